// SPDX-License-Identifier: Apache-2.0
// Split-KV decode attention (flash-decoding) on mma.sync, over a dense or paged KV cache.
//
// Decode reads a whole KV cache for a handful of query rows: memory-bound, so the design
// is about keeping enough K/V bytes in flight, not about Tensor Core throughput.
//  - One CTA per (row block, split, KV head, batch). Its rows are the G x Sq queries of the
//    G = Hq / Hkv heads that share the KV head (GQA packed: K/V are read once for all of
//    them), padded to whole 16-row mma tiles, kBlockM = 16, 32 or 64 of them.
//  - Its keys are one split of the sequence's key span: whole tiles of kBlockN = 64 keys,
//    the span's tiles dealt out evenly to the splits from the sequence's length (read on the
//    device), so a split count chosen from the shapes serves any lengths.
//  - The four warps share the CTA's rows and split each tile's keys, 16 a warp: every warp
//    keeps its own online softmax (running max and sum) and O accumulator over its keys, and
//    the warps' states are merged through shared memory at the end. (Row-split warps would
//    leave three of four idle at Sq = 1.)
//  - K/V tiles stream through a kStages-deep cp.async pipeline into XOR-swizzled shared
//    tiles (fwd_sm80.cuh's layout and ldmatrix addressing). A paged tile finds each key's
//    row through page_table, so a tile may span pages of any size; keys at or past the
//    sequence's length (and keys of a page index outside the cache) are zero-filled and
//    masked, never read.
//  - The epilogue writes o (q's dtype) and lse with one split, else fp32 partials
//    [splits, B, Hq, Sq, D] and their lse, which merge.cuh's merge_partials_kernel combines.
// Every tile is masked (the sequence end, the causal diagonal of each query, the window):
// a few compares an element, hidden under the loads.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gks/kernels/attention/common.cuh"
#include "gks/kernels/attention/fwd_sm80.cuh"
#include "gks/kernels/ptx/sm80.cuh"
#include "gks/kernels/vec.cuh"

namespace gks::kernels::attention {

struct DecodeParams {
  const void* q;
  const void* k;
  const void* v;
  const int* seqlens;     // [B]
  const int* page_table;  // [B, max_pages], paged kernels only
  void* o;                // with one split: [B, Hq, Sq, D] at o_* strides, and lse
  float* lse;
  float* o_partial;       // with more: [splits, B, Hq, Sq, D] and [splits, B, Hq, Sq], dense
  float* lse_partial;
  int64_t q_batch, q_head, q_row;
  // Dense caches [B, Hkv, S, D]: (batch, head, row) strides. Paged [pages, page_size, Hkv, D]:
  // k_batch is the page stride, k_row the stride of a row within a page.
  int64_t k_batch, k_head, k_row;
  int64_t v_batch, v_head, v_row;
  int64_t o_batch, o_head, o_row;
  int64_t lse_batch, lse_head, lse_row;
  int64_t pt_batch, pt_page;  // page_table strides
  int batch, heads_q, seqlen_q;
  int group;       // Hq / Hkv
  int capacity;    // keys a sequence's cache holds; lengths are clamped to [0, capacity]
  int num_pages;
  int page_size;
  int page_shift;  // log2(page_size) when it is a power of two, else -1
  int splits;
  int m_blocks;
  float scale_log2;  // as FwdParams
  // -1: unbounded; the host drops a bound no row can reach (so both fit 32 bits).
  int window_left;
  int window_right;
  float softcap;
  float softcap_pre;
};

template <int kHeadDim_, int kMTiles_>
struct DecodeTile {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kMTiles = kMTiles_;  // 16-row m-tiles: every warp holds all the CTA's rows
  static constexpr int kBlockM = 16 * kMTiles;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWarpKeys = 16;  // one k-step of P V
  static constexpr int kBlockN = kWarps * kWarpKeys;
  // Tiles in flight: two ahead of the one being used (D = 256: one, to stay within an SM).
  static constexpr int kStages = kHeadDim <= 128 ? 3 : 2;
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks a row
  // Q's fragments stay in registers when they are few (the O accumulator is kMTiles * D / 2).
  static constexpr bool kQInRegisters = kMTiles * kHeadDim <= 128;
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kTileBytes = kBlockN * kHeadDim * 2;  // K or V
  static constexpr int kPipeBytes = kQBytes + 2 * kStages * kTileBytes;
  // The warps' merge after the walk reuses the pipeline's memory: each warp's O rows (fp32,
  // padded 8 floats a row against bank conflicts), then its rows' max and sum.
  static constexpr int kReducePitch = kHeadDim + 8;
  static constexpr int kReduceBytes = kWarps * kBlockM * (kReducePitch + 2) * 4;
  static constexpr int kSmemBytes = kPipeBytes > kReduceBytes ? kPipeBytes : kReduceBytes;
  static constexpr int kRowStep = kThreads / kChunks;  // K/V rows the CTA copies a pass
  static constexpr int kCopyRows = kBlockN / kRowStep;  // passes a tile (rows a thread copies)
  static_assert(kHeadDim % 64 == 0, "8+ chunks a row (the swizzle's 8-row period)");
  static_assert(kThreads % kChunks == 0 && kBlockN % kRowStep == 0, "whole rows a pass");
};

// The CTA's keys: the tiles [tile_begin, tile_end) of its split, and the sequence length.
struct DecodeSplit {
  int length;
  int tile_begin, tile_end;
};

// Query i (0 .. Sq - 1) of a sequence of `length` keys sees keys [lo, hi).
__device__ __forceinline__ int2 decode_key_range(int i, int length, const DecodeParams& p) {
  const int64_t pos = int64_t(length) - p.seqlen_q + i;
  int64_t hi = length, lo = 0;
  if (p.window_right >= 0) hi = min(hi, pos + p.window_right + 1);
  if (p.window_left >= 0) lo = max(lo, pos - p.window_left);
  hi = max(hi, int64_t(0));
  return make_int2(int(min(lo, hi)), int(hi));
}

template <int kBlockN>
__device__ __forceinline__ DecodeSplit decode_split(int batch, int split, const DecodeParams& p) {
  DecodeSplit s;
  s.length = min(max(p.seqlens[batch], 0), p.capacity);
  // The span any query sees: from the first query's lowest key to the last one's highest.
  const int2 first = decode_key_range(0, s.length, p);
  const int2 last = decode_key_range(p.seqlen_q - 1, s.length, p);
  const int tile_lo = first.x / kBlockN;
  const int tile_hi = last.y > first.x ? (last.y + kBlockN - 1) / kBlockN : tile_lo;
  const int per = (tile_hi - tile_lo + p.splits - 1) / p.splits;
  s.tile_begin = min(tile_lo + split * per, tile_hi);
  s.tile_end = min(s.tile_begin + per, tile_hi);
  return s;
}

// Grid: (m_blocks * splits, Hkv, B); block: kThreads; dynamic shared memory kSmemBytes.
template <typename T, typename Tile, bool kPaged>
__global__ void __launch_bounds__(Tile::kThreads) flash_attention_decode_kernel(const DecodeParams p) {
  using namespace sm80;
  constexpr int kD = Tile::kHeadDim, kBM = Tile::kBlockM, kBN = Tile::kBlockN;
  constexpr int kMT = Tile::kMTiles, kChunks = Tile::kChunks, kStages = Tile::kStages;
  constexpr int kThreads = Tile::kThreads, kWarps = Tile::kWarps;
  constexpr int kKSteps = kD / 16;   // k-steps of S = Q K^T
  constexpr int kDTiles = kD / 8;    // 8-wide column tiles of O

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = ptx::smem_addr(smem);
  const uint32_t sK0 = sQ + Tile::kQBytes;                     // stage s at + s * kTileBytes
  const uint32_t sV0 = sK0 + kStages * Tile::kTileBytes;

  const int m_block = int(blockIdx.x) % p.m_blocks, split = int(blockIdx.x) / p.m_blocks;
  const int kv_head = blockIdx.y, batch = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int rows = p.group * p.seqlen_q;  // the KV head's query rows: head-major, then query
  const int m0 = m_block * kBM;
  const DecodeSplit range = decode_split<kBN>(batch, split, p);
  const int n_blocks = range.tile_end - range.tile_begin;
  const bool direct = p.splits == 1;  // o and lse written here, no merge

  // Where row r of the CTA (r < kBM, m0 + r < rows) writes: its head and query index.
  const auto row_head = [&](int r) { return kv_head * p.group + (m0 + r) / p.seqlen_q; };
  const auto row_query = [&](int r) { return (m0 + r) % p.seqlen_q; };
  const auto partial_row = [&](int r) -> int64_t {  // row index in [B, Hq, Sq] of the partials
    return ((int64_t(split) * p.batch + batch) * p.heads_q + row_head(r)) * p.seqlen_q + row_query(r);
  };

  if (n_blocks <= 0) {  // this split sees no key: an empty state (the merge skips its o)
    for (int idx = tid; idx < kBM * kChunks; idx += kThreads) {
      const int r = idx / kChunks, c = idx % kChunks;
      if (!direct || m0 + r >= rows) continue;
      T* o = static_cast<T*>(p.o) + batch * p.o_batch + row_head(r) * p.o_head + row_query(r) * p.o_row;
      *reinterpret_cast<uint4*>(o + c * 8) = make_uint4(0, 0, 0, 0);
    }
    for (int r = tid; r < kBM; r += kThreads) {
      if (m0 + r >= rows) continue;
      if (direct)
        p.lse[batch * p.lse_batch + row_head(r) * p.lse_head + row_query(r) * p.lse_row] = -INFINITY;
      else
        p.lse_partial[partial_row(r)] = -INFINITY;
    }
    return;
  }

  // ---- loads: Q once, then K/V tiles through the pipeline ----
  const T* q = static_cast<const T*>(p.q) + batch * p.q_batch;
  for (int idx = tid; idx < kBM * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    const bool valid = m0 + r < rows;
    const T* src = valid ? q + row_head(r) * p.q_head + row_query(r) * p.q_row + c * 8 : q;
    ptx::cp_async_16(sQ + tile_offset<kChunks>(r, c), src, valid);
  }
  ptx::cp_async_commit();

  const T* k_base = static_cast<const T*>(p.k) + kv_head * p.k_head + (kPaged ? 0 : batch * p.k_batch);
  const T* v_base = static_cast<const T*>(p.v) + kv_head * p.v_head + (kPaged ? 0 : batch * p.v_batch);
  const int* pages = kPaged ? p.page_table + batch * p.pt_batch : nullptr;
  const int copy_row = tid / kChunks, copy_col = tid % kChunks;
  // Tile `tile`'s keys into stage `stage`: this thread's chunk column of kCopyRows rows.
  // Unrolled, so that a paged tile's page-table reads are all in flight together.
  const auto load_tile = [&](int tile, int stage) {
    const uint32_t sK = sK0 + stage * Tile::kTileBytes, sV = sV0 + stage * Tile::kTileBytes;
#pragma unroll
    for (int i = 0; i < Tile::kCopyRows; ++i) {
      const int r = copy_row + i * Tile::kRowStep;
      const int n = tile * kBN + r;
      bool valid = n < range.length;
      int64_t k_off = 0, v_off = 0;
      if constexpr (kPaged) {
        const int page_index = p.page_shift >= 0 ? n >> p.page_shift : n / p.page_size;
        const int in_page = p.page_shift >= 0 ? n & (p.page_size - 1) : n - page_index * p.page_size;
        const int page = valid ? __ldg(pages + page_index * p.pt_page) : 0;
        valid = valid && page >= 0 && page < p.num_pages;
        k_off = int64_t(page) * p.k_batch + int64_t(in_page) * p.k_row;
        v_off = int64_t(page) * p.v_batch + int64_t(in_page) * p.v_row;
      } else {
        k_off = int64_t(n) * p.k_row;
        v_off = int64_t(n) * p.v_row;
      }
      const uint32_t dst = tile_offset<kChunks>(r, copy_col);
      ptx::cp_async_16(sK + dst, valid ? k_base + k_off + copy_col * 8 : k_base, valid);
      ptx::cp_async_16(sV + dst, valid ? v_base + v_off + copy_col * 8 : v_base, valid);
    }
  };
  // Prologue: kStages - 1 tiles, a commit group each (empty groups past the split's end keep
  // the count the waits below rely on).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_blocks) load_tile(range.tile_begin + s, s);
    ptx::cp_async_commit();
  }

  // This thread's rows in the mma fragments: in m-tile mt, rows g and g + 8 of its 16;
  // keys 2t and 2t + 1 of each 8-key n-tile of its warp's 16.
  const int g = lane / 4, t = lane % 4;
  int2 keys[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = mt * 16 + g + 8 * h;
      keys[mt][h] = m0 + r < rows ? decode_key_range(row_query(r), range.length, p) : make_int2(0, 0);
    }

  float acc_o[kMT][kDTiles][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int j = 0; j < kDTiles; ++j) acc_o[mt][j][0] = acc_o[mt][j][1] = acc_o[mt][j][2] = acc_o[mt][j][3] = 0.f;
  float row_max[kMT][2], row_sum[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }

  const LaneChunks<kChunks> q_lane(lane % 16, lane / 16);
  const LaneChunks<kChunks> k_lane((lane / 16) * 8 + lane % 8, (lane / 8) % 2);
  const LaneChunks<kChunks> v_lane(lane % 16, lane / 16);
  constexpr bool kQReg = Tile::kQInRegisters;
  uint32_t q_frag[kQReg ? kMT : 1][kQReg ? kKSteps : 1][4];
  if constexpr (kQReg) {
    ptx::cp_async_wait<kStages - 1>();  // Q's group is in
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) ptx::ldmatrix_x4(q_frag[mt][kk], q_lane.at(sQ, mt * 16, kk * 2));
  }

  for (int it = 0; it < n_blocks; ++it) {
    ptx::cp_async_wait<kStages - 2>();  // tile it is in, for this thread ...
    __syncthreads();  // ... and every thread; and every warp is done with tile it - 1's stage
    if (it + kStages - 1 < n_blocks) load_tile(range.tile_begin + it + kStages - 1, (it + kStages - 1) % kStages);
    ptx::cp_async_commit();

    const int stage = it % kStages;
    const uint32_t sK = sK0 + stage * Tile::kTileBytes, sV = sV0 + stage * Tile::kTileBytes;
    const int n0 = (range.tile_begin + it) * kBN + warp * Tile::kWarpKeys;  // this warp's first key

    // S = Q K^T over this warp's 16 keys: two 8-key n-tiles.
    float s[kMT][2][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int j = 0; j < 2; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      uint32_t b[4];
      ptx::ldmatrix_x4(b, k_lane.at(sK, warp * Tile::kWarpKeys, kk * 2));
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        uint32_t a[4];
        if constexpr (kQReg) {
#pragma unroll
          for (int r = 0; r < 4; ++r) a[r] = q_frag[mt][kk][r];
        } else {
          ptx::ldmatrix_x4(a, q_lane.at(sQ, mt * 16, kk * 2));
        }
        ptx::mma_m16n8k16<T>(s[mt][0], a, b[0], b[1]);
        ptx::mma_m16n8k16<T>(s[mt][1], a, b[2], b[3]);
      }
    }
    if (p.softcap != 0.f) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        FwdParams cap{};
        cap.softcap = p.softcap;
        cap.softcap_pre = p.softcap_pre;
        apply_softcap<8>(&s[mt][0][0], cap);
      }
    }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const auto row = [&](int j, int e) -> float& { return s[mt][j][2 * h + e]; };
        mask_row<2>(row, n0, t, keys[mt][h]);
        const float correction = softmax_step<true, 2>(row, row_max[mt][h], row_sum[mt][h], p.scale_log2);
        if (__any_sync(0xffffffffu, correction != 1.f)) {
#pragma unroll
          for (int j = 0; j < kDTiles; ++j) {
            acc_o[mt][j][2 * h] *= correction;
            acc_o[mt][j][2 * h + 1] *= correction;
          }
        }
      }
    }

    // O += P V: P (the S accumulators, one k-step of 16 keys) times this warp's 16 V rows.
    uint32_t p_frag[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      p_frag[mt][0] = pack2<T>(s[mt][0][0], s[mt][0][1]);
      p_frag[mt][1] = pack2<T>(s[mt][0][2], s[mt][0][3]);
      p_frag[mt][2] = pack2<T>(s[mt][1][0], s[mt][1][1]);
      p_frag[mt][3] = pack2<T>(s[mt][1][2], s[mt][1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < kDTiles / 2; ++dp) {
      uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, v_lane.at(sV, warp * Tile::kWarpKeys, dp * 2));
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        ptx::mma_m16n8k16<T>(acc_o[mt][2 * dp], p_frag[mt], b[0], b[1]);
        ptx::mma_m16n8k16<T>(acc_o[mt][2 * dp + 1], p_frag[mt], b[2], b[3]);
      }
    }
  }

  // ---- the warps' states merged: each warp's unnormalized O rows, max and sum to shared
  // memory (over the pipeline's, once every copy has landed and every warp is done) ----
  ptx::cp_async_wait<0>();
  __syncthreads();
  float* red_o = reinterpret_cast<float*>(smem);                  // [kWarps][kBM][kReducePitch]
  float* red_max = red_o + kWarps * kBM * Tile::kReducePitch;       // [kWarps][kBM]
  float* red_sum = red_max + kWarps * kBM;                          // [kWarps][kBM]
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = mt * 16 + g + 8 * h;
      float sum = row_sum[mt][h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      if (t == 0) {
        red_max[warp * kBM + r] = row_max[mt][h];
        red_sum[warp * kBM + r] = sum;
      }
      float* o_row = red_o + (warp * kBM + r) * Tile::kReducePitch;
#pragma unroll
      for (int j = 0; j < kDTiles; ++j)
        *reinterpret_cast<float2*>(o_row + j * 8 + 2 * t) = make_float2(acc_o[mt][j][2 * h], acc_o[mt][j][2 * h + 1]);
    }
  }
  __syncthreads();

  // Each thread takes 4 columns of a row at a time: the warps' weights exp2((m_w - M) *
  // scale_log2) (1 for a warp at the row's max, which keeps a row of NaN sums NaN and a row
  // no warp saw at sum 0), their sum L, and O = sum_w weight_w O_w / L.
  constexpr int kQuads = kD / 4;
  for (int idx = tid; idx < kBM * kQuads; idx += kThreads) {
    const int r = idx / kQuads, c = (idx % kQuads) * 4;
    if (m0 + r >= rows) continue;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, red_max[w * kBM + r]);
    float total = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float m_w = red_max[w * kBM + r];
      const float weight = m_w == mx ? 1.f : ptx::ex2_approx_ftz((m_w - mx) * p.scale_log2);
      total += weight * red_sum[w * kBM + r];
      const float4 o_w = *reinterpret_cast<const float4*>(red_o + (w * kBM + r) * Tile::kReducePitch + c);
      acc.x += weight * o_w.x, acc.y += weight * o_w.y, acc.z += weight * o_w.z, acc.w += weight * o_w.w;
    }
    const float inv = total != 0.f ? 1.f / total : 0.f;
    const float lse = total != 0.f ? (mx * p.scale_log2 + __log2f(total)) * 0.69314718055994531f : -INFINITY;
    acc.x *= inv, acc.y *= inv, acc.z *= inv, acc.w *= inv;
    if (direct) {
      T* o = static_cast<T*>(p.o) + batch * p.o_batch + row_head(r) * p.o_head + row_query(r) * p.o_row + c;
      *reinterpret_cast<uint2*>(o) = make_uint2(pack2<T>(acc.x, acc.y), pack2<T>(acc.z, acc.w));
      if (c == 0) p.lse[batch * p.lse_batch + row_head(r) * p.lse_head + row_query(r) * p.lse_row] = lse;
    } else {
      const int64_t pr = partial_row(r);
      *reinterpret_cast<float4*>(p.o_partial + pr * kD + c) = acc;
      if (c == 0) p.lse_partial[pr] = lse;
    }
  }
}

}  // namespace gks::kernels::attention
