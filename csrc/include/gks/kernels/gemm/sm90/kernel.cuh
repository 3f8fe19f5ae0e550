// SPDX-License-Identifier: Apache-2.0
// The Hopper GEMM (sm_90a only): c[M, N] = a[M, K] @ b[K, N], fp16/bf16 in with fp32
// accumulation or int8 in with int32 accumulation, c fp32, fp16 or bf16. Include only from
// *_sm90a.cu sources.
//
// One kernel template over three policies:
//  * Mainloop<Operands, Tile> (mainloop.cuh): the operand types, the tile config, the TMA
//    producer and the wgmma consumers of a kStages-deep shared ring;
//  * Epilogue<Scales> (epilogue.cuh): what the accumulators are multiplied by and how they
//    are written (TMA stores, direct, staged, split-K partial sums);
//  * a scheduler (scheduler.cuh): which tiles, and which of their k-blocks, each CTA takes
//    (data-parallel with split-K, stream-K, or the groups of a grouped GEMM, whose a and b
//    tensor maps are then 3-D: (k or n, row, slab or group)).
// A new operand type, epilogue or scheduler is a new policy type.
//
// Shape of the kernel: one CTA per SM, persistent; 3 warpgroups. Warpgroup 0 is the
// producer (one thread issues the TMA loads; it gives its registers away, setmaxnreg.dec),
// warpgroups 1 and 2 the consumers (setmaxnreg.inc): each owns half of the tile's rows
// (cooperative) or whole tiles in turn (ping-pong, Tile::kPingPong: one's epilogue runs
// while the other's MMAs do).
//
// Launch: programmatic dependent launch (the launcher sets it). Every thread runs
// griddepcontrol.wait after the barrier set-up, before any global access, and lets the
// stream's next kernel be scheduled at once, so back-to-back calls overlap a launch and
// set-up with the previous kernel's tail.
//
// ptxas serializes wgmmas (every one waits for the last: C7520/C7515 in -Xptxas -v) when it
// sees a possibly divergent branch before them or the accumulators touched by other
// instructions inside the loop: so the mbarrier retry loop lives inside its asm, slot
// releases are predicated, the warpgroup role is broadcast from lane 0, and the
// accumulators are never reinterpreted as integers.
#pragma once

#include <cuda.h>  // CUtensorMap (types only; the driver is reached through the runtime)

#include <cstdint>

#include "gks/kernels/gemm/sm90/epilogue.cuh"
#include "gks/kernels/gemm/sm90/mainloop.cuh"
#include "gks/kernels/gemm/sm90/scheduler.cuh"
#include "gks/kernels/gemm/sm90/tile.cuh"
#include "gks/kernels/ptx/sm90.cuh"

namespace gks::kernels::gemm::sm90 {

template <class Mainloop, class Epilogue, class Scheduler>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                const __grid_constant__ CUtensorMap map_c, const __grid_constant__ Params p) {
  using Cfg = typename Mainloop::Cfg;
  static_assert(!Scheduler::kStreamK || Cfg::kClusterSize == 1, "stream-K runs single CTAs");
  static_assert(!Scheduler::kGrouped || Cfg::kClusterSize == 1, "grouped GEMMs run single CTAs");
  extern __shared__ uint8_t smem_raw[];
  // 128-byte swizzle atoms must start on 1024-byte boundaries.
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                             ~uintptr_t(1023));
  uint8_t* smem_a = smem;
  uint8_t* smem_b = smem_a + Cfg::kStages * Cfg::kABytes;
  float* epilogue_smem = reinterpret_cast<float*>(smem_b + Cfg::kStages * Cfg::kBBytes);
  uint64_t* full = reinterpret_cast<uint64_t*>(reinterpret_cast<uint8_t*>(epilogue_smem) +
                                               Cfg::kEpilogueBytes);
  uint64_t* empty = full + Cfg::kStages;
  // The scheduler's shared memory (the grouped schedule's), after the barriers.
  int* sched_smem = reinterpret_cast<int*>(empty + Cfg::kStages);

  const uint32_t cta_rank = Cfg::kClusterSize > 1 ? ptx::cluster_cta_rank() : 0;
  const int cluster_id = int(blockIdx.x) / Cfg::kClusterSize;
  const int num_clusters = int(gridDim.x) / Cfg::kClusterSize;

  if (threadIdx.x == 0) {
#pragma unroll 1
    for (int s = 0; s < Cfg::kStages; ++s) {
      ptx::mbar_init(ptx::smem_addr(full + s), 1);  // the producer's arrive.expect_tx
      // One arrival per consumer warp (of the warpgroups that read a slot) of every CTA
      // that reads data this CTA loads.
      ptx::mbar_init(ptx::smem_addr(empty + s), Cfg::kClusterSize * Cfg::kReadersPerSlot * 4);
    }
    ptx::fence_barrier_init();
  }
  if constexpr (Cfg::kClusterSize > 1)
    ptx::cluster_sync();  // the peer's barriers exist before anyone multicasts into them
  else
    __syncthreads();
  // Launched early (programmatic dependent launch): everything above overlapped the end of
  // the previous kernel; a and b may be its outputs, and c its input.
  ptx::wait_for_prior_grids();
  ptx::allow_dependent_grids();
  if constexpr (Scheduler::kGrouped) Scheduler::template prepare<kThreads>(p, sched_smem);

  // The warpgroup's role, broadcast from lane 0 so that ptxas knows the branch below is
  // warp-uniform (a possibly divergent path before wgmma serializes it).
  const int warpgroup = __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0);
  if (warpgroup == 0) {
    ptx::registers_decrease<kProducerRegisters>();
    if (threadIdx.x == 0) {
      Mainloop::template produce<Scheduler>(&map_a, &map_b, p, ptx::smem_addr(smem_a),
                                            ptx::smem_addr(smem_b), ptx::smem_addr(full),
                                            ptx::smem_addr(empty), cta_rank, cluster_id,
                                            num_clusters, sched_smem);
    } else if constexpr (Scheduler::kGrouped) {
      // The producer's other three warps have nothing to load: they zero the rows of c
      // that no group writes.
      if (threadIdx.x >= 32)
        Scheduler::fill_uncovered(p, sched_smem, int(blockIdx.x) * 3 + int(threadIdx.x / 32) - 1,
                                  int(gridDim.x) * 3);
    }
  } else {
    ptx::registers_increase<kConsumerRegisters>();
    Mainloop::template consume<Epilogue, Scheduler>(p, &map_c, ptx::smem_addr(smem_a),
                                                    ptx::smem_addr(smem_b), ptx::smem_addr(full),
                                                    ptx::smem_addr(empty), epilogue_smem, cta_rank,
                                                    cluster_id, num_clusters, sched_smem);
  }
  // No CTA may leave while its peer can still arrive on its barriers or write its slots.
  if constexpr (Cfg::kClusterSize > 1) ptx::cluster_sync();
}

}  // namespace gks::kernels::gemm::sm90
