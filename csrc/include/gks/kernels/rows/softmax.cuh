// SPDX-License-Identifier: Apache-2.0
// Softmax over a row, on the row skeleton (skeleton.cuh): the online (max, sum) math, the
// row bodies, and SoftmaxRow, the functor. The fused softmax(rmsnorm) of the norms family
// (norm.cuh) builds on the same math and looped body (kFused: its values are
// x * inv_rms * weight, computed in fp32 and never stored).
//  - registers: a row (a warp's or a block's) is read once into registers, where it stays
//    as loaded (16-byte vectors, converted to fp32 at each use: see Raw in vec.cuh); each
//    thread takes the max of its values, then the sum of their exps against it; one
//    reduction merges the (max, sum) pairs; each thread writes exp(v - M) / S. One read,
//    one write, two exps a value, about 32 registers a thread, so an SM holds 2048 threads.
//  - looped: a block walks a long row twice: an online max and rescaled sum, then
//    normalize and write (the second read mostly hits L2). Also the path for long rows not
//    16-byte aligned. Its staged form (p.stage_row, softmax's "looped-smem" config) keeps
//    the row as loaded in dynamic shared memory during the first walk and reads it from
//    there in the second: one read of HBM a value where a row fits in shared memory, for
//    rows whose second read would miss an L2 shared by every SM's rows in flight.
// Both come in two variants: rows whose length is a multiple of the access width (every
// access is wholly inside the row or wholly past it: one predicated vector access, the lean
// code the 16-bit kernels need to keep up with memory), and ragged rows (the access that
// straddles the end goes element by element). The registers kernel has one instance for
// each (the functor's kRagged), picked by the host; the looped kernel branches once per
// launch.
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

#include "gks/kernels/ptx/common.cuh"
#include "gks/kernels/reduce.cuh"
#include "gks/kernels/rows/common.cuh"
#include "gks/kernels/vec.cuh"
#include "gks/tensor.h"

namespace gks::kernels::rows {

struct SoftmaxParams {
  const void* x;
  const void* weight;  // kFused only
  void* y;
  RowLayout x_rows;
  RowLayout y_rows;
  int64_t rows;
  int64_t cols;
  float eps;  // kFused only
  // Always 0, but not known to the compiler: see opaque (common.cuh).
  uint32_t zero = 0;
  // Looped rows, unfused, whole 16-byte accesses: the row is kept in the launch's dynamic
  // shared memory (cols * sizeof(T) bytes) between the two walks.
  int stage_row = 0;
};

// exp(v) = 2^(v * log2(e)), one MUFU.EX2 (ex2.approx: relative error ~2^-22). ftz flushes
// results below 2^-126 to 0: softmax multiplies them by factors <= 1, so what is lost is
// below 1.2e-38 in absolute terms. (exp2f would add a subnormal fix-up: 3 more
// instructions a value, which the 16-bit kernels feel.)
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float exp_via_exp2(float v) { return ptx::ex2_approx_ftz(v * kLog2e); }

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

template <int kThreads>
__device__ __forceinline__ void row_reduce_softmax(float& m, float& s, float* scratch_m,
                                                   float* scratch_s) {
  if constexpr (kThreads <= 32) {
    warp_reduce_softmax<kThreads>(m, s);
  } else {
    group_reduce_softmax<kThreads>(m, s, scratch_m, scratch_s);
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

// One row of the (unfused) registers kernel (see SoftmaxRow). The row is held
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

// One row of the looped kernel (SoftmaxRow::looped; kFused: SoftmaxRmsNormRow::looped).
// kStageRow: the first walk also writes each access, as loaded, to `stage` (the dynamic
// shared memory, one 16-byte slot an access of the row), and the second reads it there.
template <bool kRagged, typename T, int kVec, int kThreads, bool kFused, bool kStageRow = false>
__device__ __forceinline__ void softmax_row_looped(const SoftmaxParams& p, float* scratch_m,
                                                   float* scratch_s, uint4* stage = nullptr) {
  static_assert(!kStageRow || (!kRagged && !kFused && kVec * sizeof(T) == 16),
                "a staged row: unfused whole 16-byte accesses");
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
      if constexpr (kStageRow) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (base + u * kStep < cols)
            stage[(base + u * kStep) / kVec] = make_uint4(r[u].w[0], r[u].w[1], r[u].w[2], r[u].w[3]);
      }
      softmax_fold(m, s, r, zero);
    }
  }
  // (Staged: the reduction's barriers also order every thread's writes to `stage` before
  // the reads below; each thread reads back only its own slots anyway.)
  group_reduce_softmax<kThreads>(m, s, scratch_m, scratch_s);
  const float inv_sum = softmax_inv_sum(m, s);

  // Pass 2: exp(v - M) / S. With M = +-inf this is NaN everywhere, as it must be.
  for (int64_t base = first; base < cols; base += kStep * kUnroll) {
    Raw<T, kVec> r[kUnroll], wr[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if constexpr (kStageRow) {
        r[u] = Raw<T, kVec>{};  // past the row: never stored
        if (base + u * kStep < cols) {
          const uint4 v = stage[(base + u * kStep) / kVec];
          r[u].w[0] = v.x, r[u].w[1] = v.y, r[u].w[2] = v.z, r[u].w[3] = v.w;
        }
      } else {
        r[u] = load_raw<kRagged, kVec>(x, base + u * kStep, cols, !kFused);
      }
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

// The softmax functor (skeleton.cuh). Its registers kernel runs rows of at most
// kThreadsPerRow * kVecsPerThread * kVec elements (so column indices fit in int); ragged
// rows (aligned rows whose length is not a multiple of kVec: padded or single rows) have an
// instance of their own (kRagged), so that their element-wise tail does not cost the common
// case its 32 registers.
template <typename T, int kVec, bool kRagged>
struct SoftmaxRow {
  static_assert(!kRagged || kVec > 1, "one-element accesses are never ragged");
  using Params = SoftmaxParams;
  // The accesses a thread holds: kBase (4, or 8 one-element accesses) as the planner picks
  // them, twice that for registers-wide, up to kMax for 1024-thread blocks.
  static constexpr int kBase = kVec == 1 ? 8 : 4;
  static constexpr int kMax = kVec == 1 ? 8 : sizeof(T) != 4 ? 4 : 8;

  template <class S>
  static constexpr bool compiled() {
    if constexpr (kIsLooped<S>) {
      return !kRagged && S::kThreads == 512;
    } else if constexpr (kIsRegisters<S>) {
      constexpr int v = S::kVecsPerThread, t = S::kThreadsPerRow;
      if (S::kCluster != 1) return false;
      if (t == 32) return S::kRowsPerBlock == 4 && v <= (2 * kBase < kMax ? 2 * kBase : kMax);
      if (S::kRowsPerBlock != 1 || (t == 1024 && kVec == 1 && sizeof(T) != 4)) return false;
      return v <= kMax && (v == kBase || v == 2 * kBase || (v == 4 * kBase && t == 1024));
    } else {
      return false;
    }
  }

  template <class S>
  static constexpr int min_blocks() {
    if constexpr (kIsLooped<S>)
      return (kVec == 1 ? 2048 : 1536) / S::kThreads;
    else
      return kRegistersMinThreads<T, kVec, S::kThreadsPerRow, S::kVecsPerThread, false, kRagged> /
             S::kThreads;
  }

  template <class S>
  static __device__ __forceinline__ void registers(const Params& p) {
    constexpr int kWarps = S::kThreadsPerRow / 32 > 0 ? S::kThreadsPerRow / 32 : 1;
    __shared__ float scratch_m[kWarps], scratch_s[kWarps];
    // Below 2^31 + 3 (the host launches at most 2^31 - 1 rows): unsigned 32-bit, which
    // spares a register for its high half.
    const int64_t row = uint32_t(blockIdx.x * S::kRowsPerBlock + threadIdx.y);
    if (row >= p.rows) return;  // only for warp-per-row blocks, which have no block barrier
    softmax_row_in_registers<kRagged, T, kVec, S::kThreadsPerRow, S::kVecsPerThread>(
        p, row, scratch_m, scratch_s);
  }

  // One row per block, walked in steps of four accesses a thread, all in flight before the
  // first is used. 512-thread blocks, 4 an SM for one-element accesses (32 registers), 3 for
  // 16-byte ones (40): the most ptxas fits without spilling.
  template <class S>
  static __device__ __forceinline__ void looped(const Params& p) {
    __shared__ float scratch_m[S::kThreads / 32], scratch_s[S::kThreads / 32];
    if (kVec > 1 && p.cols % kVec != 0) {
      softmax_row_looped<true, T, kVec, S::kThreads, false>(p, scratch_m, scratch_s);
    } else if constexpr (kVec > 1) {
      if (p.stage_row) {
        extern __shared__ uint4 stage[];
        softmax_row_looped<false, T, kVec, S::kThreads, false, true>(p, scratch_m, scratch_s, stage);
      } else {
        softmax_row_looped<false, T, kVec, S::kThreads, false>(p, scratch_m, scratch_s);
      }
    } else {
      softmax_row_looped<false, T, kVec, S::kThreads, false>(p, scratch_m, scratch_s);
    }
  }
};

}  // namespace gks::kernels::rows
