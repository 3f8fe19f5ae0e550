// SPDX-License-Identifier: Apache-2.0
// FlashAttention forward on Hopper Tensor Cores (sm_90a only): the algorithm of
// flash_attention_fwd.cuh (K/V tiles walked last to first, online softmax in fp32
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

#include "gks/kernels/flash_attention_fwd.cuh"
#include "gks/kernels/hopper_gemm.cuh"  // descriptors, wgmma fence/commit/wait

namespace gks::kernels {

namespace flash_hopper {

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
    flash::cp_async_16(dst, valid ? static_cast<const void*>(src) : base_ptr, valid);
    src += int64_t(kRowStep) * row_stride;
    dst += kRowStep * 128;
  }
}

__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- wgmma: SS (both operands in shared memory, K-major) and RS (A in registers, B in
// shared memory MN-major), m64nNk16, fp32 accumulators, N = 64 or 128; the operand lists
// (GKS_WGMMA_REGS*, GKS_WGMMA_D*) are hopper_gemm.cuh's ----

// d (+)= A B: A [64 x 16] and B [16 x N], both K-major in shared memory.
template <typename T, int kN>
__device__ __forceinline__ void wgmma_ss(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b,
                                         int accumulate) {
#define GKS_FA_SS(SHAPE, REGS, A, B, P, DN)                                                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                                 \
               "wgmma.mma_async.sync.aligned." SHAPE " {" REGS "}, " A ", " B ", p, 1, 1, 0, 0;\n" \
               "}\n"                                                                          \
               : DN                                                                           \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))
  if constexpr (kN == 64) {
    if constexpr (std::is_same_v<T, __half>)
      GKS_FA_SS("m64n64k16.f32.f16.f16", GKS_WGMMA_REGS32, "%32", "%33", "%34",
                GKS_WGMMA_D32("+f"));
    else
      GKS_FA_SS("m64n64k16.f32.bf16.bf16", GKS_WGMMA_REGS32, "%32", "%33", "%34",
                GKS_WGMMA_D32("+f"));
  } else {
    if constexpr (std::is_same_v<T, __half>)
      GKS_FA_SS("m64n128k16.f32.f16.f16", GKS_WGMMA_REGS64, "%64", "%65", "%66",
                GKS_WGMMA_D64("+f"));
    else
      GKS_FA_SS("m64n128k16.f32.bf16.bf16", GKS_WGMMA_REGS64, "%64", "%65", "%66",
                GKS_WGMMA_D64("+f"));
  }
#undef GKS_FA_SS
}

// d += A B: A [64 x 16] from registers (a warp's mma.sync A fragment), B [16 x N]
// MN-major in shared memory.
template <typename T, int kN>
__device__ __forceinline__ void wgmma_rs(float (&d)[kN / 2], const uint32_t (&a)[4],
                                         uint64_t desc_b) {
  // scale-d is a predicate: true, d accumulates. imm-scale-a/b 1; imm-trans-b 1 (MN-major).
  constexpr int kAccumulate = 1;
#define GKS_FA_RS(SHAPE, REGS, A, B, P, DN)                                                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                                 \
               "wgmma.mma_async.sync.aligned." SHAPE " {" REGS "}, " A ", " B ", p, 1, 1, 1;\n"  \
               "}\n"                                                                          \
               : DN                                                                           \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(kAccumulate))
  if constexpr (kN == 64) {
    if constexpr (std::is_same_v<T, __half>)
      GKS_FA_RS("m64n64k16.f32.f16.f16", GKS_WGMMA_REGS32, "{%32, %33, %34, %35}", "%36", "%37",
                GKS_WGMMA_D32("+f"));
    else
      GKS_FA_RS("m64n64k16.f32.bf16.bf16", GKS_WGMMA_REGS32, "{%32, %33, %34, %35}", "%36", "%37",
                GKS_WGMMA_D32("+f"));
  } else {
    if constexpr (std::is_same_v<T, __half>)
      GKS_FA_RS("m64n128k16.f32.f16.f16", GKS_WGMMA_REGS64, "{%64, %65, %66, %67}", "%68", "%69",
                GKS_WGMMA_D64("+f"));
    else
      GKS_FA_RS("m64n128k16.f32.bf16.bf16", GKS_WGMMA_REGS64, "{%64, %65, %66, %67}", "%68", "%69",
                GKS_WGMMA_D64("+f"));
  }
#undef GKS_FA_RS
}


}  // namespace flash_hopper

// Grid: (ceil(Sq / 128), Hq, B); block: 256 threads; dynamic shared memory Tile::kSmemBytes.
template <typename T, class Cfg, bool kCausal>
__global__ void __launch_bounds__(flash_hopper::kThreads, Cfg::kCtasPerSm)
    flash_attention_fwd_hopper_kernel(const FlashAttentionFwdParams p) {
  using namespace flash_hopper;
  using flash::fast_exp2;
  using flash::pack2;
  constexpr int kD = Cfg::kD, kBN = Cfg::kBN;
  namespace hk = hopper;
  constexpr int kBM = kBlockM;
  constexpr int kKSteps = kD / 16;    // k-steps of S = Q K^T
  constexpr int kNTiles = kBN / 8;    // 8-key column groups of S
  constexpr int kDTiles = kD / 8;     // 8-wide column groups of O
  constexpr int kPVSteps = kBN / 16;  // k-steps of O += P V

  extern __shared__ uint8_t smem_raw[];
  // 128-byte swizzle atoms must start on 1024-byte boundaries.
  uint8_t* const smem = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t sQ = hk::smem_u32(smem);
  const uint32_t sK0 = sQ + Cfg::kQBytes;
  const uint32_t sV0 = sK0 + 2 * Cfg::kKVBytes;

  const int m_block = kCausal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x);
  const int head = blockIdx.y, batch = blockIdx.z;
  const int kv_head = head / p.group;
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int m0 = m_block * kBM;
  const int seqlen_q = p.seqlen_q, seqlen_k = p.seqlen_k;

  const T* q = static_cast<const T*>(p.q) + batch * p.q_batch + head * p.q_head;
  const T* k = static_cast<const T*>(p.k) + batch * p.k_batch + kv_head * p.k_head;
  const T* v = static_cast<const T*>(p.v) + batch * p.v_batch + kv_head * p.v_head;
  const auto o_head = [&] { return static_cast<T*>(p.o) + batch * p.o_batch + head * p.o_head; };
  const auto lse_head = [&] { return p.lse + batch * p.lse_batch + head * p.lse_head; };

  const int diag_offset = seqlen_k - seqlen_q;
  int n_blocks = (seqlen_k + kBN - 1) / kBN;
  if constexpr (kCausal) {
    const int64_t visible_end = int64_t(min(m0 + kBM, seqlen_q)) + diag_offset;
    n_blocks = visible_end <= 0 ? 0 : min(n_blocks, int((visible_end + kBN - 1) / kBN));
  }
  if (n_blocks == 0) {  // no row of this block sees a key: o = 0, lse = -inf
    T* o = o_head();
    float* lse = lse_head();
    for (int idx = tid; idx < kBM * (kD / 8); idx += kThreads) {
      const int row = m0 + idx / (kD / 8);
      if (row < seqlen_q)
        *reinterpret_cast<uint4*>(o + int64_t(row) * p.o_row + (idx % (kD / 8)) * 8) =
            make_uint4(0, 0, 0, 0);
    }
    for (int r = tid; r < kBM; r += kThreads)
      if (m0 + r < seqlen_q) lse[int64_t(m0 + r) * p.lse_row] = -INFINITY;
    return;
  }

  copy_tile<kD, kBM>(sQ, q, p.q_row, m0, seqlen_q, tid);
  cp_async_commit();
  copy_tile<kD, kBN>(sK0, k, p.k_row, (n_blocks - 1) * kBN, seqlen_k, tid);
  copy_tile<kD, kBN>(sV0, v, p.v_row, (n_blocks - 1) * kBN, seqlen_k, tid);
  cp_async_commit();

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
    cp_async_wait<0>();           // this thread's copies of the tile (and Q) have landed ...
    fence_proxy_async_shared();   // ... and are visible to wgmma's reads ...
    __syncthreads();              // ... for every thread's; every warpgroup is done with it - 1
    if (n_block > 0) {
      copy_tile<kD, kBN>(sK0 + next_stage_bytes, k, p.k_row, (n_block - 1) * kBN, seqlen_k, tid);
      copy_tile<kD, kBN>(sV0 + next_stage_bytes, v, p.v_row, (n_block - 1) * kBN, seqlen_k, tid);
      cp_async_commit();
    }

    // S = Q K^T for this warpgroup's 64 rows and the tile's kBN keys.
    float s[kBN / 2];
    hk::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      const uint32_t col_bytes = (ks % 4) * 32;  // 16 elements of a 64-element block
      const uint64_t desc_q = hk::smem_descriptor(
          sQ + (ks / 4) * kBM * 128 + wg_row0 * 128 + col_bytes, 16, 1024);
      const uint64_t desc_k = hk::smem_descriptor(sK + (ks / 4) * kBN * 128 + col_bytes, 16, 1024);
      wgmma_ss<T, kBN>(s, desc_q, desc_k, ks > 0);
    }
    hk::wgmma_commit();
    hk::wgmma_wait<0>();
    hk::fence_registers(s);

    if constexpr (kMasked) {  // keys past Sk and, causal, above the diagonal -> -inf
      const int n0 = n_block * kBN;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row_mine + 8 * h;
        const int limit = kCausal ? min(seqlen_k, row + 1 + diag_offset) : seqlen_k;
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          const int col = n0 + j * 8 + 2 * t;
          if (col >= limit) s[4 * j + 2 * h] = -INFINITY;
          if (col + 1 >= limit) s[4 * j + 2 * h + 1] = -INFINITY;
        }
      }
    }

    // Online softmax, rows g and g + 8 of this warp's 16; a row's 4 threads are a quad.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = row_max[h];
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // A masked row that saw only masked keys (max -inf) shifts by 0: exp2(-inf) = 0.
      const float shift = (kMasked && mx == -INFINITY) ? 0.f : mx * p.scale_log2;
      const float correction = fast_exp2(row_max[h] * p.scale_log2 - shift);
      row_max[h] = mx;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        s[4 * j + 2 * h] = fast_exp2(fmaf(s[4 * j + 2 * h], p.scale_log2, -shift));
        s[4 * j + 2 * h + 1] = fast_exp2(fmaf(s[4 * j + 2 * h + 1], p.scale_log2, -shift));
        sum += s[4 * j + 2 * h] + s[4 * j + 2 * h + 1];
      }
      row_sum[h] = row_sum[h] * correction + sum;
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
    hk::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk) {
      // 16 keys = 16 V rows of 128 bytes; the D columns are blocks of 64, kBN * 128 apart.
      const uint64_t desc_v = hk::smem_descriptor(sV + kk * 2048, kBN * 128, 1024);
      wgmma_rs<T, kD>(acc_o, p_frag[kk], desc_v);
    }
    hk::wgmma_commit();
    hk::wgmma_wait<0>();
    hk::fence_registers(acc_o);
  };

  const int visible_to_all = kCausal ? min(seqlen_k, m0 + diag_offset + 1) : seqlen_k;
  const int first_masked = max(visible_to_all, 0) / kBN;
  const int masked_passes = max(0, n_blocks - first_masked);
  int it = 0;
  for (; it < masked_passes; ++it) pass(it, std::true_type{});
  for (; it < n_blocks; ++it) pass(it, std::false_type{});

  // Epilogue: normalize, write lse, stage O through this warp's own rows of the Q tile
  // (no other warp reads or writes them any more) and store 16-byte row chunks.
  T* o = o_head();
  float* lse = lse_head();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = row_sum[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int row = row_mine + 8 * h;
    if (t == 0 && row < seqlen_q) {
      lse[int64_t(row) * p.lse_row] =
          sum > 0.f ? (row_max[h] * p.scale_log2 + __log2f(sum)) * 0.69314718055994531f
                    : -INFINITY;
    }
    row_sum[h] = sum > 0.f ? 1.f / sum : 0.f;  // now the normalizer
  }
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

}  // namespace gks::kernels
