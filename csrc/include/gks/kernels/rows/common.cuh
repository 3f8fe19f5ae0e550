// SPDX-License-Identifier: Apache-2.0
// What the row ops (norms, softmax, quantize: one output row from one input row of a
// tensor [..., N]) share on the device: the launch shapes of the row skeleton
// (skeleton.cuh), where a thread's row is, and the loads, stores and reductions of a row
// held in registers.
//
// The shapes (the host's RowPlan names one; csrc/src/rows/launch.h launches it):
//  - Registers<kThreadsPerRow, kVecsPerThread, kRowsPerBlock, kCluster>: a row is read once
//    into registers, reduced, finished and written. kThreadsPerRow threads (a warp, with
//    kRowsPerBlock rows a block; or a block; or, kCluster > 1, the kCluster CTAs of a
//    thread block cluster, sm_90) hold kVecsPerThread accesses each.
//  - Looped<kThreads>: a block walks a row twice or more; the later passes mostly hit L2.
//  - Tiled<kThreadsPerRow, kRowsPerBlock, kVecsPerThread>: no reduction along the row
//    (dequantize): blocks of kRowsPerBlock rows x kThreadsPerRow * kVecsPerThread accesses.
#pragma once

#include <cstdint>
#include <type_traits>

#include "gks/kernels/ptx/common.cuh"
#include "gks/kernels/reduce.cuh"
#include "gks/kernels/vec.cuh"
#include "gks/tensor.h"

namespace gks::kernels::rows {

template <int kThreadsPerRow_, int kVecsPerThread_, int kRowsPerBlock_ = 1, int kCluster_ = 1>
struct Registers {
  static constexpr int kThreadsPerRow = kThreadsPerRow_, kVecsPerThread = kVecsPerThread_;
  static constexpr int kRowsPerBlock = kRowsPerBlock_, kCluster = kCluster_;
  static constexpr int kThreads = kThreadsPerRow * kRowsPerBlock;
  static_assert(kRowsPerBlock == 1 || kThreadsPerRow <= 32, "several rows only per warp");
  static_assert(kCluster == 1 || kRowsPerBlock == 1, "clusters split one row");
};

template <int kThreads_>
struct Looped {
  static constexpr int kThreads = kThreads_;
};

template <int kThreadsPerRow_, int kRowsPerBlock_, int kVecsPerThread_>
struct Tiled {
  static constexpr int kThreadsPerRow = kThreadsPerRow_, kRowsPerBlock = kRowsPerBlock_;
  static constexpr int kVecsPerThread = kVecsPerThread_;
  static constexpr int kThreads = kThreadsPerRow * kRowsPerBlock;
};

template <class S>
inline constexpr bool kIsRegisters = false;
template <int kA, int kB, int kC, int kD>
inline constexpr bool kIsRegisters<Registers<kA, kB, kC, kD>> = true;
template <class S>
inline constexpr bool kIsLooped = false;
template <int kA>
inline constexpr bool kIsLooped<Looped<kA>> = true;
template <class S>
inline constexpr bool kIsTiled = false;
template <int kA, int kB, int kC>
inline constexpr bool kIsTiled<Tiled<kA, kB, kC>> = true;

// The row a thread of a Registers-shape block works on (threadIdx.y picks the row in a
// warp-per-row block; with clusters, kCluster CTAs side by side in x share a row), and its
// CTA's rank in the row's cluster. Only warp-per-row blocks can have rows past the end.
template <class S>
__device__ __forceinline__ int64_t row_index() {
  return int64_t(blockIdx.x / S::kCluster) * S::kRowsPerBlock + threadIdx.y;
}
template <class S>
__device__ __forceinline__ int cluster_rank() {
  return S::kCluster > 1 ? int(blockIdx.x % S::kCluster) : 0;
}

// Sum over the threads of a row: a warp (kThreads <= 32) or a 1-D block.
template <int kThreads, typename Op>
__device__ __forceinline__ float row_reduce(float v, Op op, float* scratch) {
  if constexpr (kThreads <= 32) {
    return warp_reduce<kThreads>(v, op);
  } else {
    return group_reduce<kThreads>(v, op, scratch);
  }
}
template <int kThreads>
__device__ __forceinline__ float row_sum(float v, float* scratch) {
  return row_reduce<kThreads>(v, SumOp{}, scratch);
}

// The bits of the element that stands for the columns past a row's end: -inf (neutral for
// a max and a softmax sum) or 0 (neutral for a sum of squares).
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
// loaded). `zero` is a kernel parameter that is 0 at run time: one integer add a word.
template <typename T, int kVec>
__device__ __forceinline__ void opaque(Raw<T, kVec>& r, uint32_t zero) {
#pragma unroll
  for (int k = 0; k < Raw<T, kVec>::kWords; ++k) ptx::add_opaque(r.w[k], zero);
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

}  // namespace gks::kernels::rows
