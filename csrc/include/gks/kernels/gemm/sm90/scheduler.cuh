// SPDX-License-Identifier: Apache-2.0
// The Hopper GEMM's tile schedulers: which output tiles (and which of their k-blocks) each
// persistent CTA computes, in what order. The producer and the consumers of a CTA walk the
// same sequence independently. A scheduler is the kernel's third policy:
//  * DataParallelScheduler: output tiles (or, with clusters, a cluster's tiles: a
//    "scheduling unit") in groups of `group_m` unit rows, so the CTAs in flight share A rows
//    and B columns in L2; each CTA takes every gridDim-th unit. Split-K (k_splits > 1, for
//    outputs with too few tiles to fill the GPU) shares a tile's k-blocks among k_splits
//    units; each writes its raw sums to a workspace slice, which split_k_reduce_kernel
//    (epilogue.cuh) adds in order.
//  * StreamKScheduler (single CTAs; sk_tiles > 0): after the data-parallel units (a whole
//    number of waves), the last sk_tiles tiles' k-blocks, as one sequence of tile-major
//    iterations, are dealt out in equal ranges to the grid's CTAs, so every SM works to the
//    end instead of a part-empty last wave. A CTA runs its range last piece first: a piece
//    that stops short of its tile's last k-block is a partial (at most one a CTA, the first
//    it runs), stored raw in the CTA's workspace slot with a flag set after it; the piece
//    that ends the tile adds the partials of the CTAs before it (lower ranks, which ran
//    theirs first) in a fixed order and runs the epilogue. So the waits go to CTAs that
//    were scheduled no later and are long done, and the sums are deterministic for a given
//    grid.
//  * GroupedScheduler (grouped_gemm): the output tiles of every group of a grouped GEMM,
//    group after group, each group's tiles starting at its first row (a tile never holds
//    two groups). At the CTA's start all its threads lay out, in shared memory, each
//    group's rows and how many units come before it (a block-wide scan); the units are
//    then dealt out as above, and the rows of c no group writes are zeroed by the producer
//    warpgroup's idle warps (fill_uncovered).
// A scheduler gives the kernel: smem_ints(groups) (ints of shared memory it needs), a
// constructor (params, cluster id, clusters, that shared memory), done(), next() ->
// UnitWork, rows() -> TileRows (where the epilogue writes a unit's tile) and fixup(): what
// the consumer does with a unit's accumulators before the epilogue (true: the unit is
// finished without one).
#pragma once

#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "gks/kernels/gemm/sm90/tile.cuh"
#include "gks/kernels/ptx/sm90.cuh"
#include "gks/kernels/vec.cuh"

namespace gks::kernels::gemm::sm90 {

// What one scheduling unit computes: unit row `row` (a tile row, or a cluster's pair of
// them), unit column `col` (a tile column, or a cluster's 2 or 4 of them), over k-blocks
// [kb_begin, kb_end) as split `split`; with stream-K, also whether the piece is a whole
// tile, a partial or the tile's finish, and the first iteration of its tile (which says
// whose partials the finish adds).
// Grouped: the unit's group, the row of a (and c) its tile rows count from, the rows at or
// past row_end that are not the group's, and the slab of a it reads (the masked layout's
// group; 0 otherwise).
enum class Piece { kWhole, kPartial, kFinish };
struct UnitWork {
  int row, col, split, kb_begin, kb_end;
  Piece piece;
  int64_t tile_first;
  int group, row_base, row_end, a_slab;
};

// Where the epilogue writes a unit's tile: row r of c at element c_offset + r * ldc, stored
// only below `end` and (later_from >= 0: a grouped GEMM whose offsets are out of order, so
// that groups may overlap) where no group from later_from on also holds the row: the last
// group that holds a row writes it, as the spec says.
struct TileRows {
  int64_t c_offset;
  int64_t end;
  int later_from;
  const int* lo;  // grouped: the groups' row bounds (shared memory)
  const int* hi;

  __device__ __forceinline__ bool keep(const Params& p, int64_t row) const {
    if (row >= end) return false;
    if (later_from < 0) return true;
    for (int g = later_from; g < p.groups; ++g)
      if (lo[g] <= row && row < hi[g]) return false;
    return true;
  }
};

// The tile a CTA computes of its cluster's unit: clusters along M stack their CTAs' tiles
// in M, clusters along N put them side by side.
template <class Cfg>
__device__ __forceinline__ int tile_row(const UnitWork& w, uint32_t cta_rank) {
  return w.row * Cfg::kClusterM + (Cfg::kClusterM > 1 ? int(cta_rank) : 0);
}
template <class Cfg>
__device__ __forceinline__ int tile_col(const UnitWork& w, uint32_t cta_rank) {
  return w.col * Cfg::kClusterN + (Cfg::kClusterN > 1 ? int(cta_rank) : 0);
}

// Scheduling unit -> its work. Splits are the slowest-moving index, so the units in flight
// together cover as many tiles as possible; within a split, units go in groups of
// `group_m` unit rows, walking down a group's rows before moving right.
__device__ __forceinline__ UnitWork unit_work(const Params& p, int unit) {
  UnitWork w;
  const int per_split = p.unit_rows * p.unit_cols;
  w.split = unit / per_split;
  unit -= w.split * per_split;
  const int per_group = p.group_m * p.unit_cols;
  const int group = unit / per_group;
  const int first_row = group * p.group_m;
  const int rows_in_group = min(p.unit_rows - first_row, p.group_m);
  const int in_group = unit - group * per_group;
  w.row = first_row + in_group % rows_in_group;
  w.col = in_group / rows_in_group;
  w.kb_begin = w.split * p.kb_per_split;
  w.kb_end = min(p.k_blocks, w.kb_begin + p.kb_per_split);
  w.piece = Piece::kWhole;
  w.tile_first = 0;
  w.group = 0;
  w.row_base = 0;
  w.row_end = p.m;
  w.a_slab = 0;
  return w;
}

// Stream-K: the first iteration of cluster `cluster`'s range.
__device__ __forceinline__ int64_t sk_range_begin(const Params& p, int cluster, int clusters) {
  return int64_t(cluster) * (int64_t(p.sk_tiles) * p.k_blocks) / clusters;
}

// Stream-K slot `slot` (CTA * 2 + half) of p.sk_partial: the fragments of one consumer
// warpgroup, 16 bytes a thread in turn, so a warp's stores and loads are contiguous.
template <class Op, class Cfg>
__device__ __forceinline__ Vec<typename Op::Acc, 4>* sk_slot(const Params& p, int slot) {
  constexpr int kVecsPerSlot = Cfg::kAtomsM * Cfg::kAccum / 4 * 128;
  return static_cast<Vec<typename Op::Acc, 4>*>(p.sk_partial) + int64_t(slot) * kVecsPerSlot +
         threadIdx.x % 128;
}

// Stream-K: stores the warpgroup's raw sums in its slot, then (once every thread's stores
// are done) one thread sets the slot's flag with release semantics.
template <class Op, class Cfg>
__device__ __forceinline__ void sk_store_partial(
    const Params& p, const typename Op::Acc (&acc)[Cfg::kAtomsM][Cfg::kAccum], int slot,
    int barrier_id) {
  Vec<typename Op::Acc, 4>* dst = sk_slot<Op, Cfg>(p, slot);
#pragma unroll
  for (int a = 0; a < Cfg::kAtomsM; ++a)
#pragma unroll
    for (int j = 0; j < Cfg::kAccum / 4; ++j) {
      Vec<typename Op::Acc, 4> v;
#pragma unroll
      for (int i = 0; i < 4; ++i) v.v[i] = acc[a][4 * j + i];
      dst[(a * Cfg::kAccum / 4 + j) * 128] = v;
    }
  ptx::named_barrier_sync<128>(barrier_id);
  // The barrier made the warpgroup's stores visible to the thread that releases the flag.
  ptx::flag_release_if_zero(p.sk_flags + slot, uint32_t(threadIdx.x % 128));
}

// Stream-K: adds to a tile's finishing piece the partials of the CTAs before `cluster`
// that hold the rest of the tile, nearest first, each once its flag is set. Every thread
// waits on the flag itself (acquire), so no barrier is needed after it.
template <class Op, class Cfg>
__device__ __forceinline__ void sk_add_partials(const Params& p,
                                                typename Op::Acc (&acc)[Cfg::kAtomsM][Cfg::kAccum],
                                                int64_t tile_first, int cluster, int clusters,
                                                int half) {
  for (int from = cluster - 1; from >= 0; --from) {
    const int slot = from * 2 + half;
    ptx::flag_acquire_wait(p.sk_flags + slot);
    const Vec<typename Op::Acc, 4>* src = sk_slot<Op, Cfg>(p, slot);
#pragma unroll
    for (int a = 0; a < Cfg::kAtomsM; ++a)
#pragma unroll
      for (int j = 0; j < Cfg::kAccum / 4; ++j) {
        const Vec<typename Op::Acc, 4> v = src[(a * Cfg::kAccum / 4 + j) * 128];
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[a][4 * j + i] += v.v[i];
      }
    if (sk_range_begin(p, from, clusters) <= tile_first) break;  // its range holds the start
  }
}

// The sequence of work of one cluster, which its producer and consumers walk alike: its
// data-parallel units (every clusters-th), then (kStreamK) its stream-K range, last piece
// first.
template <bool kStreamK_>
struct PersistentScheduler {
  static constexpr bool kStreamK = kStreamK_;
  static constexpr bool kGrouped = false;
  int unit;         // the next data-parallel unit
  int64_t sk_next;  // stream-K: one past the range's last iteration not yet handed out
  int64_t sk_begin;

  static constexpr int smem_ints(int /*groups*/) { return 0; }

  __device__ __forceinline__ PersistentScheduler(const Params& p, int cluster, int clusters,
                                                 const int* /*smem*/)
      : unit(cluster),
        sk_next(kStreamK ? sk_range_begin(p, cluster + 1, clusters) : 0),
        sk_begin(kStreamK ? sk_range_begin(p, cluster, clusters) : 0) {}

  __device__ __forceinline__ bool done(const Params& p) const {
    return unit >= p.num_units && (!kStreamK || sk_next <= sk_begin);
  }

  __device__ __forceinline__ UnitWork next(const Params& p, int clusters) {
    if (!kStreamK || unit < p.num_units) {
      const UnitWork w = unit_work(p, unit);
      unit += clusters;
      return w;
    }
    const int64_t tile = (sk_next - 1) / p.k_blocks;
    const int64_t first = tile * p.k_blocks;
    const int64_t begin = max(sk_begin, first);
    UnitWork w = unit_work(p, p.num_units + int(tile));
    w.kb_begin = int(begin - first);
    w.kb_end = int(sk_next - first);
    w.piece = w.kb_end < p.k_blocks ? Piece::kPartial
              : w.kb_begin > 0      ? Piece::kFinish
                                    : Piece::kWhole;
    w.tile_first = first;
    sk_next = begin;
    return w;
  }

  __device__ __forceinline__ TileRows rows(const Params& p, const UnitWork&) const {
    return TileRows{0, p.m, -1, nullptr, nullptr};
  }

  // Stream-K: a partial piece goes to the workspace (true: no epilogue); a tile's finishing
  // piece first adds the partials before it. The warpgroup's rows of the tile (ping-pong:
  // the whole tile) are slot `half` of the CTA's two.
  template <class Op, class Cfg>
  static __device__ __forceinline__ bool fixup(
      const Params& p, typename Op::Acc (&acc)[Cfg::kAtomsM][Cfg::kAccum], const UnitWork& w,
      int cluster_id, int num_clusters, int wg) {
    if constexpr (kStreamK) {
      const int half = Cfg::kPingPong ? 0 : wg;
      if (w.piece == Piece::kPartial) {
        sk_store_partial<Op, Cfg>(p, acc, cluster_id * 2 + half, kEpilogue + wg);
        return true;
      }
      if (w.piece == Piece::kFinish)
        sk_add_partials<Op, Cfg>(p, acc, w.tile_first, cluster_id, num_clusters, half);
    }
    return false;
  }
};

using DataParallelScheduler = PersistentScheduler<false>;
using StreamKScheduler = PersistentScheduler<true>;

// The grouped GEMM's schedule. Its shared memory, laid out by prepare(): before[g], the
// units of the groups before g (before[groups]: all of them; int64, since offsets out of
// order may make groups overlap, each up to every row); lo[g] and hi[g], group g's rows
// (the contiguous layout's clamped offsets; the masked layout's 0 and clamped count); and
// hi[groups], whether the contiguous layout's offsets are in order (then no two overlap).
// A group's units: its row tiles (from lo[g]) by the unit columns, row tiles fastest, so
// the CTAs in flight share b[g]'s columns.
template <int kBlockM>
struct GroupedScheduler {
  static constexpr bool kStreamK = false;
  static constexpr bool kGrouped = true;
  const int64_t* before;
  const int* lo;
  const int* hi;
  bool in_order;
  int64_t unit;  // the next unit
  int group;  // the group of `unit`, or one below it (it only moves forward)

  // before (int64, 8-byte aligned where the kernel puts it), lo, hi and the flag.
  static constexpr int smem_ints(int groups) { return 2 * (groups + 1) + groups + (groups + 1); }
  static __device__ __forceinline__ const int* lo_of(const int* smem, int groups) {
    return smem + 2 * (groups + 1);
  }
  static __device__ __forceinline__ const int* hi_of(const int* smem, int groups) {
    return lo_of(smem, groups) + groups;
  }

  // Every thread of the CTA: reads the offsets or counts once (after the previous kernel,
  // which may have written them) and lays out the shared schedule; ends with a barrier.
  template <int kThreads>
  static __device__ __forceinline__ void prepare(const Params& p, int* smem) {
    using Scan = cub::BlockScan<int64_t, kThreads, cub::BLOCK_SCAN_WARP_SCANS>;
    __shared__ typename Scan::TempStorage scan;
    int64_t* before_s = reinterpret_cast<int64_t*>(smem);
    int* lo_s = const_cast<int*>(lo_of(smem, p.groups));
    int* hi_s = lo_s + p.groups;
    const bool masked = p.group_counts != nullptr;
    bool in_order = true;
    int64_t carry = 0;
    for (int base = 0; base < p.groups; base += kThreads) {
      const int g = base + int(threadIdx.x);
      int64_t units = 0;
      if (g < p.groups) {
        int lo = 0, hi;
        if (masked) {
          hi = min(max(p.group_counts[g * p.group_stride], 0), p.m);
        } else {
          const int start = p.group_offsets[g * p.group_stride];
          const int end = p.group_offsets[(g + 1) * p.group_stride];
          in_order = in_order && start <= end;
          lo = min(max(start, 0), p.m);
          hi = min(max(end, lo), p.m);
        }
        lo_s[g] = lo;
        hi_s[g] = hi;
        units = int64_t((hi - lo + kBlockM - 1) / kBlockM) * p.unit_cols;
      }
      int64_t first, total;
      Scan(scan).ExclusiveSum(units, first, total);
      if (g < p.groups) before_s[g] = carry + first;
      carry += total;
      __syncthreads();  // the scan's storage is reused
    }
    in_order = __syncthreads_and(in_order);
    if (threadIdx.x == 0) {
      before_s[p.groups] = carry;
      hi_s[p.groups] = in_order;
    }
    __syncthreads();
  }

  __device__ __forceinline__ GroupedScheduler(const Params& p, int cluster, int /*clusters*/,
                                              const int* smem)
      : before(reinterpret_cast<const int64_t*>(smem)),
        lo(lo_of(smem, p.groups)),
        hi(hi_of(smem, p.groups)),
        in_order(hi[p.groups] != 0),
        unit(cluster),
        group(0) {}

  __device__ __forceinline__ void seek(const Params& p) {
    while (group < p.groups && before[group + 1] <= unit) ++group;
  }

  __device__ __forceinline__ bool done(const Params& p) {
    seek(p);
    return group >= p.groups;
  }

  __device__ __forceinline__ UnitWork next(const Params& p, int clusters) {
    seek(p);
    const int g = group;
    const int local = int(unit - before[g]);  // inside one group: below the host's bound
    const int row_tiles = (hi[g] - lo[g] + kBlockM - 1) / kBlockM;
    UnitWork w;
    w.row = local % row_tiles;
    w.col = local / row_tiles;
    w.split = 0;
    w.kb_begin = 0;
    w.kb_end = p.k_blocks;
    w.piece = Piece::kWhole;
    w.tile_first = 0;
    w.group = g;
    w.row_base = lo[g];
    w.row_end = hi[g];
    w.a_slab = p.group_counts != nullptr ? g : 0;
    unit += clusters;
    return w;
  }

  __device__ __forceinline__ TileRows rows(const Params& p, const UnitWork& w) const {
    const bool masked = p.group_counts != nullptr;
    return TileRows{masked ? int64_t(w.group) * p.c_group_stride : 0, w.row_end,
                    masked || in_order ? -1 : w.group + 1, lo, hi};
  }

  template <class Op, class Cfg>
  static __device__ __forceinline__ bool fixup(const Params&,
                                               typename Op::Acc (&)[Cfg::kAtomsM][Cfg::kAccum],
                                               const UnitWork&, int, int, int) {
    return false;
  }

  // The rows of c that no group writes, zeroed by warps `warp` of `warps` (over the grid):
  // each slab's rows past its count (masked); the rows outside every group (contiguous:
  // before the first group and after the last where the offsets are in order, else each
  // row looked up among all groups). Whole rows a warp, 16 bytes a lane where c allows.
  static __device__ __forceinline__ void fill_uncovered(const Params& p, const int* smem, int warp,
                                                        int warps) {
    const int* lo_s = lo_of(smem, p.groups);
    const int* hi_s = hi_of(smem, p.groups);
    const int lane = threadIdx.x % 32;
    const int esize = p.c_kind == 0 ? 4 : 2;
    const int64_t row_bytes = int64_t(p.n) * esize;
    auto zero_row = [&](int64_t offset, int64_t row) {
      char* dst = static_cast<char*>(p.c) + (offset + row * p.ldc) * esize;
      int64_t i = 0;
      if (p.c_vec) {
        for (i = int64_t(lane) * 16; i + 16 <= row_bytes; i += 32 * 16)
          *reinterpret_cast<uint4*>(dst + i) = make_uint4(0, 0, 0, 0);
        i = row_bytes / 16 * 16;
      }
      for (int64_t j = i + int64_t(lane) * esize; j < row_bytes; j += 32 * esize) {
        if (esize == 4)
          *reinterpret_cast<uint32_t*>(dst + j) = 0;
        else
          *reinterpret_cast<uint16_t*>(dst + j) = 0;
      }
    };
    if (p.group_counts != nullptr) {
      const int64_t rows = int64_t(p.groups) * p.m;
      for (int64_t r = warp; r < rows; r += warps) {
        const int g = int(r / p.m);
        const int row = int(r - int64_t(g) * p.m);
        if (row >= hi_s[g]) zero_row(int64_t(g) * p.c_group_stride, row);
      }
      return;
    }
    const bool in_order = hi_s[p.groups] != 0;
    if (in_order) {
      const int first = p.groups > 0 ? lo_s[0] : p.m;
      const int last = p.groups > 0 ? hi_s[p.groups - 1] : p.m;
      for (int64_t r = warp; r < first; r += warps) zero_row(0, r);
      for (int64_t r = last + warp; r < p.m; r += warps) zero_row(0, r);
      return;
    }
    for (int64_t r = warp; r < p.m; r += warps) {
      bool held = false;
      for (int g = lane; g < p.groups && !held; g += 32) held = lo_s[g] <= r && r < hi_s[g];
      if (!__any_sync(0xffffffffu, held)) zero_row(0, r);
    }
  }
};

}  // namespace gks::kernels::gemm::sm90
