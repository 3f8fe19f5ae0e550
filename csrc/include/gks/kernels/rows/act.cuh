// SPDX-License-Identifier: Apache-2.0
// The activation family on the row skeleton (skeleton.cuh): act_and_mul, y = act(gate) * up
// with gate and up the two halves of each row of x. Elementwise, so one pass: a block walks
// its row's d outputs, each thread a vector of gate and the matching vector of up at a time.
#pragma once

#include <cstdint>

#include "gks/kernels/activation.cuh"
#include "gks/kernels/rows/common.cuh"
#include "gks/kernels/rows/quantize_fp8.cuh"
#include "gks/kernels/vec.cuh"
#include "gks/tensor.h"

namespace gks::kernels::rows {

using kernels::activation;

struct ActAndMulParams {
  const void* x;
  void* y;
  RowLayout x_rows;
  RowLayout y_rows;
  int64_t rows;
  int64_t d;  // outputs a row; x's rows hold 2d
};

template <typename T, int kVec, int kAct>
struct ActAndMulRow {
  using Params = ActAndMulParams;

  template <class S>
  static constexpr bool compiled() {
    return kIsLooped<S> && S::kThreads >= 128;
  }
  template <class S>
  static constexpr int min_blocks() {
    return 0;
  }

  // d is a whole number of vectors (the host picks kVec so), so up's half starts on one.
  template <class S>
  static __device__ __forceinline__ void looped(const Params& p) {
    using V = Vec<T, kVec>;
    const int64_t row = blockIdx.x;
    const int64_t vecs = p.d / kVec;
    const V* gate = reinterpret_cast<const V*>(static_cast<const T*>(p.x) + p.x_rows.row_offset(row));
    const V* up = gate + vecs;
    V* y = reinterpret_cast<V*>(static_cast<T*>(p.y) + p.y_rows.row_offset(row));
#pragma unroll 2
    for (int64_t i = threadIdx.x; i < vecs; i += S::kThreads) {
      const Raw<T, kVec> g = load_raw_vec(gate + i), u = load_raw_vec(up + i);
      V out;
#pragma unroll
      for (int j = 0; j < kVec; ++j) out.v[j] = from_float<T>(activation<kAct>(elem(g, j)) * elem(u, j));
      y[i] = out;
    }
  }
};

// act_and_mul_quant: y = act(gate) * up in fp32, quantized to e4m3 per 1 x 128 group by
// an output policy of quantize_fp8.cuh (QuantOutFp8Group): no y in memory, q and the scales
// written at once. d is a whole number of groups (the host checks), so a block's sweep of
// kThreads accesses holds whole groups; every thread takes every sweep (the group's
// reductions are collective), those past the row with zeros and no stores.
struct ActAndMulQuantParams : ActAndMulParams {
  QuantOutParams out;
};

template <typename T, int kVec, int kAct>
struct ActAndMulQuantRow {
  using Params = ActAndMulQuantParams;
  using Out = QuantOutFp8Group;

  template <class S>
  static constexpr bool compiled() {
    return kIsLooped<S> && S::kThreads >= 128;
  }
  template <class S>
  static constexpr int min_blocks() {
    return 0;
  }

  template <class S>
  static __device__ __forceinline__ void looped(const Params& p) {
    constexpr int kThreads = S::kThreads;
    __shared__ float scratch[kThreads / 32];
    using V = Vec<T, kVec>;
    const int64_t row = blockIdx.x;
    const int64_t vecs = p.d / kVec;
    const V* gate = reinterpret_cast<const V*>(static_cast<const T*>(p.x) + p.x_rows.row_offset(row));
    const V* up = gate + vecs;
    for (int64_t base = 0; base < vecs; base += kThreads) {
      const int64_t i = base + threadIdx.x;
      const bool in = i < vecs;
      float y[1][kVec];
      if (in) {
        const Raw<T, kVec> g = load_raw_vec(gate + i), u = load_raw_vec(up + i);
#pragma unroll
        for (int j = 0; j < kVec; ++j) y[0][j] = activation<kAct>(elem(g, j)) * elem(u, j);
      } else {
#pragma unroll
        for (int j = 0; j < kVec; ++j) y[0][j] = 0.f;
      }
      Out::template store<kThreads>(p.out, row, i, in ? 1 : 0, y, scratch);
    }
  }
};

}  // namespace gks::kernels::rows
