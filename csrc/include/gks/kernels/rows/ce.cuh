// SPDX-License-Identifier: Apache-2.0
// Cross entropy on the row skeleton (skeleton.cuh): CrossEntropyRow, the forward (kBackward
// false) and the backward (true) of gks::cross_entropy_{fwd,bwd} (gks/loss.h).
//  - forward: one pass over a row with softmax's online (max, sum) fold (softmax.cuh: the
//    same math, the same treatment of non-finite values), merged over the row's threads;
//    the row's first thread reads the target's logit on its own (one extra sector a row)
//    and writes lse and the loss. Nothing is held past a step, so long rows cost no more
//    registers than short ones.
//  - backward: one pass, no reduction: each element's gradient exp(x - lse) * dloss (less
//    dloss at the target) from the forward's lse, written where it was read (so dlogits may
//    be the logits themselves). An ignored row is written as zeros without reading it.
// Shapes: a warp a row, four rows a block (Registers<32, kUnroll, 4>: short rows, many rows an
// SM), or a block of 256 or 512 threads a row (Looped). A thread keeps kUnroll accesses
// (16 bytes each where the rows are aligned) in flight a step.
#pragma once

#include <cstdint>

#include "gks/kernels/rows/common.cuh"
#include "gks/kernels/rows/softmax.cuh"
#include "gks/kernels/vec.cuh"
#include "gks/tensor.h"

namespace gks::kernels::rows {

struct CrossEntropyParams {
  const void* logits;
  RowLayout logits_rows;
  const void* target;  // int64 or int32
  int64_t target_stride;
  bool target_64;
  // forward
  void* loss;  // float32, or the logits' dtype (loss_fp32 false)
  int64_t loss_stride;
  bool loss_fp32;
  float* lse_out;
  int64_t lse_out_stride;
  // backward
  const float* lse;
  int64_t lse_stride;
  const float* dloss;
  int64_t dloss_stride;
  void* dlogits;
  RowLayout dlogits_rows;

  int64_t rows;
  int64_t cols;
  int64_t ignore_index;
  uint32_t zero = 0;  // always 0, unknown to the compiler: see opaque (common.cuh)
};

__device__ __forceinline__ int64_t ce_target(const CrossEntropyParams& p, int64_t row) {
  return p.target_64 ? static_cast<const int64_t*>(p.target)[row * p.target_stride]
                     : int64_t(static_cast<const int32_t*>(p.target)[row * p.target_stride]);
}

// One row's forward: `lane` is the thread's place among the kThreads threads of the row.
template <bool kRagged, typename T, int kVec, int kThreads, int kUnroll>
__device__ __forceinline__ void ce_fwd_row(const CrossEntropyParams& p, int64_t row, int lane,
                                           float* scratch_m, float* scratch_s) {
  constexpr int64_t kStep = int64_t(kThreads) * kVec;
  const int64_t cols = p.cols;
  const T* x = static_cast<const T*>(p.logits) + p.logits_rows.row_offset(row);
  const int64_t t = ce_target(p, row);
  const bool ignored = t == p.ignore_index;
  const bool valid = !ignored && t >= 0 && t < cols;
  float x_t = 0.f;
  if (lane == 0 && valid) x_t = elem(load_raw_vec(reinterpret_cast<const Vec<T, 1>*>(x + t)), 0);

  float m = -INFINITY, s = 0.f;
  for (int64_t base = int64_t(lane) * kVec; base < cols; base += kStep * kUnroll) {
    Raw<T, kVec> r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) r[u] = load_raw<kRagged, kVec>(x, base + u * kStep, cols, /*neg_inf=*/true);
    softmax_fold(m, s, r, p.zero);
  }
  row_reduce_softmax<kThreads>(m, s, scratch_m, scratch_s);
  if (lane == 0) {
    const float nan = __int_as_float(0x7fffffff);
    // A row whose max is +-inf has no finite lse (torch's loss is NaN there too).
    const float lse = fabsf(m) < INFINITY ? m + logf(s) : nan;
    const float loss = ignored ? 0.f : valid ? lse - x_t : nan;
    p.lse_out[row * p.lse_out_stride] = lse;
    if (p.loss_fp32)
      static_cast<float*>(p.loss)[row * p.loss_stride] = loss;
    else
      static_cast<T*>(p.loss)[row * p.loss_stride] = from_float<T>(loss);
  }
}

// One row's backward.
template <bool kRagged, typename T, int kVec, int kThreads, int kUnroll>
__device__ __forceinline__ void ce_bwd_row(const CrossEntropyParams& p, int64_t row, int lane) {
  constexpr int64_t kStep = int64_t(kThreads) * kVec;
  const int64_t cols = p.cols;
  const T* x = static_cast<const T*>(p.logits) + p.logits_rows.row_offset(row);
  T* dx = static_cast<T*>(p.dlogits) + p.dlogits_rows.row_offset(row);
  const int64_t t = ce_target(p, row);
  const int64_t first = int64_t(lane) * kVec;
  if (t == p.ignore_index) {
    float zeros[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) zeros[j] = 0.f;
    for (int64_t col = first; col < cols; col += kStep) store_values<kRagged, kVec>(dx, col, cols, zeros);
    return;
  }
  // An out-of-range target makes the row NaN.
  const bool valid = t >= 0 && t < cols;
  const float scale = valid ? p.dloss[row * p.dloss_stride] : __int_as_float(0x7fffffff);
  // exp(x - lse) = 2^(x log2(e) - lse log2(e)): one FFMA and one MUFU.EX2 an element (byte
  // for byte, the backward affords half the forward's instructions: it also writes).
  const float neg_lse_log2e = -p.lse[row * p.lse_stride] * kLog2e;
  // The thread whose accesses hold the target writes its element again, less dloss, after
  // its pass (so the pass has no per-element compare); it reads the logit first, since the
  // pass may overwrite it (in place).
  const bool owner = valid && int((t / kVec) % kThreads) == lane;
  float x_t = 0.f;
  if (owner) x_t = elem(load_raw_vec(reinterpret_cast<const Vec<T, 1>*>(x + t)), 0);
  for (int64_t base = first; base < cols; base += kStep * kUnroll) {
    Raw<T, kVec> r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) r[u] = load_raw<kRagged, kVec>(x, base + u * kStep, cols, /*neg_inf=*/true);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float g[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) g[j] = ptx::ex2_approx_ftz(fmaf(elem(r[u], j), kLog2e, neg_lse_log2e)) * scale;
      store_values<kRagged, kVec>(dx, base + u * kStep, cols, g);
    }
  }
  if (owner) dx[t] = from_float<T>((ptx::ex2_approx_ftz(fmaf(x_t, kLog2e, neg_lse_log2e)) - 1.f) * scale);
}

// The functor (skeleton.cuh). kVec: 1 or 16 bytes of elements. Rows that are not a whole
// number of 16-byte accesses take the ragged body, chosen once a launch.
template <typename T, int kVec, bool kBackward>
struct CrossEntropyRow {
  using Params = CrossEntropyParams;
  static constexpr int kUnroll = 4;

  template <class S>
  static constexpr bool compiled() {
    if constexpr (kIsLooped<S>) {
      return S::kThreads == 256 || S::kThreads == 512;
    } else if constexpr (kIsRegisters<S>) {
      return S::kThreadsPerRow == 32 && S::kRowsPerBlock == 4 && S::kCluster == 1 &&
             S::kVecsPerThread == kUnroll;
    } else {
      return false;
    }
  }
  // The forward: 1536 threads an SM (40 registers a thread). The backward, which also holds
  // its stores' values and addresses, 1280 (48 registers; at 40 it spills): with four
  // 16-byte loads a thread in flight that is still 80 KB an SM.
  template <class S>
  static constexpr int min_blocks() {
    return (kBackward ? 1280 : 1536) / S::kThreads;
  }

  template <bool kRagged, int kThreads>
  static __device__ __forceinline__ void body(const Params& p, int64_t row, int lane, float* scratch_m,
                                              float* scratch_s) {
    if constexpr (kBackward)
      ce_bwd_row<kRagged, T, kVec, kThreads, kUnroll>(p, row, lane);
    else
      ce_fwd_row<kRagged, T, kVec, kThreads, kUnroll>(p, row, lane, scratch_m, scratch_s);
  }

  template <int kThreads>
  static __device__ __forceinline__ void any_row(const Params& p, int64_t row, int lane, float* scratch_m,
                                                 float* scratch_s) {
    if (kVec > 1 && p.cols % kVec != 0)
      body<true, kThreads>(p, row, lane, scratch_m, scratch_s);
    else
      body<false, kThreads>(p, row, lane, scratch_m, scratch_s);
  }

  // A warp a row: rows past the end (the last block's) leave at once; a warp has no barrier.
  template <class S>
  static __device__ __forceinline__ void registers(const Params& p) {
    const int64_t r = row_index<S>();
    if (r >= p.rows) return;
    any_row<32>(p, r, threadIdx.x, nullptr, nullptr);
  }

  template <class S>
  static __device__ __forceinline__ void looped(const Params& p) {
    __shared__ float scratch_m[S::kThreads / 32], scratch_s[S::kThreads / 32];
    any_row<S::kThreads>(p, blockIdx.x, threadIdx.x, scratch_m, scratch_s);
  }
};

}  // namespace gks::kernels::rows
