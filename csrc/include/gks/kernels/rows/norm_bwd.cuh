// SPDX-License-Identifier: Apache-2.0
// rmsnorm_bwd on the row skeleton (skeleton.cuh): the gradients of y = x * rstd * w, with
// rstd = rsqrt(mean(x^2) + eps) recomputed from x (the forward keeps nothing), from dy:
//   g = dy * w,  xhat = x * rstd,  c = mean(g * xhat) = rstd * sum(g * x) / N,
//   dx = (g - xhat * c) * rstd,    dweight = the sum over the rows of dy * xhat.
// dx is a row's own; dweight sums over every row, deterministically (no atomics), in two
// steps:
//  - the row kernels run a persistent grid (RowPlan::max_blocks): block b walks the row
//    groups b, b + gridDim.x, ... and keeps its own fp32 sum of dy * xhat for each column it
//    holds, which it writes as row b of a workspace [gridDim.x, N] (each thread's columns are
//    the same in every row, so the sums stay in registers; the looped shape's are too many,
//    and go to the block's workspace row as it walks);
//  - rmsnorm_bwd_dweight_kernel adds the workspace's rows up, per column, in a fixed order.
// The same inputs on the same device give the same bits (the grid is the planner's, from the
// row's length and the device).
#pragma once

#include <cstdint>

#include "gks/kernels/reduce.cuh"
#include "gks/kernels/rows/common.cuh"
#include "gks/kernels/rows/norm.cuh"
#include "gks/kernels/vec.cuh"
#include "gks/tensor.h"

namespace gks::kernels::rows {

struct RmsNormBwdParams {
  const void* dy;
  const void* x;
  const void* weight;
  void* dx;
  float* dweight_parts;  // [gridDim.x, cols]: each block's sums of dy * xhat
  RowLayout dy_rows;
  RowLayout x_rows;
  RowLayout dx_rows;
  int64_t rows;
  int64_t cols;
  float eps;
};

// The two sums of a row (sum(x^2) and sum(g * x)) over its kThreads threads (a warp or a 1-D
// block), in one sweep; the trailing barrier lets the block's next row reuse the scratch.
template <int kThreads>
__device__ __forceinline__ void row_sum_pair(float& a, float& b, float* scratch_a, float* scratch_b) {
  if constexpr (kThreads <= 32) {
    a = warp_reduce<kThreads>(a, SumOp{});
    b = warp_reduce<kThreads>(b, SumOp{});
  } else {
    constexpr int kWarps = kThreads / 32;
    a = warp_reduce<32>(a, SumOp{});
    b = warp_reduce<32>(b, SumOp{});
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) {
      scratch_a[warp] = a;
      scratch_b[warp] = b;
    }
    __syncthreads();
    a = warp_reduce<kWarps>(scratch_a[lane % kWarps], SumOp{});
    b = warp_reduce<kWarps>(scratch_b[lane % kWarps], SumOp{});
    __syncthreads();
  }
}

// kVec consecutive floats (16-byte aligned where kVec > 1: the workspace's rows are cols
// floats apart, cols a multiple of kVec, from a 256-byte aligned base).
template <int kVec>
__device__ __forceinline__ void load_floats(const float* src, float (&v)[kVec]) {
  if constexpr (kVec == 1) {
    v[0] = *src;
  } else {
#pragma unroll
    for (int j = 0; j < kVec; j += 4) {
      const float4 f = *reinterpret_cast<const float4*>(src + j);
      v[j] = f.x, v[j + 1] = f.y, v[j + 2] = f.z, v[j + 3] = f.w;
    }
  }
}
template <int kVec>
__device__ __forceinline__ void store_floats(float* dst, const float (&v)[kVec]) {
  if constexpr (kVec == 1) {
    *dst = v[0];
  } else {
#pragma unroll
    for (int j = 0; j < kVec; j += 4)
      *reinterpret_cast<float4*>(dst + j) = make_float4(v[j], v[j + 1], v[j + 2], v[j + 3]);
  }
}

// One access of a row: dx (rounded to T) from x, dy, w and the row's rstd and c; dy * xhat
// added to `sums`.
template <typename T, int kVec>
__device__ __forceinline__ Vec<T, kVec> rmsnorm_bwd_access(const Raw<T, kVec>& x, const Raw<T, kVec>& dy,
                                                          const Raw<T, kVec>& w, float rstd, float c,
                                                          float (&sums)[kVec]) {
  Vec<T, kVec> out;
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const float xhat = elem(x, j) * rstd;
    const float d = elem(dy, j);
    out.v[j] = from_float<T>((d * elem(w, j) - xhat * c) * rstd);
    sums[j] += d * xhat;
  }
  return out;
}

// Threads an SM each shape is built for (the launch bound's minimum blocks; plan_rmsnorm_bwd
// sizes the persistent grid to match): a thread holding up to 2 accesses of x and dy and
// their column sums fits 64 registers (ptxas -v: no spills), one of 4 (16-bit: 32 fp32
// sums) takes up to 128.
template <class S>
constexpr int rmsnorm_bwd_threads_per_sm() {
  if constexpr (kIsLooped<S>) {
    return 1024;
  } else {
    return S::kVecsPerThread <= 2 ? 1024 : 512;
  }
}

template <typename T, int kVec>
struct RmsNormBwdRow {
  using Params = RmsNormBwdParams;

  // Registers: warps of 1, 2 or 4 accesses a thread (4 rows a block); blocks of 64-1024
  // threads of 2 accesses and of 64-512 threads of 4. Looped: 512 threads.
  template <class S>
  static constexpr bool compiled() {
    if constexpr (kIsLooped<S>) {
      return S::kThreads == 512;
    } else if constexpr (kIsRegisters<S>) {
      constexpr int t = S::kThreadsPerRow, v = S::kVecsPerThread;
      if (S::kCluster != 1) return false;
      if (t == 32) return S::kRowsPerBlock == 4 && v <= 4;
      return S::kRowsPerBlock == 1 && (v == 2 || (v == 4 && t <= 512));
    } else {
      return false;
    }
  }

  template <class S>
  static constexpr int min_blocks() {
    constexpr int blocks = rmsnorm_bwd_threads_per_sm<S>() / S::kThreads;
    return blocks > 0 ? blocks : 1;
  }

  // Row after row, each thread holds its accesses of x and dy (the weight's, the same in
  // every row, come from L1 after the first); the column sums of dy * xhat stay in
  // registers until the block is done.
  template <class S>
  static __device__ __forceinline__ void registers(const Params& p) {
    constexpr int kThreadsPerRow = S::kThreadsPerRow, kVecsPerThread = S::kVecsPerThread;
    constexpr int kRowsPerBlock = S::kRowsPerBlock;
    constexpr int kWarps = kThreadsPerRow / 32 > 0 ? kThreadsPerRow / 32 : 1;
    __shared__ float scratch[2][kWarps];
    using V = Vec<T, kVec>;
    using R = Raw<T, kVec>;
    const auto [row0, first, live] = row_part<S, kVec>(p.cols);
    const int64_t row_step = int64_t(gridDim.x) * kRowsPerBlock;

    const V* wp = reinterpret_cast<const V*>(p.weight) + first;
    float sums[kVecsPerThread][kVec] = {};

    // Warp-per-row blocks: a warp whose rows have run out still meets the others below.
#pragma unroll 1
    for (int64_t row = row0; row < p.rows; row += row_step) {
      const V* x = reinterpret_cast<const V*>(static_cast<const T*>(p.x) + p.x_rows.row_offset(row)) + first;
      const V* dy = reinterpret_cast<const V*>(static_cast<const T*>(p.dy) + p.dy_rows.row_offset(row)) + first;
      R xv[kVecsPerThread], dv[kVecsPerThread], w[kVecsPerThread];
#pragma unroll
      for (int i = 0; i < kVecsPerThread; ++i) {
        xv[i] = i < live ? load_raw_vec(x + i * kThreadsPerRow) : R{};
        dv[i] = i < live ? load_raw_vec(dy + i * kThreadsPerRow) : R{};
        w[i] = i < live ? load_raw_vec(wp + i * kThreadsPerRow) : R{};
      }
      float sumsq = 0.f, dot = 0.f;  // the accesses past the row hold zeros
#pragma unroll
      for (int i = 0; i < kVecsPerThread; ++i)
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const float a = elem(xv[i], j);
          sumsq += a * a;
          dot += elem(dv[i], j) * elem(w[i], j) * a;
        }
      row_sum_pair<kThreadsPerRow>(sumsq, dot, scratch[0], scratch[1]);
      const float rstd = rsqrtf(sumsq / float(p.cols) + p.eps);
      const float c = dot * rstd / float(p.cols);
      V* dx = reinterpret_cast<V*>(static_cast<T*>(p.dx) + p.dx_rows.row_offset(row)) + first;
#pragma unroll
      for (int i = 0; i < kVecsPerThread; ++i) {
        if (i >= live) break;
        // The weight again (from L1): held through the reduction, it would spill 16-bit rows.
        const R wv = load_raw_vec(wp + i * kThreadsPerRow);
        dx[i * kThreadsPerRow] = rmsnorm_bwd_access<T, kVec>(xv[i], dv[i], wv, rstd, c, sums[i]);
      }
    }

    if constexpr (kRowsPerBlock > 1) {
      // The block's warps hold the same columns: warps 1.. hand their sums to warp 0, which
      // adds them in warp order.
      constexpr int kPerWarp = kThreadsPerRow * kVecsPerThread * kVec;
      __shared__ float others[kRowsPerBlock - 1][kPerWarp];
      const int slot = threadIdx.x * kVecsPerThread * kVec;
      if (threadIdx.y > 0) {
#pragma unroll
        for (int i = 0; i < kVecsPerThread; ++i)
#pragma unroll
          for (int j = 0; j < kVec; ++j) others[threadIdx.y - 1][slot + i * kVec + j] = sums[i][j];
      }
      __syncthreads();
      if (threadIdx.y > 0) return;
#pragma unroll
      for (int k = 0; k < kRowsPerBlock - 1; ++k)
#pragma unroll
        for (int i = 0; i < kVecsPerThread; ++i)
#pragma unroll
          for (int j = 0; j < kVec; ++j) sums[i][j] += others[k][slot + i * kVec + j];
    }
    float* part = p.dweight_parts + int64_t(blockIdx.x) * p.cols + first * kVec;
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i) {
      if (i >= live) break;
      store_floats<kVec>(part + int64_t(i) * kThreadsPerRow * kVec, sums[i]);
    }
  }

  // One row at a time per kThreads-thread block, each row walked twice: the sums, then dx and
  // dy * xhat, the latter added to the block's workspace row (stored by the block's first
  // row). The first walk marks x and dy keep-in-L2, the second last-use, as RmsNormRow's
  // looped shape does.
  template <class S>
  static __device__ __forceinline__ void looped(const Params& p) {
    constexpr int kThreads = S::kThreads;
    using V = Vec<T, kVec>;
    using R = Raw<T, kVec>;
    __shared__ float scratch[2][kThreads / 32];
    const int64_t row_vecs = p.cols / kVec;  // a whole number (the host picks kVec so)
    const V* w = reinterpret_cast<const V*>(p.weight);
    // Plain loads and stores: each thread reads back only the sums it stored itself.
    float* part = p.dweight_parts + int64_t(blockIdx.x) * p.cols;
    bool first_row = true;
#pragma unroll 1
    for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
      const V* x = reinterpret_cast<const V*>(static_cast<const T*>(p.x) + p.x_rows.row_offset(row));
      const V* dy = reinterpret_cast<const V*>(static_cast<const T*>(p.dy) + p.dy_rows.row_offset(row));
      V* dx = reinterpret_cast<V*>(static_cast<T*>(p.dx) + p.dx_rows.row_offset(row));
      float sumsq = 0.f, dot = 0.f;
#pragma unroll 4
      for (int64_t i = threadIdx.x; i < row_vecs; i += kThreads) {
        const R xv = load_raw_vec<CacheHint::kKeepInL2>(x + i);
        const R dv = load_raw_vec<CacheHint::kKeepInL2>(dy + i);
        const R wv = load_raw_vec<CacheHint::kKeepInL2>(w + i);
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const float a = elem(xv, j);
          sumsq += a * a;
          dot += elem(dv, j) * elem(wv, j) * a;
        }
      }
      row_sum_pair<kThreads>(sumsq, dot, scratch[0], scratch[1]);
      const float rstd = rsqrtf(sumsq / float(p.cols) + p.eps);
      const float c = dot * rstd / float(p.cols);
#pragma unroll 2
      for (int64_t i = threadIdx.x; i < row_vecs; i += kThreads) {
        const R xv = load_raw_vec<CacheHint::kLastUse>(x + i);
        const R dv = load_raw_vec<CacheHint::kLastUse>(dy + i);
        const R wv = load_raw_vec<CacheHint::kKeepInL2>(w + i);
        float sums[kVec] = {};
        if (!first_row) load_floats<kVec>(part + i * kVec, sums);
        dx[i] = rmsnorm_bwd_access<T, kVec>(xv, dv, wv, rstd, c, sums);
        store_floats<kVec>(part + i * kVec, sums);
      }
      first_row = false;
    }
  }
};

// dweight[j] = the sum over b of parts[b][j], b in a fixed order, rounded once to T; 0 where
// there are no parts (no rows). A block takes kCols columns: thread (c, s) adds the part rows
// s, s + kSlices, ... of column c in order, then the kSlices sums meet in shared memory, in
// order.
inline constexpr int kDweightCols = 32, kDweightSlices = 16;
template <typename T>
__global__ void __launch_bounds__(kDweightCols * kDweightSlices)
    rmsnorm_bwd_dweight_kernel(const float* parts, int64_t count, int64_t cols, T* dweight) {
  __shared__ float sums[kDweightSlices][kDweightCols + 1];
  const int64_t col = int64_t(blockIdx.x) * kDweightCols + threadIdx.x;
  float s = 0.f;
  if (col < cols) {
#pragma unroll 4
    for (int64_t b = threadIdx.y; b < count; b += kDweightSlices) s += parts[b * cols + col];
  }
  sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.f;
#pragma unroll
    for (int k = 0; k < kDweightSlices; ++k) total += sums[k][threadIdx.x];
    dweight[col] = from_float<T>(total);
  }
}

}  // namespace gks::kernels::rows
