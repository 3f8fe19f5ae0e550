// SPDX-License-Identifier: Apache-2.0
// Hopper-native GEMM (sm_90a only): c[M, N] = a[M, K] @ b[K, N], either fp16/bf16 in with
// fp32 accumulation (HalfOperands), or int8 in with int32 accumulation and the per-row /
// per-column scales of gks.int8_gemm applied in the epilogue (Int8Operands). c is fp32,
// fp16 or bf16. Include only from *_sm90a.cu sources.
//
// Shape of the kernel (one CTA per SM, persistent):
//  * 3 warpgroups. Warpgroup 0 is the producer: one thread issues TMA loads
//    (cp.async.bulk.tensor) of A and B tiles into a kStages-deep ring of shared-memory
//    slots; it gives its registers away (setmaxnreg.dec). Warpgroups 1 and 2 are consumers:
//    each owns half of the tile's rows and issues wgmma.mma_async with fp32 accumulators in
//    registers (setmaxnreg.inc).
//  * Each slot has two mbarriers. full[s]: the producer arms it with the slot's byte count
//    (arrive.expect_tx) and the TMA engine completes it. empty[s]: every consumer warp (of
//    every CTA of the cluster) arrives once its wgmma reads of the slot are done; the
//    producer waits on it before refilling. Phases alternate each lap of the ring, so a
//    waiter tracks one parity bit per lap.
//  * A k-block is 128 bytes of K: 64 16-bit or 128 int8 elements. Shared tiles use the
//    128-byte swizzle, written by TMA and read by wgmma through matrix descriptors. An A
//    tile [BM][128 bytes] is K-major: 128-byte rows, 8-row swizzle atoms 1024 bytes apart
//    (SBO). B is kept as BN/64 blocks of 8 KiB, in one of two layouts:
//    - 16-bit: b is [K, N] row-major, i.e. MN-major for wgmma (transpose bit set); a block
//      is [64 k][64 n]: k-rows 128 bytes apart, 8-row groups 1024 bytes apart (SBO),
//      blocks 8 KiB apart (LBO).
//    - int8: wgmma reads 8-bit operands K-major only, so B comes from b transposed,
//      [N, K] (int8_gemm reads a K-major b_q in place, or makes that copy); a block is
//      [64 n][128 bytes of k], laid out
//      like A, and the blocks of a tile follow each other as one K-major [BN][128] tile.
//    Every slot and block starts on a 1024-byte boundary, which the swizzle needs.
//  * The tile scheduler walks output tiles (or, with clusters, pairs of tiles stacked in M)
//    in groups of `group_m` tile rows, so the CTAs in flight share A rows and B columns in
//    L2. Producer and consumers walk the same sequence independently.
//  * Split-K (k_splits > 1, for outputs with too few tiles to fill the GPU): a tile's
//    k-blocks are shared among k_splits scheduling units; each writes its raw sums to a
//    workspace slice and split_k_reduce_kernel adds the slices in order and finishes c.
//  * Stream-K (kStreamK configs, single CTAs; sk_tiles > 0): the last sk_tiles
//    tiles' k-blocks, as one sequence of tile-major iterations, are dealt out in equal
//    ranges to the grid's CTAs (after the data-parallel tiles, a whole number of waves), so
//    every SM works to the end instead of a part-empty last wave. A CTA runs its range
//    last piece first: a piece that stops short of its tile's last k-block is a partial
//    (at most one a CTA, the first it runs), stored raw in the CTA's workspace slot with a
//    flag set after it; the piece that ends the tile adds the partials of the CTAs before
//    it (lower ranks, which ran theirs first) in a fixed order and runs the epilogue. So
//    the waits go to CTAs that were scheduled no later and are long done, and the sums are
//    deterministic for a given grid.
//  * Cluster of 2 (kClusterM == 2): the two CTAs compute vertically adjacent tiles with the
//    same B columns; each loads half of the B blocks and multicasts them to both CTAs.
//  * Cluster of 2 or 4 along N (kClusterN): the CTAs compute side-by-side tiles with the
//    same A rows; each loads 1/kClusterN of the A tile's rows and multicasts them to all.
//    For outputs of few rows (M = 128), whose every tile reads all of A, this cuts A's L2
//    traffic by kClusterN: what cuBLAS does there (nvjet ..._128x128_64x6_4x1 at
//    128x14336x4096 in ncu: 213 MB of L2 traffic against 297 MB without, 33.0 vs 36.6 us).
//  * Edges: TMA zero-fills the part of a box outside the matrix (rows >= M, columns >= N,
//    k >= K), so the math needs no predicates; boxes wholly outside (B blocks past N, the
//    idle half of a cluster past M) are not loaded at all, since they only feed outputs
//    the epilogue never stores. The epilogue masks its stores.
//  * Epilogue (for int8 the values are float(acc) * a_scale[row] * b_scale[col]), one of:
//    - TMA stores (c_tma: a 16-bit c whose rows are 16-byte aligned, no split-K, and room
//      beside the ring for two 8 KiB buffers a consumer warpgroup): each 64 x 64 sub-tile
//      is converted in registers, written to a buffer by stmatrix in the 128-byte swizzle,
//      and stored by one thread's cp.async.bulk.tensor, which also clips the edges. On an
//      H200, against the direct epilogue below: 4096^3 back to back 0.97-0.98x cuBLAS ->
//      1.00-1.03x, 4096x4096x256 by graph replay 22.1 -> 19.8 us, int8 8192^3 792 -> 765
//      us (fewer instructions between a tile's last wgmma and the next tile's first: no
//      shuffles, no per-lane stores).
//    - Direct (c_vec: c's rows 16-byte aligned; fp32 c, split-K's partial sums aside): the
//      four lanes of a quad swap values with shuffles so that each holds 8 adjacent columns
//      of a row, one 16-byte store (two for fp32), no shared memory and no barrier.
//    - Staged (any other c): 64 x 32 fp32 chunks in a private shared buffer (rows padded to
//      40 floats: the float2 writes of a half-warp and the 16-byte reads hit distinct banks)
//      written out row-contiguously, converting to the output dtype.
//  * Launch: programmatic dependent launch (the launcher sets it). Every thread runs
//    griddepcontrol.wait after the barrier set-up, before any global access, and lets the
//    stream's next kernel be scheduled at once, so back-to-back calls overlap a launch and
//    set-up with the previous kernel's tail.
//  * ptxas serializes wgmmas (every one waits for the last: C7520/C7515 in -Xptxas -v)
//    when it sees a possibly divergent branch before them or the accumulators touched by
//    other instructions inside the loop: so the mbarrier retry loop lives inside its asm,
//    slot releases are predicated, the warpgroup role is broadcast from lane 0, and the
//    accumulators are never reinterpreted as integers.
#pragma once

#include <cuda.h>  // CUtensorMap (types only; the driver is reached through the runtime)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "gks/kernels/dependent_launch.cuh"
#include "gks/kernels/vec.cuh"  // from_float

namespace gks::kernels::hopper {

constexpr int kRowBytes = 128;              // bytes of K per k-block: one swizzle row
constexpr int kBBlockCols = 64;             // columns of c per B block
constexpr int kBBlockBytes = kRowBytes * kBBlockCols;
constexpr int kConsumerWarpgroups = 2;
// Named barriers 1 and 2 are the consumer warpgroups' epilogues; 3 and 4 the ping-pong
// hand-off (3: warpgroup 0 to 1, 4: back).
constexpr int kHandoffBarrier = 3;
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

// One compiled tile config. Cooperative (kPingPong false): kBlockM rows are split between
// the two consumer warpgroups, each covering its kBlockM / 2 rows with kAtomsM wgmma atoms
// of 64 rows x kBlockN columns. Ping-pong: the warpgroups take whole tiles in turn (the
// CTA's tiles 0, 2, 4... and 1, 3, 5...), so one's epilogue runs while the other's MMAs do.
template <int kBlockM_, int kBlockN_, int kStages_, int kClusterM_, bool kPingPong_ = false,
          bool kStreamK_ = false, int kClusterN_ = 1>
struct HopperTile {
  static constexpr int kBlockM = kBlockM_, kBlockN = kBlockN_;
  static constexpr int kStages = kStages_, kClusterM = kClusterM_, kClusterN = kClusterN_;
  static constexpr int kClusterSize = kClusterM * kClusterN;
  // Rows of the A tile each CTA of a cluster along N loads (and multicasts).
  static constexpr int kAPartRows = kBlockM / kClusterN;
  static constexpr bool kPingPong = kPingPong_;
  // Stream-K compiled in (its tail handling costs the other configs registers otherwise).
  static constexpr bool kStreamK = kStreamK_;
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
  static_assert(!kStreamK || kClusterSize == 1, "stream-K runs single CTAs");
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "slots keep 1024-byte alignment");
  static_assert(kSmemBytes <= kSmemLimit, "shared memory over the sm_90 limit");
  static_assert(kAtomsM * kAccum + 64 <= kConsumerRegisters, "accumulators must fit in registers");
};

// Everything but the tensor maps. Offsets into c are int64.
struct HopperGemmParams {
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
  int c_tma;         // 16-bit c written by TMA stores through map_c (Cfg::kTmaStore only)
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
  // Int8Operands only: c = float(acc) * a_scale[row * a_scale_stride] * b_scale[...].
  const float* a_scale;
  const float* b_scale;
  int64_t a_scale_stride, b_scale_stride;
};

// What the kernel multiplies. Both keep K-blocks of 128 bytes; they differ in the element
// type, the accumulator type, B's shared layout (above) and the epilogue's scales.
template <typename T>
struct HalfOperands {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "bf16 or fp16 inputs");
  using In = T;
  using Acc = float;
  static constexpr bool kInt8 = false;
};
struct Int8Operands {
  using In = int8_t;
  using Acc = int32_t;
  static constexpr bool kInt8 = true;
};
// Elements of K per k-block.
template <class Op>
constexpr int kBlockK = kRowBytes / int(sizeof(typename Op::In));

// ---------------------------------------------------------------- PTX wrappers

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes the barrier initializations visible to the async proxy (TMA) and the cluster.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// Arrives on the barrier if `pred`: a predicated instruction rather than a branch (see
// mbar_wait).
__device__ __forceinline__ void mbar_arrive_if(uint32_t bar, bool pred) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.u32 p, %1, 0;\n"
      "@p mbarrier.arrive.shared::cta.b64 _, [%0];\n"
      "}\n" ::"r"(bar),
      "r"(uint32_t(pred))
      : "memory");
}

// Arrives (if `pred`, predicated: see mbar_wait) on the barrier at the same shared offset
// in CTA `cta` of this cluster. Default (release, CTA-scope) semantics, as for a local
// arrive: what it orders is this warp's wgmma reads of the slot, which wgmma.wait_group
// has already completed. A cluster-scope release would add a GPU-wide memory fence per
// arrival.
__device__ __forceinline__ void mbar_arrive_cluster_if(uint32_t bar, uint32_t cta, bool pred) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      ".reg .b32 remote;\n"
      "setp.ne.u32 p, %2, 0;\n"
      "@p mapa.shared::cluster.u32 remote, %0, %1;\n"
      "@p mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(bar),
      "r"(cta), "r"(uint32_t(pred))
      : "memory");
}

// Returns once the phase with parity `parity` has completed (i.e. the barrier's current
// phase has the other parity). The retry loop lives inside the asm: a C++ loop around
// try_wait is a branch ptxas cannot prove warp-uniform, and a wgmma after such a branch is
// serialized (ptxas C7520: every wgmma then waits for the previous one to finish).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// 2-D TMA load of the box at (x = inner coordinate, y = outer) into shared `dst`,
// completing `bytes` on `bar`. Out-of-bounds elements are zero-filled.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int x, int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(x), "r"(y)
      : "memory");
}

// As tma_load_2d, but the box lands at the same shared offset (and completes bytes on the
// barrier at the same offset) in every CTA of the cluster named in `cta_mask`.
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const CUtensorMap* map,
                                                      uint32_t bar, int x, int y,
                                                      uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(x), "r"(y), "h"(cta_mask)
      : "memory");
}

__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// If `pred`: a 2-D TMA store of the shared box at `src` to (x = inner coordinate, y = outer)
// of the map's tensor, as a bulk async-group of its own; the part of the box outside the
// tensor is not written. Predicated, not branched (see mbar_wait).
__device__ __forceinline__ void tma_store_2d_if(const CUtensorMap* map, uint32_t src, int x, int y,
                                                bool pred) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.u32 p, %4, 0;\n"
      "@p cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
      "@p cp.async.bulk.commit_group;\n"
      "}\n" ::"l"(reinterpret_cast<uint64_t>(map)),
      "r"(src), "r"(x), "r"(y), "r"(uint32_t(pred))
      : "memory");
}

// If `pred`: waits until at most kPending of this thread's bulk async-groups are still
// reading shared memory (their global writes may still be in flight).
template <int kPending>
__device__ __forceinline__ void bulk_wait_read_if(bool pred) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.u32 p, %0, 0;\n"
      "@p cp.async.bulk.wait_group.read %1;\n"
      "}\n" ::"r"(uint32_t(pred)), "n"(kPending)
      : "memory");
}

// Waits until all of this thread's bulk async-groups have completed, writes included.
__device__ __forceinline__ void bulk_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// Makes this thread's generic-proxy writes to shared memory visible to the async proxy
// (a TMA store issued after a barrier reads them).
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// stmatrix .x4: four 8x8 matrices of 16-bit values, r[i] holding this lane's pair of matrix
// i (row lane / 4, columns 2 * (lane % 4) + {0, 1}: the mma accumulator fragment); lanes
// 8i..8i+7 give the shared addresses of matrix i's eight 16-byte rows.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

__device__ __forceinline__ uint32_t cluster_cta_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}

// All threads of all CTAs in the cluster; orders shared-memory accesses across it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// Barrier among the `kCount` threads that use named barrier `id` (1..15; 0 is
// __syncthreads).
template <int kCount>
__device__ __forceinline__ void named_barrier_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kCount) : "memory");
}

// Arrives at named barrier `id` without waiting (the other side of a named_barrier_sync).
template <int kCount>
__device__ __forceinline__ void named_barrier_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kCount) : "memory");
}

template <int kRegisters>
__device__ __forceinline__ void registers_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

template <int kRegisters>
__device__ __forceinline__ void registers_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most kPending committed wgmma groups of this warp are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving reads or writes of accumulator registers across the
// asynchronous wgmma boundary (the registers are written by the Tensor Cores, not by the
// instruction the compiler sees).
template <int kN>
__device__ __forceinline__ void fence_registers(float (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int kN>
__device__ __forceinline__ void fence_registers(int32_t (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// A wgmma shared-memory matrix descriptor for a 128-byte-swizzled operand:
// bits 0-13 start address >> 4, 16-29 leading byte offset >> 4, 32-45 stride byte offset
// >> 4, 49-51 base offset (0: every swizzle atom starts 1024-byte aligned), 62-63 layout
// (1 = 128-byte swizzle).
__device__ __forceinline__ uint64_t smem_descriptor(uint32_t addr, uint32_t leading_bytes,
                                                    uint32_t stride_bytes) {
  uint64_t desc = 0;
  desc |= uint64_t((addr & 0x3FFFF) >> 4);
  desc |= uint64_t((leading_bytes >> 4) & 0x3FFF) << 16;
  desc |= uint64_t((stride_bytes >> 4) & 0x3FFF) << 32;
  desc |= uint64_t(1) << 62;
  return desc;
}

// wgmma.mma_async m64nNk16 (16-bit inputs, fp32 accumulators; B MN-major, the transpose
// bit set) or m64nNk32 (int8 inputs, int32 accumulators; B K-major), A K-major, both from
// shared memory through descriptors. A k-step is 32 bytes of K either way.
// accumulate == 0 overwrites d (d = A B).
// The operand lists are spelled out for the preprocessor: a thread's N / 2 accumulator
// registers (%0 ...), then the two descriptors and the accumulate flag. The register and
// accumulator lists (GKS_WGMMA_REGS*, GKS_WGMMA_D*) stay defined: FlashAttention's wgmma
// wrappers (flash_attention_fwd_hopper.cuh) use them too.
#define GKS_WGMMA_REGS32 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15" \
  ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define GKS_WGMMA_REGS64 \
  GKS_WGMMA_REGS32 \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47" \
  ", %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define GKS_WGMMA_REGS128 \
  GKS_WGMMA_REGS64 \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79" \
  ", %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95" \
  ", %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111" \
  ", %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
// Accumulator operands with constraint C ("+f" or "+r").
#define GKS_WGMMA_D8(C, i) \
  C(d[i]), C(d[i + 1]), C(d[i + 2]), C(d[i + 3]), C(d[i + 4]), C(d[i + 5]), C(d[i + 6]), C(d[i + 7])
#define GKS_WGMMA_D32(C) GKS_WGMMA_D8(C, 0), GKS_WGMMA_D8(C, 8), GKS_WGMMA_D8(C, 16), GKS_WGMMA_D8(C, 24)
#define GKS_WGMMA_D64(C) \
  GKS_WGMMA_D32(C), GKS_WGMMA_D8(C, 32), GKS_WGMMA_D8(C, 40), GKS_WGMMA_D8(C, 48), GKS_WGMMA_D8(C, 56)
#define GKS_WGMMA_D128(C)                                                                     \
  GKS_WGMMA_D64(C), GKS_WGMMA_D8(C, 64), GKS_WGMMA_D8(C, 72), GKS_WGMMA_D8(C, 80),            \
      GKS_WGMMA_D8(C, 88), GKS_WGMMA_D8(C, 96), GKS_WGMMA_D8(C, 104), GKS_WGMMA_D8(C, 112),   \
      GKS_WGMMA_D8(C, 120)
// One wgmma of SHAPE_TYPES (e.g. "m64n256k16.f32.bf16.bf16"); PRED and DESCS name the flag
// and descriptor operands, TAIL ends the operand list (the 16-bit forms add the scale and
// transpose immediates), the rest are the accumulator outputs.
#define GKS_WGMMA_ASM(SHAPE_TYPES, REGS, PRED, DESCS, TAIL, ...)                               \
  asm volatile("{\n"                                                                           \
               ".reg .pred p;\n"                                                               \
               "setp.ne.b32 p, " PRED ", 0;\n"                                                  \
               "wgmma.mma_async.sync.aligned." SHAPE_TYPES "\n"                                 \
               "{" REGS "},\n"                                                                  \
               " " DESCS ", p" TAIL "\n"                                                        \
               "}\n"                                                                            \
               : __VA_ARGS__                                                                   \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))
#define GKS_WGMMA_TYPED(N, REGS, PRED, DESCS, DN)                                              \
  if constexpr (Op::kInt8)                                                                     \
    GKS_WGMMA_ASM("m64n" N "k32.s32.s8.s8", REGS, PRED, DESCS, ";", DN("+r"));                  \
  else if constexpr (std::is_same_v<typename Op::In, __nv_bfloat16>)                           \
    GKS_WGMMA_ASM("m64n" N "k16.f32.bf16.bf16", REGS, PRED, DESCS, ", 1, 1, 0, 1;", DN("+f"));  \
  else                                                                                         \
    GKS_WGMMA_ASM("m64n" N "k16.f32.f16.f16", REGS, PRED, DESCS, ", 1, 1, 0, 1;", DN("+f"))

template <class Op, int kN>
struct Wgmma {
  static_assert(kN == 64 || kN == 128 || kN == 256, "N: 64, 128 or 256");
  using Acc = typename Op::Acc;
  static __device__ __forceinline__ void mma(Acc (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b,
                                             int accumulate) {
    if constexpr (kN == 64) {
      GKS_WGMMA_TYPED("64", GKS_WGMMA_REGS32, "%34", "%32, %33", GKS_WGMMA_D32);
    } else if constexpr (kN == 128) {
      GKS_WGMMA_TYPED("128", GKS_WGMMA_REGS64, "%66", "%64, %65", GKS_WGMMA_D64);
    } else {
      GKS_WGMMA_TYPED("256", GKS_WGMMA_REGS128, "%130", "%128, %129", GKS_WGMMA_D128);
    }
  }
};

#undef GKS_WGMMA_TYPED
#undef GKS_WGMMA_ASM

// Hands a ring slot back: one arrival per consumer warp on the slot's empty barrier in
// every CTA of the cluster (each CTA's producer may write this CTA's slot).
// Only where `pred` holds (lane 0 of the warp), predicated rather than branched around.
template <class Cfg>
__device__ __forceinline__ void release_slot(uint32_t empty_bar, bool pred) {
  if constexpr (Cfg::kClusterSize == 1) {
    mbar_arrive_if(empty_bar, pred);
  } else {
#pragma unroll
    for (int cta = 0; cta < Cfg::kClusterSize; ++cta)
      mbar_arrive_cluster_if(empty_bar, uint32_t(cta), pred);
  }
}

// ---------------------------------------------------------------- the kernel

// What one scheduling unit computes: unit row `row` (a tile row, or a cluster's pair of
// them), unit column `col` (a tile column, or a cluster's 2 or 4 of them), over k-blocks
// [kb_begin, kb_end) as split `split`; with
// stream-K, also whether the piece is a whole tile, a partial or the tile's finish, and
// the first iteration of its tile (which says whose partials the finish adds).
enum class Piece { kWhole, kPartial, kFinish };
struct UnitWork {
  int row, col, split, kb_begin, kb_end;
  Piece piece;
  int64_t tile_first;
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
__device__ __forceinline__ UnitWork unit_work(const HopperGemmParams& p, int unit) {
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
  return w;
}

// Stream-K: the first iteration of cluster `cluster`'s range.
__device__ __forceinline__ int64_t sk_range_begin(const HopperGemmParams& p, int cluster,
                                                  int clusters) {
  return int64_t(cluster) * (int64_t(p.sk_tiles) * p.k_blocks) / clusters;
}

// The sequence of work of one cluster, which its producer and consumers walk alike: its
// data-parallel units (every clusters-th), then (kStreamK) its stream-K range, last piece
// first.
template <bool kStreamK>
struct Schedule {
  int unit;         // the next data-parallel unit
  int64_t sk_next;  // stream-K: one past the range's last iteration not yet handed out
  int64_t sk_begin;

  __device__ __forceinline__ Schedule(const HopperGemmParams& p, int cluster, int clusters)
      : unit(cluster),
        sk_next(kStreamK ? sk_range_begin(p, cluster + 1, clusters) : 0),
        sk_begin(kStreamK ? sk_range_begin(p, cluster, clusters) : 0) {}

  __device__ __forceinline__ bool done(const HopperGemmParams& p) const {
    return unit >= p.num_units && (!kStreamK || sk_next <= sk_begin);
  }

  __device__ __forceinline__ UnitWork next(const HopperGemmParams& p, int clusters) {
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
};

template <class Op, class Cfg>
__device__ __forceinline__ void run_producer(const CUtensorMap* map_a, const CUtensorMap* map_b,
                                             const HopperGemmParams& p, uint32_t smem_a,
                                             uint32_t smem_b, uint32_t full, uint32_t empty,
                                             uint32_t cta_rank, int cluster_id,
                                             int num_clusters) {
  prefetch_tensor_map(map_a);
  prefetch_tensor_map(map_b);
  int stage = 0;
  uint32_t phase = 0;
  Schedule<Cfg::kStreamK> schedule(p, cluster_id, num_clusters);
  while (!schedule.done(p)) {
    const UnitWork w = schedule.next(p, num_clusters);
    const int a_row = tile_row<Cfg>(w, cta_rank) * Cfg::kBlockM;
    const int b_col = tile_col<Cfg>(w, cta_rank) * Cfg::kBlockN;
    // Boxes wholly outside the matrix are not loaded: A rows past M (the second CTA of a
    // cluster on the last, odd tile row) and B blocks past N feed only accumulators the
    // epilogue never stores, so stale shared memory there is harmless. Boxes that straddle
    // an edge are loaded; TMA zero-fills their outside part (which matters along K). In a
    // cluster along N, every CTA expects the A parts that start inside M (each from the
    // CTA of that rank).
    const bool load_a = a_row < p.m;
    const int a_parts = min(Cfg::kClusterN, (p.m - a_row + Cfg::kAPartRows - 1) / Cfg::kAPartRows);
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
      mbar_wait(empty + 8 * stage, phase ^ 1);
      const uint32_t full_bar = full + 8 * stage;
      mbar_arrive_expect_tx(full_bar, stage_bytes);
      const int k0 = kb * kBlockK<Op>;
      if constexpr (Cfg::kClusterN > 1) {
        const int part = int(cta_rank) * Cfg::kAPartRows;
        if (int(cta_rank) < a_parts)
          tma_load_2d_multicast(smem_a + stage * Cfg::kABytes + part * kRowBytes, map_a,
                                full_bar, k0, a_row + part, uint16_t((1u << Cfg::kClusterN) - 1));
      } else if (load_a) {
        tma_load_2d(smem_a + stage * Cfg::kABytes, map_a, full_bar, k0, a_row);
      }
      const uint32_t b_slot = smem_b + stage * Cfg::kBBytes;
#pragma unroll
      for (int j = 0; j < Cfg::kBBlocks; ++j) {
        if (j >= b_blocks) break;
        // The box's (inner, outer) coordinates: (k, n) in the transposed int8 b, else (n, k).
        const int n0 = b_col + j * kBBlockCols;
        const int x = Op::kInt8 ? k0 : n0, y = Op::kInt8 ? n0 : k0;
        if constexpr (Cfg::kClusterM == 1) {
          tma_load_2d(b_slot + j * kBBlockBytes, map_b, full_bar, x, y);
        } else {
          if (j % Cfg::kClusterM == int(cta_rank))
            tma_load_2d_multicast(b_slot + j * kBBlockBytes, map_b, full_bar, x, y,
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

// Calls f(Type<OutT>{}) with c's element type OutT: float (c_kind 0), else the 16-bit type
// c_kind names. The fp16/bf16 GEMM's 16-bit output is always its input type, so only that
// one is compiled for it; int8 may write either.
template <typename T>
struct Type {
  using type = T;
};
template <class Op, class F>
__device__ __forceinline__ void with_c_type(int c_kind, F&& f) {
  if (c_kind == 0) {
    f(Type<float>{});
  } else if constexpr (Op::kInt8) {
    if (c_kind == 1)
      f(Type<__half>{});
    else
      f(Type<__nv_bfloat16>{});
  } else {
    f(Type<typename Op::In>{});
  }
}

// Reads a staged 64 x kEpilogueCols chunk out to c (rows from row0, columns from
// chunk_col) as OutT, 16 bytes a store where c allows, masked at the edges.
template <typename OutT>
__device__ __forceinline__ void write_chunk(const HopperGemmParams& p, const float* stage_buf,
                                            int64_t row0, int chunk_col) {
  constexpr int kPer = 16 / int(sizeof(OutT));  // outputs per 16-byte store
  constexpr int kVecs = kEpilogueCols / kPer;
  const int t = threadIdx.x % 128;
#pragma unroll
  for (int i = t; i < 64 * kVecs; i += 128) {
    const int r = i / kVecs, v = i % kVecs;
    const int64_t row = row0 + r;
    const int col = chunk_col + v * kPer;
    if (row >= p.m || col >= p.n) continue;
    float vals[kPer];
#pragma unroll
    for (int e = 0; e < kPer; e += 4) {
      const float4 q = *reinterpret_cast<const float4*>(stage_buf + r * kEpiloguePitch + v * kPer + e);
      vals[e] = q.x, vals[e + 1] = q.y, vals[e + 2] = q.z, vals[e + 3] = q.w;
    }
    OutT* dst = static_cast<OutT*>(p.c) + row * p.ldc + col;
    if (p.c_vec && col + kPer <= p.n) {
      Vec<OutT, kPer> out;
#pragma unroll
      for (int e = 0; e < kPer; ++e) out.v[e] = from_float<OutT>(vals[e]);
      *reinterpret_cast<Vec<OutT, kPer>*>(dst) = out;
    } else {
#pragma unroll
      for (int e = 0; e < kPer; ++e)
        if (col + e < p.n) dst[e] = from_float<OutT>(vals[e]);
    }
  }
}

// Writes one 64 x kBlockN accumulator atom of a consumer warpgroup to c, in 64 x 32
// chunks staged through `stage_buf`. `row0`/`col0`: the atom's first element in c.
template <class Op, class Cfg>
__device__ __forceinline__ void store_atom(const HopperGemmParams& p,
                                           const typename Op::Acc (&acc)[Cfg::kAccum],
                                           float* stage_buf, int barrier_id, int64_t row0,
                                           int col0) {
  const int t = threadIdx.x % 128;
  const int warp = t / 32, lane = t % 32;
  // Accumulator fragment of m64nN: register 4j + {0,1} holds row warp*16 + lane/4,
  // columns 8j + 2*(lane%4) + {0,1}; registers 4j + {2,3} the same columns 8 rows down.
  const int r = warp * 16 + lane / 4;
  // int8: the scales of this thread's two rows (0 past the edge: those are never stored).
  float sa_lo = 1.f, sa_hi = 1.f;
  if constexpr (Op::kInt8) {
    sa_lo = row0 + r < p.m ? p.a_scale[(row0 + r) * p.a_scale_stride] : 0.f;
    sa_hi = row0 + r + 8 < p.m ? p.a_scale[(row0 + r + 8) * p.a_scale_stride] : 0.f;
  }
#pragma unroll
  for (int chunk = 0; chunk < Cfg::kBlockN / kEpilogueCols; ++chunk) {
    const int chunk_col = col0 + chunk * kEpilogueCols;
    if (chunk_col >= p.n) break;  // uniform across the warpgroup
    named_barrier_sync<128>(barrier_id);  // the previous chunk has been read out
#pragma unroll
    for (int jj = 0; jj < kEpilogueCols / 8; ++jj) {
      const int j = chunk * (kEpilogueCols / 8) + jj;
      const int col = jj * 8 + 2 * (lane % 4);
      float2 lo, hi;
      if constexpr (Op::kInt8) {
        // float(acc) * a_scale * b_scale, in that order (gks.reference.int8_gemm's).
        const int c0 = chunk_col + col;
        const float sb0 = c0 < p.n ? p.b_scale[int64_t(c0) * p.b_scale_stride] : 0.f;
        const float sb1 = c0 + 1 < p.n ? p.b_scale[int64_t(c0 + 1) * p.b_scale_stride] : 0.f;
        lo = make_float2(float(acc[4 * j]) * sa_lo * sb0, float(acc[4 * j + 1]) * sa_lo * sb1);
        hi = make_float2(float(acc[4 * j + 2]) * sa_hi * sb0, float(acc[4 * j + 3]) * sa_hi * sb1);
      } else {
        lo = make_float2(acc[4 * j], acc[4 * j + 1]);
        hi = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
      }
      *reinterpret_cast<float2*>(stage_buf + r * kEpiloguePitch + col) = lo;
      *reinterpret_cast<float2*>(stage_buf + (r + 8) * kEpiloguePitch + col) = hi;
    }
    named_barrier_sync<128>(barrier_id);
    with_c_type<Op>(p.c_kind, [&](auto out) {
      write_chunk<typename decltype(out)::type>(p, stage_buf, row0, chunk_col);
    });
  }
}

// Lanes 4q..4q+3 of a quad each hold one 32-bit value of four column groups (e[i]: group
// i); afterwards lane q's e[p] is lane p's value of group q, so that a lane holds one
// group's eight adjacent columns. Two butterfly rounds of shuffles.
template <typename W>
__device__ __forceinline__ void quad_transpose(W (&e)[4], int lane) {
#pragma unroll
  for (int d = 1; d <= 2; d <<= 1) {
    const bool upper = (lane & d) != 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (i & d) continue;
      const W received = __shfl_xor_sync(0xffffffffu, upper ? e[i] : e[i | d], d);
      if (upper)
        e[i] = received;
      else
        e[i | d] = received;
    }
  }
}

// Writes one 64 x kBlockN accumulator atom to c (rows 16-byte aligned) straight from
// registers, with no shared memory and no barrier; for int8, float(acc) * a_scale * b_scale
// as store_atom. Each quad of lanes swaps its values (quad_transpose) so that a lane owns 8
// adjacent columns of a row: one 16-byte store for a 16-bit c, two for fp32. Masked at the
// edges.
template <class Op, typename OutT, class Cfg>
__device__ __forceinline__ void store_atom_direct(const HopperGemmParams& p,
                                                  const typename Op::Acc (&acc)[Cfg::kAccum],
                                                  int64_t row0, int col0) {
  // Per column pair: two floats (fp32 c), or one 32-bit word of two 16-bit values. (The
  // accumulators are never reinterpreted as integers: ptxas would then move them between
  // register classes inside the main loop and serialize its wgmmas.)
  constexpr bool kFloat = sizeof(OutT) == 4;
  using Pair = Vec<OutT, 2>;
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
  const int quad_lane = lane % 4;
  const int64_t first_row = row0 + warp * 16 + lane / 4;  // and 8 rows below
  float sa[2] = {1.f, 1.f};  // int8: the scales of this thread's two rows
  if constexpr (Op::kInt8) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
      sa[h] = first_row + 8 * h < p.m ? p.a_scale[(first_row + 8 * h) * p.a_scale_stride] : 0.f;
  }
#pragma unroll
  for (int g = 0; g < Cfg::kBlockN / 32; ++g) {  // four 8-column groups at a time
    // lo/hi[h][i]: the even and odd column of this thread's pair in group 4g + i, row h.
    float lo[2][4], hi[2][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int j = 4 * g + i;
      float sb0 = 1.f, sb1 = 1.f;
      if constexpr (Op::kInt8) {
        const int c0 = col0 + 8 * j + 2 * quad_lane;
        sb0 = c0 < p.n ? p.b_scale[int64_t(c0) * p.b_scale_stride] : 0.f;
        sb1 = c0 + 1 < p.n ? p.b_scale[int64_t(c0 + 1) * p.b_scale_stride] : 0.f;
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        lo[h][i] = float(acc[4 * j + 2 * h]);
        hi[h][i] = float(acc[4 * j + 2 * h + 1]);
        if constexpr (Op::kInt8) {
          lo[h][i] = lo[h][i] * sa[h] * sb0;
          hi[h][i] = hi[h][i] * sa[h] * sb1;
        }
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t packed[4];
      if constexpr (kFloat) {
        quad_transpose(lo[h], lane);
        quad_transpose(hi[h], lane);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          Pair pair;
          pair.v[0] = from_float<OutT>(lo[h][i]);
          pair.v[1] = from_float<OutT>(hi[h][i]);
          packed[i] = *reinterpret_cast<const uint32_t*>(&pair);
        }
        quad_transpose(packed, lane);
      }
      const int64_t row = first_row + 8 * h;
      const int col = col0 + 32 * g + 8 * quad_lane;  // this lane's group
      if (row >= p.m || col >= p.n) continue;
      OutT* dst = static_cast<OutT*>(p.c) + row * p.ldc + col;
      if (col + 8 <= p.n) {
        if constexpr (kFloat) {
          reinterpret_cast<float4*>(dst)[0] = make_float4(lo[h][0], hi[h][0], lo[h][1], hi[h][1]);
          reinterpret_cast<float4*>(dst)[1] = make_float4(lo[h][2], hi[h][2], lo[h][3], hi[h][3]);
        } else {
          *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
        }
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          if (col + e >= p.n) break;
          if constexpr (kFloat)
            dst[e] = e % 2 ? hi[h][e / 2] : lo[h][e / 2];
          else
            dst[e] = reinterpret_cast<const Pair*>(&packed[e / 2])->v[e % 2];
        }
      }
    }
  }
}

// Writes one 64 x kBlockN accumulator atom to a 16-bit c through shared memory and TMA:
// each 64 x 64 sub-tile goes by stmatrix (no shuffles) into one of the warpgroup's two
// buffers, in the 128-byte swizzle map_c reads with, and one thread stores it with
// cp.async.bulk.tensor; TMA clips rows and columns past the edges. For int8, float(acc) *
// a_scale * b_scale as store_atom. `sub` counts the warpgroup's sub-tiles (which buffer).
// Buffer reuse: before the barrier that publishes sub-tile s, the storing thread waits
// until the store of s - 1 has read its buffer, which sub-tile s + 1 then overwrites.
template <class Op, typename OutT, class Cfg>
__device__ __forceinline__ void store_atom_tma(const HopperGemmParams& p,
                                               const typename Op::Acc (&acc)[Cfg::kAccum],
                                               const CUtensorMap* map_c, uint32_t buffers,
                                               int barrier_id, int row0, int col0, int& sub) {
  using Pair = Vec<OutT, 2>;
  const int t = threadIdx.x % 128, lane = t % 32, warp = t / 32;
  // stmatrix addresses: lanes 8i..8i+7 name the rows of matrix i; matrices 0 / 1 are the
  // top / bottom 8 rows of an 8-column group, 2 / 3 those of the next group.
  const int st_row = warp * 16 + lane % 8 + 8 * ((lane / 8) % 2);
  const int st_group = lane / 16;
  float sa[2] = {1.f, 1.f};  // int8: the scales of this thread's two fragment rows
  if constexpr (Op::kInt8) {
    const int64_t first_row = int64_t(row0) + warp * 16 + lane / 4;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      sa[h] = first_row + 8 * h < p.m ? p.a_scale[(first_row + 8 * h) * p.a_scale_stride] : 0.f;
  }
#pragma unroll
  for (int s = 0; s < Cfg::kBlockN / kSubtileCols; ++s) {
    const int sub_col = col0 + s * kSubtileCols;
    if (sub_col >= p.n) break;  // uniform across the warpgroup
    const uint32_t buffer = buffers + uint32_t(sub % kStoreBuffers) * kSubtileBytes;
#pragma unroll
    for (int jj = 0; jj < kSubtileCols / 8; jj += 2) {
      uint32_t r[4];
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int j = s * (kSubtileCols / 8) + jj + q;
        float sb[2] = {1.f, 1.f};
        if constexpr (Op::kInt8) {
          const int c0 = col0 + 8 * j + 2 * (lane % 4);
#pragma unroll
          for (int e = 0; e < 2; ++e)
            sb[e] = c0 + e < p.n ? p.b_scale[int64_t(c0 + e) * p.b_scale_stride] : 0.f;
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          Pair pair;
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float v = float(acc[4 * j + 2 * h + e]);
            if constexpr (Op::kInt8) v = v * sa[h] * sb[e];
            pair.v[e] = from_float<OutT>(v);
          }
          r[2 * q + h] = *reinterpret_cast<const uint32_t*>(&pair);
        }
      }
      // 16-byte chunk jj + st_group of row st_row, at its 128-byte-swizzled place.
      const int chunk = (jj + st_group) ^ (st_row % 8);
      stmatrix_x4(buffer + uint32_t(st_row * 128 + chunk * 16), r);
    }
    fence_proxy_async_shared();
    bulk_wait_read_if<0>(t == 0);
    named_barrier_sync<128>(barrier_id);
    tma_store_2d_if(map_c, buffer, sub_col, row0, t == 0);
    ++sub;
  }
}

// Split-K: writes one 64 x kBlockN atom's raw sums to this split's slice of p.partial,
// straight from the fragment (two consecutive columns a store), masked at the edges.
template <class Op, class Cfg>
__device__ __forceinline__ void store_partial(const HopperGemmParams& p,
                                              const typename Op::Acc (&acc)[Cfg::kAccum], int split,
                                              int64_t row0, int col0) {
  using Acc = typename Op::Acc;
  const int t = threadIdx.x % 128;
  const int warp = t / 32, lane = t % 32;
  Acc* slice = static_cast<Acc*>(p.partial) + int64_t(split) * p.m * p.n;
  const bool pairs = p.n % 2 == 0;  // an even column then starts an 8-byte-aligned pair
#pragma unroll
  for (int j = 0; j < Cfg::kBlockN / 8; ++j) {
    const int col = col0 + 8 * j + 2 * (lane % 4);
    if (col >= p.n) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // rows warp*16 + lane/4 and 8 below (see store_atom)
      const int64_t row = row0 + warp * 16 + lane / 4 + 8 * h;
      if (row >= p.m) continue;
      Acc* dst = slice + row * p.n + col;
      if (pairs) {
        Vec<Acc, 2> v;
        v.v[0] = acc[4 * j + 2 * h];
        v.v[1] = acc[4 * j + 2 * h + 1];
        *reinterpret_cast<Vec<Acc, 2>*>(dst) = v;
      } else {
        dst[0] = acc[4 * j + 2 * h];
        if (col + 1 < p.n) dst[1] = acc[4 * j + 2 * h + 1];
      }
    }
  }
}

// Stream-K slot `slot` (CTA * 2 + half) of p.sk_partial: the fragments of one consumer
// warpgroup, 16 bytes a thread in turn, so a warp's stores and loads are contiguous.
template <class Op, class Cfg>
__device__ __forceinline__ Vec<typename Op::Acc, 4>* sk_slot(const HopperGemmParams& p, int slot) {
  constexpr int kVecsPerSlot = Cfg::kAtomsM * Cfg::kAccum / 4 * 128;
  return static_cast<Vec<typename Op::Acc, 4>*>(p.sk_partial) + int64_t(slot) * kVecsPerSlot +
         threadIdx.x % 128;
}

// Stream-K: stores the warpgroup's raw sums in its slot, then (once every thread's stores
// are done) one thread sets the slot's flag with release semantics.
template <class Op, class Cfg>
__device__ __forceinline__ void sk_store_partial(
    const HopperGemmParams& p, const typename Op::Acc (&acc)[Cfg::kAtomsM][Cfg::kAccum], int slot,
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
  named_barrier_sync<128>(barrier_id);
  // Predicated, not a branch (see mbar_wait). The release orders the warpgroup's stores,
  // made visible to this thread by the barrier, before the flag.
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.eq.u32 p, %1, 0;\n"
      "@p st.release.gpu.global.b32 [%0], 1;\n"
      "}\n" ::"l"(p.sk_flags + slot),
      "r"(uint32_t(threadIdx.x % 128))
      : "memory");
}

// Stream-K: adds to a tile's finishing piece the partials of the CTAs before `cluster`
// that hold the rest of the tile, nearest first, each once its flag is set. Every thread
// waits on the flag itself (acquire), so no barrier is needed after it.
template <class Op, class Cfg>
__device__ __forceinline__ void sk_add_partials(const HopperGemmParams& p,
                                                typename Op::Acc (&acc)[Cfg::kAtomsM][Cfg::kAccum],
                                                int64_t tile_first, int cluster, int clusters,
                                                int half) {
  for (int from = cluster - 1; from >= 0; --from) {
    const int slot = from * 2 + half;
    asm volatile(
        "{\n"
        ".reg .pred ready;\n"
        ".reg .b32 flag;\n"
        "WAIT_%=:\n"
        "ld.acquire.gpu.global.b32 flag, [%0];\n"
        "setp.ne.u32 ready, flag, 0;\n"
        "@!ready bra WAIT_%=;\n"
        "}\n" ::"l"(p.sk_flags + slot)
        : "memory");
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

template <typename OutT>
__device__ __forceinline__ void store_one(const HopperGemmParams& p, int64_t row, int col, float v) {
  static_cast<OutT*>(p.c)[row * p.ldc + col] = from_float<OutT>(v);
}

// Split-K: c = the sum of the splits' partial sums, in split order (deterministic), for
// int8 then float(sum) * a_scale * b_scale as in store_atom; one output element a thread.
template <class Op>
__global__ void __launch_bounds__(256) split_k_reduce_kernel(const __grid_constant__ HopperGemmParams p) {
  using Acc = typename Op::Acc;
  wait_for_prior_grids();  // the partial sums of the GEMM kernel before it
  allow_dependent_grids();
  const int64_t total = int64_t(p.m) * p.n;
  const Acc* partial = static_cast<const Acc*>(p.partial);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    Acc sum = partial[i];
    for (int s = 1; s < p.k_splits; ++s) sum += partial[s * total + i];
    const int64_t row = i / p.n;
    const int col = int(i - row * p.n);
    float v;
    if constexpr (Op::kInt8)
      v = float(sum) * p.a_scale[row * p.a_scale_stride] * p.b_scale[int64_t(col) * p.b_scale_stride];
    else
      v = sum;
    with_c_type<Op>(p.c_kind, [&](auto out) { store_one<typename decltype(out)::type>(p, row, col, v); });
  }
}

template <class Op, class Cfg>
__device__ __forceinline__ void run_consumer(const HopperGemmParams& p, const CUtensorMap* map_c,
                                             uint32_t smem_a, uint32_t smem_b, uint32_t full,
                                             uint32_t empty, float* epilogue_smem,
                                             uint32_t cta_rank, int cluster_id, int num_clusters) {
  const int wg = threadIdx.x / 128 - 1;  // 0 or 1: which half of the tile's rows
  const int lane = threadIdx.x % 32;
  // The warpgroup's share of the epilogue's shared memory: a staged chunk, or its TMA
  // store buffers (1024-byte aligned, as the swizzle needs).
  float* stage_buf = epilogue_smem + wg * 64 * kEpiloguePitch;
  const uint32_t store_buffers =
      smem_u32(epilogue_smem) + uint32_t(wg * kStoreBuffers * kSubtileBytes);
  int sub = 0;  // TMA store: sub-tiles this warpgroup has stored
  typename Op::Acc acc[Cfg::kAtomsM][Cfg::kAccum];
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
  Schedule<Cfg::kStreamK> schedule(p, cluster_id, num_clusters);
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
    // Ping-pong hand-off: a warpgroup starts a unit's k-loop only once the other has waited
    // on the full barriers of all of its previous unit. Without it a warpgroup could wait on
    // a slot two phases ahead, which mbarrier parity cannot tell from a completed phase.
    if (Cfg::kPingPong && turn > 0) named_barrier_sync<256>(kHandoffBarrier + 1 - wg);

    int prev_stage = 0;
    for (int kb = w.kb_begin; kb < w.kb_end; ++kb) {
      mbar_wait(full + 8 * stage, phase);
      const uint32_t a_slot = smem_a + stage * Cfg::kABytes + a_wg_offset;
      const uint32_t b_slot = smem_b + stage * Cfg::kBBytes;
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < kRowBytes / 32; ++k) {
        // k-step k (32 bytes of K): A advances 32 bytes inside its 128-byte rows (the
        // swizzle is applied to the absolute address, so this stays consistent with the
        // TMA writes), and so does a K-major (int8) B; an MN-major B advances 16 k-rows =
        // 2 KiB, its blocks 8 KiB apart (LBO). 8-row groups are 1024 bytes apart (SBO).
        const uint64_t desc_b = Op::kInt8 ? smem_descriptor(b_slot + k * 32, 16, 1024)
                                          : smem_descriptor(b_slot + k * 2048, kBBlockBytes, 1024);
#pragma unroll
        for (int a = 0; a < Cfg::kAtomsM; ++a) {
          const uint64_t desc_a = smem_descriptor(a_slot + a * 64 * kRowBytes + k * 32, 16, 1024);
          Wgmma<Op, Cfg::kBlockN>::mma(acc[a], desc_a, desc_b, kb > w.kb_begin || k > 0);
        }
      }
      wgmma_commit();
      // Keep this k-block's wgmmas in flight; the previous block's are now complete, so
      // its slot can be handed back to the producer.
      wgmma_wait<1>();
#pragma unroll
      for (int a = 0; a < Cfg::kAtomsM; ++a) fence_registers(acc[a]);
      release_slot<Cfg>(empty + 8 * prev_stage, kb > w.kb_begin && lane == 0);
      prev_stage = stage;
      if (++stage == Cfg::kStages) {
        stage = 0;
        phase ^= 1;
      }
    }
    if (Cfg::kPingPong && !schedule.done(p))
      named_barrier_arrive<256>(kHandoffBarrier + wg);  // the other warpgroup's turn
    wgmma_wait<0>();
#pragma unroll
    for (int a = 0; a < Cfg::kAtomsM; ++a) fence_registers(acc[a]);
    release_slot<Cfg>(empty + 8 * prev_stage, lane == 0);

    // Stream-K: the warpgroup's rows of the tile (ping-pong: the whole tile) are slot `half`.
    if constexpr (Cfg::kStreamK) {
      const int half = Cfg::kPingPong ? 0 : wg;
      if (w.piece == Piece::kPartial) {
        sk_store_partial<Op, Cfg>(p, acc, cluster_id * 2 + half, 1 + wg);
        continue;
      }
      if (w.piece == Piece::kFinish)
        sk_add_partials<Op, Cfg>(p, acc, w.tile_first, cluster_id, num_clusters, half);
    }

    const int64_t wg_row = int64_t(tile_m) * Cfg::kBlockM + wg_first_row;
#pragma unroll
    for (int a = 0; a < Cfg::kAtomsM; ++a) {
      // Uniform across the warpgroup. (A cluster along N may have a tile wholly past N.)
      if (wg_row + a * 64 >= p.m || col0 >= p.n) break;
      if (p.k_splits > 1) {
        store_partial<Op, Cfg>(p, acc[a], w.split, wg_row + a * 64, col0);
      } else if (Cfg::kTmaStore && p.c_tma) {
        if constexpr (Cfg::kTmaStore) {
          with_c_type<Op>(p.c_kind, [&](auto out) {
            using OutT = typename decltype(out)::type;
            if constexpr (sizeof(OutT) == 2)
              store_atom_tma<Op, OutT, Cfg>(p, acc[a], map_c, store_buffers, 1 + wg,
                                            int(wg_row) + a * 64, col0, sub);
          });
        }
      } else if (p.c_vec) {
        with_c_type<Op>(p.c_kind, [&](auto out) {
          store_atom_direct<Op, typename decltype(out)::type, Cfg>(p, acc[a], wg_row + a * 64,
                                                                  col0);
        });
      } else {
        store_atom<Op, Cfg>(p, acc[a], stage_buf, 1 + wg, wg_row + a * 64, col0);
      }
    }
  }
  // The TMA stores finish before the CTA (and its shared memory) goes away.
  if (Cfg::kTmaStore && p.c_tma && threadIdx.x % 128 == 0) bulk_wait_all();
}

template <class Op, class Cfg>
__global__ void __launch_bounds__(kThreads, 1)
    hopper_gemm_kernel(const __grid_constant__ CUtensorMap map_a,
                       const __grid_constant__ CUtensorMap map_b,
                       const __grid_constant__ CUtensorMap map_c,
                       const __grid_constant__ HopperGemmParams p) {
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

  const uint32_t cta_rank = Cfg::kClusterSize > 1 ? cluster_cta_rank() : 0;
  const int cluster_id = int(blockIdx.x) / Cfg::kClusterSize;
  const int num_clusters = int(gridDim.x) / Cfg::kClusterSize;

  if (threadIdx.x == 0) {
#pragma unroll 1
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbar_init(smem_u32(full + s), 1);  // the producer's arrive.expect_tx
      // One arrival per consumer warp (of the warpgroups that read a slot) of every CTA
      // that reads data this CTA loads.
      mbar_init(smem_u32(empty + s), Cfg::kClusterSize * Cfg::kReadersPerSlot * 4);
    }
    fence_barrier_init();
  }
  if constexpr (Cfg::kClusterSize > 1)
    cluster_sync();  // the peer's barriers exist before anyone multicasts into them
  else
    __syncthreads();
  // Launched early (programmatic dependent launch): everything above overlapped the end of
  // the previous kernel; a and b may be its outputs, and c its input.
  wait_for_prior_grids();
  allow_dependent_grids();

  // The warpgroup's role, broadcast from lane 0 so that ptxas knows the branch below is
  // warp-uniform (a possibly divergent path before wgmma serializes it; see mbar_wait).
  const int warpgroup = __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0);
  if (warpgroup == 0) {
    registers_decrease<kProducerRegisters>();
    if (threadIdx.x == 0)
      run_producer<Op, Cfg>(&map_a, &map_b, p, smem_u32(smem_a), smem_u32(smem_b), smem_u32(full),
                           smem_u32(empty), cta_rank, cluster_id, num_clusters);
  } else {
    registers_increase<kConsumerRegisters>();
    run_consumer<Op, Cfg>(p, &map_c, smem_u32(smem_a), smem_u32(smem_b), smem_u32(full),
                         smem_u32(empty), epilogue_smem, cta_rank, cluster_id, num_clusters);
  }
  // No CTA may leave while its peer can still arrive on its barriers or write its slots.
  if constexpr (Cfg::kClusterSize > 1) cluster_sync();
}

}  // namespace gks::kernels::hopper
