// SPDX-License-Identifier: Apache-2.0
// Warp-shuffle and block reductions over fp32.
#pragma once

namespace gks::kernels {

struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Reduces over the kWidth lanes of each aligned lane group (kWidth a power of two <= 32);
// every lane of the group gets the result.
template <int kWidth = 32, typename Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset, kWidth));
  return v;
}

// Reduces over a 1-D group of kThreads threads (threadIdx.x in [0, kThreads)) in one block;
// every thread gets the result. `scratch` holds kThreads / 32 floats and may be reused once
// this returns (it ends with a barrier).
template <int kThreads, typename Op>
__device__ __forceinline__ float group_reduce(float v, Op op, float* scratch) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "kThreads: a multiple of 32 up to 1024");
  v = warp_reduce<32>(v, op);
  if constexpr (kThreads > 32) {
    constexpr int kWarps = kThreads / 32;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = scratch[lane % kWarps];
    v = warp_reduce<kWarps>(v, op);
    __syncthreads();
  }
  return v;
}

}  // namespace gks::kernels
