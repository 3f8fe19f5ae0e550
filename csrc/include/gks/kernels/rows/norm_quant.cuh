// SPDX-License-Identifier: Apache-2.0
// RMSNorm (and the residual add first: fused_add_rmsnorm's rows) with a quantized output:
// rmsnorm_quant / fused_add_rmsnorm_quant (gks/norms.h). The row is RmsNormRow's (the same
// loads, residual add and sum of squares), held in registers; y = x * inv_rms * w stays in
// fp32 and goes to an output policy of quantize_fp8.cuh (QuantOutInt8Token,
// QuantOutFp8Token, QuantOutFp8Group), which reduces the scales and stores q. One read of x
// (and of the residual), one write of q and the scales (and of residual_out).
#pragma once

#include <type_traits>

#include "gks/kernels/rows/norm.cuh"
#include "gks/kernels/rows/quantize_fp8.cuh"

namespace gks::kernels::rows {

template <bool kAddResidual>
struct RmsNormQuantParams : std::conditional_t<kAddResidual, AddRmsNormParams, RmsNormParams> {
  QuantOutParams out;
};

template <typename T, int kVec, bool kAddResidual, class Out>
struct RmsNormQuantRow {
  using Params = RmsNormQuantParams<kAddResidual>;
  using Norm = RmsNormRow<T, kVec, kAddResidual>;

  // Registers only (the host refuses longer rows), the shapes plan_rmsnorm_quant picks:
  // warps of 1-8 accesses a thread (4 rows a block) where the output allows; blocks of 64-256
  // threads of 1 access (short rows), of 128-1024 threads of 4, and of 1024 threads of 8.
  template <class S>
  static constexpr bool compiled() {
    if constexpr (kIsRegisters<S>) {
      constexpr int t = S::kThreadsPerRow, v = S::kVecsPerThread;
      if (S::kCluster != 1) return false;
      if (t == 32) return S::kRowsPerBlock == 4 && !(Out::kNeedsBlockRow && kVec == 1);
      if (S::kRowsPerBlock != 1 || (Out::kNeedsBlockRow && kVec == 1 && t < 128)) return false;
      return (v == 1 && t <= 256) || (v == 4 && t >= 128) || (v == 8 && t == 1024);
    } else {
      return false;
    }
  }
  // The fp32 results take kVecsPerThread * kVec registers beside the row: up to 64 a thread.
  template <class S>
  static constexpr int min_blocks() {
    return S::kThreads >= 1024 ? 1 : 1024 / S::kThreads;
  }

  template <class S>
  static __device__ __forceinline__ void registers(const Params& p) {
    constexpr int kThreadsPerRow = S::kThreadsPerRow, kVecsPerThread = S::kVecsPerThread;
    __shared__ float scratch[kThreadsPerRow / 32 > 0 ? kThreadsPerRow / 32 : 1];
    const auto [row, first, live] = row_part<S, kVec>(p.cols);
    if (S::kRowsPerBlock > 1 && row >= p.rows) return;  // warp-per-row blocks: no block barrier
    using V = Vec<T, kVec>;
    using R = Raw<T, kVec>;
    const V* x = reinterpret_cast<const V*>(static_cast<const T*>(p.x) + p.x_rows.row_offset(row)) + first;
    R v[kVecsPerThread];
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i) v[i] = i < live ? load_raw_vec(x + i * kThreadsPerRow) : R{};
    Norm::template add_residual<kVecsPerThread, kThreadsPerRow>(Norm::residual_rows(p, row), first, live, v);
    float sumsq = 0.f;
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kVec; ++j) sumsq += elem(v[i], j) * elem(v[i], j);
    sumsq = row_sum<kThreadsPerRow>(sumsq, scratch);
    const float inv_rms = rsqrtf(sumsq / float(p.cols) + p.eps);
    const V* w = reinterpret_cast<const V*>(p.weight) + first;
    float y[kVecsPerThread][kVec];
#pragma unroll
    for (int i = 0; i < kVecsPerThread; ++i) {
      const R wv = i < live ? load_raw_vec(w + i * kThreadsPerRow) : R{};
#pragma unroll
      for (int j = 0; j < kVec; ++j) y[i][j] = i < live ? elem(v[i], j) * inv_rms * elem(wv, j) : 0.f;  // 0 past the row, even where inv_rms is inf
    }
    Out::template store<kThreadsPerRow>(p.out, row, first, live, y, scratch);
  }
};

}  // namespace gks::kernels::rows
