// SPDX-License-Identifier: Apache-2.0
// Softmax device code, and its fusion with RMSNorm (kFused: the values are
// x * inv_rms * weight, computed in fp32 and never stored). Two shapes of kernel:
//  - registers: a row (a warp's or a block's) is read once into registers, where it stays
//    as loaded (16-byte vectors, converted to fp32 at each use: see Raw in vec.cuh); each thread takes
//    the max of its values, then the sum of their exps against it; one reduction merges
//    the (max, sum) pairs; each thread writes exp(v - M) / S. One read, one write, two exps
//    a value, about 32 registers a thread, so an SM holds 2048 threads. The fused kernel
//    first reduces the sum of squares, then holds its values in fp32 as exps against the
//    thread's own max and rescales them once the row's (M, S) is known: one exp a value.
//  - looped: a block walks a long row twice: an online max and rescaled sum, then
//    normalize and write (the second read mostly hits L2). The fused kernel first walks it
//    once more for the sum of squares. Also the path for long rows not 16-byte aligned.
//    (RMSNorm's reversed second pass with evict-first hints was tried here: fp32 gained,
//    3942 vs 2844 GB/s at 8192x32768 on an H200, but 16-bit rows lost: 2626 vs 3750. Not
//    adopted.)
// Both come in two variants: rows whose length is a multiple of the access width (every
// access is wholly inside the row or wholly past it: one predicated vector access, the lean
// code the 16-bit kernels need to keep up with memory), and ragged rows (the access that
// straddles the end goes element by element). The registers kernel has one instance for
// each, picked by the host; the looped kernel branches once per launch.
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
#include <type_traits>

#include "gks/kernels/cp_async.cuh"
#include "gks/kernels/dependent_launch.cuh"
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
  // Always 0, but not known to the compiler: see opaque.
  uint32_t zero = 0;
};

// exp(v) = 2^(v * log2(e)), one MUFU.EX2 (ex2.approx: relative error ~2^-22). ftz flushes
// results below 2^-126 to 0: softmax multiplies them by factors <= 1, so what is lost is
// below 1.2e-38 in absolute terms. (exp2f would add a subnormal fix-up: 3 more
// instructions a value, which the 16-bit kernels feel.)
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float exp2_approx(float v) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}
__device__ __forceinline__ float exp_via_exp2(float v) { return exp2_approx(v * kLog2e); }

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

// The bits of the element that stands for the columns past a row's end: -inf (neutral for
// the max and the sum) or 0 (neutral for the fused kernel's sum of squares).
template <typename T>
__device__ __forceinline__ uint32_t fill_bits(bool neg_inf) {
  if (!neg_inf) return 0u;
  if constexpr (sizeof(T) == 4) {
    return 0xff800000u;
  } else if constexpr (std::is_same_v<T, __half>) {
    return 0xfc00u;
  } else {
    return 0xff80u;
  }
}

// Gives a held access a value the compiler cannot relate to its last one, so that it
// converts the access afresh at the next use instead of keeping the previous use's fp32
// values live (ptxas merges identical conversions, which would undo holding the row as
// loaded; likewise x * inv_rms in the fused kernel). `zero` is SoftmaxParams::zero: one
// integer add a 32-bit word.
template <typename T, int kVec>
__device__ __forceinline__ void opaque(Raw<T, kVec>& r, uint32_t zero) {
#pragma unroll
  for (int k = 0; k < Raw<T, kVec>::kWords; ++k)
    asm volatile("add.u32 %0, %0, %1;" : "+r"(r.w[k]) : "r"(zero));
}
template <int kN, typename T, int kVec>
__device__ __forceinline__ void opaque(Raw<T, kVec> (&r)[kN], uint32_t zero) {
#pragma unroll
  for (int i = 0; i < kN; ++i) opaque(r[i], zero);
}

// Elements [col, col + kVec) of a row of `cols` elements, as loaded, the fill (-inf or 0)
// past the end. kRagged: cols may not be a multiple of kVec, and the access that straddles
// the end goes element by element. Otherwise an access is wholly in or wholly out: one
// predicated vector load. I: the index type (int where the host bounds the row).
template <bool kRagged, int kVec, typename T, typename I>
__device__ __forceinline__ Raw<T, kVec> load_raw(const T* row, I col, I cols, bool neg_inf) {
  using R = Raw<T, kVec>;
  R r;
  if (kRagged ? col + kVec <= cols : col < cols) {
    r = load_raw_vec(reinterpret_cast<const Vec<T, kVec>*>(row + col));
  } else {
#pragma unroll
    for (int k = 0; k < R::kWords; ++k) r.w[k] = 0u;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const uint32_t bits = kRagged && col + j < cols ? bits_of(row[col + j]) : fill_bits<T>(neg_inf);
      r.w[j / R::kPerWord] |= bits << (16 * (j % R::kPerWord));
    }
  }
  return r;
}

// Writes the elements of [col, col + kVec) that lie in the row, rounded to T.
template <bool kRagged, int kVec, typename T, typename I>
__device__ __forceinline__ void store_values(T* row, I col, I cols, const float (&in)[kVec]) {
  if (kRagged ? col + kVec <= cols : col < cols) {
    Vec<T, kVec> v;
#pragma unroll
    for (int j = 0; j < kVec; ++j) v.v[j] = from_float<T>(in[j]);
    *reinterpret_cast<Vec<T, kVec>*>(row + col) = v;
  } else if constexpr (kRagged) {
#pragma unroll
    for (int j = 0; j < kVec; ++j)
      if (col + j < cols) row[col + j] = from_float<T>(in[j]);
  }
}

// The fp32 values of an access: kFused, x * inv_rms * weight for the columns of the row
// and -inf past its end (so they drop out of the max and the sum); otherwise x as is
// (already -inf past the end).
template <bool kFused, bool kRagged, int kVec, typename T, typename I>
__device__ __forceinline__ void values_of(const Raw<T, kVec>& x, const Raw<T, kVec>& w, I col,
                                          I cols, float inv_rms, float (&v)[kVec]) {
  const bool access_in_row = col < cols;  // kRagged: its first element
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    if constexpr (kFused) {
      // A select, not a branch: a branch would hold the access's values across it.
      const bool in_row = kRagged ? col + j < cols : access_in_row;
      const float value = elem(x, j) * inv_rms * elem(w, j);
      v[j] = in_row ? value : -INFINITY;
    } else {
      v[j] = elem(x, j);
    }
  }
}

// Folds kN held accesses of x (unfused) into a pair (m, s): one rescale of s to the new
// max, then one exp a value. The accesses are converted once for the max and again for
// the exps.
template <int kN, typename T, int kVec>
__device__ __forceinline__ void softmax_fold(float& m, float& s, Raw<T, kVec> (&r)[kN],
                                             uint32_t zero) {
  float step_max = -INFINITY;
#pragma unroll
  for (int i = 0; i < kN; ++i)
#pragma unroll
    for (int j = 0; j < kVec; ++j) step_max = fmaxf(step_max, elem(r[i], j));
  const float m_new = fmaxf(m, step_max);
  const float offset = softmax_offset(m_new);
  s *= exp_via_exp2(m - offset);
  if constexpr (sizeof(T) < 4) opaque(r, zero);  // fp32 values are used as they are
#pragma unroll
  for (int i = 0; i < kN; ++i)
#pragma unroll
    for (int j = 0; j < kVec; ++j) s += exp_via_exp2(elem(r[i], j) - offset);
  m = m_new;
}

// Folds kN values into (m, s), kChunk at a time: one rescale of s to the new max a chunk,
// then one exp a value. (The fused kernels' values are held in fp32 only for this; chunks
// of 4 keep few of them live, and one-element accesses fold all theirs at once.)
template <int kChunk, int kN>
__device__ __forceinline__ void softmax_fold_values(float& m, float& s, const float (&v)[kN]) {
  static_assert(kN % kChunk == 0, "whole chunks");
#pragma unroll
  for (int c = 0; c < kN; c += kChunk) {
    float step_max = -INFINITY;
#pragma unroll
    for (int j = c; j < c + kChunk; ++j) step_max = fmaxf(step_max, v[j]);
    const float m_new = fmaxf(m, step_max);
    const float offset = softmax_offset(m_new);
    s *= exp_via_exp2(m - offset);
#pragma unroll
    for (int j = c; j < c + kChunk; ++j) s += exp_via_exp2(v[j] - offset);
    m = m_new;
  }
}

// Folds the fused values of kN held accesses of x into (m, s); w(i) gives access i's
// weights (read where used) and col(i) its first column.
template <bool kRagged, int kN, int kVec, typename T, typename I, typename W, typename C>
__device__ __forceinline__ void softmax_fold_fused(float& m, float& s, const Raw<T, kVec> (&x)[kN],
                                                   W w, C col, I cols, float inv_rms) {
  if constexpr (kVec == 1) {
    float v[kN];
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      float vi[1];
      values_of<true, kRagged>(x[i], w(i), col(i), cols, inv_rms, vi);
      v[i] = vi[0];
    }
    softmax_fold_values<kN>(m, s, v);
  } else {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      float v[kVec];
      values_of<true, kRagged>(x[i], w(i), col(i), cols, inv_rms, v);
      softmax_fold_values<4>(m, s, v);
    }
  }
}

// Sum of squares of kN held accesses (filled with 0 past the row's end).
template <int kN, typename T, int kVec>
__device__ __forceinline__ float sum_squares(const Raw<T, kVec> (&r)[kN]) {
  float sumsq = 0.f;
#pragma unroll
  for (int i = 0; i < kN; ++i)
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float v = elem(r[i], j);
      sumsq += v * v;
    }
  return sumsq;
}

// Whether an unfused registers kernel is meant to fit 32 registers a thread (2048 threads
// an SM): 16-byte accesses, rows a multiple of them, and at most 64 bytes of the row a thread.
template <typename T, int kVec, int kVecsPerThread, bool kRagged>
inline constexpr bool kRegisterLean = kVec > 1 && !kRagged && kVecsPerThread * kVec * sizeof(T) <= 64;

// The threads an SM should hold (__launch_bounds__ asks ptxas to fit them without spilling,
// which it does for these): 2048 for the lean kernels; 1536 (40 registers) for the fused
// kernel's 16 fp32 values a thread in a block per row (1280 in a warp per row, whose 64-bit
// row index takes more) and for one-element accesses; the longest rows (1024-thread blocks
// holding 128 bytes a thread) and ragged rows take what they need.
template <typename T, int kVec, int kThreadsPerRow, int kVecsPerThread, bool kFused, bool kRagged>
inline constexpr int kRegistersMinThreads =
    kFused ? (kVec > 1 && !kRagged && kVecsPerThread * kVec <= 16 ? (kThreadsPerRow > 32 ? 1536 : 1280) : 1)
    : kRegisterLean<T, kVec, kVecsPerThread, kRagged> ? 2048
    : kVec == 1 ? 1536
                : 1;

// Where a CTA of a thread block cluster sits in a row split over the cluster: its rank, and
// three floats of its shared memory that the other CTAs read (sum of squares, max, sum).
struct ClusterPart {
  int rank = 0;
  float* slots = nullptr;
};

// Merges one (m, s) pair per CTA over the kCluster CTAs of a cluster (sm_90), in rank order
// on every CTA (so all get the same result); `slots` is two floats of this CTA's shared
// memory. As cluster_sum: the caller must have waited out any earlier arrive, and must call
// cluster_release_wait() before it exits.
template <int kCluster>
__device__ __forceinline__ void cluster_merge_softmax(float& m, float& s, float* slots) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    slots[0] = m;
    slots[1] = s;
  }
  cg::this_cluster().sync();
  float m_all = -INFINITY, s_all = 0.f;
#pragma unroll
  for (int r = 0; r < kCluster; ++r) {
    const float* peer = cg::this_cluster().map_shared_rank(slots, r);
    softmax_merge(m_all, s_all, peer[0], peer[1]);
  }
  cg::this_cluster().barrier_arrive();
  m = m_all;
  s = s_all;
#else
  __trap();  // the host launches clusters only on sm_90+
#endif
}

// One row of the fused registers kernel for long fp32 rows (1024 threads x 8 accesses): x
// is held as loaded and x * inv_rms * w recomputed at each use, the weight read twice
// (mostly from L1), two exps a value. Holding 32 fp32 values a thread instead (below) took
// these rows from 614 to 778-814 us at 8192x32768 on an H200: x, w and the values do not
// fit the 64 registers of a 1024-thread block without serializing the loads.
template <bool kRagged, typename T, int kVec, int kThreadsPerRow, int kVecsPerThread>
__device__ __forceinline__ void softmax_rmsnorm_row_recompute(const SoftmaxParams& p, int64_t row,
                                                              float* scratch_m, float* scratch_s) {
  constexpr int kStride = kThreadsPerRow * kVec;  // columns between a thread's accesses
  const int cols = static_cast<int>(p.cols);      // bounded by the host (see the kernel)
  const T* x = static_cast<const T*>(p.x) + p.x_rows.row_offset(row);
  const T* w = static_cast<const T*>(p.weight);
  const int first = threadIdx.x * kVec;
  const uint32_t zero = p.zero;

  Raw<T, kVec> r[kVecsPerThread];
#pragma unroll
  for (int i = 0; i < kVecsPerThread; ++i)
    r[i] = load_raw<kRagged, kVec>(x, first + i * kStride, cols, /*neg_inf=*/false);

  float m = -INFINITY, s = 0.f;
  const float sumsq = row_sum<kThreadsPerRow>(sum_squares(r), scratch_s);
  const float inv_rms = rsqrtf(sumsq / float(cols) + p.eps);
  const auto col = [&](int i) { return first + i * kStride; };
  softmax_fold_fused<kRagged>(
      m, s, r, [&](int i) { return load_raw<kRagged, kVec>(w, col(i), cols, false); }, col, cols,
      inv_rms);
  row_reduce_softmax<kThreadsPerRow>(m, s, scratch_m, scratch_s);
  const float inv_sum = softmax_inv_sum(m, s);

  // exp(v - M) / S. The weight is read again (at w + zero, so that the compiler does not
  // keep the first reads live).
  opaque(r, zero);
  T* y = static_cast<T*>(p.y) + p.y_rows.row_offset(row);
#pragma unroll
  for (int i = 0; i < kVecsPerThread; ++i) {
    const int c = first + i * kStride;
    float v[kVec];
    values_of<true, kRagged>(r[i], load_raw<kRagged, kVec>(w + zero, c, cols, false), c, cols,
                             inv_rms, v);
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[j] = exp_via_exp2(v[j] - m) * inv_sum;
    store_values<kRagged, kVec>(y, c, cols, v);
  }
}

// The fused kernels' first step: kN accesses of x and of the weight (load_x(i), load_w(i),
// as load_raw gives them), their products x * w into v in fp32, the largest product of the
// columns in the row (in_row(i, j)) into max_xw, and the sum of squares of x (returned).
template <int kN, int kVec, typename LoadX, typename LoadW, typename InRow>
__device__ __forceinline__ float products_and_sum_squares(LoadX load_x, LoadW load_w, InRow in_row,
                                                          float (&v)[kN][kVec], float& max_xw) {
  decltype(load_x(0)) xr[kN], wr[kN];
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    xr[i] = load_x(i);
    wr[i] = load_w(i);
  }
  float sumsq = 0.f;
  max_xw = -INFINITY;
#pragma unroll
  for (int i = 0; i < kN; ++i)
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float xv = elem(xr[i], j);
      sumsq += xv * xv;
      v[i][j] = xv * elem(wr[i], j);
      if (in_row(i, j)) max_xw = fmaxf(max_xw, v[i][j]);
    }
  return sumsq;
}

// One row of the fused registers kernel (see softmax_registers_kernel). x and the weight
// are read once, as loaded; the sum of squares is taken from x, then each pair becomes its
// fp32 product x * w, which the row's inv_rms scales to the value v once the reduction has
// it. Each thread then keeps e = exp(v - m_t) against its own max m_t, and s_t = sum e; one
// merge of the (m_t, s_t) pairs gives the row's (M, S), and the thread writes
// e * exp(m_t - M) / S. One exp a value and no second read of the weight, which the fused
// op needs to keep up with memory (recomputing x * inv_rms * w and its exp for the output
// held 16-bit rows to 55-69% of copy bandwidth on an H200).
// load_x(i) and load_w(i) give access i of the thread's part of x and of the weight, as
// load_raw would (0 past the row's end).
template <bool kRagged, typename T, int kVec, int kThreadsPerRow, int kVecsPerThread, int kCluster,
          typename LoadX, typename LoadW>
__device__ __forceinline__ void softmax_rmsnorm_row_values(const SoftmaxParams& p, int64_t row,
                                                           int first, LoadX load_x, LoadW load_w,
                                                           float* scratch_m, float* scratch_s,
                                                           ClusterPart part) {
  constexpr int kStride = kThreadsPerRow * kVec;  // columns between a thread's accesses
  const int cols = static_cast<int>(p.cols);      // bounded by the host (see the kernel)
  const auto col = [&](int i) { return first + i * kStride; };
  const auto in_row = [&](int i, int j) { return kRagged ? col(i) + j < cols : col(i) < cols; };

  // v[i][j] holds x * w, then v = x * inv_rms * w, then e = exp(v - m_t).
  float v[kVecsPerThread][kVec];
  float unused_max;
  float total = row_sum<kThreadsPerRow>(
      products_and_sum_squares(load_x, load_w, in_row, v, unused_max), scratch_s);
  if constexpr (kCluster > 1) total = cluster_sum<kCluster>(total, part.slots);
  const float inv_rms = rsqrtf(total / float(cols) + p.eps);

  float m_t = -INFINITY, s_t = 0.f;
  // Past the row's end v is -inf, which drops out of the max and the sum (e = 0).
#pragma unroll
  for (int i = 0; i < kVecsPerThread; ++i)
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      v[i][j] = in_row(i, j) ? v[i][j] * inv_rms : -INFINITY;
      m_t = fmaxf(m_t, v[i][j]);
    }
  const float offset = softmax_offset(m_t);
#pragma unroll
  for (int i = 0; i < kVecsPerThread; ++i)
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      v[i][j] = exp_via_exp2(v[i][j] - offset);
      s_t += v[i][j];
    }
  float m = m_t, s = s_t;
  row_reduce_softmax<kThreadsPerRow>(m, s, scratch_m, scratch_s);
  if constexpr (kCluster > 1) {
    cluster_release_wait();  // every CTA has read the sums of squares: the barrier is free
    cluster_merge_softmax<kCluster>(m, s, part.slots + 1);
  }
  // exp(m_t - M) / S; a thread whose values are all -inf (or NaN) has e = 0 (or NaN), and
  // 0 * inv_sum keeps the row all NaN when inv_sum is (M = +-inf, or a NaN anywhere).
  const float factor =
      (m_t == -INFINITY ? 0.f : exp_via_exp2(m_t - m)) * softmax_inv_sum(m, s);

  T* y = static_cast<T*>(p.y) + p.y_rows.row_offset(row);
#pragma unroll
  for (int i = 0; i < kVecsPerThread; ++i) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[i][j] *= factor;
    store_values<kRagged, kVec>(y, col(i), cols, v[i]);
  }
  if constexpr (kCluster > 1) cluster_release_wait();  // the others have read our slots
}

// The fused registers kernel's row: x and the weight read from global memory.
template <bool kRagged, typename T, int kVec, int kThreadsPerRow, int kVecsPerThread, int kCluster = 1>
__device__ __forceinline__ void softmax_rmsnorm_row_in_registers(const SoftmaxParams& p,
                                                                 int64_t row, float* scratch_m,
                                                                 float* scratch_s,
                                                                 ClusterPart part = {}) {
  constexpr int kStride = kThreadsPerRow * kVec;
  const int cols = static_cast<int>(p.cols);
  const T* x = static_cast<const T*>(p.x) + p.x_rows.row_offset(row);
  const T* w = static_cast<const T*>(p.weight);
  // With kCluster > 1, CTA `rank` of the cluster holds the rank-th kStride * kVecsPerThread
  // columns of the row.
  int first = threadIdx.x * kVec;
  if constexpr (kCluster > 1) first += part.rank * kStride * kVecsPerThread;
  softmax_rmsnorm_row_values<kRagged, T, kVec, kThreadsPerRow, kVecsPerThread, kCluster>(
      p, row, first,
      [&](int i) { return load_raw<kRagged, kVec>(x, first + i * kStride, cols, /*neg_inf=*/false); },
      [&](int i) { return load_raw<kRagged, kVec>(w, first + i * kStride, cols, /*neg_inf=*/false); },
      scratch_m, scratch_s, part);
}

// One row of the (unfused) registers kernel (see softmax_registers_kernel). The row is held
// as loaded (Raw) and read from registers three times: the max, then the exps against it,
// then exp(v - M) / S for the output (two exps a value, which the SFUs afford at memory
// speed, where holding the exps in fp32 would cost the 16-bit rows their 32 registers).
template <bool kRagged, typename T, int kVec, int kThreadsPerRow, int kVecsPerThread>
__device__ __forceinline__ void softmax_row_in_registers(const SoftmaxParams& p, int64_t row,
                                                         float* scratch_m, float* scratch_s) {
  constexpr int kStride = kThreadsPerRow * kVec;  // columns between a thread's accesses
  const int cols = static_cast<int>(p.cols);      // bounded by the host (see the kernel)
  const T* x = static_cast<const T*>(p.x) + p.x_rows.row_offset(row);
  // Where y's row starts, before the loads in the lean kernels (2 registers held, but none
  // of its 64-bit temporaries in the output phase, which they could not spare); after the
  // reduction in the others (where 2 registers held throughout cost more).
  constexpr bool kYEarly = kRegisterLean<T, kVec, kVecsPerThread, kRagged>;
  T* y = kYEarly ? static_cast<T*>(p.y) + p.y_rows.row_offset(row) : nullptr;
  const int first = threadIdx.x * kVec;
  const uint32_t zero = p.zero;

  Raw<T, kVec> r[kVecsPerThread];
#pragma unroll
  for (int i = 0; i < kVecsPerThread; ++i)
    r[i] = load_raw<kRagged, kVec>(x, first + i * kStride, cols, /*neg_inf=*/true);

  float m = -INFINITY, s = 0.f;
  softmax_fold(m, s, r, zero);
  row_reduce_softmax<kThreadsPerRow>(m, s, scratch_m, scratch_s);
  const float inv_sum = softmax_inv_sum(m, s);

  // exp(v - M) / S. With M = +-inf this is NaN everywhere, as it must be.
  if constexpr (sizeof(T) < 4) opaque(r, zero);
  if constexpr (!kYEarly) y = static_cast<T*>(p.y) + p.y_rows.row_offset(row);
#pragma unroll
  for (int i = 0; i < kVecsPerThread; ++i) {
    const int col = first + i * kStride;
    float v[kVec];
    values_of<false, kRagged>(r[i], r[i], col, cols, 1.f, v);
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[j] = exp_via_exp2(v[j] - m) * inv_sum;
    store_values<kRagged, kVec>(y, col, cols, v);
  }
}

// Block: kThreadsPerRow x kRowsPerBlock threads; threadIdx.y picks the row in the block.
// The host launches it only for rows of at most kThreadsPerRow * kVecsPerThread * kVec
// elements (so column indices fit in int), with kRagged = (cols % kVec != 0): ragged rows
// (aligned rows whose length is not a multiple of kVec: padded or single rows) have an
// instance of their own, so that their element-wise tail does not cost the common case
// its 32 registers.
template <typename T, int kVec, int kThreadsPerRow, int kVecsPerThread, int kRowsPerBlock,
          bool kFused, bool kRagged>
__global__ void __launch_bounds__(
    kThreadsPerRow* kRowsPerBlock,
    kRegistersMinThreads<T, kVec, kThreadsPerRow, kVecsPerThread, kFused, kRagged> /
        (kThreadsPerRow * kRowsPerBlock))
    softmax_registers_kernel(const SoftmaxParams p) {
  static_assert(kRowsPerBlock == 1 || kThreadsPerRow <= 32, "several rows only per warp");
  static_assert(!kRagged || kVec > 1, "one-element accesses are never ragged");
  constexpr int kWarps = kThreadsPerRow / 32 > 0 ? kThreadsPerRow / 32 : 1;
  __shared__ float scratch_m[kWarps], scratch_s[kWarps];
  // Below 2^31 + 3 (the host launches at most 2^31 - 1 rows): unsigned 32-bit, which
  // spares a register for its high half.
  const int64_t row = uint32_t(blockIdx.x * kRowsPerBlock + threadIdx.y);
  if (row >= p.rows) return;  // only for warp-per-row blocks, which have no block barrier
  if constexpr (kFused && sizeof(T) == 4 && kVecsPerThread * kVec > 16) {
    softmax_rmsnorm_row_recompute<kRagged, T, kVec, kThreadsPerRow, kVecsPerThread>(
        p, row, scratch_m, scratch_s);
  } else if constexpr (kFused) {
    softmax_rmsnorm_row_in_registers<kRagged, T, kVec, kThreadsPerRow, kVecsPerThread>(
        p, row, scratch_m, scratch_s);
  } else {
    softmax_row_in_registers<kRagged, T, kVec, kThreadsPerRow, kVecsPerThread>(p, row, scratch_m,
                                                                               scratch_s);
  }
}

// The fused op's long rows split over a thread block cluster (sm_90): CTA `rank` of a
// kCluster-CTA cluster holds kThreads * kVecsPerThread accesses of row blockIdx.x / kCluster
// (16-byte aligned rows, a multiple of kVec long), and the sum of squares and the (max, sum)
// pairs meet through distributed shared memory. Small CTAs (several an SM) instead of one
// 1024-thread CTA an SM, so that one row's loads overlap another's reductions.
template <typename T, int kVec, int kThreads, int kVecsPerThread, int kCluster>
__global__ void __launch_bounds__(kThreads, 1536 / kThreads)
    softmax_rmsnorm_cluster_kernel(const SoftmaxParams p) {
  __shared__ float scratch_m[kThreads / 32], scratch_s[kThreads / 32];
  __shared__ float slots[3];
  const ClusterPart part{int(blockIdx.x % kCluster), slots};  // 1-D clusters along x
  const int64_t row = blockIdx.x / kCluster;
  softmax_rmsnorm_row_in_registers<false, T, kVec, kThreads, kVecsPerThread, kCluster>(
      p, row, scratch_m, scratch_s, part);
}

// One row of the looped kernel (see softmax_looped_kernel).
template <bool kRagged, typename T, int kVec, int kThreads, bool kFused>
__device__ __forceinline__ void softmax_row_looped(const SoftmaxParams& p, float* scratch_m,
                                                   float* scratch_s) {
  // Accesses in flight a thread, held as loaded: four of x, or two of x and two of weight.
  constexpr int kUnroll = kFused ? 2 : 4;
  constexpr int64_t kStep = int64_t(kThreads) * kVec;  // columns one access of the block covers
  const int64_t cols = p.cols;
  const T* x = static_cast<const T*>(p.x) + p.x_rows.row_offset(blockIdx.x);
  T* y = static_cast<T*>(p.y) + p.y_rows.row_offset(blockIdx.x);
  const T* w = static_cast<const T*>(p.weight);
  const int64_t first = int64_t(threadIdx.x) * kVec;
  const uint32_t zero = p.zero;

  float inv_rms = 1.f;
  if constexpr (kFused) {
    float sumsq = 0.f;
    for (int64_t base = first; base < cols; base += kStep * 4) {
      Raw<T, kVec> r[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) r[u] = load_raw<kRagged, kVec>(x, base + u * kStep, cols, false);
      sumsq += sum_squares(r);
    }
    sumsq = group_reduce<kThreads>(sumsq, SumOp{}, scratch_s);
    inv_rms = rsqrtf(sumsq / float(cols) + p.eps);
  }

  // Pass 1: online max and rescaled sum, one rescale a step (an access, fused).
  float m = -INFINITY, s = 0.f;
  for (int64_t base = first; base < cols; base += kStep * kUnroll) {
    Raw<T, kVec> r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) r[u] = load_raw<kRagged, kVec>(x, base + u * kStep, cols, !kFused);
    if constexpr (kFused) {
      Raw<T, kVec> wr[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wr[u] = load_raw<kRagged, kVec>(w, base + u * kStep, cols, false);
      softmax_fold_fused<kRagged>(
          m, s, r, [&](int u) -> const Raw<T, kVec>& { return wr[u]; },
          [&](int u) { return base + u * kStep; }, cols, inv_rms);
    } else {
      softmax_fold(m, s, r, zero);
    }
  }
  group_reduce_softmax<kThreads>(m, s, scratch_m, scratch_s);
  const float inv_sum = softmax_inv_sum(m, s);

  // Pass 2: exp(v - M) / S. With M = +-inf this is NaN everywhere, as it must be.
  for (int64_t base = first; base < cols; base += kStep * kUnroll) {
    Raw<T, kVec> r[kUnroll], wr[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      r[u] = load_raw<kRagged, kVec>(x, base + u * kStep, cols, !kFused);
      if constexpr (kFused) wr[u] = load_raw<kRagged, kVec>(w, base + u * kStep, cols, false);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float v[kVec];
      values_of<kFused, kRagged>(r[u], wr[u], base + u * kStep, cols, inv_rms, v);
#pragma unroll
      for (int j = 0; j < kVec; ++j) v[j] = exp_via_exp2(v[j] - m) * inv_sum;
      store_values<kRagged, kVec>(y, base + u * kStep, cols, v);
    }
  }
}

// One row per kThreads-thread block; the row is walked in steps of kUnroll accesses a
// thread, all in flight before the first is used. 512-thread blocks, 4 an SM for
// one-element accesses (32 registers), 3 for 16-byte ones (40), 2 for the fused 16-bit
// kernel (its 64-bit indices and weights take 56): the most ptxas fits without spilling.
template <typename T, int kVec, int kThreads, bool kFused>
__global__ void __launch_bounds__(
    kThreads, (kVec == 1 ? 2048 : kFused && sizeof(T) < 4 ? 1024 : 1536) / kThreads)
    softmax_looped_kernel(const SoftmaxParams p) {
  __shared__ float scratch_m[kThreads / 32], scratch_s[kThreads / 32];
  if (kVec > 1 && p.cols % kVec != 0) {
    softmax_row_looped<true, T, kVec, kThreads, kFused>(p, scratch_m, scratch_s);
  } else {
    softmax_row_looped<false, T, kVec, kThreads, kFused>(p, scratch_m, scratch_s);
  }
}

// The staged kernel, for the fused op's longest rows (16-byte aligned, a whole number of
// accesses, up to kThreads x kVecsPerThread accesses): persistent blocks, one an SM, each
// taking rows blockIdx.x, blockIdx.x + gridDim.x, ... A block that holds such a row in
// registers fills its SM, so in the registers kernel memory idled while the row was
// reduced, exponentiated and written. Here the block's next row is on its way into shared
// memory (cp.async) while the current one is processed from registers. Each thread copies
// the very accesses it will read (slot i * kThreads + t: conflict-free), so no barrier
// guards a buffer: a thread has read its slots of a buffer before it copies into them
// again. With one buffer (kBuffers = 1) the next row's copies start after the first
// reduction (every thread has read the current row by then); with two, as soon as the
// current row has landed, into the other buffer (read one row earlier), so that they are in
// flight through the whole row. The block also copies the weight's first kWeightSlots
// accesses a thread into shared memory, once (the rest it reads from global memory, L2, at
// each row). Launched early (programmatic dependent launch, sm_90): it waits for the
// stream's previous kernel before it reads anything.
// A row: v = x * w in fp32, held; the thread's sum of squares and max of v; one sweep
// reduces both (inv_rms > 0 scales every value alike and rounding is monotone, so the
// row's max of v * inv_rms is max(v) * inv_rms exactly); then e = 2^(fma(v, inv_rms *
// log2 e, -M * log2 e)), one FFMA and one ex2 a value; a plain sum of the e; e / S written.
// No exp in either reduction and one barrier each (each its own scratch, the other's
// barrier between a scratch's uses).
// Measured on an H200 at 8192x32768, back to back in one process (µs; fp32, fp16, bf16):
// this 556, 273, 272; one buffer and launched plainly 562, 277, 276; the kernel before it,
// whose threads kept their own max and merged (max, sum) pairs (two exps a merge step, two
// barriers a reduction) with fp32's weight read from L2, 576, 291, 295 (single launches).
// Two 1024-thread blocks an SM holding x as loaded (16 registers), the weight read at each
// of three uses, two exps a value: 16-bit 331-347. Streaming stores (st.global.cs) lost
// 1%; the weight's L2 reads issued before the wait for the row changed nothing. Older
// variants that lost or tied: the row by one thread's cp.async.bulk; two CTAs of a cluster
// sharing a row; 512-thread blocks of 64 values two an SM.
template <typename T, int kVec, int kThreads, int kVecsPerThread, int kBuffers, int kWeightSlots>
__global__ void __launch_bounds__(kThreads, 1) softmax_rmsnorm_staged_kernel(const SoftmaxParams p) {
  static_assert(kVec * sizeof(T) == 16, "16-byte accesses");
  static_assert(kBuffers == 1 || kBuffers == 2, "one or two row buffers");
  static_assert(kWeightSlots >= 0 && kWeightSlots <= kVecsPerThread, "weight slots: some of a row's");
  constexpr int kStride = kThreads * kVec;
  constexpr int kSlots = kThreads * kVecsPerThread;  // a row's
  __shared__ float scratch_sumsq[kThreads / 32], scratch_max[kThreads / 32],
      scratch_sum[kThreads / 32];
  extern __shared__ uint4 staged[];  // the rows' slots, then the weight's
  uint4* x_slots = staged;                           // the current row
  uint4* x_next = staged + (kBuffers - 1) * kSlots;  // where the next row goes
  uint4* const weight_slots = staged + kBuffers * kSlots;
  const int cols = static_cast<int>(p.cols);  // bounded by the host
  const int first = threadIdx.x * kVec;
  const auto in_row = [&](int i) { return first + i * kStride < cols; };
  const auto slot = [&](int i) { return i * kThreads + int(threadIdx.x); };
  // Copies this thread's first `accesses` accesses of `src` (a row of x, or the weight).
  const auto copy = [&](uint4* slots, const T* src, int accesses) {
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i)
      if (i < accesses && in_row(i)) cp_async_zfill<16>(&slots[slot(i)], src + first + i * kStride, 16);
    cp_async_commit();
  };
  const auto read_slot = [&](const uint4* slots, int i) {
    return in_row(i) ? load_raw_vec(reinterpret_cast<const Vec<T, kVec>*>(&slots[slot(i)]))
                     : Raw<T, kVec>{};
  };
  const auto x_row = [&](int64_t row) { return static_cast<const T*>(p.x) + p.x_rows.row_offset(row); };
  const T* w = static_cast<const T*>(p.weight);

  wait_for_prior_grids();
  allow_dependent_grids();
  if constexpr (kWeightSlots > 0) copy(weight_slots, w, kWeightSlots);
  if (blockIdx.x < p.rows) copy(x_slots, x_row(blockIdx.x), kVecsPerThread);
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    cp_async_wait<0>();             // this row (and the weight) has landed
    asm volatile("" ::: "memory");  // the slots are read after the wait, not before
    const int64_t next = row + gridDim.x;
    if constexpr (kBuffers == 2) {
      if (next < p.rows) copy(x_next, x_row(next), kVecsPerThread);
    }

    float v[kVecsPerThread][kVec];  // x * w, then e
    float max_xw;
    float sumsq = products_and_sum_squares(
        [&](int i) { return read_slot(x_slots, i); },
        [&](int i) {
          return i < kWeightSlots ? read_slot(weight_slots, i)
                                  : load_raw<false, kVec>(w, first + i * kStride, cols, false);
        },
        [&](int i, int) { return in_row(i); }, v, max_xw);
    group_sum_max_one_barrier<kThreads>(sumsq, max_xw, scratch_sumsq, scratch_max);
    if constexpr (kBuffers == 1) {
      if (next < p.rows) copy(x_next, x_row(next), kVecsPerThread);  // the slots are read
    } else {
      uint4* const read = x_slots;
      x_slots = x_next;
      x_next = read;
    }

    const float inv_rms = rsqrtf(sumsq / float(cols) + p.eps);
    // A row with no value above -inf keeps M = -inf (not -inf * 0 = NaN when inv_rms is 0).
    const float m = max_xw == -INFINITY ? -INFINITY : max_xw * inv_rms;
    const float scale = inv_rms * kLog2e, offset = softmax_offset(m) * kLog2e;
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float e = exp2_approx(fmaf(v[i][j], scale, -offset));
        v[i][j] = in_row(i) ? e : 0.f;  // past the row's end: 0, not 2^(0 * scale)
        s += v[i][j];
      }
    s = group_reduce_one_barrier<kThreads>(s, SumOp{}, scratch_sum);
    // NaN everywhere when M is not finite or S is NaN (see the top of the file).
    const float inv_sum = softmax_inv_sum(m, s);
    T* y = static_cast<T*>(p.y) + p.y_rows.row_offset(row);
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) v[i][j] *= inv_sum;
      store_values<false, kVec>(y, first + i * kStride, cols, v[i]);
    }
  }
}

}  // namespace gks::kernels
