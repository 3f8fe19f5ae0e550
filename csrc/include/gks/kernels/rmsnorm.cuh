// SPDX-License-Identifier: Apache-2.0
// RMSNorm device code. Two shapes of kernel:
//  - registers: a row (or a warp's row) is read once into registers, reduced, scaled and
//    written; used whenever the row fits in the registers of one block.
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
template <typename T, int kVec, int kThreadsPerRow, int kVecsPerThread, int kRowsPerBlock>
__global__ void __launch_bounds__(kThreadsPerRow* kRowsPerBlock)
    rmsnorm_registers_kernel(const RmsNormParams p) {
  static_assert(kRowsPerBlock == 1 || kThreadsPerRow <= 32, "several rows only per warp");
  __shared__ float scratch[kThreadsPerRow / 32 > 0 ? kThreadsPerRow / 32 : 1];
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= p.rows) return;  // only for warp-per-row blocks, which have no block barrier
  const T* x = static_cast<const T*>(p.x) + p.x_rows.row_offset(row);
  const int tid = threadIdx.x;

  float v[kVecsPerThread][kVec];
  float sumsq = 0.f;
#pragma unroll
  for (int i = 0; i < kVecsPerThread; ++i) {
    const int64_t col = (int64_t(i) * kThreadsPerRow + tid) * kVec;
    load_row_vec<kVec>(x, col, p.cols, v[i]);
#pragma unroll
    for (int j = 0; j < kVec; ++j) sumsq += v[i][j] * v[i][j];
  }
  if constexpr (kThreadsPerRow <= 32) {
    sumsq = warp_reduce<kThreadsPerRow>(sumsq, SumOp{});
  } else {
    sumsq = group_reduce<kThreadsPerRow>(sumsq, SumOp{}, scratch);
  }
  const float inv_rms = rsqrtf(sumsq / float(p.cols) + p.eps);

  const T* w = static_cast<const T*>(p.weight);
  T* y = static_cast<T*>(p.y) + p.y_rows.row_offset(row);
#pragma unroll
  for (int i = 0; i < kVecsPerThread; ++i) {
    const int64_t col = (int64_t(i) * kThreadsPerRow + tid) * kVec;
    if (col >= p.cols) break;
    float wv[kVec];
    load_row_vec<kVec>(w, col, p.cols, wv);
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[i][j] = v[i][j] * inv_rms * wv[j];
    store_row_vec<kVec>(y, col, p.cols, v[i]);
  }
}

// One row per kThreads-thread block; the row is walked twice, kUnroll accesses in flight.
// The host sizes the grid's rows-in-flight to fit in half the L2, so the second pass reads
// the row from L2, not DRAM. That pass walks the row backwards (the latest-read chunks are
// the likeliest still cached), marks x as last-use and streams y out, so neither evicts
// rows that other blocks have yet to re-read.
template <typename T, int kVec, int kThreads>
__global__ void __launch_bounds__(kThreads) rmsnorm_looped_kernel(const RmsNormParams p) {
  constexpr int kUnroll = 4;
  constexpr int64_t kStep = int64_t(kThreads) * kVec;       // elements one sweep covers
  constexpr int64_t kChunk = kStep * kUnroll;                // elements one iteration covers
  __shared__ float scratch[kThreads / 32];
  const int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(p.x) + p.x_rows.row_offset(row);
  const int64_t first = int64_t(threadIdx.x) * kVec;

  float sumsq = 0.f;
  for (int64_t base = 0; base < p.cols; base += kChunk) {
    float v[kUnroll][kVec];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) load_row_vec<kVec>(x, base + u * kStep + first, p.cols, v[u]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int j = 0; j < kVec; ++j) sumsq += v[u][j] * v[u][j];
  }
  sumsq = group_reduce<kThreads>(sumsq, SumOp{}, scratch);
  const float inv_rms = rsqrtf(sumsq / float(p.cols) + p.eps);

  const T* w = static_cast<const T*>(p.weight);
  T* y = static_cast<T*>(p.y) + p.y_rows.row_offset(row);
  const int64_t last_chunk = (p.cols - 1) / kChunk * kChunk;
  for (int64_t base = last_chunk; base >= 0; base -= kChunk) {
    float v[kUnroll][kVec], wv[kUnroll][kVec];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      load_row_vec<kVec, CacheHint::kLastUse>(x, base + u * kStep + first, p.cols, v[u]);
      load_row_vec<kVec>(w, base + u * kStep + first, p.cols, wv[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) v[u][j] = v[u][j] * inv_rms * wv[u][j];
      store_row_vec<kVec, CacheHint::kStreaming>(y, base + u * kStep + first, p.cols, v[u]);
    }
  }
}

}  // namespace gks::kernels
