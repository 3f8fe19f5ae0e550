// SPDX-License-Identifier: Apache-2.0
// FlashAttention-2 forward on Ampere/Hopper Tensor Cores (mma.sync m16n8k16, fp32 accumulate).
//
// One CTA owns kBlockM query rows of one (batch, head); each warp owns 16 or 32 of them. The
// CTA walks the K/V tiles of that head from the last to the first, keeping the online softmax
// (running max and sum per row) and the output accumulator in fp32 registers:
//   S = Q K^T                  mma.sync, A = Q fragments, B = K rows via ldmatrix
//   P = exp2(S * scale*log2e - running max)      rows reduced by quad shuffles
//   O = O * correction + P V   mma.sync, A = P straight from the S accumulators (no shared
//                              memory round trip), B = V via ldmatrix.trans
// K/V tiles are double buffered: the cp.async copies of tile n+1 run during the math on
// tile n (one barrier per tile). Tiles that need masks (the last one past Sk, those that
// cross a window bound or the causal diagonal) run in separate loops at the two ends of the
// walk; the others carry no mask code. O is rescaled only when some row's running max
// moved. Shared tiles use an XOR swizzle of their 16-byte chunks, so the 8 rows an
// ldmatrix phase reads (and the cp.async writes) fall in 8 different bank groups.
// Tiles past Sq/Sk are zero-filled (cp.async src-size 0) and masked to -inf; CTAs skip the
// K tiles wholly outside their rows' windows (causal: above the diagonal).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "gks/kernels/attention/common.cuh"
#include "gks/kernels/ptx/sm80.cuh"
#include "gks/kernels/vec.cuh"

namespace gks::kernels::attention {

// The tile shape of one kernel; the host plan reads the same numbers. Each warp owns
// kWarpRows = kBlockM / kWarps query rows, in 16-row m-tiles: every K/V fragment a warp
// loads from shared memory feeds kMTiles mma's, so more rows per warp means less shared
// memory traffic per flop (and more registers per thread). kRescaleVotePerTile: O's
// rescale (when a row's max moved) is decided by one warp vote a tile after all rows, not
// one vote and branch a row pair; which is faster depends on the tile (see FlashFwdConfig).
// kHeadDimV: v's (and o's) head dim, q's and k's unless given (DeepSeek's 192 / 128).
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, bool kQInRegisters_,
          bool kRescaleVotePerTile_ = false, int kHeadDimV_ = kHeadDim_>
struct FlashFwdTile {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDimV_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kWarpRows = kBlockM / kWarps;
  static constexpr int kMTiles = kWarpRows / 16;
  static constexpr bool kQInRegisters = kQInRegisters_;
  static constexpr bool kRescaleVotePerTile = kRescaleVotePerTile_;
  static constexpr int kChunks = kHeadDim / 8;    // 16-byte chunks per row of Q and K
  static constexpr int kChunksV = kHeadDimV / 8;  // ... of V and O
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKBytes = kBlockN * kHeadDim * 2;
  static constexpr int kVBytes = kBlockN * kHeadDimV * 2;
  static constexpr int kSmemBytes = kQBytes + 2 * (kKBytes + kVBytes);  // Q + 2 stages x (K, V)
  static_assert(kHeadDim % 16 == 0 && kHeadDimV % 16 == 0, "head dims: k-steps of 16");
  static_assert(kHeadDimV <= kHeadDim, "O is staged in Q's tile");
  static_assert(kBlockM % (16 * kWarps) == 0 && kMTiles >= 1, "whole 16-row m-tiles per warp");
  static_assert(kBlockN % 16 == 0, "keys: pairs of 8-wide n-tiles");
  static_assert(kChunks % 4 == 0 && kChunksV % 4 == 0,
                "the swizzle needs a multiple of 4 chunks per row");
  static_assert((kBlockM * kChunks) % kThreads == 0 && (kBlockN * kChunks) % kThreads == 0 &&
                    (kBlockN * kChunksV) % kThreads == 0,
                "tile copies: whole 16-byte chunks per thread");
};

// Tile per head dim and mask: 4 warps of 32 query rows (D = 256: of 16 rows). A 32-row
// warp feeds each K/V fragment to two m-tiles, half the shared-memory traffic per flop of a
// 16-row warp (4 or 8 of them). O takes kMTiles * D / 2 fp32 registers per thread and S
// kMTiles * kBlockN / 2: at D = 128 the 64-key tile runs at the 255-register limit with a
// few spilled loop invariants (ptxas -v: 24 bytes) and is still faster than 32-key tiles,
// as at D = 96. D = 64 takes 128-key tiles with Q in shared memory: non-causal with one
// rescale vote a tile, causal with a vote a row pair. D = 32 keeps Q's fragments in
// registers unless causal. D = 192 takes D = 256's shape (64 rows of 16 a warp, 32-key tiles),
// with v's head dim 192 or 128. (docs/perf/attention.md has what these were measured against.)
template <int kHeadDim, bool kCausal, int kHeadDimV = kHeadDim> struct FlashFwdConfig;
template <bool kCausal> struct FlashFwdConfig<32, kCausal> {
  using Tile = FlashFwdTile<32, 128, 64, 4, !kCausal>;
};
template <bool kCausal> struct FlashFwdConfig<64, kCausal> {
  using Tile = FlashFwdTile<64, 128, 128, 4, false, !kCausal>;
};
template <bool kCausal> struct FlashFwdConfig<96, kCausal> {
  using Tile = FlashFwdTile<96, 128, 64, 4, false>;
};
template <bool kCausal> struct FlashFwdConfig<128, kCausal> {
  using Tile = FlashFwdTile<128, 128, 64, 4, false>;
};
template <bool kCausal, int kHeadDimV> struct FlashFwdConfig<192, kCausal, kHeadDimV> {
  using Tile = FlashFwdTile<192, 64, 32, 4, false, false, kHeadDimV>;
};
template <bool kCausal> struct FlashFwdConfig<256, kCausal> {
  using Tile = FlashFwdTile<256, 64, 32, 4, false>;
};

namespace sm80 {

// ---- swizzled shared tiles: rows of kChunks 16-byte chunks ----

// Physical chunk of logical chunk `chunk` in row `row`. With 8+ chunks per row (128-byte
// rows or wider) XOR the low 3 bits with row % 8; with 4 or 12 chunks (64/192-byte rows,
// two rows per 128 bytes) XOR the low 2 bits with (row / 2) % 4. Either way the 8 rows of
// an ldmatrix phase hit 8 different 16-byte bank groups.
template <int kChunks>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  if constexpr (kChunks % 8 == 0) {
    return chunk ^ (row & 7);
  } else {
    return chunk ^ ((row >> 1) & 3);
  }
}
template <int kChunks>
__device__ __forceinline__ uint32_t tile_offset(int row, int chunk) {
  return uint32_t(row * kChunks + swizzle<kChunks>(row, chunk)) * 16u;
}

// Shared addresses of the 16-byte chunks one lane hands to ldmatrix: (lane_row + row_const,
// chunk_const + lane_chunk) for a lane_chunk in {0, 1}, any row_const that is a multiple
// of 8 and any even chunk_const. The swizzle depends only on the row mod 8 and the low
// chunk bits, so a lane keeps one offset (its row and the chunk bits its row XORs in), and
// the constants enter as an XOR and an add of immediates applied to tile + offset: the
// swizzled bits of the tile base (128-byte aligned) and of every row offset are zero, so
// the XOR lands on the chunk bits alone. Applied to the address rather than to the offset,
// nothing per constant is loop-invariant, and the compiler keeps one register a lane
// instead of hoisting one address per k-step (which spilled at 64-key tiles).
template <int kChunks>
struct LaneChunks {
  static constexpr int kLowMask = kChunks % 8 == 0 ? 7 : 3;  // chunk bits the swizzle touches
  uint32_t offset;  // lane_row * row bytes + (lane_chunk ^ swizzle bits of lane_row) * 16

  __device__ __forceinline__ LaneChunks(int lane_row, int lane_chunk)
      : offset(uint32_t(lane_row * kChunks) * 16u +
               uint32_t(lane_chunk ^ swizzle<kChunks>(lane_row, 0)) * 16u) {}
  // `tile` is the shared address of a 128-byte-aligned swizzled tile.
  __device__ __forceinline__ uint32_t at(uint32_t tile, int row_const, int chunk_const) const {
    return ((tile + offset) ^ uint32_t((chunk_const & kLowMask) * 16)) +
           uint32_t(row_const * kChunks + (chunk_const & ~kLowMask)) * 16u;
  }
};

// Copies rows [row0, row0 + kRows) of a [rows, kChunks * 8] matrix into a swizzled tile
// with cp.async; rows at or past `rows` are zero-filled and never read (`rows` >= 1).
// Where a thread count is a multiple of the chunks per row, each thread owns one chunk
// column and every kRowStep-th row: its shared offsets are two registers (the swizzle has
// period 2 in the row step) and its global addresses one base plus multiples of a stride.
template <int kChunks, int kThreads>
struct TileCopy {
  static constexpr bool kColumnPerThread = kThreads % kChunks == 0;
  static constexpr int kRowStep = kColumnPerThread ? kThreads / kChunks : 1;
  static_assert(!kColumnPerThread || kRowStep % 4 == 0, "row step: the swizzle's period");
  int row;               // first row this thread copies
  int col;               // its chunk column
  uint32_t smem_even;    // tile offset of (row + i * kRowStep, col) for even i ...
  uint32_t smem_odd;     // ... and odd i, less i * kRowStep rows

  __device__ __forceinline__ explicit TileCopy(int tid)
      : row(tid / kChunks),
        col(tid % kChunks),
        smem_even(tile_offset<kChunks>(tid / kChunks, tid % kChunks)),
        smem_odd(tile_offset<kChunks>(tid / kChunks + kRowStep, tid % kChunks) -
                 uint32_t(kRowStep * kChunks * 16)) {}

  template <int kRows, typename T>
  __device__ __forceinline__ void operator()(uint32_t tile, const T* base, int64_t row_stride,
                                             int row0, int rows, int tid) const {
    static_assert((kRows * kChunks) % kThreads == 0, "whole chunks per thread");
    constexpr int kPerThread = kRows * kChunks / kThreads;
    if constexpr (kColumnPerThread) {
      // A rolled loop: unrolled, the compiler keeps every copy's address in a register
      // for the whole K loop, which the mma accumulators need.
      const T* src = base + int64_t(row0 + row) * row_stride + col * 8;
      const int64_t step = int64_t(kRowStep) * row_stride;
      uint32_t dst = tile + smem_even;
      const uint32_t to_odd = smem_odd - smem_even + uint32_t(kRowStep * kChunks * 16);
      const uint32_t to_even = smem_even - smem_odd + uint32_t(kRowStep * kChunks * 16);
#pragma unroll 1
      for (int i = 0; i < kPerThread; ++i) {
        const bool valid = row0 + row + i * kRowStep < rows;
        ptx::cp_async_16(dst, valid ? src : base, valid);
        src += step;
        dst += i % 2 == 0 ? to_odd : to_even;
      }
    } else {  // 12 chunks per row (D = 96): a chunk index per copy
#pragma unroll 1
      for (int i = 0; i < kPerThread; ++i) {
        const int idx = tid + i * kThreads;
        const int r = idx / kChunks, c = idx % kChunks;
        const bool valid = row0 + r < rows;
        const T* src = base + int64_t(valid ? row0 + r : 0) * row_stride + c * 8;
        ptx::cp_async_16(tile + tile_offset<kChunks>(r, c), src, valid);
      }
    }
  }

  // As operator(), rows of a paged cache (FwdParams::page_table): row g is row g % page_size
  // of page pages[g / page_size], page_stride elements per page; a page index outside
  // [0, num_pages) reads as zeros. A page lookup per row: the general path, for any page
  // size.
  template <int kRows, typename T>
  __device__ __forceinline__ void paged(uint32_t tile, const T* base, int64_t row_stride, int64_t page_stride,
                                        const FwdParams& p, int row0, int rows, int tid) const {
    static_assert((kRows * kChunks) % kThreads == 0, "whole chunks per thread");
    constexpr int kPerThread = kRows * kChunks / kThreads;
#pragma unroll 1
    for (int i = 0; i < kPerThread; ++i) {
      int r, c;
      if constexpr (kColumnPerThread) {
        r = row + i * kRowStep, c = col;
      } else {
        const int idx = tid + i * kThreads;
        r = idx / kChunks, c = idx % kChunks;
      }
      const int g = row0 + r;
      bool valid = g < rows;
      const T* src = base;
      if (valid) {
        const int page = p.page_table[g / p.page_size];
        valid = page >= 0 && page < p.num_pages;
        if (valid) src = base + int64_t(page) * page_stride + int64_t(g % p.page_size) * row_stride + c * 8;
      }
      ptx::cp_async_16(tile + tile_offset<kChunks>(r, c), src, valid);
    }
  }
};

// a if kFirst, else b (references to the caller's objects).
template <bool kFirst, class A, class B>
__device__ __forceinline__ const auto& first_if(const A& a, const B& b) {
  if constexpr (kFirst)
    return a;
  else
    return b;
}

// Query block m_block of the CTA's (head, batch): the whole forward of its rows.
template <typename T, typename Tile, Mask kMask, bool kVarlen>
__device__ __forceinline__ void attend_block(const FwdParams& p, int m_block) {
  constexpr int kD = Tile::kHeadDim, kBM = Tile::kBlockM, kBN = Tile::kBlockN;
  constexpr int kThreads = Tile::kThreads, kChunks = Tile::kChunks, kMT = Tile::kMTiles;
  constexpr int kChunksV = Tile::kChunksV;
  constexpr int kKSteps = kD / 16;    // k-steps of S = Q K^T
  constexpr int kNTiles = kBN / 8;    // 8-key column tiles of S
  constexpr int kDTiles = Tile::kHeadDimV / 8;  // 8-wide column tiles of O
  constexpr int kPVSteps = kBN / 16;  // k-steps of O += P V

  extern __shared__ __align__(128) unsigned char smem[];
  // Layout: Q tile, K stage 0, K stage 1, V stage 0, V stage 1.
  const uint32_t sQ = ptx::smem_addr(smem);
  const uint32_t sK0 = sQ + Tile::kQBytes;
  const uint32_t sV0 = sK0 + 2 * Tile::kKBytes;

  const BlockHeads<T, kMask> heads(p, m_block);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int m0 = heads.m_block * kBM;
  const int seqlen_q = p.seqlen_q, seqlen_k = p.seqlen_k;
  const T* q = heads.q(p);
  const T* k = heads.k(p);
  const T* v = heads.v(p);

  const BlockWalk walk = block_walk<kBM, kBN, kMask>(m0, p);
  const int n_blocks = walk.blocks();
  if (n_blocks == 0) {
    write_unseen_rows<kBM, kChunksV, kThreads>(heads.o(p), heads.lse(p), p, m0, tid);
    return;
  }

  // Prologue: Q, then the first (highest) K/V tile into stage 0; one commit group each.
  const TileCopy<kChunks, kThreads> copy(tid);
  // V's copier: Q and K's where the rows are as wide.
  const TileCopy<kChunksV, kThreads> copy_v_own(tid);
  const auto& copy_v = first_if<kChunksV == kChunks>(copy, copy_v_own);
  // K and V tiles from rows at a stride, or (varlen over a paged cache) through the page
  // table: a uniform branch.
  const auto copy_keys = [&](const auto& cp, uint32_t tile, const T* base, int64_t row_stride, int64_t page_stride,
                             int row0) {
    if constexpr (kVarlen) {
      if (p.page_table != nullptr) {
        cp.template paged<kBN>(tile, base, row_stride, page_stride, p, row0, seqlen_k, tid);
        return;
      }
    }
    cp.template operator()<kBN>(tile, base, row_stride, row0, seqlen_k, tid);
  };
  copy.template operator()<kBM>(sQ, q, p.q_row, m0, seqlen_q, tid);
  ptx::cp_async_commit();
  copy_keys(copy, sK0, k, p.k_row, p.k_page, (walk.n_max - 1) * kBN);
  ptx::cp_async_commit();
  copy_keys(copy_v, sV0, v, p.v_row, p.v_page, (walk.n_max - 1) * kBN);
  ptx::cp_async_commit();

  // This thread's place in the mma fragments: in m-tile mt, rows g and g + 8 of its 16,
  // columns 2t and 2t + 1 of each 8-wide tile.
  const int g = lane / 4, t = lane % 4;
  const int warp_row0 = warp * Tile::kWarpRows;
  const int row_mine = m0 + warp_row0 + g;  // + 16 * mt + 8 * h
  int2 keys[kMT][2];  // the keys each of this thread's rows sees (read by masked passes)
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) keys[mt][h] = key_range<kMask>(row_mine + 16 * mt + 8 * h, p);

  float acc_o[kMT][kDTiles][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int j = 0; j < kDTiles; ++j)
      acc_o[mt][j][0] = acc_o[mt][j][1] = acc_o[mt][j][2] = acc_o[mt][j][3] = 0.f;
  float row_max[kMT][2], row_sum[kMT][2];  // running max of raw scores; this thread's sum
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }

  // ldmatrix x4 addresses: lane l points at row l % 16, chunk l / 16 of a 16x16 block for
  // the A operand (Q) and for V (transposed); for K (two 8-key n-tiles) at row
  // (l / 16) * 8 + l % 8, chunk (l / 8) % 2.
  const LaneChunks<kChunks> q_lane(warp_row0 + lane % 16, lane / 16);
  const LaneChunks<kChunks> k_lane((lane / 16) * 8 + lane % 8, (lane / 8) % 2);
  const LaneChunks<kChunksV> v_lane(lane % 16, lane / 16);

  uint32_t q_frag[Tile::kQInRegisters ? kMT : 1][Tile::kQInRegisters ? kKSteps : 1][4];
  if constexpr (Tile::kQInRegisters) {
    ptx::cp_async_wait<2>();  // Q is in (the first K and V tiles may not be)
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk)
        ptx::ldmatrix_x4(q_frag[mt][kk], q_lane.at(sQ, mt * 16, kk * 2));
  }

  // One pass over K/V tile n_block = walk.n_max - 1 - it. kMasked passes apply the rows'
  // key ranges; the others (every key visible to every row of the block) skip that work.
  auto pass = [&](const int it, auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    const int n_block = walk.n_max - 1 - it;
    // V's stages are K's where they are as large (the same values, the same instructions).
    constexpr bool kSameStages = Tile::kVBytes == Tile::kKBytes;
    const uint32_t stage_bytes = (it & 1) * Tile::kKBytes;
    const uint32_t v_stage_bytes = kSameStages ? stage_bytes : (it & 1) * Tile::kVBytes;
    const uint32_t sK = sK0 + stage_bytes, sV = sV0 + v_stage_bytes;
    const uint32_t next_stage_bytes = Tile::kKBytes - stage_bytes;
    const uint32_t next_v_stage_bytes =
        kSameStages ? next_stage_bytes : Tile::kVBytes - v_stage_bytes;
    // One barrier per pass: the K and V copies of this tile were issued a whole pass ago.
    ptx::cp_async_wait<0>();  // this K and V tile (and Q) are in ...
    __syncthreads();     // ... for every thread; and every warp is done with tile it - 1

    // Prefetch the next tile into the stage tile it - 1 used.
    if (n_block > walk.n_min) {
      copy_keys(copy, sK0 + next_stage_bytes, k, p.k_row, p.k_page, (n_block - 1) * kBN);
      copy_keys(copy_v, sV0 + next_v_stage_bytes, v, p.v_row, p.v_page, (n_block - 1) * kBN);
      ptx::cp_async_commit();
    }

    // S = Q K^T for this warp's rows and the tile's kBN keys.
    float s[kMT][kNTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      uint32_t a_reg[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        if constexpr (Tile::kQInRegisters) {
#pragma unroll
          for (int r = 0; r < 4; ++r) a_reg[mt][r] = q_frag[mt][kk][r];
        } else {
          ptx::ldmatrix_x4(a_reg[mt], q_lane.at(sQ, mt * 16, kk * 2));
        }
      }
#pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        uint32_t b[4];
        ptx::ldmatrix_x4(b, k_lane.at(sK, np * 16, kk * 2));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          ptx::mma_m16n8k16<T>(s[mt][2 * np], a_reg[mt], b[0], b[1]);
          ptx::mma_m16n8k16<T>(s[mt][2 * np + 1], a_reg[mt], b[2], b[3]);
        }
      }
    }

    if (p.softcap != 0.f) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) apply_softcap<kNTiles * 4>(&s[mt][0][0], p);
    }
    if constexpr (kMasked) {
      const int n0 = n_block * kBN;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
          mask_row<kNTiles>([&](int j, int e) -> float& { return s[mt][j][2 * h + e]; }, n0, t,
                            keys[mt][h]);
      }
    }

    // Online softmax, one row pair (g, g + 8) per m-tile and thread; a row's 4 threads are
    // a quad (lanes 4g .. 4g + 3).
    float corrections[kMT][2];  // kRescaleVotePerTile: each row's, for the rescale below
    bool moved = false;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float correction = softmax_step<kMasked, kNTiles>(
            [&](int j, int e) -> float& { return s[mt][j][2 * h + e]; }, row_max[mt][h],
            row_sum[mt][h], p.scale_log2);
        // Rescale O only when some row's max moved (after the first tiles it rarely does):
        // a warp-uniform branch that mostly skips D / 2 multiplies per thread. Per row pair,
        // or once a tile after all rows (their softmax chains then interleave).
        if constexpr (Tile::kRescaleVotePerTile) {
          corrections[mt][h] = correction;
          moved |= correction != 1.f;
        } else if (__any_sync(0xffffffffu, correction != 1.f)) {
#pragma unroll
          for (int j = 0; j < kDTiles; ++j) {
            acc_o[mt][j][2 * h] *= correction;
            acc_o[mt][j][2 * h + 1] *= correction;
          }
        }
      }
    }
    if (Tile::kRescaleVotePerTile && __any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int j = 0; j < kDTiles; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            acc_o[mt][j][2 * h] *= corrections[mt][h];
            acc_o[mt][j][2 * h + 1] *= corrections[mt][h];
          }
    }

#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk) {
      // P as the A operand of P V: the accumulators of n-tiles 2kk and 2kk + 1 are exactly
      // the A fragment of k-step kk (rows g / g + 8, keys 2t.. of each half).
      uint32_t p_frag[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        p_frag[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        p_frag[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        p_frag[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        p_frag[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        uint32_t b[4];
        ptx::ldmatrix_x4_trans(b, v_lane.at(sV, kk * 16, dp * 2));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          ptx::mma_m16n8k16<T>(acc_o[mt][2 * dp], p_frag[mt], b[0], b[1]);
          ptx::mma_m16n8k16<T>(acc_o[mt][2 * dp + 1], p_frag[mt], b[2], b[3]);
        }
      }
    }
  };

  int it = 0;
  for (; it < walk.masked_top; ++it) pass(it, std::true_type{});
  for (; it < n_blocks - walk.masked_bottom; ++it) pass(it, std::false_type{});
  for (; it < n_blocks; ++it) pass(it, std::true_type{});

  // Epilogue: normalize, write lse, stage O through this warp's own rows of the Q tile
  // (read only by this warp) and store it as 16-byte row chunks. O row r sits in Q row r,
  // at Q's pitch: at O's (narrower when Dv < D) it would reach into rows that other warps
  // may still be reading.
  T* o = heads.o(p);
  float* lse = heads.lse(p);
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h)  // row_sum becomes the normalizer
      row_sum[mt][h] = finish_row(row_sum[mt][h], row_max[mt][h], row_mine + 16 * mt + 8 * h, t, p, lse);
  }
  __syncwarp();
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int j = 0; j < kDTiles; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = warp_row0 + 16 * mt + g + 8 * h;
        *reinterpret_cast<uint32_t*>(smem + tile_offset<kChunks>(r, j) + t * 4) =
            pack2<T>(acc_o[mt][j][2 * h] * row_sum[mt][h], acc_o[mt][j][2 * h + 1] * row_sum[mt][h]);
      }
    }
  }
  __syncwarp();
  static_assert((Tile::kWarpRows * kChunksV) % 32 == 0, "O rows: whole chunks per lane");
#pragma unroll
  for (int i = 0; i < Tile::kWarpRows * kChunksV / 32; ++i) {
    const int idx = lane + i * 32;
    const int r = warp_row0 + idx / kChunksV, c = idx % kChunksV;
    if (m0 + r < seqlen_q) {
      *reinterpret_cast<uint4*>(o + int64_t(m0 + r) * p.o_row + c * 8) =
          *reinterpret_cast<const uint4*>(smem + tile_offset<kChunks>(r, c));
    }
  }
}

}  // namespace sm80

// Grid: (ceil(Sq / kBlockM), Hq, B); block: kThreads; dynamic shared memory kSmemBytes.
// kVarlen: (ceil(max_seqlen_q / kBlockM), Hq, B) over packed sequences (p.cu_seqlens_q);
// a CTA takes query blocks first_m_block, + gridDim.x, ... of its sequence, so rows past
// max_seqlen_q are still computed.
template <typename T, typename Tile, Mask kMask, bool kVarlen = false>
__global__ void __launch_bounds__(Tile::kThreads)
    flash_attention_fwd_kernel(const FwdParams params) {
  for_each_query_block<T, kMask, kVarlen, Tile::kBlockM>(
      params, [](const FwdParams& p, int m_block) { sm80::attend_block<T, Tile, kMask, kVarlen>(p, m_block); });
}

}  // namespace gks::kernels::attention
