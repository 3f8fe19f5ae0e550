// SPDX-License-Identifier: Apache-2.0
// RMSNorm device code. Two shapes of kernel:
//  - registers: a row is read once into registers, reduced, scaled and written; a warp, a
//    block or (sm_90) a cluster of blocks holds each row. Used whenever the row fits.
//  - looped: a block walks a long row twice (sum of squares, then scale); the second pass
//    mostly hits L2. Also the path for rows that are not 16-byte aligned (vec = 1).
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

// One row per kThreads-thread block; the row is walked twice, kUnroll accesses in flight.
// The host sizes the grid's rows-in-flight to fit in half the L2, so the second pass reads
// the row from L2, not DRAM. That pass walks the row backwards (the latest-read chunks are
// the likeliest still cached), marks x as last-use and streams y out, so neither evicts
// rows that other blocks have yet to re-read.
template <typename T, int kVec, int kThreads>
__global__ void __launch_bounds__(kThreads) rmsnorm_looped_kernel(const RmsNormParams p) {
  constexpr int kUnroll = 4;
  constexpr int kChunk = kThreads * kUnroll;  // vectors one iteration covers
  using R = Raw<T, kVec>;
  using V = Vec<T, kVec>;
  __shared__ float scratch[kThreads / 32];
  const int64_t row = blockIdx.x;
  const int64_t row_vecs = p.cols / kVec;  // a whole number (the host picks kVec so)
  const V* x = reinterpret_cast<const V*>(static_cast<const T*>(p.x) + p.x_rows.row_offset(row));

  float sumsq = 0.f;
  for (int64_t base = threadIdx.x; base < row_vecs; base += kChunk) {
    R v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      v[u] = base + u * kThreads < row_vecs ? load_raw_vec(x + base + u * kThreads) : R{};
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int j = 0; j < kVec; ++j) sumsq += elem(v[u], j) * elem(v[u], j);
  }
  sumsq = group_reduce<kThreads>(sumsq, SumOp{}, scratch);
  const float inv_rms = rsqrtf(sumsq / float(p.cols) + p.eps);

  const V* w = reinterpret_cast<const V*>(p.weight);
  V* y = reinterpret_cast<V*>(static_cast<T*>(p.y) + p.y_rows.row_offset(row));
  const int64_t last = threadIdx.x + (row_vecs - 1) / kChunk * kChunk;
  for (int64_t base = last; base >= 0; base -= kChunk) {
    R v[kUnroll], wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * kThreads < row_vecs) {
        v[u] = load_raw_vec<CacheHint::kLastUse>(x + base + u * kThreads);
        wv[u] = load_raw_vec(w + base + u * kThreads);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * kThreads >= row_vecs) break;
      V out;
#pragma unroll
      for (int j = 0; j < kVec; ++j) out.v[j] = from_float<T>(elem(v[u], j) * inv_rms * elem(wv[u], j));
      store_vec<CacheHint::kStreaming>(y + base + u * kThreads, out);
    }
  }
}

}  // namespace gks::kernels
