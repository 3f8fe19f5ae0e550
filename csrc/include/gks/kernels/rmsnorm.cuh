// SPDX-License-Identifier: Apache-2.0
// RMSNorm device code. Two shapes of kernel:
//  - registers: a row is read once into registers, reduced, scaled and written; a warp, a
//    block or (sm_90) a cluster of blocks holds each row. Used whenever the row fits, but:
//  - looped: a block walks a row twice (sum of squares, then scale); the second pass mostly
//    hits L2. The heuristic's choice for fp32 rows of 2048 to 4096 elements (measured faster
//    there, see plan_rmsnorm) and for rows too long for registers.
#pragma once

#include <cstdint>

#include "gks/kernels/reduce.cuh"
#include "gks/kernels/vec.cuh"
#include "gks/tensor.h"

namespace gks::kernels {

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

// Block: kThreadsPerRow x kRowsPerBlock threads; threadIdx.y picks the row in the block.
// With kCluster > 1 a row is split over the kCluster CTAs of a thread block cluster (sm_90),
// each holding a contiguous kThreadsPerRow * kVecsPerThread accesses of it, and the partial
// sums of squares meet through distributed shared memory. That keeps long rows in
// registers while each CTA stays small enough for several per SM, so one CTA's loads
// overlap another's reduction and stores.
template <typename T, int kVec, int kThreadsPerRow, int kVecsPerThread, int kRowsPerBlock,
          int kCluster = 1>
// Up to 4 accesses a thread fit in 32 registers, which lets an SM hold 2048 threads.
__global__ void __launch_bounds__(kThreadsPerRow* kRowsPerBlock,
                                  (kVecsPerThread <= 4 ? 2048 : 1024) / (kThreadsPerRow * kRowsPerBlock))
    rmsnorm_registers_kernel(const RmsNormParams p) {
  static_assert(kRowsPerBlock == 1 || kThreadsPerRow <= 32, "several rows only per warp");
  static_assert(kCluster == 1 || kRowsPerBlock == 1, "clusters split one row");
  __shared__ float scratch[kThreadsPerRow / 32 > 0 ? kThreadsPerRow / 32 : 1];
  __shared__ float cluster_slot;
  const int rank = kCluster > 1 ? int(blockIdx.x % kCluster) : 0;  // 1-D clusters along x
  const int64_t row = int64_t(blockIdx.x / kCluster) * kRowsPerBlock + threadIdx.y;
  // Only warp-per-row blocks (no block barrier, no cluster) can have rows past the end.
  if (kRowsPerBlock > 1 && row >= p.rows) return;
  // This thread's accesses are i = 0 .. kVecsPerThread-1, kThreadsPerRow vectors apart,
  // starting at vector `first`; the row is a whole number of vectors (the host picks kVec
  // so), so each access is wholly inside the row or wholly past it.
  using V = Vec<T, kVec>;
  const int64_t first = int64_t(rank) * kVecsPerThread * kThreadsPerRow + threadIdx.x;
  const int64_t row_vecs = p.cols / kVec;
  const int live = first >= row_vecs ? 0
                   : int(min(int64_t(kVecsPerThread), (row_vecs - first + kThreadsPerRow - 1) / kThreadsPerRow));

  // The row stays as loaded (Raw) and is converted to fp32 where it is used.
  using R = Raw<T, kVec>;
  const V* x = reinterpret_cast<const V*>(static_cast<const T*>(p.x) + p.x_rows.row_offset(row)) + first;
  R v[kVecsPerThread];
#pragma unroll
  for (int i = 0; i < kVecsPerThread; ++i) v[i] = i < live ? load_raw_vec(x + i * kThreadsPerRow) : R{};
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
  if constexpr (kThreadsPerRow <= 32) {
    sumsq = warp_reduce<kThreadsPerRow>(sumsq, SumOp{});
  } else {
    sumsq = group_reduce<kThreadsPerRow>(sumsq, SumOp{}, scratch);
  }
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
// DRAM busy. On an H200 at fp32 32768x4096 it ran 258-260 us, the row in registers 264 us,
// and the earlier looped kernel, without the keep-in-L2 hint, 369 us.)
template <typename T, int kVec, int kThreads>
__global__ void __launch_bounds__(kThreads) rmsnorm_looped_kernel(const RmsNormParams p) {
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

  float sumsq = 0.f;
  const auto add_squares = [&](const R& v) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) sumsq += elem(v, j) * elem(v, j);
  };
#pragma unroll 1
  for (int64_t base = threadIdx.x; base < whole1; base += kThreads * kUnroll1) {
    R v[kUnroll1];
#pragma unroll
    for (int u = 0; u < kUnroll1; ++u) v[u] = load_raw_vec<CacheHint::kKeepInL2>(x + base + u * kThreads);
#pragma unroll
    for (int u = 0; u < kUnroll1; ++u) add_squares(v[u]);
  }
#pragma unroll 1
  for (int64_t i = whole1 + threadIdx.x; i < row_vecs; i += kThreads)
    add_squares(load_raw_vec<CacheHint::kKeepInL2>(x + i));
  sumsq = group_reduce<kThreads>(sumsq, SumOp{}, scratch);
  const float inv_rms = rsqrtf(sumsq / float(p.cols) + p.eps);

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
      v[u] = load_raw_vec<CacheHint::kLastUse>(x + base + u * kThreads);
      wv[u] = load_raw_vec<CacheHint::kKeepInL2>(w + base + u * kThreads);
    }
#pragma unroll
    for (int u = 0; u < kUnroll2; ++u) y[base + u * kThreads] = scale(v[u], wv[u]);
  }
#pragma unroll 1
  for (int64_t i = whole2 + threadIdx.x; i < row_vecs; i += kThreads)
    y[i] = scale(load_raw_vec<CacheHint::kLastUse>(x + i), load_raw_vec<CacheHint::kKeepInL2>(w + i));
}

}  // namespace gks::kernels
