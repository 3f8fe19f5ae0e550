// SPDX-License-Identifier: Apache-2.0
// FlashAttention forward on Hopper Tensor Cores (sm_90a only), two kernels: the wgmma kernel
// (config "wgmma", below) and the warp-specialized one (config "wgmma.ws", namespace ws at
// the end of the file). Include only from *_sm90a.cu sources.
//
// The wgmma kernel: the algorithm of fwd_sm80.cuh (K/V tiles walked last to first, online
// softmax in fp32 registers, masks only on the tiles that need them), with both matmuls on
// wgmma instead of mma.sync.
//
//  * A CTA owns 128 query rows of one (batch, head): two warpgroups of 64 rows each. Both
//    read the same K/V tiles, double buffered in shared memory: every thread issues cp.async
//    copies of tile n - 1 while tile n is used (one barrier per tile). No warp
//    specialization: the two warpgroups of a CTA run their matmuls and softmax in step, and
//    the Tensor Cores are kept busy by a second CTA on the SM (Tile::kCtasPerSm; the
//    tiles are sized so that two fit in registers and shared memory).
//  * S = Q K^T: wgmma m64nBNk16 with both operands read from shared memory through matrix
//    descriptors, K-major (Q's rows and K's rows hold D contiguous elements).
//  * O += P V: wgmma m64nDk16 with P from registers (the S accumulators rounded to 16 bits:
//    a warp's accumulator fragment of S is exactly its A fragment of P, as for mma.sync)
//    and V from shared memory, MN-major (V's rows hold D contiguous elements: the N dim).
//  * Shared tiles use wgmma's 128-byte swizzle: a tile of R rows x D columns is D / 64
//    blocks of [R rows x 128 bytes]; 16-byte chunk c of row r sits at chunk c ^ (r % 8) of
//    its 128-byte row, and 8-row groups are 1024 bytes apart. cp.async writes that layout
//    directly (no TMA, so any stride works), then a proxy fence makes the writes visible
//    to wgmma, which reads shared memory through the async proxy.
//  * The accumulator layout of a wgmma m64nN tile is per warp that of mma.sync m16n8
//    tiles (warp w of a warpgroup owns rows 16w..16w+15; thread (g, t) = (lane / 4,
//    lane % 4) holds rows g and g + 8, columns 2t and 2t + 1 of each 8-column group), so
//    the row reductions are the same quad shuffles as in the mma.sync kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "gks/kernels/attention/common.cuh"
#include "gks/kernels/ptx/sm80.cuh"
#include "gks/kernels/ptx/sm90.cuh"
#include "gks/kernels/ptx/wgmma.cuh"
#include "gks/kernels/vec.cuh"

namespace gks::kernels::attention {

namespace sm90 {

constexpr int kBlockM = 128;  // two warpgroups of 64 rows
constexpr int kThreads = 256;

// kCtasPerSm: the launch bound's minimum blocks per SM (2 caps a thread at 128 registers).
template <int kHeadDim, int kBlockN, int kCtasPerSm_ = 1>
struct Tile {
  static_assert(kHeadDim % 64 == 0, "D: whole 128-byte swizzle blocks");
  static_assert(kBlockN == 64 || kBlockN == 128, "keys per tile: wgmma N of 64 or 128");
  static constexpr int kD = kHeadDim;
  static constexpr int kBN = kBlockN;
  static constexpr int kCtasPerSm = kCtasPerSm_;
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKVBytes = kBlockN * kHeadDim * 2;
  // Q, two stages of K and V; + 1024: the window is re-aligned to 1024 bytes in the kernel.
  static constexpr int kSmemBytes = kQBytes + 4 * kKVBytes + 1024;
};

// Byte offset of 16-byte chunk `chunk` (of the D / 8 in a row) of row `row` in a swizzled
// tile of kRows rows.
template <int kRows>
__device__ __forceinline__ uint32_t chunk_offset(int row, int chunk) {
  return uint32_t((chunk / 8) * kRows * 128 + row * 128 + (((chunk % 8) ^ (row & 7)) * 16));
}

// Copies rows [row0, row0 + kRows) of a [rows, kD] matrix into a swizzled tile with
// cp.async; rows at or past `rows` are zero-filled. Thread tid owns chunk column
// tid % (kD / 8) and every kRowStep-th row from tid / (kD / 8): a multiple of 8, so its
// swizzle is the same on every row it copies.
template <int kD, int kRows>
__device__ __forceinline__ void copy_tile(uint32_t tile, const void* base_ptr, int64_t row_stride,
                                          int row0, int rows, int tid) {
  constexpr int kChunks = kD / 8;
  constexpr int kRowStep = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && kRowStep % 8 == 0 && kRows % kRowStep == 0,
                "copies: whole rows per step, steps of whole swizzle groups");
  const auto* base = static_cast<const uint16_t*>(base_ptr);
  const int row = tid / kChunks, col = tid % kChunks;
  const uint16_t* src = base + int64_t(row0 + row) * row_stride + col * 8;
  uint32_t dst = tile + chunk_offset<kRows>(row, col);
#pragma unroll
  for (int i = 0; i < kRows / kRowStep; ++i) {
    const bool valid = row0 + row + i * kRowStep < rows;
    ptx::cp_async_16(dst, valid ? static_cast<const void*>(src) : base_ptr, valid);
    src += int64_t(kRowStep) * row_stride;
    dst += kRowStep * 128;
  }
}

// As copy_tile, rows of a paged cache (FwdParams::page_table): row g is row g % page_size of
// page pages[g / page_size], page_stride elements per page; a page index outside
// [0, num_pages) reads as zeros. One page-table lookup per copied row.
template <int kD, int kRows>
__device__ __forceinline__ void copy_tile_paged(uint32_t tile, const void* base_ptr, int64_t row_stride,
                                                int64_t page_stride, const FwdParams& p, int row0, int rows,
                                                int tid) {
  constexpr int kChunks = kD / 8;
  constexpr int kRowStep = kThreads / kChunks;
  const auto* base = static_cast<const uint16_t*>(base_ptr);
  const int row = tid / kChunks, col = tid % kChunks;
  uint32_t dst = tile + chunk_offset<kRows>(row, col);
#pragma unroll 1
  for (int i = 0; i < kRows / kRowStep; ++i) {
    const int g = row0 + row + i * kRowStep;
    bool valid = g < rows;
    const void* src = base_ptr;
    if (valid) {
      const int page = p.page_table[g / p.page_size];
      valid = page >= 0 && page < p.num_pages;
      if (valid) src = base + int64_t(page) * page_stride + int64_t(g % p.page_size) * row_stride + col * 8;
    }
    ptx::cp_async_16(dst, src, valid);
    dst += kRowStep * 128;
  }
}

// A warp's 16 rows of O (the accumulator layout: this thread's rows `row` and row + 8,
// columns 2t, 2t + 1 of each 8-column group), times each row's normalizer, as 16-bit values
// into a swizzled tile of kRows rows.
template <typename T, int kRows, int kDTiles>
__device__ __forceinline__ void stage_o(uint8_t* tile, const float (&acc_o)[kDTiles * 4],
                                        const float (&norm)[2], int row, int t) {
#pragma unroll
  for (int j = 0; j < kDTiles; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      *reinterpret_cast<uint32_t*>(tile + chunk_offset<kRows>(row + 8 * h, j) + t * 4) =
          pack2<T>(acc_o[4 * j + 2 * h] * norm[h], acc_o[4 * j + 2 * h + 1] * norm[h]);
    }
  }
}

// Query block m_block of the CTA's (head, batch): the whole forward of its rows.
template <typename T, class Cfg, Mask kMask, bool kVarlen>
__device__ __forceinline__ void attend_block(const FwdParams& p, int m_block) {
  constexpr int kD = Cfg::kD, kBN = Cfg::kBN;
  constexpr int kBM = kBlockM;
  constexpr int kKSteps = kD / 16;    // k-steps of S = Q K^T
  constexpr int kNTiles = kBN / 8;    // 8-key column groups of S
  constexpr int kDTiles = kD / 8;     // 8-wide column groups of O
  constexpr int kPVSteps = kBN / 16;  // k-steps of O += P V

  extern __shared__ uint8_t smem_raw[];
  // 128-byte swizzle atoms must start on 1024-byte boundaries.
  uint8_t* const smem = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t sQ = ptx::smem_addr(smem);
  const uint32_t sK0 = sQ + Cfg::kQBytes;
  const uint32_t sV0 = sK0 + 2 * Cfg::kKVBytes;

  const BlockHeads<T, kMask> heads(p, m_block);
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int m0 = heads.m_block * kBM;
  const int seqlen_q = p.seqlen_q, seqlen_k = p.seqlen_k;
  const T* q = heads.q(p);
  const T* k = heads.k(p);
  const T* v = heads.v(p);

  const BlockWalk walk = block_walk<kBM, kBN, kMask>(m0, p);
  const int n_blocks = walk.blocks();
  if (n_blocks == 0) {
    write_unseen_rows<kBM, kD / 8, kThreads>(heads.o(p), heads.lse(p), p, m0, tid);
    return;
  }

  // K and V tiles from rows at a stride, or (varlen over a paged cache) through the page
  // table: a uniform branch.
  const auto copy_keys = [&](uint32_t tile, const T* base, int64_t row_stride, int64_t page_stride, int row0) {
    if constexpr (kVarlen) {
      if (p.page_table != nullptr) {
        copy_tile_paged<kD, kBN>(tile, base, row_stride, page_stride, p, row0, seqlen_k, tid);
        return;
      }
    }
    copy_tile<kD, kBN>(tile, base, row_stride, row0, seqlen_k, tid);
  };
  copy_tile<kD, kBM>(sQ, q, p.q_row, m0, seqlen_q, tid);
  ptx::cp_async_commit();
  copy_keys(sK0, k, p.k_row, p.k_page, (walk.n_max - 1) * kBN);
  copy_keys(sV0, v, p.v_row, p.v_page, (walk.n_max - 1) * kBN);
  ptx::cp_async_commit();

  const int g = lane / 4, t = lane % 4;
  const int wg_row0 = wg * 64;                      // this warpgroup's rows in the tile
  const int row_mine = m0 + wg_row0 + warp * 16 + g;  // + 8 * h
  const int2 keys[2] = {key_range<kMask>(row_mine, p), key_range<kMask>(row_mine + 8, p)};

  float acc_o[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) acc_o[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};

  auto pass = [&](const int it, auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    const int n_block = walk.n_max - 1 - it;
    const uint32_t stage_bytes = (it & 1) * Cfg::kKVBytes;
    const uint32_t sK = sK0 + stage_bytes, sV = sV0 + stage_bytes;
    const uint32_t next_stage_bytes = Cfg::kKVBytes - stage_bytes;
    ptx::cp_async_wait<0>();           // this thread's copies of the tile (and Q) have landed ...
    ptx::fence_proxy_async_shared();  // ... and are visible to wgmma's reads ...
    __syncthreads();              // ... for every thread's; every warpgroup is done with it - 1
    if (n_block > walk.n_min) {
      copy_keys(sK0 + next_stage_bytes, k, p.k_row, p.k_page, (n_block - 1) * kBN);
      copy_keys(sV0 + next_stage_bytes, v, p.v_row, p.v_page, (n_block - 1) * kBN);
      ptx::cp_async_commit();
    }

    // S = Q K^T for this warpgroup's 64 rows and the tile's kBN keys.
    float s[kBN / 2];
    ptx::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      const uint32_t col_bytes = (ks % 4) * 32;  // 16 elements of a 64-element block
      const uint64_t desc_q = ptx::smem_descriptor(
          sQ + (ks / 4) * kBM * 128 + wg_row0 * 128 + col_bytes, 16, 1024);
      const uint64_t desc_k = ptx::smem_descriptor(sK + (ks / 4) * kBN * 128 + col_bytes, 16, 1024);
      ptx::wgmma_ss<T, kBN, /*kTransB=*/false>(s, desc_q, desc_k, ks > 0);
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
    ptx::fence_registers(s);

    if (p.softcap != 0.f) apply_softcap<kBN / 2>(s, p);
    if constexpr (kMasked) {
      const int n0 = n_block * kBN;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        mask_row<kNTiles>([&](int j, int e) -> float& { return s[4 * j + 2 * h + e]; }, n0, t,
                          keys[h]);
    }

    // Online softmax, rows g and g + 8 of this warp's 16.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float correction = softmax_step<kMasked, kNTiles>(
          [&](int j, int e) -> float& { return s[4 * j + 2 * h + e]; }, row_max[h], row_sum[h],
          p.scale_log2);
      if (__any_sync(0xffffffffu, correction != 1.f)) {
#pragma unroll
        for (int j = 0; j < kDTiles; ++j) {
          acc_o[4 * j + 2 * h] *= correction;
          acc_o[4 * j + 2 * h + 1] *= correction;
        }
      }
    }

    // O += P V: P's A fragment of k-step kk is the accumulators of key groups 2kk, 2kk + 1.
    uint32_t p_frag[kPVSteps][4];
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk) {
      p_frag[kk][0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
      p_frag[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
      p_frag[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
      p_frag[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
    }
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk) {
      // 16 keys = 16 V rows of 128 bytes; the D columns are blocks of 64, kBN * 128 apart.
      const uint64_t desc_v = ptx::smem_descriptor(sV + kk * 2048, kBN * 128, 1024);
      ptx::wgmma_rs<T, kD>(acc_o, p_frag[kk], desc_v);
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
    ptx::fence_registers(acc_o);
  };

  int it = 0;
  for (; it < walk.masked_top; ++it) pass(it, std::true_type{});
  for (; it < n_blocks - walk.masked_bottom; ++it) pass(it, std::false_type{});
  for (; it < n_blocks; ++it) pass(it, std::true_type{});

  // Epilogue: normalize, write lse, stage O through this warp's own rows of the Q tile
  // (no other warp reads or writes them any more) and store 16-byte row chunks.
  T* o = heads.o(p);
  float* lse = heads.lse(p);
#pragma unroll
  for (int h = 0; h < 2; ++h)  // row_sum becomes the normalizer
    row_sum[h] = finish_row(row_sum[h], row_max[h], row_mine + 8 * h, t, p, lse);
  const int warp_row0 = wg_row0 + warp * 16;
  stage_o<T, kBM, kDTiles>(smem, acc_o, row_sum, warp_row0 + g, t);
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 16 * (kD / 8) / 32; ++i) {
    const int idx = lane + i * 32;
    const int r = warp_row0 + idx / (kD / 8), c = idx % (kD / 8);
    if (m0 + r < seqlen_q) {
      *reinterpret_cast<uint4*>(o + int64_t(m0 + r) * p.o_row + c * 8) =
          *reinterpret_cast<const uint4*>(smem + chunk_offset<kBM>(r, c));
    }
  }
}

}  // namespace sm90

// Grid: (ceil(Sq / 128), Hq, B); block: 256 threads; dynamic shared memory Tile::kSmemBytes.
// kVarlen: as the mma.sync kernel's (fwd_sm80.cuh), query blocks first, + gridDim.x, ... of
// the CTA's sequence.
template <typename T, class Cfg, Mask kMask, bool kVarlen = false>
__global__ void __launch_bounds__(sm90::kThreads, Cfg::kCtasPerSm)
    flash_attention_fwd_wgmma_kernel(const FwdParams params) {
  for_each_query_block<T, kMask, kVarlen, sm90::kBlockM>(
      params, [](const FwdParams& p, int m_block) { sm90::attend_block<T, Cfg, kMask, kVarlen>(p, m_block); });
}

}  // namespace gks::kernels::attention

// ---------------------------------------------------------------------------------------
// The warp-specialized Hopper kernel (config "wgmma.ws"): FlashAttention-3's organisation of
// the same algorithm, written for gks.
//
//  * Persistent: one CTA an SM walks tiles of 128 query rows of one (batch, head); a
//    tile's index runs over the query blocks of a head (causal: longest first) and then
//    over heads, so the CTAs running at once share few heads' K/V in L2.
//  * Warpgroup 0 is the producer: one thread issues TMA loads of Q (once a tile) and of
//    K and V into kStages-deep rings, K and V with barriers of their own, in the order the
//    consumers use them (K_0, K_1, V_0, K_2, V_1, ...); it gives its registers away
//    (setmaxnreg.dec) to warpgroups 1 and 2, the consumers, 64 query rows each.
//  * Inside a consumer warpgroup the softmax of tile i overlaps the P V wgmma of tile i - 1:
//    S_i = Q K_i^T and O += P_{i-1} V_{i-1} are issued together, the softmax of S_i runs
//    once S_i is done, while the P V product is still in flight.
//  * Between the consumer warpgroups, ping-pong: a warpgroup issues its wgmmas only in its
//    turn (named barriers kSchedule + wg), so one's softmax runs while the other's matmuls
//    keep the Tensor Cores busy.
//  * The epilogue stages O in shared memory (its own buffer, so the next tile's Q can
//    land meanwhile) and writes it with TMA stores; lse goes straight from registers.
// Q, K, V and O are addressed through 4-D tensor maps over [B, H, S, D] (any strides TMA
// takes): a box never crosses into another head's rows, and rows past Sq or Sk read as
// zeros and are not written.
namespace gks::kernels::attention::ws {

constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
constexpr int kBlockM = 128;   // 64 query rows a consumer warpgroup
// setmaxnreg moves registers only within the CTA's launch allocation (168 a thread at 384
// threads): 128 x 24 + 256 x 240 = 384 x 168. Asking for more blocks the consumers forever.
constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;
static_assert(128 * kProducerRegisters + 256 * kConsumerRegisters <= kThreads * 168,
              "register reallocation within the launch's 168 a thread");

enum NamedBarrier : int {
  kSchedule = 1,  // + consumer warpgroup (0, 1): its turn to issue wgmmas
  kEpilogue = 3,  // + consumer warpgroup: its rows of the O buffer are free / written
};

// kOAliasQ: O is staged in Q's buffer (where shared memory has no room for its own); Q is
// then handed back only once the epilogue's TMA stores have read it. kHeadDimV: v's and o's
// head dim (q's and k's unless given: DeepSeek's 192 / 128).
template <int kHeadDim, int kBlockN, int kStages_, bool kOAliasQ_ = false,
          int kHeadDimV = kHeadDim>
struct Tile {
  static_assert(kHeadDim % 32 == 0 && kHeadDim >= 64 && kHeadDimV % 32 == 0 && kHeadDimV >= 64,
                "head dims: 64 or more, whole k-steps and wgmma N");
  static_assert(kBlockN == 64 || kBlockN == 128, "keys per tile: wgmma N of 64 or 128");
  static_assert(kHeadDimV <= kHeadDim || !kOAliasQ_, "O staged in Q's buffer fits it");
  static constexpr int kD = kHeadDim;
  static constexpr int kDV = kHeadDimV;
  static constexpr int kBN = kBlockN;
  static constexpr int kStages = kStages_;
  static constexpr bool kOAliasQ = kOAliasQ_;
  // Rows are kept in whole 128-byte swizzle blocks of 64 columns; the columns past D (D = 96)
  // are TMA's zero fill, never read by a wgmma and never stored.
  static constexpr int kColBlocks = (kHeadDim + 63) / 64;    // of Q and K rows
  static constexpr int kColBlocksV = (kHeadDimV + 63) / 64;  // of V and O rows
  static constexpr int kQBytes = kBlockM * kColBlocks * 128;
  static constexpr int kKBytes = kBlockN * kColBlocks * 128;
  static constexpr int kVBytes = kBlockN * kColBlocksV * 128;
  static constexpr int kOBytes = kOAliasQ ? 0 : kBlockM * kColBlocksV * 128;
  // Q, O, the K and V rings, their barriers; + 1024: the window is re-aligned in the kernel.
  static constexpr int kBarrierBytes = (2 + 4 * kStages) * 8;
  static constexpr int kSmemBytes =
      kQBytes + kOBytes + kStages * (kKBytes + kVBytes) + kBarrierBytes + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

// The persistent schedule: `tiles` tiles, m_blocks query blocks of each of `heads` (Hq)
// heads of each batch; a CTA takes tiles blockIdx.x, + gridDim.x, ...
struct Schedule {
  int tiles, m_blocks, heads;
};
struct TileCoords {
  int m_block, head, batch;
};
template <Mask kMask>
__device__ __forceinline__ TileCoords tile_coords(int index, const Schedule& sched) {
  const int bh = index / sched.m_blocks, m = index % sched.m_blocks;
  return {kMask == Mask::kRight ? sched.m_blocks - 1 - m : m, bh % sched.heads, bh / sched.heads};
}

// A ring position: slot and the parity of its current lap.
struct RingPos {
  int slot = 0;
  uint32_t phase = 0;
  template <int kStages>
  __device__ __forceinline__ void advance() {
    if (++slot == kStages) {
      slot = 0;
      phase ^= 1u;
    }
  }
};

struct Barriers {
  uint32_t q_full, q_empty, k_full, k_empty, v_full, v_empty;  // + 8 * slot for the rings
};

template <typename T, class Cfg, Mask kMask>
__device__ __forceinline__ void produce(const CUtensorMap* map_q, const CUtensorMap* map_k,
                                        const CUtensorMap* map_v, const FwdParams& p,
                                        uint32_t sQ, uint32_t sK, uint32_t sV, const Barriers& bar,
                                        const Schedule& sched) {
  constexpr int kBN = Cfg::kBN, kColBlocks = Cfg::kColBlocks;
  using KRing = std::integral_constant<int, Cfg::kColBlocks>;
  using VRing = std::integral_constant<int, Cfg::kColBlocksV>;
  ptx::prefetch_tensor_map(map_q);
  ptx::prefetch_tensor_map(map_k);
  ptx::prefetch_tensor_map(map_v);
  RingPos kpos, vpos;
  uint32_t q_phase = 0;
  // One K or V tile (kCols column blocks) into its ring's next slot.
  auto load_kv = [&](auto cols, const CUtensorMap* map, uint32_t ring, uint32_t full,
                     uint32_t empty, RingPos& pos, int n_block, int kv_head, int batch) {
    constexpr int kCols = decltype(cols)::value, kSlotBytes = kBN * kCols * 128;
    ptx::mbar_wait(empty + 8 * pos.slot, pos.phase ^ 1u);
    ptx::mbar_arrive_expect_tx(full + 8 * pos.slot, kSlotBytes);
#pragma unroll
    for (int cb = 0; cb < kCols; ++cb)
      ptx::tma_load_4d(ring + pos.slot * kSlotBytes + cb * kBN * 128, map, full + 8 * pos.slot,
                       cb * 64, n_block * kBN, kv_head, batch);
    pos.template advance<Cfg::kStages>();
  };
  for (int index = blockIdx.x; index < sched.tiles; index += gridDim.x) {
    const TileCoords c = tile_coords<kMask>(index, sched);
    const int m0 = c.m_block * kBlockM;
    const BlockWalk walk = block_walk<kBlockM, kBN, kMask>(m0, p);
    const int n = walk.blocks();
    if (n == 0) continue;
    const int kv_head = c.head / p.group;
    // Q, once the consumers are done with the last tile's.
    // A half of the rows wholly past Sq is not loaded: its rows are never stored, and rows
    // do not mix, so what its stale shared memory holds reaches no output.
    const int halves = m0 + 64 < p.seqlen_q ? 2 : 1;
    ptx::mbar_wait(bar.q_empty, q_phase ^ 1u);
    ptx::mbar_arrive_expect_tx(bar.q_full, halves * (Cfg::kQBytes / 2));
#pragma unroll
    for (int cb = 0; cb < kColBlocks; ++cb)
#pragma unroll
      for (int half = 0; half < 2; ++half)
        if (half < halves)
          ptx::tma_load_4d(sQ + cb * kBlockM * 128 + half * 64 * 128, map_q, bar.q_full, cb * 64,
                           m0 + half * 64, c.head, c.batch);
    q_phase ^= 1u;
    load_kv(KRing{}, map_k, sK, bar.k_full, bar.k_empty, kpos, walk.n_max - 1, kv_head, c.batch);
    for (int i = 1; i < n; ++i) {
      load_kv(KRing{}, map_k, sK, bar.k_full, bar.k_empty, kpos, walk.n_max - 1 - i, kv_head,
              c.batch);
      load_kv(VRing{}, map_v, sV, bar.v_full, bar.v_empty, vpos, walk.n_max - i, kv_head, c.batch);
    }
    load_kv(VRing{}, map_v, sV, bar.v_full, bar.v_empty, vpos, walk.n_min, kv_head, c.batch);
  }
}

// Keeps registers that an in-flight wgmma reads live (and unchanged) up to this point.
template <int kN>
__device__ __forceinline__ void keep_registers(uint32_t (&r)[kN][4]) {
#pragma unroll
  for (int i = 0; i < kN; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

template <typename T, class Cfg, Mask kMask>
__device__ __forceinline__ void consume(const CUtensorMap* map_o, const FwdParams& p,
                                        uint8_t* smem_o, uint32_t sQ, uint32_t sK, uint32_t sV,
                                        const Barriers& bar, const Schedule& sched) {
  constexpr int kD = Cfg::kD, kDV = Cfg::kDV, kBN = Cfg::kBN, kColBlocksV = Cfg::kColBlocksV;
  constexpr int kKSteps = kD / 16;    // k-steps of S = Q K^T
  constexpr int kNTiles = kBN / 8;    // 8-key column groups of S
  constexpr int kDTiles = kDV / 8;    // 8-wide column groups of O
  constexpr int kPVSteps = kBN / 16;  // k-steps of O += P V
  const int wg = int(threadIdx.x) / 128 - 1;
  const int wg_tid = int(threadIdx.x) % 128, warp = wg_tid / 32, lane = wg_tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int wg_row0 = wg * 64;
  const bool leader = wg_tid == 0;
  const uint32_t sO = ptx::smem_addr(smem_o);
  RingPos kpos, vpos;
  uint32_t q_phase = 0;

  // Ping-pong: warpgroup 0 issues first.
  if (wg == 1) ptx::named_barrier_arrive<256>(kSchedule + 0);
  auto my_turn = [&] { ptx::named_barrier_sync<256>(kSchedule + wg); };
  auto their_turn = [&] { ptx::named_barrier_arrive<256>(kSchedule + 1 - wg); };
  auto release = [&](uint32_t empty, const RingPos& pos) {
    ptx::mbar_arrive_if(empty + 8 * pos.slot, lane == 0);
  };

  for (int index = blockIdx.x; index < sched.tiles; index += gridDim.x) {
    const TileCoords c = tile_coords<kMask>(index, sched);
    const int m0 = c.m_block * kBlockM;
    const BlockWalk walk = block_walk<kBlockM, kBN, kMask>(m0, p);
    const int n = walk.blocks();
    T* o = static_cast<T*>(p.o) + c.batch * p.o_batch + c.head * p.o_head;
    float* lse = p.lse + c.batch * p.lse_batch + c.head * p.lse_head;
    if (n == 0) {
      write_unseen_rows<64, kDV / 8, 128>(o, lse, p, m0 + wg_row0, wg_tid);
      continue;
    }
    const int row_mine = m0 + wg_row0 + warp * 16 + g;  // + 8 * h
    const int2 keys[2] = {key_range<kMask>(row_mine, p), key_range<kMask>(row_mine + 8, p)};

    float acc_o[kDV / 2];
#pragma unroll
    for (int i = 0; i < kDV / 2; ++i) acc_o[i] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
    float s[kBN / 2];
    uint32_t p_frag[kPVSteps][4];

    auto issue_s = [&] {  // S = Q K^T of this warpgroup's 64 rows and K slot kpos
      const uint32_t k_slot = sK + kpos.slot * Cfg::kKBytes;
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
        const uint32_t col_bytes = (ks % 4) * 32;  // 16 elements of a 64-element block
        const uint64_t desc_q = ptx::smem_descriptor(
            sQ + (ks / 4) * kBlockM * 128 + wg_row0 * 128 + col_bytes, 16, 1024);
        const uint64_t desc_k =
            ptx::smem_descriptor(k_slot + (ks / 4) * kBN * 128 + col_bytes, 16, 1024);
        ptx::wgmma_ss<T, kBN, /*kTransB=*/false>(s, desc_q, desc_k, ks > 0);
      }
    };
    auto issue_pv = [&] {  // O += P V with V slot vpos
      const uint32_t v_slot = sV + vpos.slot * Cfg::kVBytes;
#pragma unroll
      for (int kk = 0; kk < kPVSteps; ++kk) {
        // 16 keys = 16 V rows of 128 bytes; the D columns are blocks of 64, kBN * 128 apart.
        const uint64_t desc_v = ptx::smem_descriptor(v_slot + kk * 2048, kBN * 128, 1024);
        ptx::wgmma_rs<T, kDV>(acc_o, p_frag[kk], desc_v);
      }
    };
    // The softmax of S (tile n_block): cap, masks, the online step; returns each row's
    // rescale factor for O.
    auto softmax = [&](int n_block, auto masked, float (&correction)[2]) {
      constexpr bool kMasked = decltype(masked)::value;
      if (p.softcap != 0.f) apply_softcap<kBN / 2>(s, p);
      if constexpr (kMasked) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
          mask_row<kNTiles>([&](int j, int e) -> float& { return s[4 * j + 2 * h + e]; },
                            n_block * kBN, t, keys[h]);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h)
        correction[h] = softmax_step<kMasked, kNTiles>(
            [&](int j, int e) -> float& { return s[4 * j + 2 * h + e]; }, row_max[h], row_sum[h],
            p.scale_log2);
    };
    auto softmax_pass = [&](int i, float (&correction)[2]) {
      const int n_block = walk.n_max - 1 - i;
      if (i < walk.masked_top || i >= n - walk.masked_bottom)
        softmax(n_block, std::true_type{}, correction);
      else
        softmax(n_block, std::false_type{}, correction);
    };
    auto to_p = [&] {  // P's A fragment of k-step kk: S's key groups 2kk and 2kk + 1
#pragma unroll
      for (int kk = 0; kk < kPVSteps; ++kk) {
        p_frag[kk][0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
        p_frag[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
        p_frag[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
        p_frag[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
      }
    };

    ptx::mbar_wait(bar.q_full, q_phase);
    q_phase ^= 1u;
    // Tile 0: S alone.
    my_turn();
    ptx::mbar_wait(bar.k_full + 8 * kpos.slot, kpos.phase);
    ptx::wgmma_fence();
    issue_s();
    ptx::wgmma_commit();
    their_turn();
    ptx::wgmma_wait<0>();
    ptx::fence_registers(s);
    release(bar.k_empty, kpos);
    kpos.advance<Cfg::kStages>();
    // Q is handed back after its last read (or, staging O, after the epilogue).
    if (!Cfg::kOAliasQ && n == 1) ptx::mbar_arrive_if(bar.q_empty, lane == 0);
    {
      float correction[2];
      softmax_pass(0, correction);  // O is still 0: nothing to rescale
    }
    to_p();

    // Tiles 1 .. n - 1: S_i with P_{i-1} V_{i-1}, the softmax of S_i under the latter.
    for (int i = 1; i < n; ++i) {
      my_turn();
      ptx::mbar_wait(bar.k_full + 8 * kpos.slot, kpos.phase);
      ptx::wgmma_fence();
      issue_s();
      ptx::wgmma_commit();
      ptx::mbar_wait(bar.v_full + 8 * vpos.slot, vpos.phase);
      issue_pv();
      ptx::wgmma_commit();
      their_turn();
      ptx::wgmma_wait<1>();  // S_i is done; P V may still run
      ptx::fence_registers(s);
      release(bar.k_empty, kpos);
      kpos.advance<Cfg::kStages>();
      if (!Cfg::kOAliasQ && i == n - 1) ptx::mbar_arrive_if(bar.q_empty, lane == 0);
      float correction[2];
      softmax_pass(i, correction);
      ptx::wgmma_wait<0>();
      keep_registers(p_frag);  // read by the P V wgmma up to its completion
      ptx::fence_registers(acc_o);
      release(bar.v_empty, vpos);
      vpos.advance<Cfg::kStages>();
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (__any_sync(0xffffffffu, correction[h] != 1.f)) {
#pragma unroll
          for (int j = 0; j < kDTiles; ++j) {
            acc_o[4 * j + 2 * h] *= correction[h];
            acc_o[4 * j + 2 * h + 1] *= correction[h];
          }
        }
      }
      to_p();
    }
    // The last P V.
    ptx::mbar_wait(bar.v_full + 8 * vpos.slot, vpos.phase);
    ptx::wgmma_fence();
    issue_pv();
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
    keep_registers(p_frag);
    ptx::fence_registers(acc_o);
    release(bar.v_empty, vpos);
    vpos.advance<Cfg::kStages>();

    // Epilogue: lse from registers; O normalized into this warpgroup's rows of the O
    // buffer (once its last TMA store has read them) and stored by TMA.
#pragma unroll
    for (int h = 0; h < 2; ++h)
      row_sum[h] = finish_row(row_sum[h], row_max[h], row_mine + 8 * h, t, p, lse);
    ptx::bulk_wait_read_if<0>(leader);
    ptx::named_barrier_sync<128>(kEpilogue + wg);
    sm90::stage_o<T, kBlockM, kDTiles>(smem_o, acc_o, row_sum, wg_row0 + warp * 16 + g, t);
    ptx::fence_proxy_async_shared();  // the writes, visible to the TMA engine
    ptx::named_barrier_sync<128>(kEpilogue + wg);
    const bool store = leader && m0 + wg_row0 < p.seqlen_q;
#pragma unroll
    for (int cb = 0; cb < kColBlocksV; ++cb)
      ptx::tma_store_4d_if(map_o, sO + cb * kBlockM * 128 + wg_row0 * 128, cb * 64, m0 + wg_row0,
                           c.head, c.batch, store);
    if constexpr (Cfg::kOAliasQ) {  // the next Q may land once the stores have read O
      ptx::bulk_wait_read_if<0>(leader);
      ptx::named_barrier_sync<128>(kEpilogue + wg);
      ptx::mbar_arrive_if(bar.q_empty, lane == 0);
    }
  }
  // The other warpgroup's last turn signal is still pending on warpgroup 0's barrier.
  if (wg == 0) my_turn();
  if (leader) ptx::bulk_wait_all();  // the O buffer is read (and written out) before exit
}

// Grid: min(tiles, CTAs that fit at once); block: 384 threads; dynamic shared memory
// Cfg::kSmemBytes.
template <typename T, class Cfg, Mask kMask>
__global__ void __launch_bounds__(kThreads, 1)
    flash_attention_fwd_ws_kernel(const __grid_constant__ CUtensorMap map_q,
                                  const __grid_constant__ CUtensorMap map_k,
                                  const __grid_constant__ CUtensorMap map_v,
                                  const __grid_constant__ CUtensorMap map_o,
                                  const __grid_constant__ FwdParams p, const Schedule sched) {
  extern __shared__ uint8_t smem_raw[];
  // 128-byte swizzle atoms must start on 1024-byte boundaries.
  uint8_t* const smem = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t sQ = ptx::smem_addr(smem);
  uint8_t* const smem_o = smem + (Cfg::kOAliasQ ? 0 : Cfg::kQBytes);
  const uint32_t sK = sQ + Cfg::kQBytes + Cfg::kOBytes;
  const uint32_t sV = sK + Cfg::kStages * Cfg::kKBytes;
  const uint32_t bars = sV + Cfg::kStages * Cfg::kVBytes;
  const Barriers bar{bars, bars + 8, bars + 16, bars + 16 + 8 * Cfg::kStages,
                     bars + 16 + 16 * Cfg::kStages, bars + 16 + 24 * Cfg::kStages};
  if (threadIdx.x == 0) {
    ptx::mbar_init(bar.q_full, 1);
    ptx::mbar_init(bar.q_empty, 8);  // every consumer warp
#pragma unroll 1
    for (int s = 0; s < Cfg::kStages; ++s) {
      ptx::mbar_init(bar.k_full + 8 * s, 1);
      ptx::mbar_init(bar.k_empty + 8 * s, 8);
      ptx::mbar_init(bar.v_full + 8 * s, 1);
      ptx::mbar_init(bar.v_empty + 8 * s, 8);
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();
  // The role, broadcast from lane 0 so that ptxas sees a warp-uniform branch.
  const int warpgroup = __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0);
  if (warpgroup == 0) {
    ptx::registers_decrease<kProducerRegisters>();
    if (threadIdx.x == 0)
      produce<T, Cfg, kMask>(&map_q, &map_k, &map_v, p, sQ, sK, sV, bar, sched);
  } else {
    ptx::registers_increase<kConsumerRegisters>();
    consume<T, Cfg, kMask>(&map_o, p, smem_o, sQ, sK, sV, bar, sched);
  }
}

}  // namespace gks::kernels::attention::ws
