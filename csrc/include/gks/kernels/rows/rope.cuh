// SPDX-License-Identifier: Apache-2.0
// The rope family on the row skeleton (skeleton.cuh): apply_rope, one looped block a token
// (the skeleton's "row"), walking the rotation pairs of all the token's q and k heads. A
// thread takes a unit of kPairs pairs at a time and writes both values of each pair after it
// has read them, so the op runs in place. The pass-through values (rotary_dim < head_dim)
// are copied only when the output is another tensor.
#pragma once

#include <cstdint>

#include "gks/kernels/rows/common.cuh"
#include "gks/kernels/vec.cuh"
#include "gks/tensor.h"

namespace gks::kernels::rows {

struct RopeParams {
  const void* q;
  const void* k;
  void* q_out;
  void* k_out;
  RowLayout q_rows;  // rows: tokens x heads
  RowLayout k_rows;
  RowLayout q_out_rows;
  RowLayout k_out_rows;
  const float* cos_sin;    // [max_pos, rotary_dim]
  const void* positions;   // [tokens], int32 or int64
  bool positions_64;
  bool copy_rest;          // out of place with rotary_dim < head_dim
  int64_t rows;            // tokens
  int64_t max_pos;
  int heads_q, heads_k, head_dim, rotary_dim;
};

// kVec: the access width (1 or 16 bytes of elements). NeoX: a unit is one access at i and
// one at i + rotary_dim / 2 (kVec pairs); GPT-J: one access of kVec interleaved elements
// (kVec / 2 pairs), or with kVec = 1 the two elements of one pair.
template <typename T, int kVec, bool kNeox>
struct RopeRow {
  using Params = RopeParams;
  static constexpr int kPairs = kNeox ? kVec : (kVec > 1 ? kVec / 2 : 1);

  template <class S>
  static constexpr bool compiled() {
    return kIsLooped<S> && (S::kThreads == 128 || S::kThreads == 256);
  }
  template <class S>
  static constexpr int min_blocks() {
    return 0;
  }

  // Rotates the unit of pairs starting at pair i0 of the head at x into y (y may be x).
  static __device__ __forceinline__ void rotate(const T* x, T* y, int i0, int half, const float* cs, bool valid) {
    using V = Vec<T, kVec>;
    float a[kPairs], b[kPairs];
    if constexpr (kNeox) {
      const Raw<T, kVec> ra = load_raw_vec(reinterpret_cast<const V*>(x + i0));
      const Raw<T, kVec> rb = load_raw_vec(reinterpret_cast<const V*>(x + i0 + half));
#pragma unroll
      for (int j = 0; j < kPairs; ++j) a[j] = elem(ra, j), b[j] = elem(rb, j);
    } else if constexpr (kVec > 1) {
      const Raw<T, kVec> r = load_raw_vec(reinterpret_cast<const V*>(x + 2 * i0));
#pragma unroll
      for (int j = 0; j < kPairs; ++j) a[j] = elem(r, 2 * j), b[j] = elem(r, 2 * j + 1);
    } else {
      a[0] = elem(load_raw_vec(reinterpret_cast<const V*>(x + 2 * i0)), 0);
      b[0] = elem(load_raw_vec(reinterpret_cast<const V*>(x + 2 * i0 + 1)), 0);
    }
    float oa[kPairs], ob[kPairs];
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      const float c = valid ? cs[i0 + j] : __int_as_float(0x7fc00000), s = valid ? cs[half + i0 + j] : 0.f;
      oa[j] = a[j] * c - b[j] * s;
      ob[j] = b[j] * c + a[j] * s;
    }
    if constexpr (kNeox) {
      store_raw_vec(reinterpret_cast<V*>(y + i0), raw_of<T, kVec>(oa));
      store_raw_vec(reinterpret_cast<V*>(y + i0 + half), raw_of<T, kVec>(ob));
    } else if constexpr (kVec > 1) {
      float o[kVec];
#pragma unroll
      for (int j = 0; j < kPairs; ++j) o[2 * j] = oa[j], o[2 * j + 1] = ob[j];
      store_raw_vec(reinterpret_cast<V*>(y + 2 * i0), raw_of<T, kVec>(o));
    } else {
      y[2 * i0] = from_float<T>(oa[0]);
      y[2 * i0 + 1] = from_float<T>(ob[0]);
    }
  }

  template <class S>
  static __device__ __forceinline__ void looped(const Params& p) {
    const int64_t token = blockIdx.x;
    const int64_t pos = p.positions_64 ? static_cast<const int64_t*>(p.positions)[token]
                                       : int64_t(static_cast<const int32_t*>(p.positions)[token]);
    const bool valid = pos >= 0 && pos < p.max_pos;  // else NaN angles (see gks/rope.h)
    const float* cs = p.cos_sin + (valid ? pos : 0) * p.rotary_dim;
    const int half = p.rotary_dim / 2, units = half / kPairs, heads = p.heads_q + p.heads_k;
    const auto head = [&](int h, bool out) -> T* {
      const bool is_q = h < p.heads_q;
      const int64_t row = token * (is_q ? p.heads_q : p.heads_k) + (is_q ? h : h - p.heads_q);
      if (out)
        return static_cast<T*>(is_q ? p.q_out : p.k_out) + (is_q ? p.q_out_rows : p.k_out_rows).row_offset(row);
      return const_cast<T*>(static_cast<const T*>(is_q ? p.q : p.k)) + (is_q ? p.q_rows : p.k_rows).row_offset(row);
    };
    for (int u = threadIdx.x; u < heads * units; u += S::kThreads) {
      const int h = u / units, i0 = (u - h * units) * kPairs;
      rotate(head(h, false), head(h, true), i0, half, cs, valid);
    }
    if (p.copy_rest) {
      const int rest = p.head_dim - p.rotary_dim;
      for (int e = threadIdx.x; e < heads * rest; e += S::kThreads) {
        const int h = e / rest, c = p.rotary_dim + (e - h * rest);
        head(h, true)[c] = head(h, false)[c];
      }
    }
  }
};

}  // namespace gks::kernels::rows
