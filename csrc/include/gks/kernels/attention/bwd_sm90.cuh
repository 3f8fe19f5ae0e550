// SPDX-License-Identifier: Apache-2.0
// FlashAttention backward on Hopper Tensor Cores (sm_90a only; config "wgmma"): the dK/dV
// kernel of bwd_sm80.cuh's algorithm on wgmma, with dQ accumulated in fp32 by atomics from
// the same kernel (FlashAttention-2/3's organisation) instead of a second pass that
// recomputes the scores. Include only from *_sm90a.cu sources.
//
//  * A CTA owns kBlockN = 128 keys of one K/V head, two warpgroups of 64 keys each, and
//    walks the query blocks (kBlockM rows) of every query head of its group that see one of
//    its keys; K and V stay in shared memory, Q and dO tiles (with their lse and delta) are
//    double buffered by cp.async (the forward's copy_tile and 128-byte swizzle).
//  * Per query block, each warpgroup computes its keys' transposed scores
//      S^T = K Q^T, dP^T = V dO^T                      (wgmma, both operands in shared memory)
//    so that P^T and dS^T = P^T (dP^T - delta) land in registers in the A-operand layout of
//      dV += P^T dO, dK += dS^T Q                      (wgmma with A from registers)
//    and no score goes through shared memory for them (FlashAttention-3's SdP_swapAB).
//  * dQ = dS K contracts over all 128 keys, so dS^T goes to shared memory once (4-byte
//    stores into the 128-byte swizzle, as the forward's stage_o) and, after a barrier of
//    both warpgroups, each warpgroup computes a 64 x 64 part of the block's dQ with dS^T
//    read transposed (an MN-major A operand) and K read MN-major, and adds it into an fp32
//    accumulator in global memory with 16-byte atomics. The accumulator keeps each part in its wgmma fragment order
//    (register-major, so a warp's atomics cover 512 contiguous bytes); a last kernel
//    scales, rounds and writes dQ in rows. The atomics make dQ's rounding order vary from
//    run to run: the mma.sync config is the deterministic one.
//  * Head dims 64 (kBlockM 128: the warpgroups split dQ's rows) and 128 (kBlockM 64: they
//    split its columns), v's head dim the same.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gks/kernels/attention/bwd_sm80.cuh"
#include "gks/kernels/attention/common.cuh"
#include "gks/kernels/attention/fwd_sm90.cuh"
#include "gks/kernels/ptx/sm80.cuh"
#include "gks/kernels/ptx/sm90.cuh"
#include "gks/kernels/ptx/wgmma.cuh"
#include "gks/kernels/vec.cuh"

namespace gks::kernels::attention {

// The wgmma backward's tiles (the host reads the same numbers).
template <int kHeadDim_>
struct FlashBwdWgmmaTile {
  static_assert(kHeadDim_ == 64 || kHeadDim_ == 128, "head dims 64 and 128");
  static constexpr int kD = kHeadDim_;
  static constexpr int kThreads = sm90::kThreads;  // two warpgroups
  static constexpr int kBN = 128;                  // keys a CTA owns, 64 a warpgroup
  static constexpr int kBM = kD == 64 ? 128 : 64;  // query rows a step
  // Each warpgroup's part of a step's dQ: 64 rows x 64 columns (one wgmma m64n64).
  static constexpr bool kSplitRows = kBM == 128;
  static constexpr int kDqPart = 64 * 64;
  static_assert(kBM * kD == 2 * kDqPart, "two 64 x 64 dQ parts a step");
  static constexpr int kKBytes = kBN * kD * 2;  // K, and V
  static constexpr int kQBytes = kBM * kD * 2;  // Q, and dO, a stage
  static constexpr int kDsBytes = kBN * kBM * 2;
  static constexpr int kStatBytes = 2 * kBM * 4;  // lse2 and delta, a stage
  // K, V, two stages of Q and dO, dS^T, two stages of stats; + 1024: re-aligned in the kernel.
  static constexpr int kSmemBytes = 2 * kKBytes + 4 * kQBytes + kDsBytes + 2 * kStatBytes + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

namespace bwd90 {

// Whether a (query block, key block) pair needs the per-element mask: it crosses the
// window's bounds or holds keys past Sk (query rows past Sq are harmless: their lse2 is +inf,
// so P = 0).
template <Mask kMask, int kBM, int kBN>
__device__ __forceinline__ bool needs_mask(int m0, int n0, const FwdParams& p) {
  if (n0 + kBN > p.seqlen_k) return true;
  const int64_t off = int64_t(p.seqlen_k) - p.seqlen_q;
  if constexpr (kMask != Mask::kNone)
    if (int64_t(n0 + kBN - 1) - m0 - off > p.window_right) return true;
  if constexpr (kMask == Mask::kLocal)
    if (int64_t(n0) - (m0 + kBM - 1) - off < -int64_t(p.window_left)) return true;
  return false;
}

}  // namespace bwd90

// dK and dV of 128 keys of one K/V head (grid: (ceil(Sk / 128), Hkv, B)) and their part of
// dQ, added into dq_accum ([B, Hq, ceil(Sq / kBM), kBM * D] fp32, zeroed, fragment order).
template <typename T, typename Tile, Mask kMask>
__global__ void __launch_bounds__(Tile::kThreads, 1) flash_attention_bwd_wgmma_kernel(const BwdParams p) {
  constexpr int kD = Tile::kD, kBM = Tile::kBM, kBN = Tile::kBN;
  constexpr int kSTiles = kBM / 8;     // 8-query column groups of S^T
  constexpr int kKSteps = kD / 16;     // k-steps of S^T and dP^T
  constexpr int kMSteps = kBM / 16;    // k-steps of dV and dK (the step's queries)
  constexpr int kNSteps = kBN / 16;    // k-steps of dQ (the block's keys)
  const FwdParams& f = p.f;

  extern __shared__ uint8_t smem_raw[];
  uint8_t* const smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  // Layout: K, V, dS^T, Q and dO of stage 0, of stage 1, then the stats (every tile a
  // multiple of 1024 bytes, so each starts a swizzle atom).
  const uint32_t sK = ptx::smem_addr(smem);
  const uint32_t sV = sK + Tile::kKBytes;
  const uint32_t sDs = sV + Tile::kKBytes;
  const uint32_t sStage0 = sDs + Tile::kDsBytes;
  uint8_t* const ds_tile = smem + 2 * Tile::kKBytes;
  float* const s_stats = reinterpret_cast<float*>(smem + 2 * Tile::kKBytes + Tile::kDsBytes + 4 * Tile::kQBytes);

  const int tid = threadIdx.x, wg = tid / 128, tid_wg = tid % 128, warp = tid_wg / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int n0 = blockIdx.x * kBN, kv_head = blockIdx.y, batch = blockIdx.z;
  const T* k = static_cast<const T*>(f.k) + batch * f.k_batch + kv_head * f.k_head;
  const T* v = static_cast<const T*>(f.v) + batch * f.v_batch + kv_head * f.v_head;

  const bwd::QueryBlocks blocks = bwd::query_blocks_seeing<kMask, kBN, kBM>(n0, f);
  const int m_begin = blocks.begin, m_blocks = blocks.count;
  const int steps = m_blocks * f.group;
  const int m_blocks_all = (f.seqlen_q + kBM - 1) / kBM;

  sm90::copy_tile<kD, kBN>(sK, k, f.k_row, n0, f.seqlen_k, tid);
  sm90::copy_tile<kD, kBN>(sV, v, f.v_row, n0, f.seqlen_k, tid);
  ptx::cp_async_commit();

  // Step it: query block m_begin + it % m_blocks of query head kv_head * group + it / m_blocks.
  auto load_step = [&](int it, int stage) {
    const int head = kv_head * f.group + it / m_blocks;
    const int m0 = (m_begin + it % m_blocks) * kBM;
    const uint32_t sQ = sStage0 + stage * 2 * Tile::kQBytes, sDo = sQ + Tile::kQBytes;
    const T* q = static_cast<const T*>(f.q) + batch * f.q_batch + head * f.q_head;
    const T* dout = static_cast<const T*>(p.dout) + batch * p.do_batch + head * p.do_head;
    sm90::copy_tile<kD, kBM>(sQ, q, f.q_row, m0, f.seqlen_q, tid);
    sm90::copy_tile<kD, kBM>(sDo, dout, p.do_row, m0, f.seqlen_q, tid);
    ptx::cp_async_commit();
    if (tid < kBM) {  // read in a later step, after a barrier
      const int row = m0 + tid;
      const bool in = row < f.seqlen_q;
      const float* lse = f.lse + batch * f.lse_batch + head * f.lse_head;
      float* stats = s_stats + stage * 2 * kBM;
      stats[tid] = in ? bwd::lse_log2(lse[int64_t(row) * f.lse_row]) : INFINITY;
      stats[kBM + tid] = in ? p.delta[(int64_t(batch) * f.group * gridDim.y + head) * f.seqlen_q + row] : 0.f;
    }
  };
  if (steps > 0) load_step(0, 0);

  float acc_dk[kD / 2], acc_dv[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) acc_dk[i] = acc_dv[i] = 0.f;

  const int wg_key0 = wg * 64;                       // this warpgroup's keys in the block
  const int key_mine = n0 + wg_key0 + warp * 16 + g;  // + 8 * h: this thread's rows of S^T
  // This warpgroup's part of a step's dQ: rows [dq_row0, + 64), columns [dq_col0, + 64).
  const int dq_row0 = Tile::kSplitRows ? wg * 64 : 0;
  const int dq_col0 = Tile::kSplitRows ? 0 : wg * 64;

#pragma unroll 1
  for (int it = 0; it < steps; ++it) {
    const int stage = it & 1;
    ptx::cp_async_wait<0>();          // this thread's copies of the step (and K, V) have landed ...
    ptx::fence_proxy_async_shared();  // ... visible to wgmma's reads ...
    __syncthreads();                  // ... for every thread's; the other stage and dS^T are free
    if (it + 1 < steps) load_step(it + 1, stage ^ 1);
    const uint32_t sQ = sStage0 + stage * 2 * Tile::kQBytes, sDo = sQ + Tile::kQBytes;
    const float* lse2 = s_stats + stage * 2 * kBM;
    const float* delta = lse2 + kBM;
    const int head = kv_head * f.group + it / m_blocks;
    const int m_block = m_begin + it % m_blocks;
    const int m0 = m_block * kBM;

    // S^T = K Q^T and dP^T = V dO^T: this warpgroup's 64 keys x the step's kBM queries,
    // two commit groups so that P^T's exponentials overlap dP^T's product.
    float s[kBM / 2], dp[kBM / 2];
    ptx::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      const uint32_t col = (ks % 4) * 32;  // 16 elements of a 64-column block
      const uint64_t desc_k = ptx::smem_descriptor(sK + (ks / 4) * kBN * 128 + wg_key0 * 128 + col, 16, 1024);
      const uint64_t desc_q = ptx::smem_descriptor(sQ + (ks / 4) * kBM * 128 + col, 16, 1024);
      ptx::wgmma_ss<T, kBM, false>(s, desc_k, desc_q, ks > 0);
    }
    ptx::wgmma_commit();
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      const uint32_t col = (ks % 4) * 32;
      const uint64_t desc_v = ptx::smem_descriptor(sV + (ks / 4) * kBN * 128 + wg_key0 * 128 + col, 16, 1024);
      const uint64_t desc_do = ptx::smem_descriptor(sDo + (ks / 4) * kBM * 128 + col, 16, 1024);
      ptx::wgmma_ss<T, kBM, false>(dp, desc_v, desc_do, ks > 0);
    }
    ptx::wgmma_commit();

    // P^T in place of S^T and dS^T = P^T (dP^T - delta) (* 1 - tanh^2 under a softcap) in
    // place of dP^T; element (key g + 8h, query 8j + 2t + e&1) is register 4j + e.
    const bool masked = bwd90::needs_mask<kMask, kBM, kBN>(m0, n0, f);
    const auto seen = [&](int j, int e) {
      return !masked || bwd::visible<kMask>(key_mine + 8 * (e >> 1), m0 + 8 * j + 2 * t + (e & 1), f);
    };
    if (f.softcap != 0.f) {  // the factor is used as soon as it is made (no array of them)
      ptx::wgmma_wait<0>();
      ptx::fence_registers(s);
      ptx::fence_registers(dp);
#pragma unroll
      for (int j = 0; j < kSTiles; ++j) {
        const float2 l2 = *reinterpret_cast<const float2*>(lse2 + 8 * j + 2 * t);
        const float2 dl = *reinterpret_cast<const float2*>(delta + 8 * j + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float factor;
          const float pr = bwd::score_p(s[4 * j + e], (e & 1) ? l2.y : l2.x, seen(j, e), f, factor);
          s[4 * j + e] = pr;
          dp[4 * j + e] = pr * (dp[4 * j + e] - ((e & 1) ? dl.y : dl.x)) * factor;
        }
      }
    } else {  // P^T's exponentials while dP^T's product runs
      ptx::wgmma_wait<1>();
      ptx::fence_registers(s);
#pragma unroll
      for (int j = 0; j < kSTiles; ++j) {
        const float2 l2 = *reinterpret_cast<const float2*>(lse2 + 8 * j + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float z = fmaf(s[4 * j + e], f.scale_log2, -((e & 1) ? l2.y : l2.x));
          s[4 * j + e] = seen(j, e) ? ptx::ex2_approx_ftz(z) : 0.f;
        }
      }
      ptx::wgmma_wait<0>();
      ptx::fence_registers(dp);
#pragma unroll
      for (int j = 0; j < kSTiles; ++j) {
        const float2 dl = *reinterpret_cast<const float2*>(delta + 8 * j + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[4 * j + e] = s[4 * j + e] * (dp[4 * j + e] - ((e & 1) ? dl.y : dl.x));
      }
    }
    // Both as A fragments (16-bit pairs) of the next products: k-step kk is the
    // accumulators of query groups 2kk, 2kk + 1.
    uint32_t p_frag[kMSteps][4], ds_frag[kMSteps][4];
#pragma unroll
    for (int kk = 0; kk < kMSteps; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        p_frag[kk][r] = pack2<T>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
        ds_frag[kk][r] = pack2<T>(dp[8 * kk + 2 * r], dp[8 * kk + 2 * r + 1]);
      }

    // dV += P^T dO and dK += dS^T Q, k along the step's queries (dO and Q MN-major: 16
    // query rows of 128 bytes a k-step; the head dim's 64-column blocks kBM * 128 apart).
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kMSteps; ++kk) {
      ptx::wgmma_rs<T, kD>(acc_dv, p_frag[kk], ptx::smem_descriptor(sDo + kk * 2048, kBM * 128, 1024));
      ptx::wgmma_rs<T, kD>(acc_dk, ds_frag[kk], ptx::smem_descriptor(sQ + kk * 2048, kBM * 128, 1024));
    }
    ptx::wgmma_commit();

    // dS^T into shared memory: this warpgroup's 64 key rows of the [kBN x kBM] tile.
#pragma unroll
    for (int j = 0; j < kSTiles; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = wg_key0 + warp * 16 + g + 8 * h;
        *reinterpret_cast<uint32_t*>(ds_tile + sm90::chunk_offset<kBN>(row, j) + t * 4) =
            ds_frag[j / 2][2 * (j % 2) + h];
      }
    ptx::fence_proxy_async_shared();  // the stores, visible to wgmma ...
    __syncthreads();                  // ... of both warpgroups

    // dQ part = dS K over the block's keys: A = dS^T read transposed (MN-major: 16 key rows
    // of 128 bytes a k-step, the queries' 64-column block dq_row0 / 64), B = K MN-major.
    float dq[32];
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kNSteps; ++kk) {
      const uint64_t desc_ds = ptx::smem_descriptor(sDs + (dq_row0 / 64) * kBN * 128 + kk * 2048, kBN * 128, 1024);
      const uint64_t desc_k = ptx::smem_descriptor(sK + (dq_col0 / 64) * kBN * 128 + kk * 2048, kBN * 128, 1024);
      ptx::wgmma_ss<T, 64, /*kTransB=*/true, /*kTransA=*/true>(dq, desc_ds, desc_k, kk > 0);
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
    ptx::fence_registers(dq);
    ptx::fence_registers(acc_dv);
    ptx::fence_registers(acc_dk);

    // Into the accumulator, fragment order: float4 i4 of thread tid_wg at (i4 * 128 + tid_wg) * 4.
    float* acc = p.dq_accum + ((int64_t(batch) * f.group * gridDim.y + head) * m_blocks_all + m_block) * (kBM * kD) +
                 wg * Tile::kDqPart;
#pragma unroll
    for (int i4 = 0; i4 < 8; ++i4)
      atomicAdd(reinterpret_cast<float4*>(acc) + i4 * 128 + tid_wg,
                make_float4(dq[4 * i4], dq[4 * i4 + 1], dq[4 * i4 + 2], dq[4 * i4 + 3]));
  }

  ptx::cp_async_wait<0>();  // a CTA with no step still has its K/V copies in flight

  // dK (times the softmax scale) and dV: this thread's keys g, g + 8 of its warp's 16.
  const int row0 = n0 + wg_key0 + warp * 16;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + g + 8 * h;
    if (row >= f.seqlen_k) continue;
    T* dk = static_cast<T*>(p.dk) + batch * p.dk_batch + kv_head * p.dk_head + int64_t(row) * p.dk_row + 2 * t;
    T* dv = static_cast<T*>(p.dv) + batch * p.dv_batch + kv_head * p.dv_head + int64_t(row) * p.dv_row + 2 * t;
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) {
      *reinterpret_cast<uint32_t*>(dk + 8 * j) =
          pack2<T>(acc_dk[4 * j + 2 * h] * p.softmax_scale, acc_dk[4 * j + 2 * h + 1] * p.softmax_scale);
      *reinterpret_cast<uint32_t*>(dv + 8 * j) = pack2<T>(acc_dv[4 * j + 2 * h], acc_dv[4 * j + 2 * h + 1]);
    }
  }
}

// dQ = softmax_scale * dq_accum in rows (grid: (ceil(Sq / kBM), Hq, B), 256 threads): each
// thread reads the eight float4s it would have added (the fragment order above) and writes
// its elements' pairs.
template <typename T, typename Tile>
__global__ void __launch_bounds__(Tile::kThreads) flash_attention_bwd_dq_convert_kernel(const BwdParams p) {
  constexpr int kBM = Tile::kBM, kD = Tile::kD;
  const int tid = threadIdx.x, wg = tid / 128, tid_wg = tid % 128, warp = tid_wg / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int m_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const float* acc = p.dq_accum + ((int64_t(batch) * gridDim.y + head) * gridDim.x + m_block) * (kBM * kD) +
                     wg * Tile::kDqPart;
  const int row0 = m_block * kBM + (Tile::kSplitRows ? wg * 64 : 0) + warp * 16 + g;
  const int col0 = (Tile::kSplitRows ? 0 : wg * 64) + 2 * t;
  T* dq = static_cast<T*>(p.dq) + batch * p.dq_batch + head * p.dq_head;
#pragma unroll
  for (int i4 = 0; i4 < 8; ++i4) {  // i4: the 8-column group j of the m64n64 accumulator
    const float4 a = reinterpret_cast<const float4*>(acc)[i4 * 128 + tid_wg];
    const float pair[2][2] = {{a.x, a.y}, {a.z, a.w}};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      if (row < p.f.seqlen_q)
        *reinterpret_cast<uint32_t*>(dq + int64_t(row) * p.dq_row + col0 + 8 * i4) =
            pack2<T>(pair[h][0] * p.softmax_scale, pair[h][1] * p.softmax_scale);
    }
  }
}

}  // namespace gks::kernels::attention
