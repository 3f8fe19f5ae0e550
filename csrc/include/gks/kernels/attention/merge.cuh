// SPDX-License-Identifier: Apache-2.0
// merge_state / merge_states: partial attention states (v_k, s_k), each the softmax-weighted
// values and the log-sum-exp of one part of a row's keys, merged into the state of all of
// them (FlashInfer's cascade merge, in natural-log lse):
//   m = max_k s_k,  w_k = exp(s_k - m),  s = m + log(sum_k w_k),  v = sum_k w_k v_k / sum_k w_k.
// A state whose s is -inf saw no key and contributes nothing (its v is not read); a row whose
// states all saw nothing gets v = 0 and s = -inf, as attention gives a row that sees no key.
// A NaN s, or a +inf one, makes the row NaN. fp32 math, v in the states' dtype.
//
// Memory-bound and short-rowed (a row is a head dim, 64 to 256 values): kThreadsPerRow
// threads of one warp share a row, each a 16-byte vector (or one element) at a time, and a
// block holds 256 / kThreadsPerRow rows.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "gks/kernels/vec.cuh"
#include "gks/tensor.h"

namespace gks::kernels::attention {

struct MergeStateParams {
  // Pairwise: the states (v[0], s[0]) and (v[1], s[1]). Stacked: state k of a row at
  // v[0] + k * v_state_stride and s[0] + k * s_state_stride.
  const void* v[2] = {};
  const float* s[2] = {};
  RowLayout v_rows[2];
  RowLayout s_rows[2];  // s viewed as [..., 1]: row_offset is the element of a row's s
  int64_t v_state_stride = 0;
  int64_t s_state_stride = 0;
  int states = 2;
  void* v_out = nullptr;
  float* s_out = nullptr;
  RowLayout v_out_rows;
  RowLayout s_out_rows;
  int64_t rows = 0;
  int64_t d = 0;
};

inline constexpr int kMergeThreads = 256;

// The merge of the rows a block holds: states of type T, the merged v stored as TOut (T, or
// a 16-bit type for fp32 states: split-KV decode's partials merged into its output).
template <typename T, int kVec, int kThreadsPerRow, bool kStacked, typename TOut>
__device__ __forceinline__ void merge_rows(const MergeStateParams& p) {
  static_assert(kThreadsPerRow >= 1 && kThreadsPerRow <= 32 && kMergeThreads % kThreadsPerRow == 0,
                "a row's threads sit in one warp");
  static_assert(std::is_same_v<T, TOut> || (sizeof(T) == 4 && sizeof(TOut) == 2 && (kVec == 1 || kVec == 4)),
                "the merged v in the states' type, or fp32 states into 16-bit values");
  using V = Vec<T, kVec>;
  const int lane = threadIdx.x % kThreadsPerRow;
  const int64_t row = int64_t(blockIdx.x) * (kMergeThreads / kThreadsPerRow) + threadIdx.x / kThreadsPerRow;
  if (row >= p.rows) return;  // the whole group of the row leaves together

  const float* s0 = p.s[0] + p.s_rows[0].row_offset(row);
  const T* v0 = static_cast<const T*>(p.v[0]) + p.v_rows[0].row_offset(row);
  // Pairwise, both scores are held: the in-place form writes s over s[0] at the end.
  float s_pair[2] = {};
  const float* s1 = nullptr;
  const T* v1 = nullptr;
  if constexpr (!kStacked) {
    s1 = p.s[1] + p.s_rows[1].row_offset(row);
    v1 = static_cast<const T*>(p.v[1]) + p.v_rows[1].row_offset(row);
    s_pair[0] = *s0;
    s_pair[1] = *s1;
  }
  const auto score = [&](int k) -> float {
    if constexpr (kStacked) {
      return s0[k * p.s_state_stride];
    } else {
      return s_pair[k];
    }
  };
  const auto values = [&](int k) -> const V* {
    if constexpr (kStacked) {
      return reinterpret_cast<const V*>(v0 + k * p.v_state_stride);
    } else {
      return reinterpret_cast<const V*>(k == 0 ? v0 : v1);
    }
  };

  float m = -INFINITY;
  bool invalid = false;  // a NaN or +inf score
  for (int k = 0; k < p.states; ++k) {
    const float s = score(k);
    invalid |= isnan(s) || s == INFINITY;
    m = fmaxf(m, s);
  }
  float total = 0.f;
  if (!invalid && m != -INFINITY) {
    for (int k = 0; k < p.states; ++k) total += expf(score(k) - m);
  }
  const float inv_total = invalid ? NAN : (m == -INFINITY ? 0.f : 1.f / total);

  TOut* out_row = static_cast<TOut*>(p.v_out) + p.v_out_rows.row_offset(row);
  const int64_t vecs = p.d / kVec;
  for (int64_t i = lane; i < vecs; i += kThreadsPerRow) {
    float acc[kVec] = {};
    if (!invalid && m != -INFINITY) {
      for (int k = 0; k < p.states; ++k) {
        const float w = expf(score(k) - m);
        if (w == 0.f) continue;  // saw no key (or a weight below fp32's range): not read
        const Raw<T, kVec> x = load_raw_vec(values(k) + i);
#pragma unroll
        for (int j = 0; j < kVec; ++j) acc[j] += w * elem(x, j);
      }
    }
    float o[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) o[j] = acc[j] * inv_total;
    if constexpr (std::is_same_v<T, TOut>) {
      store_raw_vec(reinterpret_cast<V*>(out_row) + i, raw_of<T, kVec>(o));
    } else if constexpr (kVec == 1) {
      out_row[i] = from_float<TOut>(o[0]);
    } else {  // four fp32 values into four 16-bit ones: one 8-byte store
      *reinterpret_cast<uint2*>(out_row + i * kVec) = make_uint2(pack2<TOut>(o[0], o[1]), pack2<TOut>(o[2], o[3]));
    }
  }

  if (lane == 0) {
    float* s_out = p.s_out + p.s_out_rows.row_offset(row);
    *s_out = invalid ? NAN : (m == -INFINITY ? -INFINITY : m + logf(total));
  }
}

template <typename T, int kVec, int kThreadsPerRow, bool kStacked>
__global__ void __launch_bounds__(kMergeThreads) merge_state_kernel(const MergeStateParams p) {
  merge_rows<T, kVec, kThreadsPerRow, kStacked, T>(p);
}

// Stacked fp32 partial states (kVec 4: 16-byte loads, or 1) merged into TOut values (fp16 or
// bf16): the second phase of split-KV decode (kernels/attention/decode.cuh).
template <typename TOut, int kVec, int kThreadsPerRow>
__global__ void __launch_bounds__(kMergeThreads) merge_partials_kernel(const MergeStateParams p) {
  merge_rows<float, kVec, kThreadsPerRow, true, TOut>(p);
}

}  // namespace gks::kernels::attention
