// SPDX-License-Identifier: Apache-2.0
// FlashAttention forward on Hopper Tensor Cores (sm_90a only): the algorithm of
// fwd_sm80.cuh (K/V tiles walked last to first, online softmax in fp32
// registers, masks only on the tiles that need them), with both matmuls on wgmma instead
// of mma.sync. Include only from *_sm90a.cu sources.
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

}  // namespace sm90

// Grid: (ceil(Sq / 128), Hq, B); block: 256 threads; dynamic shared memory Tile::kSmemBytes.
template <typename T, class Cfg, bool kCausal>
__global__ void __launch_bounds__(sm90::kThreads, Cfg::kCtasPerSm)
    flash_attention_fwd_wgmma_kernel(const FwdParams p) {
  using namespace sm90;
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

  const BlockHeads<T, kCausal> heads(p);
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int m0 = heads.m_block * kBM;
  const int seqlen_q = p.seqlen_q, seqlen_k = p.seqlen_k;
  const T* q = heads.q(p);
  const T* k = heads.k(p);
  const T* v = heads.v(p);

  const int diag_offset = seqlen_k - seqlen_q;
  int n_blocks = (seqlen_k + kBN - 1) / kBN;  // the K/V tiles the block walks (common.cuh)
  if constexpr (kCausal) {
    const int64_t visible_end = int64_t(min(m0 + kBM, seqlen_q)) + diag_offset;
    n_blocks = visible_end <= 0 ? 0 : min(n_blocks, int((visible_end + kBN - 1) / kBN));
  }
  if (n_blocks == 0) {
    write_unseen_rows<kBM, kD / 8, kThreads>(heads.o(p), heads.lse(p), p, m0, tid);
    return;
  }

  copy_tile<kD, kBM>(sQ, q, p.q_row, m0, seqlen_q, tid);
  ptx::cp_async_commit();
  copy_tile<kD, kBN>(sK0, k, p.k_row, (n_blocks - 1) * kBN, seqlen_k, tid);
  copy_tile<kD, kBN>(sV0, v, p.v_row, (n_blocks - 1) * kBN, seqlen_k, tid);
  ptx::cp_async_commit();

  const int g = lane / 4, t = lane % 4;
  const int wg_row0 = wg * 64;                      // this warpgroup's rows in the tile
  const int row_mine = m0 + wg_row0 + warp * 16 + g;  // + 8 * h

  float acc_o[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) acc_o[i] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};

  auto pass = [&](const int it, auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    const int n_block = n_blocks - 1 - it;
    const uint32_t stage_bytes = (it & 1) * Cfg::kKVBytes;
    const uint32_t sK = sK0 + stage_bytes, sV = sV0 + stage_bytes;
    const uint32_t next_stage_bytes = Cfg::kKVBytes - stage_bytes;
    ptx::cp_async_wait<0>();           // this thread's copies of the tile (and Q) have landed ...
    ptx::fence_proxy_async_shared();  // ... and are visible to wgmma's reads ...
    __syncthreads();              // ... for every thread's; every warpgroup is done with it - 1
    if (n_block > 0) {
      copy_tile<kD, kBN>(sK0 + next_stage_bytes, k, p.k_row, (n_block - 1) * kBN, seqlen_k, tid);
      copy_tile<kD, kBN>(sV0 + next_stage_bytes, v, p.v_row, (n_block - 1) * kBN, seqlen_k, tid);
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

    if constexpr (kMasked) {
      const int n0 = n_block * kBN;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int limit = key_limit<kCausal>(row_mine + 8 * h, seqlen_k, diag_offset);
        mask_row<kNTiles>([&](int j, int e) -> float& { return s[4 * j + 2 * h + e]; }, n0, t,
                          limit);
      }
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

  const int masked_passes = attention::masked_passes<kBN, kCausal>(n_blocks, m0, seqlen_k, diag_offset);
  int it = 0;
  for (; it < masked_passes; ++it) pass(it, std::true_type{});
  for (; it < n_blocks; ++it) pass(it, std::false_type{});

  // Epilogue: normalize, write lse, stage O through this warp's own rows of the Q tile
  // (no other warp reads or writes them any more) and store 16-byte row chunks.
  T* o = heads.o(p);
  float* lse = heads.lse(p);
#pragma unroll
  for (int h = 0; h < 2; ++h)  // row_sum becomes the normalizer
    row_sum[h] = finish_row(row_sum[h], row_max[h], row_mine + 8 * h, t, p, lse);
  const int warp_row0 = wg_row0 + warp * 16;
#pragma unroll
  for (int j = 0; j < kDTiles; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp_row0 + g + 8 * h;
      *reinterpret_cast<uint32_t*>(smem + chunk_offset<kBM>(r, j) + t * 4) =
          pack2<T>(acc_o[4 * j + 2 * h] * row_sum[h], acc_o[4 * j + 2 * h + 1] * row_sum[h]);
    }
  }
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

}  // namespace gks::kernels::attention
