// SPDX-License-Identifier: Apache-2.0
// The Hopper GEMM's mainloop: the operand types, the producer's TMA loads into the
// shared ring and the consumers' wgmmas out of it, over the units a scheduler hands out
// and into an epilogue. The kernel's first policy, Mainloop<Operands, Tile>.
//
//  * Warpgroup 0 is the producer: one thread issues TMA loads (cp.async.bulk.tensor) of A
//    and B tiles into a kStages-deep ring of shared-memory slots. Warpgroups 1 and 2 are
//    consumers: wgmma.mma_async with accumulators in registers.
//  * Each slot has two mbarriers. full[s]: the producer arms it with the slot's byte count
//    (arrive.expect_tx) and the TMA engine completes it. empty[s]: every consumer warp (of
//    every CTA of the cluster) arrives once its wgmma reads of the slot are done; the
//    producer waits on it before refilling. Phases alternate each lap of the ring, so a
//    waiter tracks one parity bit per lap.
//  * A k-block is 128 bytes of K: 64 16-bit or 128 8-bit elements. Shared tiles use the
//    128-byte swizzle, written by TMA and read by wgmma through matrix descriptors. An A
//    tile [BM][128 bytes] is K-major: 128-byte rows, 8-row swizzle atoms 1024 bytes apart
//    (SBO). B is kept as BN/64 blocks of 8 KiB, laid out as the operand type says (below).
//    Every slot and block starts on a 1024-byte boundary, which the swizzle needs.
//  * Clusters: along M (kClusterM == 2) the two CTAs compute vertically adjacent tiles with
//    the same B columns; each loads half of the B blocks and multicasts them to both. Along
//    N (kClusterN of 2 or 4) the CTAs compute side-by-side tiles with the same A rows; each
//    loads 1/kClusterN of the A tile's rows and multicasts them to all. For outputs of few
//    rows, whose every tile reads all of A, that cuts A's L2 traffic by kClusterN.
//  * Edges: TMA zero-fills the part of a box outside the matrix (rows >= M, columns >= N,
//    k >= K), so the math needs no predicates; boxes wholly outside (B blocks past N, the
//    idle half of a cluster past M) are not loaded at all, since they only feed outputs
//    the epilogue never stores.
// An operand type gives: In and Acc (the element and accumulator types), kBKMajor (B is
// stored [N, K], its tensor map made over that and its TMA boxes addressed (k, n)), B's
// shared layout for the wgmma descriptors (kBStepBytes, kBLeadingBytes) and mma (one wgmma).
#pragma once

#include <cuda.h>  // CUtensorMap (types only)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "gks/kernels/gemm/sm90/scheduler.cuh"
#include "gks/kernels/gemm/sm90/tile.cuh"
#include "gks/kernels/ptx/sm90.cuh"
#include "gks/kernels/ptx/wgmma.cuh"

namespace gks::kernels::gemm::sm90 {

// fp16 / bf16 in, fp32 accumulators. b is [K, N] row-major, i.e. MN-major for wgmma
// (transpose bit set); a B block is [64 k][64 n]: k-rows 128 bytes apart, 8-row groups 1024
// bytes apart (SBO), blocks 8 KiB apart (LBO).
template <typename T>
struct HalfOperands {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "bf16 or fp16 inputs");
  using In = T;
  using Acc = float;
  static constexpr bool kBKMajor = false;
  static constexpr bool kPromote = false;
  // B's k-step k (32 bytes of K) starts k * kBStepBytes into a block (16 MN-major k-rows =
  // 2 KiB), and its blocks are kBLeadingBytes apart (LBO: 8 KiB).
  static constexpr uint32_t kBStepBytes = 2048, kBLeadingBytes = kBBlockBytes;
  template <int kN>
  static __device__ __forceinline__ void mma(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b,
                                             int accumulate) {
    ptx::wgmma_ss<T, kN, /*kTransB=*/true>(d, desc_a, desc_b, accumulate);
  }
};

// 8-bit in: int8 with int32 accumulators, fp8 (e4m3 / e5m2) with fp32 ones. wgmma reads
// 8-bit operands K-major only, so B comes from b transposed, [N, K] (int8_gemm and
// gemm_fp8 read a K-major b in place, or make that copy); a block is [64 n][128 bytes of
// k], laid out like A, and the blocks of a tile follow each other as one K-major [BN][128]
// tile.
// kPromote (fp8): each k-block's products go to fresh accumulators that are added to the
// fp32 total once they complete, the promotion DeepGEMM does every 128 of K: Hopper's fp8
// wgmma keeps only about 14 bits of its sums (DeepSeek-V3's report, 3.3.2), too few for a
// whole K. With p.block_scales a k-block is one 128-wide scale group of K, and its products
// are scaled as they are added (a's scale of the row and the group, b's of the group and
// the 128 columns): DeepSeek-V3's block scaling.
template <typename T, bool kPromote_ = false>
struct ByteOperands {
  static_assert(sizeof(T) == 1, "8-bit inputs");
  static_assert(!kPromote_ || !std::is_same_v<T, int8_t>, "int8 sums are exact: nothing to promote");
  using In = T;
  using Acc = ptx::WgmmaAcc<T>;
  static constexpr bool kBKMajor = true;
  static constexpr bool kPromote = kPromote_;
  // A K-major B advances 32 bytes inside its 128-byte rows, as A does (LBO unused: 16).
  static constexpr uint32_t kBStepBytes = 32, kBLeadingBytes = 16;
  template <int kN>
  static __device__ __forceinline__ void mma(Acc (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b,
                                             int accumulate) {
    ptx::wgmma_ss<T, kN, /*kTransB=*/false>(d, desc_a, desc_b, accumulate);
  }
};
using Int8Operands = ByteOperands<int8_t>;

// Elements of K per k-block.
template <class Op>
constexpr int kBlockK = kRowBytes / int(sizeof(typename Op::In));

template <class Op_, class Tile_>
struct Mainloop {
  using Op = Op_;
  using Cfg = Tile_;
  using Acc = typename Op::Acc;

  // Hands a ring slot back: one arrival per consumer warp on the slot's empty barrier in
  // every CTA of the cluster (each CTA's producer may write this CTA's slot). Only where
  // `pred` holds (lane 0 of the warp), predicated rather than branched around.
  static __device__ __forceinline__ void release_slot(uint32_t empty_bar, bool pred) {
    if constexpr (Cfg::kClusterSize == 1) {
      ptx::mbar_arrive_if(empty_bar, pred);
    } else {
#pragma unroll
      for (int cta = 0; cta < Cfg::kClusterSize; ++cta)
        ptx::mbar_arrive_cluster_if(empty_bar, uint32_t(cta), pred);
    }
  }

  // The producer thread: walks the schedule, loading every unit's k-blocks into the ring.
  template <class Scheduler>
  static __device__ __forceinline__ void produce(const CUtensorMap* map_a, const CUtensorMap* map_b,
                                                 const Params& p, uint32_t smem_a, uint32_t smem_b,
                                                 uint32_t full, uint32_t empty, uint32_t cta_rank,
                                                 int cluster_id, int num_clusters,
                                                 const int* sched_smem) {
    ptx::prefetch_tensor_map(map_a);
    ptx::prefetch_tensor_map(map_b);
    int stage = 0;
    uint32_t phase = 0;
    Scheduler schedule(p, cluster_id, num_clusters, sched_smem);
    while (!schedule.done(p)) {
      const UnitWork w = schedule.next(p, num_clusters);
      const int a_row = w.row_base + tile_row<Cfg>(w, cta_rank) * Cfg::kBlockM;
      const int b_col = tile_col<Cfg>(w, cta_rank) * Cfg::kBlockN;
      // Boxes wholly outside the matrix are not loaded: A rows past M (the second CTA of a
      // cluster on the last, odd tile row) and B blocks past N feed only accumulators the
      // epilogue never stores, so stale shared memory there is harmless. Boxes that straddle
      // an edge are loaded; TMA zero-fills their outside part (which matters along K). In a
      // cluster along N, every CTA expects the A parts that start inside M (each from the
      // CTA of that rank). (Grouped: rows past the group's feed only rows never stored.)
      const bool load_a = a_row < w.row_end;
      const int a_parts =
          min(Cfg::kClusterN, (w.row_end - a_row + Cfg::kAPartRows - 1) / Cfg::kAPartRows);
      const int b_blocks =
          max(0, min(Cfg::kBBlocks, (p.n - b_col + kBBlockCols - 1) / kBBlockCols));
      // A and the B blocks land in this CTA's slot (half of the B blocks from the peer in a
      // cluster along M; the other CTAs' parts of A in a cluster along N).
      const uint32_t a_bytes = Cfg::kClusterN > 1 ? a_parts * Cfg::kAPartRows * kRowBytes
                               : load_a           ? Cfg::kABytes
                                                  : 0;
      const uint32_t stage_bytes = a_bytes + b_blocks * kBBlockBytes;
      for (int kb = w.kb_begin; kb < w.kb_end; ++kb) {
        // Wait until every consumer (of every CTA in the cluster) has finished with the slot;
        // on the first lap the parity trick lets this pass at once.
        ptx::mbar_wait(empty + 8 * stage, phase ^ 1);
        const uint32_t full_bar = full + 8 * stage;
        ptx::mbar_arrive_expect_tx(full_bar, stage_bytes);
        const int k0 = kb * kBlockK<Op>;
        if constexpr (Cfg::kClusterN > 1) {
          const int part = int(cta_rank) * Cfg::kAPartRows;
          if (int(cta_rank) < a_parts)
            ptx::tma_load_2d_multicast(smem_a + stage * Cfg::kABytes + part * kRowBytes, map_a,
                                       full_bar, k0, a_row + part,
                                       uint16_t((1u << Cfg::kClusterN) - 1));
        } else if (load_a) {
          if constexpr (Scheduler::kGrouped)
            ptx::tma_load_3d(smem_a + stage * Cfg::kABytes, map_a, full_bar, k0, a_row, w.a_slab);
          else
            ptx::tma_load_2d(smem_a + stage * Cfg::kABytes, map_a, full_bar, k0, a_row);
        }
        const uint32_t b_slot = smem_b + stage * Cfg::kBBytes;
#pragma unroll
        for (int j = 0; j < Cfg::kBBlocks; ++j) {
          if (j >= b_blocks) break;
          const int n0 = b_col + j * kBBlockCols;
          // The box's (inner, outer) coordinates: (k, n) in a K-major b, else (n, k).
          const int x = Op::kBKMajor ? k0 : n0, y = Op::kBKMajor ? n0 : k0;
          if constexpr (Scheduler::kGrouped) {
            ptx::tma_load_3d(b_slot + j * kBBlockBytes, map_b, full_bar, x, y, w.group);
          } else if constexpr (Cfg::kClusterM == 1) {
            ptx::tma_load_2d(b_slot + j * kBBlockBytes, map_b, full_bar, x, y);
          } else {
            if (j % Cfg::kClusterM == int(cta_rank))
              ptx::tma_load_2d_multicast(b_slot + j * kBBlockBytes, map_b, full_bar, x, y,
                                         uint16_t((1u << Cfg::kClusterM) - 1));
          }
        }
        if (++stage == Cfg::kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
  }

  // The wgmmas of one k-block (slots a_slot, b_slot) into d, committed as one group: the
  // k-block's first k-step adds to d where `accumulate`, else overwrites it.
  static __device__ __forceinline__ void issue_k_block(Acc (&d)[Cfg::kAtomsM][Cfg::kAccum], uint32_t a_slot,
                                                       uint32_t b_slot, bool accumulate) {
    ptx::wgmma_fence();
#pragma unroll
    for (int k = 0; k < kRowBytes / 32; ++k) {
      // k-step k (32 bytes of K): A advances 32 bytes inside its 128-byte rows (the swizzle
      // is applied to the absolute address, so this stays consistent with the TMA writes);
      // B as the operand type lays it out. 8-row groups are 1024 bytes apart (SBO).
      const uint64_t desc_b = ptx::smem_descriptor(b_slot + k * Op::kBStepBytes, Op::kBLeadingBytes, 1024);
#pragma unroll
      for (int a = 0; a < Cfg::kAtomsM; ++a) {
        const uint64_t desc_a = ptx::smem_descriptor(a_slot + a * 64 * kRowBytes + k * 32, 16, 1024);
        Op::template mma<Cfg::kBlockN>(d[a], desc_a, desc_b, accumulate || k > 0);
      }
    }
    ptx::wgmma_commit();
  }

  // Promoted operands: the factors k-block kb's products are added to the total with, per
  // fragment row (a's scale of the row and b's of the tile's 128 columns, where
  // p.block_scales; else 1). Rows past M and tiles past N get 0 (never stored).
  static __device__ __forceinline__ void block_scales(const Params& p, const UnitWork& w, int64_t wg_row,
                                                      int col0, int kb, float (&s)[Cfg::kAtomsM][2]) {
    static_assert(Cfg::kBlockN <= 128, "one b block scale per k-block of a tile");
#pragma unroll
    for (int a = 0; a < Cfg::kAtomsM; ++a)
#pragma unroll
      for (int h = 0; h < 2; ++h) s[a][h] = 1.f;
    if (!p.block_scales) return;
    // The fragment's rows (wgmma.cuh): warp w of the warpgroup has rows 16 w + lane / 4 and
    // + 8 of each 64-row atom.
    const int64_t row0 = wg_row + (threadIdx.x % 128) / 32 * 16 + (threadIdx.x % 32) / 4;
    const float* a_scale = p.a_scale + w.a_slab * p.a_scale_slab_stride;
    const float sb = col0 < p.n ? p.b_scale[w.group * p.b_scale_slab_stride + kb * p.b_scale_group_stride +
                                            (col0 / 128) * p.b_scale_stride]
                                : 0.f;
#pragma unroll
    for (int a = 0; a < Cfg::kAtomsM; ++a)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = row0 + a * 64 + 8 * h;
        s[a][h] = row < p.m ? a_scale[row * p.a_scale_stride + kb * p.a_scale_group_stride] * sb : 0.f;
      }
  }

  // Adds a completed k-block's products to the total, scaled.
  static __device__ __forceinline__ void add_promoted(Acc (&acc)[Cfg::kAtomsM][Cfg::kAccum],
                                                      Acc (&part)[Cfg::kAtomsM][Cfg::kAccum],
                                                      const float (&s)[Cfg::kAtomsM][2]) {
#pragma unroll
    for (int a = 0; a < Cfg::kAtomsM; ++a) {
      ptx::fence_registers(part[a]);
#pragma unroll
      for (int i = 0; i < Cfg::kAccum; ++i) acc[a][i] += part[a][i] * s[a][(i / 2) % 2];
    }
  }

  // Promoted operands: a unit's k-loop, two k-blocks deep. Block kb's wgmmas go into one of
  // two sets of fresh accumulators while block kb - 1's (the other set) complete and are
  // added to the total, so the warpgroup keeps a block queued on the Tensor Cores through
  // every promotion (waiting for each block before adding it would leave them idle then,
  // for both warpgroups at once, since both wait on the same full barrier). A block's slot
  // goes back once its products are added. acc holds the unit's total on return;
  // `loads_waited` runs once the last block's full barrier has been waited on.
  template <class LoadsWaited>
  static __device__ __forceinline__ void promote_unit(const Params& p, Acc (&acc)[Cfg::kAtomsM][Cfg::kAccum],
                                                      const UnitWork& w, uint32_t smem_a, uint32_t smem_b,
                                                      uint32_t full, uint32_t empty, int& stage,
                                                      uint32_t& phase, int64_t wg_row, int col0,
                                                      bool lane0, LoadsWaited&& loads_waited) {
    static_assert(3 * Cfg::kAtomsM * Cfg::kAccum + 32 <= kConsumerRegisters,
                  "two k-blocks' accumulators beside the total");
#pragma unroll
    for (int a = 0; a < Cfg::kAtomsM; ++a)
#pragma unroll
      for (int i = 0; i < Cfg::kAccum; ++i) acc[a][i] = 0;
    if (w.kb_end == w.kb_begin) {
      loads_waited();
      return;
    }
    Acc part0[Cfg::kAtomsM][Cfg::kAccum], part1[Cfg::kAtomsM][Cfg::kAccum];
    float s0[Cfg::kAtomsM][2], s1[Cfg::kAtomsM][2];
    int prev_stage = stage;
    // Block kb's wgmmas into `part`, its scales into `s` (loaded while the wgmmas run).
    auto issue = [&](Acc(&part)[Cfg::kAtomsM][Cfg::kAccum], float(&s)[Cfg::kAtomsM][2], int kb) {
      ptx::mbar_wait(full + 8 * stage, phase);
      issue_k_block(part, smem_a + stage * Cfg::kABytes, smem_b + stage * Cfg::kBBytes, false);
      block_scales(p, w, wg_row, col0, kb, s);
      prev_stage = stage;
      if (++stage == Cfg::kStages) {
        stage = 0;
        phase ^= 1;
      }
    };
    // The block before the newest one: complete once at most one group is pending, its
    // slot free once added. (Every wait is unconditional within the loop body: ptxas
    // serializes wgmmas around a wait it cannot place.)
    auto promote_previous = [&](Acc(&part)[Cfg::kAtomsM][Cfg::kAccum], const float(&s)[Cfg::kAtomsM][2],
                                int slot) {
      ptx::wgmma_wait<1>();
      add_promoted(acc, part, s);
      release_slot(empty + 8 * slot, lane0);
    };
    issue(part0, s0, w.kb_begin);
    int kb = w.kb_begin + 1;
    for (; kb + 1 < w.kb_end; kb += 2) {
      int slot = prev_stage;
      issue(part1, s1, kb);
      promote_previous(part0, s0, slot);
      slot = prev_stage;
      issue(part0, s0, kb + 1);
      promote_previous(part1, s1, slot);
    }
    if (kb < w.kb_end) {  // an even number of blocks: one left, into part1
      const int slot = prev_stage;
      issue(part1, s1, kb);
      promote_previous(part0, s0, slot);
      loads_waited();
      ptx::wgmma_wait<0>();
      add_promoted(acc, part1, s1);
    } else {
      loads_waited();
      ptx::wgmma_wait<0>();
      add_promoted(acc, part0, s0);
    }
    release_slot(empty + 8 * prev_stage, lane0);
  }

  // A consumer warpgroup: the schedule's units (its own, ping-pong), each one's k-blocks out
  // of the ring into the accumulators (slot s waits on full[s]; a slot goes back to the
  // producer once the wgmmas of the next block are issued and its own are done), then the
  // scheduler's fixup and the epilogue.
  template <class Epilogue, class Scheduler>
  static __device__ __forceinline__ void consume(const Params& p, const CUtensorMap* map_c,
                                                 uint32_t smem_a, uint32_t smem_b, uint32_t full,
                                                 uint32_t empty, float* epilogue_smem,
                                                 uint32_t cta_rank, int cluster_id,
                                                 int num_clusters, const int* sched_smem) {
    const int wg = threadIdx.x / 128 - 1;  // 0 or 1: which half of the tile's rows
    const int lane = threadIdx.x % 32;
    // The warpgroup's share of the epilogue's shared memory: a staged chunk, or its TMA
    // store buffers (1024-byte aligned, as the swizzle needs).
    float* stage_buf = epilogue_smem + wg * 64 * kEpiloguePitch;
    const uint32_t store_buffers =
        ptx::smem_addr(epilogue_smem) + uint32_t(wg * kStoreBuffers * kSubtileBytes);
    int sub = 0;  // TMA store: sub-tiles this warpgroup has stored
    Acc acc[Cfg::kAtomsM][Cfg::kAccum];
#pragma unroll
    for (int a = 0; a < Cfg::kAtomsM; ++a)
#pragma unroll
      for (int i = 0; i < Cfg::kAccum; ++i) acc[a][i] = 0;

    // This warpgroup's first row of a tile (its half, cooperative; row 0, ping-pong), and
    // where its A rows start in every slot (128 bytes per row).
    const int wg_first_row = Cfg::kPingPong ? 0 : wg * Cfg::kWarpgroupM;
    const uint32_t a_wg_offset = uint32_t(wg_first_row * kRowBytes);

    int stage = 0;
    uint32_t phase = 0;
    Scheduler schedule(p, cluster_id, num_clusters, sched_smem);
    // turn: ping-pong, the CTA's units alternate between the warpgroups.
    for (int turn = 0; !schedule.done(p); ++turn) {
      const UnitWork w = schedule.next(p, num_clusters);
      if (Cfg::kPingPong && turn % kConsumerWarpgroups != wg) {
        // The other warpgroup's unit: its k-blocks fill the next slots of the ring.
        const int next = stage + (w.kb_end - w.kb_begin);
        phase ^= uint32_t(next / Cfg::kStages) & 1u;
        stage = next % Cfg::kStages;
        continue;
      }
      const int tile_m = tile_row<Cfg>(w, cta_rank);
      const int col0 = tile_col<Cfg>(w, cta_rank) * Cfg::kBlockN;
      // Ping-pong hand-off: a warpgroup starts a unit's k-loop only once the other has
      // waited on the full barriers of all of its previous unit. Without it a warpgroup
      // could wait on a slot two phases ahead, which mbarrier parity cannot tell from a
      // completed phase.
      if (Cfg::kPingPong && turn > 0) ptx::named_barrier_sync<256>(kHandoff + 1 - wg);
      const int64_t wg_row = w.row_base + int64_t(tile_m) * Cfg::kBlockM + wg_first_row;

      if constexpr (Op::kPromote) {
        promote_unit(p, acc, w, smem_a + a_wg_offset, smem_b, full, empty, stage, phase, wg_row, col0,
                     lane == 0, [&] {
                       if (Cfg::kPingPong && !schedule.done(p))
                         ptx::named_barrier_arrive<256>(kHandoff + wg);  // the other warpgroup's turn
                     });
      } else {
        int prev_stage = 0;
        for (int kb = w.kb_begin; kb < w.kb_end; ++kb) {
          ptx::mbar_wait(full + 8 * stage, phase);
          issue_k_block(acc, smem_a + stage * Cfg::kABytes + a_wg_offset, smem_b + stage * Cfg::kBBytes,
                        kb > w.kb_begin);
          // Keep this k-block's wgmmas in flight; the previous block's are now complete, so
          // its slot can be handed back to the producer.
          ptx::wgmma_wait<1>();
#pragma unroll
          for (int a = 0; a < Cfg::kAtomsM; ++a) ptx::fence_registers(acc[a]);
          release_slot(empty + 8 * prev_stage, kb > w.kb_begin && lane == 0);
          prev_stage = stage;
          if (++stage == Cfg::kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
        if (Cfg::kPingPong && !schedule.done(p))
          ptx::named_barrier_arrive<256>(kHandoff + wg);  // the other warpgroup's turn
        ptx::wgmma_wait<0>();
#pragma unroll
        for (int a = 0; a < Cfg::kAtomsM; ++a) ptx::fence_registers(acc[a]);
        release_slot(empty + 8 * prev_stage, lane == 0);
      }

      if (Scheduler::template fixup<Op, Cfg>(p, acc, w, cluster_id, num_clusters, wg)) continue;
      Epilogue::template store<Op, Cfg>(p, acc, map_c, stage_buf, store_buffers, sub, w.split,
                                        wg_row, col0, wg, schedule.rows(p, w));
    }
    Epilogue::template drain<Cfg>(p);
  }
};

}  // namespace gks::kernels::gemm::sm90
