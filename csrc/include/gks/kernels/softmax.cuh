// SPDX-License-Identifier: Apache-2.0
// Softmax device code, and its fusion with RMSNorm (kFused: the values are
// x * inv_rms * weight, computed in fp32 and never stored). Two shapes of kernel:
//  - registers: a row (a warp's or a block's) is read once into registers; each thread
//    takes the max of its values, exponentiates them in place against that max and sums
//    them; one reduction merges the (max, sum) pairs; each thread rescales its
//    exponentials to the row's max and writes them. One read, one write, one exp a value.
//  - looped: a block walks a long row twice: an online max and rescaled sum, then
//    normalize and write (the second read mostly hits L2). The fused kernel first walks it
//    once more for the sum of squares. Also the path for long rows not 16-byte aligned.
//    (RMSNorm's reversed second pass with evict-first hints was tried here: fp32 gained,
//    3942 vs 2844 GB/s at 8192x32768 on an H200, but 16-bit rows, the ones this kernel
//    serves by default, lost: 2626 vs 3750. Not adopted.)
// Both come in two variants, picked per launch: rows whose length is a multiple of the
// access width (every access is wholly inside the row or wholly past it: one predicated
// vector access, the lean code the 16-bit kernels need to keep up with memory), and ragged
// rows (the access that straddles the end goes element by element).
//
// Non-finite values. The pair (m, s) kept for a set of values is m = their max (NaN is
// ignored, -inf for an empty or all -inf set) and s = sum of exp(v - offset(m)) where
// offset(m) is m, or 0 when m is -inf (so -inf - -inf never makes a NaN of an all -inf
// part of a row). A NaN value makes s NaN, and every later rescale keeps it NaN. At the
// end the row's max M decides: finite M gives exp(v - M) / S, where S >= 1 and NaN when
// the row held a NaN; M = +inf (the row held +inf) or M = -inf (all -inf) gives NaN
// everywhere. That is exactly torch.softmax's result in each case.
#pragma once

#include <cstdint>

#include "gks/kernels/reduce.cuh"
#include "gks/kernels/vec.cuh"
#include "gks/tensor.h"

namespace gks::kernels {

struct SoftmaxParams {
  const void* x;
  const void* weight;  // kFused only
  void* y;
  RowLayout x_rows;
  RowLayout y_rows;
  int64_t rows;
  int64_t cols;
  float eps;  // kFused only
};

// exp(v) = 2^(v * log2(e)), one MUFU.EX2 (ex2.approx: relative error ~2^-22). ftz flushes
// results below 2^-126 to 0: softmax multiplies them by factors <= 1, so what is lost is
// below 1.2e-38 in absolute terms. (exp2f would add a subnormal fix-up: 3 more
// instructions a value, which the 16-bit kernels feel.)
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float exp_via_exp2(float v) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v * kLog2e));
  return r;
}

// The offset the sum of a set with max m is kept relative to (see the top of the file).
__device__ __forceinline__ float softmax_offset(float m) { return m == -INFINITY ? 0.f : m; }

// Merges the pair (m2, s2) into (m, s). The scale factors use m, not offset(m): a part
// whose max is -inf has s = 0 (or NaN), and exp(-inf - offset) = 0 keeps it so even when
// offset is very negative (exp(0 - offset) could overflow to inf and make 0 * inf = NaN).
__device__ __forceinline__ void softmax_merge(float& m, float& s, float m2, float s2) {
  const float m_new = fmaxf(m, m2);
  const float offset = softmax_offset(m_new);
  s = s * exp_via_exp2(m - offset) + s2 * exp_via_exp2(m2 - offset);
  m = m_new;
}

// 1 / S when the row's max M is finite; NaN when the row held +inf or was all -inf.
__device__ __forceinline__ float softmax_inv_sum(float m, float s) {
  return fabsf(m) < INFINITY ? 1.f / s : __int_as_float(0x7fffffff);
}

// Merges (m, s) over the kWidth lanes of each aligned lane group; every lane gets the result.
template <int kWidth>
__device__ __forceinline__ void warp_reduce_softmax(float& m, float& s) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset, kWidth);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, offset, kWidth);
    softmax_merge(m, s, m2, s2);
  }
}

// Merges (m, s) over a 1-D group of kThreads threads of one block; every thread gets the
// result. scratch_m and scratch_s hold kThreads / 32 floats each; ends with a barrier.
template <int kThreads>
__device__ __forceinline__ void group_reduce_softmax(float& m, float& s, float* scratch_m,
                                                     float* scratch_s) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "kThreads: a multiple of 32 up to 1024");
  warp_reduce_softmax<32>(m, s);
  if constexpr (kThreads > 32) {
    constexpr int kWarps = kThreads / 32;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) {
      scratch_m[warp] = m;
      scratch_s[warp] = s;
    }
    __syncthreads();
    m = scratch_m[lane % kWarps];
    s = scratch_s[lane % kWarps];
    warp_reduce_softmax<kWarps>(m, s);
    __syncthreads();
  }
}

// Sum over a row group: a warp (kThreads <= 32) or a 1-D block.
template <int kThreads>
__device__ __forceinline__ float row_sum(float v, float* scratch) {
  if constexpr (kThreads <= 32) {
    return warp_reduce<kThreads>(v, SumOp{});
  } else {
    return group_reduce<kThreads>(v, SumOp{}, scratch);
  }
}

template <int kThreads>
__device__ __forceinline__ void row_reduce_softmax(float& m, float& s, float* scratch_m,
                                                   float* scratch_s) {
  if constexpr (kThreads <= 32) {
    warp_reduce_softmax<kThreads>(m, s);
  } else {
    group_reduce_softmax<kThreads>(m, s, scratch_m, scratch_s);
  }
}

// Elements [col, col + kVec) of a row of `cols` elements, in fp32, `fill` past the end.
// kRagged: cols may not be a multiple of kVec (load_row_vec goes element by element at
// the end). Otherwise an access is wholly in or wholly out: one predicated vector load.
template <bool kRagged, int kVec, typename T>
__device__ __forceinline__ void load_values(const T* row, int64_t col, int64_t cols,
                                            float (&out)[kVec], float fill) {
  if constexpr (kRagged) {
    load_row_vec<kVec>(row, col, cols, out, fill);
  } else if (col < cols) {
    const Vec<T, kVec> v = *reinterpret_cast<const Vec<T, kVec>*>(row + col);
#pragma unroll
    for (int j = 0; j < kVec; ++j) out[j] = to_float(v.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) out[j] = fill;
  }
}

template <bool kRagged, int kVec, typename T>
__device__ __forceinline__ void store_values(T* row, int64_t col, int64_t cols,
                                             const float (&in)[kVec]) {
  if constexpr (kRagged) {
    if (col < cols) store_row_vec<kVec>(row, col, cols, in);
  } else if (col < cols) {
    Vec<T, kVec> v;
#pragma unroll
    for (int j = 0; j < kVec; ++j) v.v[j] = from_float<T>(in[j]);
    *reinterpret_cast<Vec<T, kVec>*>(row + col) = v;
  }
}

// kFused: v[j] <- v[j] * inv_rms * weight[col + j] for the columns of the row, and -inf
// for the columns past its end (so they drop out of the max and the sum).
template <bool kRagged, int kVec, typename T>
__device__ __forceinline__ void apply_rmsnorm(const T* weight, int64_t col, int64_t cols,
                                              float inv_rms, float (&v)[kVec]) {
  float w[kVec];
  load_values<kRagged, kVec>(weight, col, cols, w, 0.f);
  if (col + kVec <= cols) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[j] = v[j] * inv_rms * w[j];
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[j] = col + j < cols ? v[j] * inv_rms * w[j] : -INFINITY;
  }
}

// One row of the registers kernel (see softmax_registers_kernel).
template <bool kRagged, typename T, int kVec, int kThreadsPerRow, int kVecsPerThread, bool kFused>
__device__ __forceinline__ void softmax_row_in_registers(const SoftmaxParams& p, int64_t row,
                                                         float* scratch_m, float* scratch_s) {
  constexpr int kStride = kThreadsPerRow * kVec;  // columns between a thread's accesses
  const T* x = static_cast<const T*>(p.x) + p.x_rows.row_offset(row);
  const int first = threadIdx.x * kVec;

  // Columns past the row's end load as -inf (neutral for max and sum); the fused kernel
  // loads them as 0 (neutral for the sum of squares) and sets them to -inf afterwards.
  constexpr float kFill = kFused ? 0.f : -INFINITY;
  float v[kVecsPerThread][kVec];
#pragma unroll
  for (int i = 0; i < kVecsPerThread; ++i)
    load_values<kRagged, kVec>(x, first + i * kStride, p.cols, v[i], kFill);

  if constexpr (kFused) {
    float sumsq = 0.f;
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kVec; ++j) sumsq += v[i][j] * v[i][j];
    sumsq = row_sum<kThreadsPerRow>(sumsq, scratch_s);
    const float inv_rms = rsqrtf(sumsq / float(p.cols) + p.eps);
    const T* w = static_cast<const T*>(p.weight);
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i)
      apply_rmsnorm<kRagged, kVec>(w, first + i * kStride, p.cols, inv_rms, v[i]);
  }

  // This thread's max, then its exponentials in place, relative to that max.
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < kVecsPerThread; ++i)
#pragma unroll
    for (int j = 0; j < kVec; ++j) m = fmaxf(m, v[i][j]);
  const float offset = softmax_offset(m);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < kVecsPerThread; ++i)
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      v[i][j] = exp_via_exp2(v[i][j] - offset);
      s += v[i][j];
    }

  float row_max = m, row_sum_exp = s;
  row_reduce_softmax<kThreadsPerRow>(row_max, row_sum_exp, scratch_m, scratch_s);
  // exp(v - M) / S = exp(v - offset) * exp(offset - M) / S; m stands for offset (they differ
  // only when m = -inf, where every exponential here is 0 or NaN and the factor must be 0).
  const float scale = exp_via_exp2(m - row_max) * softmax_inv_sum(row_max, row_sum_exp);

  T* y = static_cast<T*>(p.y) + p.y_rows.row_offset(row);
#pragma unroll
  for (int i = 0; i < kVecsPerThread; ++i) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[i][j] *= scale;
    store_values<kRagged, kVec>(y, first + i * kStride, p.cols, v[i]);
  }
}

// Block: kThreadsPerRow x kRowsPerBlock threads; threadIdx.y picks the row in the block.
// The host launches it only for rows of at most kThreadsPerRow * kVecsPerThread * kVec
// elements (so column indices fit in int).
template <typename T, int kVec, int kThreadsPerRow, int kVecsPerThread, int kRowsPerBlock,
          bool kFused>
__global__ void __launch_bounds__(kThreadsPerRow* kRowsPerBlock)
    softmax_registers_kernel(const SoftmaxParams p) {
  static_assert(kRowsPerBlock == 1 || kThreadsPerRow <= 32, "several rows only per warp");
  constexpr int kWarps = kThreadsPerRow / 32 > 0 ? kThreadsPerRow / 32 : 1;
  __shared__ float scratch_m[kWarps], scratch_s[kWarps];
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= p.rows) return;  // only for warp-per-row blocks, which have no block barrier
  if (kVec > 1 && p.cols % kVec != 0) {
    softmax_row_in_registers<true, T, kVec, kThreadsPerRow, kVecsPerThread, kFused>(
        p, row, scratch_m, scratch_s);
  } else {
    softmax_row_in_registers<false, T, kVec, kThreadsPerRow, kVecsPerThread, kFused>(
        p, row, scratch_m, scratch_s);
  }
}

// One row of the looped kernel (see softmax_looped_kernel).
template <bool kRagged, typename T, int kVec, int kThreads, bool kFused>
__device__ __forceinline__ void softmax_row_looped(const SoftmaxParams& p, float* scratch_m,
                                                   float* scratch_s) {
  // Four accesses in flight a thread; two for the fused 16-bit kernel, whose weight loads
  // double the registers a step holds.
  constexpr int kUnroll = kFused && kVec > 4 ? 2 : 4;
  constexpr int64_t kStep = int64_t(kThreads) * kVec;  // columns one access of the block covers
  constexpr float kFill = kFused ? 0.f : -INFINITY;
  const int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(p.x) + p.x_rows.row_offset(row);
  const T* w = static_cast<const T*>(p.weight);
  const int64_t first = int64_t(threadIdx.x) * kVec;

  float inv_rms = 1.f;
  if constexpr (kFused) {
    float sumsq = 0.f;
    for (int64_t base = first; base < p.cols; base += kStep * kUnroll) {
      float v[kUnroll][kVec];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) load_values<kRagged, kVec>(x, base + u * kStep, p.cols, v[u], 0.f);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int j = 0; j < kVec; ++j) sumsq += v[u][j] * v[u][j];
    }
    sumsq = group_reduce<kThreads>(sumsq, SumOp{}, scratch_s);
    inv_rms = rsqrtf(sumsq / float(p.cols) + p.eps);
  }

  // Pass 1: online max and rescaled sum, one rescale per step.
  float m = -INFINITY, s = 0.f;
  for (int64_t base = first; base < p.cols; base += kStep * kUnroll) {
    float v[kUnroll][kVec];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) load_values<kRagged, kVec>(x, base + u * kStep, p.cols, v[u], kFill);
    if constexpr (kFused) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        apply_rmsnorm<kRagged, kVec>(w, base + u * kStep, p.cols, inv_rms, v[u]);
    }
    float step_max = -INFINITY;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int j = 0; j < kVec; ++j) step_max = fmaxf(step_max, v[u][j]);
    const float m_new = fmaxf(m, step_max);
    const float offset = softmax_offset(m_new);
    s *= exp_via_exp2(m - offset);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int j = 0; j < kVec; ++j) s += exp_via_exp2(v[u][j] - offset);
    m = m_new;
  }
  group_reduce_softmax<kThreads>(m, s, scratch_m, scratch_s);
  const float inv_sum = softmax_inv_sum(m, s);

  // Pass 2: exp(v - M) / S. With M = +-inf this is NaN everywhere, as it must be.
  T* y = static_cast<T*>(p.y) + p.y_rows.row_offset(row);
  for (int64_t base = first; base < p.cols; base += kStep * kUnroll) {
    float v[kUnroll][kVec];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) load_values<kRagged, kVec>(x, base + u * kStep, p.cols, v[u], kFill);
    if constexpr (kFused) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        apply_rmsnorm<kRagged, kVec>(w, base + u * kStep, p.cols, inv_rms, v[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) v[u][j] = exp_via_exp2(v[u][j] - m) * inv_sum;
      store_values<kRagged, kVec>(y, base + u * kStep, p.cols, v[u]);
    }
  }
}

// One row per kThreads-thread block; the row is walked in steps of kUnroll accesses a
// thread, all in flight before the first is used.
template <typename T, int kVec, int kThreads, bool kFused>
__global__ void __launch_bounds__(kThreads) softmax_looped_kernel(const SoftmaxParams p) {
  __shared__ float scratch_m[kThreads / 32], scratch_s[kThreads / 32];
  if (kVec > 1 && p.cols % kVec != 0) {
    softmax_row_looped<true, T, kVec, kThreads, kFused>(p, scratch_m, scratch_s);
  } else {
    softmax_row_looped<false, T, kVec, kThreads, kFused>(p, scratch_m, scratch_s);
  }
}

}  // namespace gks::kernels
