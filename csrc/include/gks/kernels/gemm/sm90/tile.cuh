// SPDX-License-Identifier: Apache-2.0
// The Hopper GEMM's shared vocabulary: the constants of its layout, the tile config, the
// named barriers and the kernel parameters. See kernel.cuh for the shape of the kernel.
#pragma once

#include <cstdint>

#include "gks/kernels/gemm/epilogue_terms.h"

namespace gks::kernels::gemm::sm90 {

constexpr int kRowBytes = 128;              // bytes of K per k-block: one swizzle row
constexpr int kBBlockCols = 64;             // columns of c per B block
constexpr int kBBlockBytes = kRowBytes * kBBlockCols;
constexpr int kConsumerWarpgroups = 2;
constexpr int kThreads = 128 * (1 + kConsumerWarpgroups);
constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;
constexpr int kEpilogueCols = 32;                   // fp32 columns per staged chunk
constexpr int kEpiloguePitch = kEpilogueCols + 8;   // floats per staged row
constexpr int kSmemLimit = 227 * 1024;              // per-block opt-in limit on sm_90
// TMA-store epilogue: 64 x 64 sub-tiles of a 16-bit c (one 128-byte swizzle row each),
// double-buffered per consumer warpgroup.
constexpr int kSubtileCols = 64;
constexpr int kSubtileBytes = 64 * kSubtileCols * 2;
constexpr int kStoreBuffers = 2;
static_assert(kSubtileCols * 2 == kRowBytes, "a sub-tile row is one 128-byte swizzle row");

// The named barriers (0 is __syncthreads). A consumer warpgroup wg syncs its epilogue on
// kEpilogue + wg (128 threads); ping-pong warpgroups hand the next unit's k-loop to each
// other on kHandoff + wg: warpgroup 0 arrives at kHandoff (which 1 waits on), 1 at
// kHandoff + 1 (which 0 waits on), 256 threads each.
enum NamedBarrier : int {
  kEpilogue = 1,  // and 2
  kHandoff = 3,   // and 4
};

// One compiled tile config. Cooperative (kPingPong false): kBlockM rows are split between
// the two consumer warpgroups, each covering its kBlockM / 2 rows with kAtomsM wgmma atoms
// of 64 rows x kBlockN columns. Ping-pong: the warpgroups take whole tiles in turn (the
// CTA's tiles 0, 2, 4... and 1, 3, 5...), so one's epilogue runs while the other's MMAs do.
// A cluster is kClusterM CTAs stacked in M (they share B, each loading half of its blocks
// and multicasting them) or kClusterN side by side in N (they share A, each loading
// 1 / kClusterN of its rows).
template <int kBlockM_, int kBlockN_, int kStages_, int kClusterM_, bool kPingPong_ = false,
          int kClusterN_ = 1>
struct Tile {
  static constexpr int kBlockM = kBlockM_, kBlockN = kBlockN_;
  static constexpr int kStages = kStages_, kClusterM = kClusterM_, kClusterN = kClusterN_;
  static constexpr int kClusterSize = kClusterM * kClusterN;
  // Rows of the A tile each CTA of a cluster along N loads (and multicasts).
  static constexpr int kAPartRows = kBlockM / kClusterN;
  static constexpr bool kPingPong = kPingPong_;
  static constexpr int kWarpgroupM = kPingPong ? kBlockM : kBlockM / kConsumerWarpgroups;
  static constexpr int kReadersPerSlot = kPingPong ? 1 : kConsumerWarpgroups;  // warpgroups
  static constexpr int kAtomsM = kWarpgroupM / 64;
  static constexpr int kAccum = kBlockN / 2;  // accumulators per thread per atom
  static constexpr int kBBlocks = kBlockN / kBBlockCols;
  static constexpr int kABytes = kBlockM * kRowBytes;
  static constexpr int kBBytes = kBBlocks * kBBlockBytes;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kBarrierBytes = 2 * kStages * 8;
  // The epilogue's shared memory: the staged chunks, or where it fits beside the ring, the
  // TMA store's sub-tile buffers (which then also hold the staged chunks).
  static constexpr int kStagedBytes = kConsumerWarpgroups * 64 * kEpiloguePitch * 4;
  static constexpr int kTmaStoreBytes = kConsumerWarpgroups * kStoreBuffers * kSubtileBytes;
  // + 1024: the dynamic shared window is re-aligned to 1024 bytes in the kernel.
  static constexpr bool kTmaStore =
      1024 + kStages * kStageBytes + kTmaStoreBytes + kBarrierBytes <= kSmemLimit;
  static constexpr int kEpilogueBytes = kTmaStore ? kTmaStoreBytes : kStagedBytes;
  static constexpr int kSmemBytes = 1024 + kStages * kStageBytes + kEpilogueBytes + kBarrierBytes;
  static_assert(kTmaStoreBytes >= kStagedBytes, "the store buffers hold the staged chunks");

  static_assert(kBlockN == 64 || kBlockN == 128 || kBlockN == 256, "wgmma N of 64, 128 or 256");
  static_assert(kWarpgroupM % 64 == 0 && kBlockM <= 256, "64-row atoms; TMA boxes <= 256 rows");
  static_assert(kClusterM == 1 || (kClusterM == 2 && kBBlocks % 2 == 0),
                "a cluster of 2 splits the B blocks between its CTAs");
  static_assert(kClusterN == 1 || kClusterN == 2 || kClusterN == 4, "clusters of 2 or 4 along N");
  static_assert(kClusterM == 1 || kClusterN == 1, "a cluster is along M or along N");
  static_assert(kAPartRows % 8 == 0, "A parts are whole 8-row swizzle atoms (1024 bytes)");
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "slots keep 1024-byte alignment");
  static_assert(kSmemBytes <= kSmemLimit, "shared memory over the sm_90 limit");
  static_assert(kAtomsM * kAccum + 64 <= kConsumerRegisters, "accumulators must fit in registers");
};

// Everything but the tensor maps. Offsets into c are int64.
struct Params {
  void* c;
  int64_t ldc;       // elements between rows of c
  int m, n, k;
  int k_blocks;      // ceil(K bytes / 128), >= 1
  int unit_cols;     // ceil(ceil(N / kBlockN) / kClusterN): columns of scheduling units
  int unit_rows;     // ceil(ceil(M / kBlockM) / kClusterM): rows of scheduling units
  int num_units;     // unit_rows * unit_cols * k_splits
  int group_m;       // unit rows per scheduler group (>= 1)
  int c_kind;        // c's dtype: 0 float32, 1 float16, 2 bfloat16
  int c_vec;         // c's rows allow 16-byte stores (base and leading dim 16-byte aligned)
  int c_tma;         // 16-bit c written by TMA stores through map_c (Tile::kTmaStore only)
  // Split-K: each tile's k-blocks are shared among k_splits units of kb_per_split k-blocks
  // (the last may have fewer). With k_splits > 1 a unit writes its raw sums to
  // partial[split][M][N] (Op::Acc, rows N apart) and split_k_reduce_kernel finishes c.
  int k_splits;
  int kb_per_split;
  void* partial;
  // Stream-K: after num_units data-parallel units (a multiple of the grid), the last
  // sk_tiles tiles are shared out by k-block. sk_partial holds a slot a CTA and half-tile
  // (the rows of one consumer warpgroup; ping-pong: the tile), Op::Acc in fragment order;
  // sk_flags, one per slot, are zero at launch and set once the slot is written.
  int sk_tiles;
  void* sk_partial;
  int* sk_flags;
  // The fused epilogue (Epilogue<Fused>, epilogue_terms.h): scales, bias, gated unit.
  EpilogueTerms epi;
  // block_scales (promoted operands, Op::kPromote, only): the scale of row r and k-block kb
  // is a_scale[r * a_scale_stride + kb * a_scale_group_stride], that of k-block kb and the
  // 128 columns from 128 j b_scale[kb * b_scale_group_stride + j * b_scale_stride].
  // Grouped: a slab's (masked layout) a scales start a_scale_slab_stride further, group g's
  // b scales g * b_scale_slab_stride further.
  const float* a_scale;
  const float* b_scale;
  int64_t a_scale_stride, b_scale_stride;
  int block_scales;
  int64_t a_scale_group_stride, b_scale_group_stride;
  int64_t a_scale_slab_stride, b_scale_slab_stride;
  // Grouped (GroupedScheduler, scheduler.cuh): `groups` products c[rows of g] = a[rows of g]
  // @ b[g], a and b read through 3-D tensor maps (k or n, row, group). Contiguous layout
  // (group_offsets, [groups + 1]): group g is rows [clamp(off[g]), clamp(off[g + 1])) of the
  // m rows of a and c. Masked layout (group_counts, [groups]): group g is the first
  // clamp(count[g], 0, m) of the m rows of its slab of a, and of c's slab g, c_group_stride
  // elements apart. Entries are group_stride ints apart. Every other row of c is written 0.
  const int* group_offsets;
  const int* group_counts;
  int64_t group_stride;
  int groups;
  int64_t c_group_stride;
};

}  // namespace gks::kernels::gemm::sm90
