// SPDX-License-Identifier: Apache-2.0
// The norms family on the row skeleton (skeleton.cuh): RMSNorm (with the residual added
// first: fused_add_rmsnorm), LayerNorm, and softmax(rmsnorm(x) *
// weight) in one kernel (the values x * inv_rms * weight computed in fp32 and never
// stored), whose softmax is softmax.cuh's.
#pragma once

#include <cstdint>
#include <type_traits>

#include "gks/kernels/ptx/sm80.cuh"
#include "gks/kernels/ptx/sm90.cuh"
#include "gks/kernels/reduce.cuh"
#include "gks/kernels/rows/common.cuh"
#include "gks/kernels/rows/softmax.cuh"
#include "gks/kernels/vec.cuh"
#include "gks/tensor.h"

namespace gks::kernels::rows {

// RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight.
//  - registers: a row is read once into registers, reduced, scaled and written; a warp, a
//    block or (sm_90) a cluster of blocks holds each row. With kCluster > 1 a row is split
//    over the kCluster CTAs of a thread block cluster, each holding a contiguous
//    kThreadsPerRow * kVecsPerThread accesses of it, and the partial sums of squares meet
//    through distributed shared memory: long rows stay in registers while each CTA stays
//    small enough for several per SM, so one CTA's loads overlap another's reduction and
//    stores.
//  - looped: a block walks a row twice (sum of squares, then scale); the second pass mostly
//    hits L2. The heuristic's choice for fp32 rows of 2048 to 4096 elements (see
//    plan_rmsnorm) and for rows too long for registers.
struct RmsNormParams {
  const void* x;
  const void* weight;
  void* y;
  RowLayout x_rows;
  RowLayout y_rows;
  int64_t rows;
  int64_t cols;
  float eps;
};

// fused_add_rmsnorm's: r = x + residual (in fp32, rounded to x's dtype) is written to
// residual_out and normalized as RMSNorm's x.
struct AddRmsNormParams : RmsNormParams {
  const void* residual;
  void* residual_out;
  RowLayout residual_rows;
  RowLayout residual_out_rows;
};

// kAddResidual: fused_add_rmsnorm's rows (the residual added first, the sum stored, then
// normalized); else rmsnorm's.
// Where a thread's part of its row lies in a Registers shape: the row, its first access (a
// vector index into the row) and how many of its kVecsPerThread accesses, kThreadsPerRow
// vectors apart, lie inside the row. The row is a whole number of vectors (the host picks
// kVec so), so each access is wholly inside the row or wholly past it.
struct RowPart {
  int64_t row;
  int64_t first;
  int live;
};
template <class S, int kVec>
__device__ __forceinline__ RowPart row_part(int64_t cols) {
  constexpr int kThreadsPerRow = S::kThreadsPerRow, kVecsPerThread = S::kVecsPerThread;
  const int64_t first = int64_t(cluster_rank<S>()) * kVecsPerThread * kThreadsPerRow + threadIdx.x;
  const int64_t row_vecs = cols / kVec;
  const int live = first >= row_vecs ? 0
                   : int(min(int64_t(kVecsPerThread), (row_vecs - first + kThreadsPerRow - 1) / kThreadsPerRow));
  return {row_index<S>(), first, live};
}

template <typename T, int kVec, bool kAddResidual = false>
struct RmsNormRow {
  using Params = std::conditional_t<kAddResidual, AddRmsNormParams, RmsNormParams>;

  // Registers: warps of 1-8 accesses a thread (4 rows a block); blocks of 64-1024 threads
  // of 2, 4 or 8; clusters (16-byte accesses) of 256- or 1024-thread CTAs. Looped: 128-1024.
  template <class S>
  static constexpr bool compiled() {
    if constexpr (kIsLooped<S>) {
      return S::kThreads >= 128;
    } else if constexpr (kIsRegisters<S>) {
      constexpr int t = S::kThreadsPerRow, v = S::kVecsPerThread;
      if (t == 32) return S::kRowsPerBlock == 4 && S::kCluster == 1;
      if (S::kRowsPerBlock != 1 || v < 2) return false;
      return S::kCluster == 1 || (kVec > 1 && (t == 256 || t == 1024));
    } else {
      return false;
    }
  }

  // Up to 4 accesses a thread fit in 32 registers, which lets an SM hold 2048 threads. With
  // the residual's accesses beside x's: up to 2 in 32, 4 in 64 and 8 in 128 (ptxas -v: fewer
  // registers spill), as far as the block's size allows.
  template <class S>
  static constexpr int min_blocks() {
    if constexpr (!kIsRegisters<S>) {
      return 0;
    } else if constexpr (kAddResidual) {
      constexpr int v = S::kVecsPerThread;
      constexpr int blocks = (v <= 2 ? 2048 : v <= 4 ? 1024 : 512) / S::kThreads;
      return blocks > 0 ? blocks : 1;  // 1024-thread blocks: 64 registers whatever is asked
    } else {
      return (S::kVecsPerThread <= 4 ? 2048 : 1024) / S::kThreads;
    }
  }

  // The row's residual and residual_out, as vectors (unused without the residual).
  struct ResidualRows {
    const Vec<T, kVec>* res = nullptr;
    Vec<T, kVec>* out = nullptr;
  };
  static __device__ __forceinline__ ResidualRows residual_rows(const Params& p, int64_t row) {
    if constexpr (kAddResidual) {
      return {reinterpret_cast<const Vec<T, kVec>*>(static_cast<const T*>(p.residual) + p.residual_rows.row_offset(row)),
              reinterpret_cast<Vec<T, kVec>*>(static_cast<T*>(p.residual_out) + p.residual_out_rows.row_offset(row))};
    } else {
      return {};
    }
  }

  // r = x + residual for the accesses of one thread's row part (`live` of them, kStride
  // vectors apart from vector `first` of the row), written to residual_out and left in v as
  // rounded.
  template <int kN, int kStride>
  static __device__ __forceinline__ void add_residual(const ResidualRows& rows, int64_t first, int live,
                                                      Raw<T, kVec> (&v)[kN]) {
    if constexpr (kAddResidual) {
      const Vec<T, kVec>* res = rows.res + first;
      Vec<T, kVec>* out = rows.out + first;
      Raw<T, kVec> rv[kN];
#pragma unroll
      for (int i = 0; i < kN; ++i) rv[i] = i < live ? load_raw_vec(res + i * kStride) : Raw<T, kVec>{};
#pragma unroll
      for (int i = 0; i < kN; ++i) {
        float sum[kVec];
#pragma unroll
        for (int j = 0; j < kVec; ++j) sum[j] = elem(v[i], j) + elem(rv[i], j);
        v[i] = raw_of<T, kVec>(sum);
        if (i < live) store_raw_vec(out + i * kStride, v[i]);
      }
    }
  }

  template <class S>
  static __device__ __forceinline__ void registers(const Params& p) {
    constexpr int kThreadsPerRow = S::kThreadsPerRow, kVecsPerThread = S::kVecsPerThread;
    constexpr int kRowsPerBlock = S::kRowsPerBlock, kCluster = S::kCluster;
    __shared__ float scratch[kThreadsPerRow / 32 > 0 ? kThreadsPerRow / 32 : 1];
    __shared__ float cluster_slot;
    const auto [row, first, live] = row_part<S, kVec>(p.cols);
    // Only warp-per-row blocks (no block barrier, no cluster) can have rows past the end.
    if (kRowsPerBlock > 1 && row >= p.rows) return;
    using V = Vec<T, kVec>;

    // The row stays as loaded (Raw) and is converted to fp32 where it is used.
    using R = Raw<T, kVec>;
    const V* x = reinterpret_cast<const V*>(static_cast<const T*>(p.x) + p.x_rows.row_offset(row)) + first;
    R v[kVecsPerThread];
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i) v[i] = i < live ? load_raw_vec(x + i * kThreadsPerRow) : R{};
    add_residual<kVecsPerThread, kThreadsPerRow>(residual_rows(p, row), first, live, v);
    // Long fp32 rows (8 accesses a thread, one 1024-thread CTA an SM) load the weight with x
    // and hold x * w (as many registers as x), so the weight's loads overlap x's instead of
    // trailing the reduction. 16-bit rows would need twice the registers for the products,
    // and 4-access fp32 threads would spill at the 32 registers that 2048 threads an SM allow.
    constexpr bool kWeightFirst = sizeof(T) == 4 && kVecsPerThread > 4;
    const V* w = reinterpret_cast<const V*>(p.weight) + first;
    float xw[kWeightFirst ? kVecsPerThread : 1][kVec];
    float sumsq = 0.f;
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i) {
      R wv{};
      if constexpr (kWeightFirst) wv = i < live ? load_raw_vec(w + i * kThreadsPerRow) : R{};
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float a = elem(v[i], j);
        sumsq += a * a;
        if constexpr (kWeightFirst) xw[i][j] = a * elem(wv, j);
      }
    }
    sumsq = row_sum<kThreadsPerRow>(sumsq, scratch);
    if constexpr (kCluster > 1) sumsq = cluster_sum<kCluster>(sumsq, &cluster_slot);
    const float inv_rms = rsqrtf(sumsq / float(p.cols) + p.eps);

    V* y = reinterpret_cast<V*>(static_cast<T*>(p.y) + p.y_rows.row_offset(row)) + first;
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i) {
      if (i >= live) break;
      V out;
      if constexpr (kWeightFirst) {
#pragma unroll
        for (int j = 0; j < kVec; ++j) out.v[j] = from_float<T>(xw[i][j] * inv_rms);
      } else {
        const R wv = load_raw_vec(w + i * kThreadsPerRow);
#pragma unroll
        for (int j = 0; j < kVec; ++j) out.v[j] = from_float<T>(elem(v[i], j) * inv_rms * elem(wv, j));
      }
      y[i * kThreadsPerRow] = out;
    }
    if constexpr (kCluster > 1) cluster_release_wait();
  }

  // One row per kThreads-thread block; the row is walked twice, kUnroll accesses a thread in
  // flight. The host sizes the grid's rows-in-flight to fit in half the L2, and the first pass
  // marks x keep-in-L2, so the second pass reads the row from L2, not DRAM; the second pass
  // marks x last-use, so rows already done make way for the rows other blocks will re-read.
  // (torch.compile's shape of kernel. What it gains over holding the row in registers is
  // overlap: a block's second pass, served by L2, runs while other blocks' first passes keep
  // DRAM busy; docs/perf/norms.md has the figures.)
  template <class S>
  static __device__ __forceinline__ void looped(const Params& p) {
    constexpr int kThreads = S::kThreads;
    // Accesses a thread has in flight: 4 in the first pass; 2 of x and 2 of w in the second
    // (the compiler is kept from unrolling further).
    constexpr int kUnroll1 = 4;
    constexpr int kUnroll2 = kVec > 1 ? 2 : 4;
    using R = Raw<T, kVec>;
    using V = Vec<T, kVec>;
    __shared__ float scratch[kThreads / 32];
    const int64_t row = blockIdx.x;
    const int64_t row_vecs = p.cols / kVec;  // a whole number (the host picks kVec so)
    // Whole chunks go without bounds checks (which would put each load in its own branch and
    // keep the loads from overlapping); the rest, one access a thread at a time.
    const int64_t whole1 = row_vecs / (kThreads * kUnroll1) * (kThreads * kUnroll1);
    const int64_t whole2 = row_vecs / (kThreads * kUnroll2) * (kThreads * kUnroll2);
    const V* x = reinterpret_cast<const V*>(static_cast<const T*>(p.x) + p.x_rows.row_offset(row));
    const ResidualRows res_rows = residual_rows(p, row);
    // With the residual x is read once (the second pass reads the stored sum instead).
    constexpr CacheHint kFirst = kAddResidual ? CacheHint::kLastUse : CacheHint::kKeepInL2;

    float sumsq = 0.f;
    const auto add_squares = [&](const R& v) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) sumsq += elem(v, j) * elem(v, j);
    };
#pragma unroll 1
    for (int64_t base = threadIdx.x; base < whole1; base += kThreads * kUnroll1) {
      R v[kUnroll1];
#pragma unroll
      for (int u = 0; u < kUnroll1; ++u) v[u] = load_raw_vec<kFirst>(x + base + u * kThreads);
      add_residual<kUnroll1, kThreads>(res_rows, base, kUnroll1, v);
#pragma unroll
      for (int u = 0; u < kUnroll1; ++u) add_squares(v[u]);
    }
#pragma unroll 1
    for (int64_t i = whole1 + threadIdx.x; i < row_vecs; i += kThreads) {
      R v[1] = {load_raw_vec<kFirst>(x + i)};
      add_residual<1, kThreads>(res_rows, i, 1, v);
      add_squares(v[0]);
    }
    sumsq = group_reduce<kThreads>(sumsq, SumOp{}, scratch);
    const float inv_rms = rsqrtf(sumsq / float(p.cols) + p.eps);
    // With the residual the second pass reads the stored sum back (it may be all that is
    // left of the inputs: residual_out may be residual). Each thread reads the vectors it
    // stored itself (both passes give vector i to thread i % kThreads), with plain loads,
    // which the compiler keeps after those stores (a hinted load's asm could be hoisted).
    const V* src = x;
    if constexpr (kAddResidual) src = res_rows.out;
    constexpr CacheHint kSecond = kAddResidual ? CacheHint::kDefault : CacheHint::kLastUse;

    const V* w = reinterpret_cast<const V*>(p.weight);
    V* y = reinterpret_cast<V*>(static_cast<T*>(p.y) + p.y_rows.row_offset(row));
    const auto scale = [&](const R& v, const R& wv) {
      V out;
#pragma unroll
      for (int j = 0; j < kVec; ++j) out.v[j] = from_float<T>(elem(v, j) * inv_rms * elem(wv, j));
      return out;
    };
#pragma unroll 1
    for (int64_t base = threadIdx.x; base < whole2; base += kThreads * kUnroll2) {
      R v[kUnroll2], wv[kUnroll2];
#pragma unroll
      for (int u = 0; u < kUnroll2; ++u) {
        v[u] = load_raw_vec<kSecond>(src + base + u * kThreads);
        wv[u] = load_raw_vec<CacheHint::kKeepInL2>(w + base + u * kThreads);
      }
#pragma unroll
      for (int u = 0; u < kUnroll2; ++u) y[base + u * kThreads] = scale(v[u], wv[u]);
    }
#pragma unroll 1
    for (int64_t i = whole2 + threadIdx.x; i < row_vecs; i += kThreads)
      y[i] = scale(load_raw_vec<kSecond>(src + i), load_raw_vec<CacheHint::kKeepInL2>(w + i));
  }
};

// LayerNorm: y = (x - mean) / sqrt(var + eps) * weight (+ bias), var the biased variance,
// on rmsnorm's kernel shapes and plans. Both shapes take the corrected two-pass form: a
// first mean m0 = sum(x) / n, then d = x - m0 and its sums s1, s2, so that mean = m0 + s1/n
// and var = s2/n - (s1/n)^2, the output ((x - m0) - s1/n) * rstd. The correction s1/n
// takes up m0's rounding; no large value is ever subtracted from another, whatever the
// row's mean or an outlier in it (a shift by one element would not be so robust).
//  - registers: the row held once, the three sums reduced from the held values.
//  - looped: three walks of the row (m0; s1 and s2; the output), the last two mostly from L2.
// A NaN or inf anywhere in a row makes its variance NaN, so the row comes out NaN.
struct LayerNormParams {
  const void* x;
  const void* weight;
  const void* bias;  // null: no bias
  void* y;
  RowLayout x_rows;
  RowLayout y_rows;
  int64_t rows;
  int64_t cols;
  float eps;
};

template <typename T, int kVec, bool kBias>
struct LayerNormRow {
  using Params = LayerNormParams;
  using Shapes = RmsNormRow<T, kVec>;  // the same kernel shapes, so the same plans

  template <class S>
  static constexpr bool compiled() {
    return Shapes::template compiled<S>();
  }
  // Held rows and the three sums take more registers than rmsnorm's: 32 a thread (2048 threads
  // an SM) spill even at 2 accesses a thread (ptxas -v), so 64 (1024 threads).
  template <class S>
  static constexpr int min_blocks() {
    if constexpr (kIsRegisters<S>)
      return 1024 / S::kThreads;
    else
      return 0;
  }

  // rstd from the sums of d = x - m0: var = s2/n - (s1/n)^2, NaN kept (a clamp to 0 that
  // swallowed it would turn an inf in the row into finite outputs).
  static __device__ __forceinline__ float rstd_of(float s1, float s2, float n, float eps) {
    const float c = s1 / n;
    float var = s2 / n - c * c;
    var = var < 0.f ? 0.f : var;
    return rsqrtf(var + eps);
  }

  // The output of one access: ((x - m0) - c) * rstd * w (+ b).
  static __device__ __forceinline__ Vec<T, kVec> normalized(const Raw<T, kVec>& v, const Raw<T, kVec>& w,
                                                             const Raw<T, kVec>& b, float m0, float c, float rstd) {
    Vec<T, kVec> out;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      float o = ((elem(v, j) - m0) - c) * rstd * elem(w, j);
      if constexpr (kBias) o += elem(b, j);
      out.v[j] = from_float<T>(o);
    }
    return out;
  }
  static __device__ __forceinline__ Raw<T, kVec> bias_at(const Params& p, int64_t i) {
    if constexpr (kBias) return load_raw_vec(reinterpret_cast<const Vec<T, kVec>*>(p.bias) + i);
    return Raw<T, kVec>{};
  }

  template <class S>
  static __device__ __forceinline__ void registers(const Params& p) {
    constexpr int kThreadsPerRow = S::kThreadsPerRow, kVecsPerThread = S::kVecsPerThread;
    constexpr int kRowsPerBlock = S::kRowsPerBlock, kCluster = S::kCluster;
    __shared__ float scratch[kThreadsPerRow / 32 > 0 ? kThreadsPerRow / 32 : 1];
    __shared__ float cluster_slot;
    const auto [row, first, live] = row_part<S, kVec>(p.cols);
    if (kRowsPerBlock > 1 && row >= p.rows) return;  // warp-per-row blocks only
    using V = Vec<T, kVec>;
    using R = Raw<T, kVec>;
    const V* x = reinterpret_cast<const V*>(static_cast<const T*>(p.x) + p.x_rows.row_offset(row)) + first;
    R v[kVecsPerThread];
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i) v[i] = i < live ? load_raw_vec(x + i * kThreadsPerRow) : R{};
    // The row's total over its threads (and its cluster's CTAs: each use of the slot waits
    // until every CTA has read the last).
    const auto total = [&](float part) {
      part = row_sum<kThreadsPerRow>(part, scratch);
      if constexpr (kCluster > 1) {
        part = cluster_sum<kCluster>(part, &cluster_slot);
        cluster_release_wait();
      }
      return part;
    };
    const float n = float(p.cols);
    float sum = 0.f;  // the accesses past the row hold zeros: they add nothing here
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kVec; ++j) sum += elem(v[i], j);
    const float m0 = total(sum) / n;
    float s1 = 0.f, s2 = 0.f;
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i) {
      if (i >= live) break;  // but they would here (0 - m0)
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float d = elem(v[i], j) - m0;
        s1 += d;
        s2 += d * d;
      }
    }
    s1 = total(s1);
    const float rstd = rstd_of(s1, total(s2), n, p.eps);
    const V* w = reinterpret_cast<const V*>(p.weight) + first;
    V* y = reinterpret_cast<V*>(static_cast<T*>(p.y) + p.y_rows.row_offset(row)) + first;
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i) {
      if (i >= live) break;
      y[i * kThreadsPerRow] = normalized(v[i], load_raw_vec(w + i * kThreadsPerRow),
                                         bias_at(p, first + i * kThreadsPerRow), m0, s1 / n, rstd);
    }
  }

  template <class S>
  static __device__ __forceinline__ void looped(const Params& p) {
    constexpr int kThreads = S::kThreads;
    using V = Vec<T, kVec>;
    __shared__ float scratch[kThreads / 32];
    const int64_t row = blockIdx.x;
    const int64_t row_vecs = p.cols / kVec;
    const V* x = reinterpret_cast<const V*>(static_cast<const T*>(p.x) + p.x_rows.row_offset(row));
    const float n = float(p.cols);
    float sum = 0.f;
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < row_vecs; i += kThreads) {
      const Raw<T, kVec> v = load_raw_vec<CacheHint::kKeepInL2>(x + i);
#pragma unroll
      for (int j = 0; j < kVec; ++j) sum += elem(v, j);
    }
    const float m0 = group_reduce<kThreads>(sum, SumOp{}, scratch) / n;
    float s1 = 0.f, s2 = 0.f;
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < row_vecs; i += kThreads) {
      const Raw<T, kVec> v = load_raw_vec<CacheHint::kKeepInL2>(x + i);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float d = elem(v, j) - m0;
        s1 += d;
        s2 += d * d;
      }
    }
    s1 = group_reduce<kThreads>(s1, SumOp{}, scratch);
    const float rstd = rstd_of(s1, group_reduce<kThreads>(s2, SumOp{}, scratch), n, p.eps);
    const V* w = reinterpret_cast<const V*>(p.weight);
    V* y = reinterpret_cast<V*>(static_cast<T*>(p.y) + p.y_rows.row_offset(row));
#pragma unroll 2
    for (int64_t i = threadIdx.x; i < row_vecs; i += kThreads)
      y[i] = normalized(load_raw_vec<CacheHint::kLastUse>(x + i), load_raw_vec<CacheHint::kKeepInL2>(w + i),
                        bias_at(p, i), m0, s1 / n, rstd);
  }
};

// softmax(rmsnorm(x) * weight): the fused op's rows.
//  - registers: the row is read once and its sum of squares reduced first; then its values
//    are held in fp32 as exps against the thread's own max, rescaled once the row's (M, S)
//    is known: one exp a value (softmax_rmsnorm_row_in_registers). Long fp32 rows
//    recompute the values instead (softmax_rmsnorm_row_recompute). With kCluster > 1
//    (sm_90) the row is split over the CTAs of a cluster, whose sums of squares and (max,
//    sum) pairs meet through distributed shared memory: small CTAs, several an SM, so that
//    one row's loads overlap another's reductions.
//  - looped: softmax.cuh's looped row with kFused: a first pass for the sum of squares.
//  - staged (its own kernel, below): the longest rows in persistent blocks that fetch their
//    next row into shared memory while they process the current one.

// One row of the fused registers kernel for long fp32 rows (1024 threads x 8 accesses): x
// is held as loaded and x * inv_rms * w recomputed at each use, the weight read twice
// (mostly from L1), two exps a value. Holding 32 fp32 values a thread instead (below) is
// slower on these rows: x, w and the values do not fit the 64 registers of a 1024-thread
// block without serializing the loads (docs/perf/norms.md).
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

// One row of the fused registers kernel (see SoftmaxRmsNormRow). x and the weight
// are read once, as loaded; the sum of squares is taken from x, then each pair becomes its
// fp32 product x * w, which the row's inv_rms scales to the value v once the reduction has
// it. Each thread then keeps e = exp(v - m_t) against its own max m_t, and s_t = sum e; one
// merge of the (m_t, s_t) pairs gives the row's (M, S), and the thread writes
// e * exp(m_t - M) / S. One exp a value and no second read of the weight, which the fused
// op needs to keep up with memory (recomputing x * inv_rms * w and its exp for the output
// holds 16-bit rows well short of copy bandwidth; docs/perf/norms.md).
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

template <typename T, int kVec, bool kRagged>
struct SoftmaxRmsNormRow {
  static_assert(!kRagged || kVec > 1, "one-element accesses are never ragged");
  using Params = SoftmaxParams;
  // The accesses a thread holds: kBase (16 values, or 8 one-element accesses) as the
  // planner picks them, twice that for registers-wide, up to kMax for 1024-thread blocks
  // (fp32 ragged rows stop at 4: 8 spilled).
  static constexpr int kBase = kVec == 1 ? 8 : 16 / kVec;
  static constexpr int kMax = kVec == 1 ? 8 : sizeof(T) != 4 ? 4 : kRagged ? 4 : 8;

  template <class S>
  static constexpr bool compiled() {
    if constexpr (kIsLooped<S>) {
      return !kRagged && S::kThreads == 512;
    } else if constexpr (kIsRegisters<S>) {
      constexpr int v = S::kVecsPerThread, t = S::kThreadsPerRow;
      // Clusters: 256-thread CTAs of kBase accesses, 16-byte aligned rows a multiple of them.
      if (S::kCluster != 1) return kVec > 1 && !kRagged && t == 256 && v == kBase;
      constexpr int kWide = 2 * kBase < kMax ? 2 * kBase : kMax;
      if (t == 32) return S::kRowsPerBlock == 4 && v <= kWide;
      if (S::kRowsPerBlock != 1 || (t == 1024 && kVec == 1 && sizeof(T) != 4)) return false;
      return v <= kMax && (v == kBase || v == 2 * kBase || (v == 4 * kBase && t == 1024));
    } else {
      return false;
    }
  }

  // Registers: see kRegistersMinThreads (softmax.cuh); cluster CTAs 1536 threads an SM.
  // Looped: 512-thread blocks, 4 an SM for one-element accesses, 3 for fp32's 16-byte ones,
  // 2 for 16-bit rows (their 64-bit indices and weights take 56 registers).
  template <class S>
  static constexpr int min_blocks() {
    if constexpr (kIsLooped<S>)
      return (kVec == 1 ? 2048 : sizeof(T) < 4 ? 1024 : 1536) / S::kThreads;
    else if constexpr (S::kCluster > 1)
      return 1536 / S::kThreads;
    else
      return kRegistersMinThreads<T, kVec, S::kThreadsPerRow, S::kVecsPerThread, true, kRagged> /
             S::kThreads;
  }

  template <class S>
  static __device__ __forceinline__ void registers(const Params& p) {
    constexpr int kThreadsPerRow = S::kThreadsPerRow, kVecsPerThread = S::kVecsPerThread;
    if constexpr (S::kCluster > 1) {
      // CTA `rank` of the row's cluster holds kThreads * kVecsPerThread accesses of row
      // blockIdx.x / kCluster.
      __shared__ float scratch_m[kThreadsPerRow / 32], scratch_s[kThreadsPerRow / 32];
      __shared__ float slots[3];
      const ClusterPart part{int(blockIdx.x % S::kCluster), slots};  // 1-D clusters along x
      const int64_t row = blockIdx.x / S::kCluster;
      softmax_rmsnorm_row_in_registers<false, T, kVec, kThreadsPerRow, kVecsPerThread, S::kCluster>(
          p, row, scratch_m, scratch_s, part);
    } else {
      constexpr int kWarps = kThreadsPerRow / 32 > 0 ? kThreadsPerRow / 32 : 1;
      __shared__ float scratch_m[kWarps], scratch_s[kWarps];
      // Below 2^31 + 3 (the host launches at most 2^31 - 1 rows): unsigned 32-bit, which
      // spares a register for its high half.
      const int64_t row = uint32_t(blockIdx.x * S::kRowsPerBlock + threadIdx.y);
      if (row >= p.rows) return;  // only for warp-per-row blocks, which have no block barrier
      if constexpr (sizeof(T) == 4 && kVecsPerThread * kVec > 16) {
        softmax_rmsnorm_row_recompute<kRagged, T, kVec, kThreadsPerRow, kVecsPerThread>(
            p, row, scratch_m, scratch_s);
      } else {
        softmax_rmsnorm_row_in_registers<kRagged, T, kVec, kThreadsPerRow, kVecsPerThread>(
            p, row, scratch_m, scratch_s);
      }
    }
  }

  template <class S>
  static __device__ __forceinline__ void looped(const Params& p) {
    __shared__ float scratch_m[S::kThreads / 32], scratch_s[S::kThreads / 32];
    if (kVec > 1 && p.cols % kVec != 0) {
      softmax_row_looped<true, T, kVec, S::kThreads, true>(p, scratch_m, scratch_s);
    } else {
      softmax_row_looped<false, T, kVec, S::kThreads, true>(p, scratch_m, scratch_s);
    }
  }
};

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
// docs/perf/norms.md has what this kernel, its one-buffer and plain-launch forms, and the
// variants tried before it measured.
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
      if (i < accesses && in_row(i)) ptx::cp_async_zfill<16>(&slots[slot(i)], src + first + i * kStride, 16);
    ptx::cp_async_commit();
  };
  const auto read_slot = [&](const uint4* slots, int i) {
    return in_row(i) ? load_raw_vec(reinterpret_cast<const Vec<T, kVec>*>(&slots[slot(i)]))
                     : Raw<T, kVec>{};
  };
  const auto x_row = [&](int64_t row) { return static_cast<const T*>(p.x) + p.x_rows.row_offset(row); };
  const T* w = static_cast<const T*>(p.weight);

  ptx::wait_for_prior_grids();
  ptx::allow_dependent_grids();
  if constexpr (kWeightSlots > 0) copy(weight_slots, w, kWeightSlots);
  if (blockIdx.x < p.rows) copy(x_slots, x_row(blockIdx.x), kVecsPerThread);
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    ptx::cp_async_wait<0>();             // this row (and the weight) has landed
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
        const float e = ptx::ex2_approx_ftz(fmaf(v[i][j], scale, -offset));
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

}  // namespace gks::kernels::rows
