// SPDX-License-Identifier: Apache-2.0
// Warp-shuffle and block reductions over fp32.
#pragma once

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#include <cooperative_groups.h>
#endif

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
// every thread gets the result. One barrier: `scratch` (kThreads / 32 floats) may be written
// again only after a later barrier of the block (a kernel that alternates two scratch
// arrays between its reductions needs no other).
template <int kThreads, typename Op>
__device__ __forceinline__ float group_reduce_one_barrier(float v, Op op, float* scratch) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "kThreads: a multiple of 32 up to 1024");
  v = warp_reduce<32>(v, op);
  if constexpr (kThreads > 32) {
    constexpr int kWarps = kThreads / 32;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = warp_reduce<kWarps>(scratch[lane % kWarps], op);
  }
  return v;
}

// As group_reduce_one_barrier, then a barrier: `scratch` may be reused once this returns.
template <int kThreads, typename Op>
__device__ __forceinline__ float group_reduce(float v, Op op, float* scratch) {
  v = group_reduce_one_barrier<kThreads>(v, op, scratch);
  if constexpr (kThreads > 32) __syncthreads();
  return v;
}

// The sum of `sum` and the max of `max` over a 1-D group of kThreads threads of one block,
// in one sweep and one barrier (as group_reduce_one_barrier, one scratch array each).
template <int kThreads>
__device__ __forceinline__ void group_sum_max_one_barrier(float& sum, float& max,
                                                          float* scratch_sum, float* scratch_max) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "kThreads: a multiple of 32 up to 1024");
  sum = warp_reduce<32>(sum, SumOp{});
  max = warp_reduce<32>(max, MaxOp{});
  if constexpr (kThreads > 32) {
    constexpr int kWarps = kThreads / 32;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) {
      scratch_sum[warp] = sum;
      scratch_max[warp] = max;
    }
    __syncthreads();
    sum = warp_reduce<kWarps>(scratch_sum[lane % kWarps], SumOp{});
    max = warp_reduce<kWarps>(scratch_max[lane % kWarps], MaxOp{});
  }
}

// Sums one value per CTA over the kCluster CTAs of a thread block cluster (sm_90+); every
// thread of every CTA gets the same total, added in rank order (deterministic). `slot` is
// one float of this CTA's shared memory. Every thread of the CTA must call this, and later
// cluster_release_wait() before it exits: the other CTAs read this CTA's slot through
// distributed shared memory, so it must outlive their reads.
template <int kCluster>
__device__ __forceinline__ float cluster_sum(float cta_total, float* slot) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  if (threadIdx.x == 0 && threadIdx.y == 0) *slot = cta_total;
  cg::this_cluster().sync();  // every slot written (release/acquire across the cluster)
  float total = 0.f;
#pragma unroll
  for (int r = 0; r < kCluster; ++r) total += *cg::this_cluster().map_shared_rank(slot, r);
  cg::this_cluster().barrier_arrive();  // done reading the others' slots
  return total;
#else
  __trap();  // the host launches clusters only on sm_90+
  return cta_total;
#endif
}

// The wait that pairs with cluster_sum's final arrive: returns once every CTA of the
// cluster has read its slots, after which this CTA's shared memory may go away.
__device__ __forceinline__ void cluster_release_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cooperative_groups::this_cluster().barrier_wait();
#endif
}

}  // namespace gks::kernels
