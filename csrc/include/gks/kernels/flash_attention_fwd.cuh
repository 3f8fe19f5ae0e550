// SPDX-License-Identifier: Apache-2.0
// FlashAttention-2 forward on Ampere/Hopper Tensor Cores (mma.sync m16n8k16, fp32 accumulate).
//
// One CTA owns kBlockM query rows of one (batch, head); each warp owns 16 of them. The CTA
// walks the K/V tiles of that head from the last to the first, keeping the online softmax
// (running max and sum per row) and the output accumulator in fp32 registers:
//   S = Q K^T                  mma.sync, A = Q fragments, B = K rows via ldmatrix
//   P = exp2(S * scale*log2e - running max)      rows reduced by quad shuffles
//   O = O * correction + P V   mma.sync, A = P straight from the S accumulators (no shared
//                              memory round trip), B = V via ldmatrix.trans
// K/V tiles are double buffered: the cp.async copies of tile n+1 run during the math on
// tile n. Shared tiles use an XOR swizzle of their 16-byte chunks, so the 8 rows an
// ldmatrix phase reads (and the cp.async writes) fall in 8 different bank groups.
// Tiles past Sq/Sk are zero-filled (cp.async src-size 0) and masked to -inf; causal CTAs
// skip the K tiles wholly above their diagonal and mask only the tiles that cross it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace gks::kernels {

struct FlashAttentionFwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  // Strides in elements: batch, head, row (the last dim is contiguous).
  int64_t q_batch, q_head, q_row;
  int64_t k_batch, k_head, k_row;
  int64_t v_batch, v_head, v_row;
  int64_t o_batch, o_head, o_row;
  int64_t lse_batch, lse_head, lse_row;
  int seqlen_q;
  int seqlen_k;
  int group;          // Hq / Hkv: query heads sharing one K/V head
  float scale_log2;   // softmax_scale * log2(e)
};

// The tile shape of one kernel; the host plan reads the same numbers.
template <int kHeadDim_, int kBlockM_, int kBlockN_, bool kQInRegisters_>
struct FlashFwdTile {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kBlockM / 16;
  static constexpr int kThreads = kWarps * 32;
  static constexpr bool kQInRegisters = kQInRegisters_;
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKVBytes = kBlockN * kHeadDim * 2;
  static constexpr int kSmemBytes = kQBytes + 4 * kKVBytes;  // Q + 2 stages x (K, V)
  static_assert(kHeadDim % 16 == 0, "head dim: k-steps of 16");
  static_assert(kBlockM % 16 == 0 && kWarps >= 1, "16 query rows per warp");
  static_assert(kBlockN % 16 == 0, "keys: pairs of 8-wide n-tiles");
  static_assert(kChunks % 4 == 0, "the swizzle needs a multiple of 4 chunks per row");
  static_assert((kBlockM * kChunks) % kThreads == 0 && (kBlockN * kChunks) % kThreads == 0,
                "tile copies: whole 16-byte chunks per thread");
};

// Tile per head dim (the FlashAttention-2 shapes, with 16 rows per warp). D <= 128 keeps
// Q's fragments in registers; D = 256 reloads them from shared memory (register budget).
template <int kHeadDim> struct FlashFwdConfig;
template <> struct FlashFwdConfig<32> { using Tile = FlashFwdTile<32, 128, 128, true>; };
template <> struct FlashFwdConfig<64> { using Tile = FlashFwdTile<64, 128, 128, true>; };
template <> struct FlashFwdConfig<96> { using Tile = FlashFwdTile<96, 128, 64, true>; };
template <> struct FlashFwdConfig<128> { using Tile = FlashFwdTile<128, 128, 64, true>; };
template <> struct FlashFwdConfig<256> { using Tile = FlashFwdTile<256, 64, 32, false>; };

namespace flash {

// ---- PTX wrappers ----

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; reads nothing and writes zeros when !valid.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a (16x16, row-major) * b (16x8, column-major), fp32 accumulators.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1);
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4],
                                                  uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two fp32 values as one register of two 16-bit values, `lo` in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

// 2^x on the SFU (about 2 ulp; exp2(-inf) = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

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

// Byte offsets, in a swizzled tile, of the 16-byte chunks one lane hands to ldmatrix:
// (lane_row + row_const, chunk_const + lane_chunk) for a lane_chunk in {0, 1}, any row_const
// that is a multiple of 8 and any even chunk_const. The swizzle depends only on the row
// mod 8 and the low chunk bits, so each lane needs one register per residue of chunk_const
// (4, or 2 for 4/12-chunk rows); everything else folds into the instruction's immediate.
template <int kChunks>
struct LaneChunks {
  static constexpr int kLowMask = kChunks % 8 == 0 ? 7 : 3;  // chunk bits the swizzle touches
  static constexpr int kVariants = (kLowMask + 1) / 2;
  uint32_t offset[kVariants];

  __device__ __forceinline__ LaneChunks(int lane_row, int lane_chunk) {
    const int row_bits = swizzle<kChunks>(lane_row, 0);  // what the row XORs into the chunk
#pragma unroll
    for (int i = 0; i < kVariants; ++i)
      offset[i] = uint32_t(lane_row * kChunks + ((2 * i) ^ lane_chunk ^ row_bits)) * 16u;
  }
  __device__ __forceinline__ uint32_t at(int row_const, int chunk_const) const {
    return offset[(chunk_const & kLowMask) / 2] +
           uint32_t(row_const * kChunks + (chunk_const & ~kLowMask)) * 16u;
  }
};

// Copies rows [row0, row0 + kRows) of a [rows, kChunks * 8] matrix into a swizzled tile with
// cp.async; rows at or past `rows` are zero-filled and never read.
template <int kRows, int kChunks, int kThreads, typename T>
__device__ __forceinline__ void load_tile_async(uint32_t tile, const T* base, int64_t row_stride,
                                                int row0, int rows, int tid) {
  constexpr int kPerThread = kRows * kChunks / kThreads;
#pragma unroll 1
  for (int i = 0; i < kPerThread; ++i) {
    const int idx = tid + i * kThreads;
    const int r = idx / kChunks, c = idx % kChunks;
    const bool valid = row0 + r < rows;
    const T* src = base + int64_t(valid ? row0 + r : 0) * row_stride + c * 8;
    cp_async_16(tile + tile_offset<kChunks>(r, c), src, valid);
  }
}

}  // namespace flash

// Grid: (ceil(Sq / kBlockM), Hq, B); block: kThreads; dynamic shared memory kSmemBytes.
template <typename T, typename Tile, bool kCausal>
__global__ void __launch_bounds__(Tile::kThreads)
    flash_attention_fwd_kernel(const FlashAttentionFwdParams p) {
  using namespace flash;
  constexpr int kD = Tile::kHeadDim, kBM = Tile::kBlockM, kBN = Tile::kBlockN;
  constexpr int kThreads = Tile::kThreads, kChunks = Tile::kChunks;
  constexpr int kKSteps = kD / 16;   // k-steps of S = Q K^T
  constexpr int kNTiles = kBN / 8;   // 8-key column tiles of S
  constexpr int kDTiles = kD / 8;    // 8-wide column tiles of O
  constexpr int kPVSteps = kBN / 16; // k-steps of O += P V

  extern __shared__ __align__(128) unsigned char smem[];
  // Layout: Q tile, K stage 0, K stage 1, V stage 0, V stage 1.
  const uint32_t sQ = smem_addr(smem);
  const uint32_t sK0 = sQ + Tile::kQBytes;
  const uint32_t sV0 = sK0 + 2 * Tile::kKVBytes;

  // Causal CTAs run longest-first (the last query blocks see the most keys).
  const int m_block = kCausal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x);
  const int head = blockIdx.y, batch = blockIdx.z;
  const int kv_head = head / p.group;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int m0 = m_block * kBM;
  const int seqlen_q = p.seqlen_q, seqlen_k = p.seqlen_k;

  const T* q = static_cast<const T*>(p.q) + batch * p.q_batch + head * p.q_head;
  const T* k = static_cast<const T*>(p.k) + batch * p.k_batch + kv_head * p.k_head;
  const T* v = static_cast<const T*>(p.v) + batch * p.v_batch + kv_head * p.v_head;
  T* o = static_cast<T*>(p.o) + batch * p.o_batch + head * p.o_head;
  float* lse = p.lse + batch * p.lse_batch + head * p.lse_head;

  // Query row i sees keys j < i + 1 + (Sk - Sq) (causal) and j < Sk.
  const int diag_offset = seqlen_k - seqlen_q;
  int n_blocks = (seqlen_k + kBN - 1) / kBN;
  if constexpr (kCausal) {
    const int64_t visible_end = int64_t(min(m0 + kBM, seqlen_q)) + diag_offset;
    n_blocks = visible_end <= 0 ? 0 : min(n_blocks, int((visible_end + kBN - 1) / kBN));
  }
  if (n_blocks == 0) {  // no row of this block sees a key: o = 0, lse = -inf
    for (int idx = tid; idx < kBM * kChunks; idx += kThreads) {
      const int row = m0 + idx / kChunks;
      if (row < seqlen_q)
        *reinterpret_cast<uint4*>(o + row * p.o_row + (idx % kChunks) * 8) = make_uint4(0, 0, 0, 0);
    }
    for (int r = tid; r < kBM; r += kThreads)
      if (m0 + r < seqlen_q) lse[(m0 + r) * p.lse_row] = -INFINITY;
    return;
  }

  // Prologue: Q, then the first (highest) K/V tile into stage 0; one commit group each.
  load_tile_async<kBM, kChunks, kThreads>(sQ, q, p.q_row, m0, seqlen_q, tid);
  cp_async_commit();
  load_tile_async<kBN, kChunks, kThreads>(sK0, k, p.k_row, (n_blocks - 1) * kBN, seqlen_k, tid);
  cp_async_commit();
  load_tile_async<kBN, kChunks, kThreads>(sV0, v, p.v_row, (n_blocks - 1) * kBN, seqlen_k, tid);
  cp_async_commit();

  // This thread's place in the mma fragments: row g (and g + 8) of the warp's 16, columns
  // 2t and 2t + 1 of each 8-wide tile.
  const int g = lane / 4, t = lane % 4;
  const int warp_row0 = warp * 16;
  const int row_mine = m0 + warp_row0 + g;  // and row_mine + 8

  float acc_o[kDTiles][4];
#pragma unroll
  for (int j = 0; j < kDTiles; ++j) acc_o[j][0] = acc_o[j][1] = acc_o[j][2] = acc_o[j][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};  // running max of the raw scores
  float row_sum[2] = {0.f, 0.f};               // this thread's part of the running sum
  uint32_t q_frag[Tile::kQInRegisters ? kKSteps : 1][4];

  // ldmatrix x4 addresses: lane l points at row l % 16, chunk l / 16 of a 16x16 block for
  // the A operand (Q) and for V (transposed); for K (two 8-key n-tiles) at row
  // (l / 16) * 8 + l % 8, chunk (l / 8) % 2.
  const LaneChunks<kChunks> q_lane(warp_row0 + lane % 16, lane / 16);
  const LaneChunks<kChunks> k_lane((lane / 16) * 8 + lane % 8, (lane / 8) % 2);
  const LaneChunks<kChunks> v_lane(lane % 16, lane / 16);

  if constexpr (Tile::kQInRegisters) {
    cp_async_wait<2>();  // Q is in (the first K and V tiles may not be)
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk)
      ldmatrix_x4(q_frag[kk], sQ + q_lane.at(0, kk * 2));
  }

  for (int it = 0; it < n_blocks; ++it) {
    const int n_block = n_blocks - 1 - it;
    const uint32_t stage_bytes = (it & 1) * Tile::kKVBytes;
    const uint32_t sK = sK0 + stage_bytes, sV = sV0 + stage_bytes;
    const uint32_t next_stage_bytes = Tile::kKVBytes - stage_bytes;
    cp_async_wait<1>();  // Q (first pass) and this K tile are in; this V tile may not be
    __syncthreads();     // ... for every thread; and every warp is done with tile it - 1

    // Prefetch the next tile into the stage tile it - 1 used (commit even when empty, so
    // the wait counts above and below hold on every pass).
    if (n_block > 0)
      load_tile_async<kBN, kChunks, kThreads>(sK0 + next_stage_bytes, k, p.k_row, (n_block - 1) * kBN,
                                              seqlen_k, tid);
    cp_async_commit();
    if (n_block > 0)
      load_tile_async<kBN, kChunks, kThreads>(sV0 + next_stage_bytes, v, p.v_row, (n_block - 1) * kBN,
                                              seqlen_k, tid);
    cp_async_commit();

    // S = Q K^T for this warp's 16 rows and the tile's kBN keys.
    float s[kNTiles][4];
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      uint32_t a_reg[4];
      if constexpr (Tile::kQInRegisters) {
#pragma unroll
        for (int r = 0; r < 4; ++r) a_reg[r] = q_frag[kk][r];
      } else {
        ldmatrix_x4(a_reg, sQ + q_lane.at(0, kk * 2));
      }
#pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, sK + k_lane.at(np * 16, kk * 2));
        mma_16816<T>(s[2 * np], a_reg, b[0], b[1]);
        mma_16816<T>(s[2 * np + 1], a_reg, b[2], b[3]);
      }
    }

    // Mask keys past Sk and, causal, above the diagonal. Only tiles that reach past Sk or
    // past the diagonal of this block's first row need it.
    const int n0 = n_block * kBN;
    const bool needs_mask =
        n0 + kBN > seqlen_k || (kCausal && n0 + kBN - 1 > m0 + diag_offset);
    if (needs_mask) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int limit = kCausal ? min(seqlen_k, (row_mine + 8 * h) + 1 + diag_offset) : seqlen_k;
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          const int col = n0 + j * 8 + 2 * t;
          if (col >= limit) s[j][2 * h] = -INFINITY;
          if (col + 1 >= limit) s[j][2 * h + 1] = -INFINITY;
        }
      }
    }

    // Online softmax, one row pair (g, g + 8) per thread; a row's 4 threads are a quad.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = row_max[h];
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // A row that has seen only masked keys keeps max -inf; shift by 0 so that
      // exp2(-inf - shift) is 0 rather than NaN.
      const float shift = mx == -INFINITY ? 0.f : mx * p.scale_log2;
      const float correction = fast_exp2(row_max[h] * p.scale_log2 - shift);
      row_max[h] = mx;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        s[j][2 * h] = fast_exp2(fmaf(s[j][2 * h], p.scale_log2, -shift));
        s[j][2 * h + 1] = fast_exp2(fmaf(s[j][2 * h + 1], p.scale_log2, -shift));
        sum += s[j][2 * h] + s[j][2 * h + 1];
      }
      row_sum[h] = row_sum[h] * correction + sum;
#pragma unroll
      for (int j = 0; j < kDTiles; ++j) {
        acc_o[j][2 * h] *= correction;
        acc_o[j][2 * h + 1] *= correction;
      }
    }

    // P as the A operand of P V: the accumulators of n-tiles 2kk and 2kk + 1 are exactly
    // the A fragment of k-step kk (rows g / g + 8, keys 2t.. of each half).
    uint32_t p_frag[kPVSteps][4];
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk) {
      p_frag[kk][0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
      p_frag[kk][1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
      p_frag[kk][2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      p_frag[kk][3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }

    cp_async_wait<2>();  // this V tile is in (the next K and V may still be in flight)
    __syncthreads();

#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk) {
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, sV + v_lane.at(kk * 16, dp * 2));
        mma_16816<T>(acc_o[2 * dp], p_frag[kk], b[0], b[1]);
        mma_16816<T>(acc_o[2 * dp + 1], p_frag[kk], b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();  // nothing is left in flight at exit (the last groups are empty)

  // Epilogue: normalize, write lse, stage O through this warp's own 16 rows of the Q tile
  // (read only by this warp) and store it as 16-byte row chunks.
  float inv_sum[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = row_sum[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    inv_sum[h] = sum > 0.f ? 1.f / sum : 0.f;
    if (t == 0 && (row_mine + 8 * h) < seqlen_q) {
      // lse = ln(sum_j 2^(s_j * scale_log2)) = ln2 * (max * scale_log2 + log2(sum)).
      lse[int64_t((row_mine + 8 * h)) * p.lse_row] =
          sum > 0.f ? (row_max[h] * p.scale_log2 + __log2f(sum)) * 0.69314718055994531f
                    : -INFINITY;
    }
  }
  __syncwarp();
#pragma unroll
  for (int j = 0; j < kDTiles; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp_row0 + g + 8 * h;
      *reinterpret_cast<uint32_t*>(smem + tile_offset<kChunks>(row, j) + t * 4) =
          pack2<T>(acc_o[j][2 * h] * inv_sum[h], acc_o[j][2 * h + 1] * inv_sum[h]);
    }
  }
  __syncwarp();
  static_assert((16 * kChunks) % 32 == 0, "O rows: whole chunks per lane");
#pragma unroll
  for (int i = 0; i < 16 * kChunks / 32; ++i) {
    const int idx = lane + i * 32;
    const int r = warp_row0 + idx / kChunks, c = idx % kChunks;
    if (m0 + r < seqlen_q) {
      *reinterpret_cast<uint4*>(o + int64_t(m0 + r) * p.o_row + c * 8) =
          *reinterpret_cast<const uint4*>(smem + tile_offset<kChunks>(r, c));
    }
  }
}

}  // namespace gks::kernels
