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
//  * Two kernels share these products (namespace bwd90): flash_attention_bwd_wgmma_kernel
//    (config "wgmma": every thread loads with cp.async, two CTA barriers a step, dQ by
//    atomics) and bwd_ws::flash_attention_bwd_ws_kernel (config "wgmma.ws", below:
//    TMA loads by a producer warp, dQ added by a writer warp's bulk reduce-adds).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

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

// ---- one query block's products for one warpgroup (64 keys), shared by both kernels ----

// S^T = K Q^T (or dP^T = V dO^T): this warpgroup's 64 keys of the [kBN x D] tile `sKV` x the
// step's kBM rows of `sQ` (both K-major), issued, not committed.
template <typename T, typename Tile>
__device__ __forceinline__ void issue_scores(float (&acc)[Tile::kBM / 2], uint32_t sKV, uint32_t sQ, int wg_key0) {
#pragma unroll
  for (int ks = 0; ks < Tile::kD / 16; ++ks) {
    const uint32_t col = (ks % 4) * 32;  // 16 elements of a 64-column block
    const uint64_t desc_k = ptx::smem_descriptor(sKV + (ks / 4) * Tile::kBN * 128 + wg_key0 * 128 + col, 16, 1024);
    const uint64_t desc_q = ptx::smem_descriptor(sQ + (ks / 4) * Tile::kBM * 128 + col, 16, 1024);
    ptx::wgmma_ss<T, Tile::kBM, false>(acc, desc_k, desc_q, ks > 0);
  }
}

// The query rows [lo, hi] each of a thread's two keys (key0, key0 + 8) sees, for a step that
// needs the per-element mask: the mask's window, rows past Sq cut, empty for a key past Sk;
// clamped to int, so that an element's test is two compares (no branch, no 64-bit math).
struct KeyRows {
  int lo[2], hi[2];
};
template <Mask kMask>
__device__ __forceinline__ KeyRows key_rows(int key0, const FwdParams& f) {
  KeyRows r;
  const int64_t off = int64_t(f.seqlen_k) - f.seqlen_q;  // the diagonal: key = query + off
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t key = key0 + 8 * h;
    int64_t lo = 0, hi = int64_t(f.seqlen_q) - 1;
    if constexpr (kMask != Mask::kNone) lo = max(lo, key - off - f.window_right);
    if constexpr (kMask == Mask::kLocal) hi = min(hi, key - off + f.window_left);
    if (key >= f.seqlen_k) lo = 1, hi = 0;
    r.lo[h] = int(min(lo, int64_t(INT32_MAX)));
    r.hi[h] = int(max(hi, int64_t(-1)));
  }
  return r;
}

// With S^T and dP^T committed in that order: P^T in place of S^T and dS^T = P^T (dP^T -
// delta) (* 1 - tanh^2 under a softcap) in place of dP^T, waiting for each product as late
// as it can (P^T's exponentials run under dP^T's product); element (key g + 8h, query
// 8j + 2t + e&1) is register 4j + e. lse2 and delta: the step's kBM rows, in shared memory.
// A step that needs no mask runs code without any test (one branch a step, not one an
// element: per-element branches keep ptxas from interleaving the exponentials).
template <typename Tile, Mask kMask>
__device__ __forceinline__ void scores_to_grads(float (&s)[Tile::kBM / 2], float (&dp)[Tile::kBM / 2],
                                                const float* lse2, const float* delta, int m0, int n0, int key_mine,
                                                int t, const FwdParams& f) {
  constexpr int kSTiles = Tile::kBM / 8;  // 8-query column groups of S^T
  const auto grads = [&](auto masked_c) {
    constexpr bool kMasked = decltype(masked_c)::value;
    KeyRows rows{};
    if constexpr (kMasked) rows = key_rows<kMask>(key_mine, f);
    const auto seen = [&](int j, int e) {
      if constexpr (!kMasked) return true;
      const int query = m0 + 8 * j + 2 * t + (e & 1);
      return bool((query >= rows.lo[e >> 1]) & (query <= rows.hi[e >> 1]));
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
    } else {
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
  };
  if (needs_mask<kMask, Tile::kBM, Tile::kBN>(m0, n0, f))
    grads(std::true_type{});
  else
    grads(std::false_type{});
}

// P^T or dS^T as A fragments (16-bit pairs) of the next products: k-step kk is the
// accumulators of query groups 2kk, 2kk + 1.
template <typename T, int kMSteps>
__device__ __forceinline__ void to_a_fragments(uint32_t (&frag)[kMSteps][4], const float (&acc)[kMSteps * 8]) {
#pragma unroll
  for (int kk = 0; kk < kMSteps; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) frag[kk][r] = pack2<T>(acc[8 * kk + 2 * r], acc[8 * kk + 2 * r + 1]);
}

// acc += A^T B with A^T in registers (P^T or dS^T) and B the step's dO or Q (MN-major: 16
// query rows of 128 bytes a k-step; the head dim's 64-column blocks kBM * 128 apart).
template <typename T, typename Tile>
__device__ __forceinline__ void issue_key_grad(float (&acc)[Tile::kD / 2], const uint32_t (&frag)[Tile::kBM / 16][4],
                                               uint32_t sB) {
#pragma unroll
  for (int kk = 0; kk < Tile::kBM / 16; ++kk)
    ptx::wgmma_rs<T, Tile::kD>(acc, frag[kk], ptx::smem_descriptor(sB + kk * 2048, Tile::kBM * 128, 1024));
}

// dS^T into the shared [kBN x kBM] tile: this warpgroup's 64 key rows (4-byte stores into
// the 128-byte swizzle, as the forward's stage_o).
template <typename Tile>
__device__ __forceinline__ void store_ds_t(uint8_t* tile, const uint32_t (&ds)[Tile::kBM / 16][4], int wg_key0,
                                           int warp, int g, int t) {
#pragma unroll
  for (int j = 0; j < Tile::kBM / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = wg_key0 + warp * 16 + g + 8 * h;
      *reinterpret_cast<uint32_t*>(tile + sm90::chunk_offset<Tile::kBN>(row, j) + t * 4) = ds[j / 2][2 * (j % 2) + h];
    }
}

// This warpgroup's 64 x 64 part of the step's dQ = dS K over the block's keys: A = dS^T read
// transposed (MN-major: 16 key rows of 128 bytes a k-step, the queries' 64-column block
// dq_row0 / 64), B = K MN-major. Issued, not committed.
template <typename T, typename Tile>
__device__ __forceinline__ void issue_dq(float (&dq)[32], uint32_t sDs, uint32_t sK, int dq_row0, int dq_col0) {
#pragma unroll
  for (int kk = 0; kk < Tile::kBN / 16; ++kk) {
    const uint64_t desc_ds = ptx::smem_descriptor(sDs + (dq_row0 / 64) * Tile::kBN * 128 + kk * 2048, Tile::kBN * 128, 1024);
    const uint64_t desc_k = ptx::smem_descriptor(sK + (dq_col0 / 64) * Tile::kBN * 128 + kk * 2048, Tile::kBN * 128, 1024);
    ptx::wgmma_ss<T, 64, /*kTransB=*/true, /*kTransA=*/true>(dq, desc_ds, desc_k, kk > 0);
  }
}

// dK (times the softmax scale) and dV of this thread's keys g, g + 8 of its warp's 16.
template <typename T, typename Tile>
__device__ __forceinline__ void store_dk_dv(const BwdParams& p, const float (&acc_dk)[Tile::kD / 2],
                                            const float (&acc_dv)[Tile::kD / 2], int row0, int kv_head, int batch,
                                            int g, int t) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + g + 8 * h;
    if (row >= p.f.seqlen_k) continue;
    T* dk = static_cast<T*>(p.dk) + batch * p.dk_batch + kv_head * p.dk_head + int64_t(row) * p.dk_row + 2 * t;
    T* dv = static_cast<T*>(p.dv) + batch * p.dv_batch + kv_head * p.dv_head + int64_t(row) * p.dv_row + 2 * t;
#pragma unroll
    for (int j = 0; j < Tile::kD / 8; ++j) {
      *reinterpret_cast<uint32_t*>(dk + 8 * j) =
          pack2<T>(acc_dk[4 * j + 2 * h] * p.softmax_scale, acc_dk[4 * j + 2 * h + 1] * p.softmax_scale);
      *reinterpret_cast<uint32_t*>(dv + 8 * j) = pack2<T>(acc_dv[4 * j + 2 * h], acc_dv[4 * j + 2 * h + 1]);
    }
  }
}

// Where a step adds its dQ: the fp32 accumulator [B, Hq, ceil(Sq / kBM), kBM * D] of query
// block m_block of head `head`, and this warpgroup's part of it (its 64 x 64 dQ fragment in
// register order).
template <typename Tile>
__device__ __forceinline__ float* dq_accum_part(const BwdParams& p, int batch, int head, int m_block, int wg) {
  const int heads_q = p.f.group * gridDim.y, m_blocks_all = (p.f.seqlen_q + Tile::kBM - 1) / Tile::kBM;
  return p.dq_accum + ((int64_t(batch) * heads_q + head) * m_blocks_all + m_block) * (Tile::kBM * Tile::kD) +
         wg * Tile::kDqPart;
}

}  // namespace bwd90

// dK and dV of 128 keys of one K/V head (grid: (ceil(Sk / 128), Hkv, B)) and their part of
// dQ, added into dq_accum ([B, Hq, ceil(Sq / kBM), kBM * D] fp32, zeroed, fragment order).
template <typename T, typename Tile, Mask kMask>
__global__ void __launch_bounds__(Tile::kThreads, 1) flash_attention_bwd_wgmma_kernel(const BwdParams p) {
  constexpr int kD = Tile::kD, kBM = Tile::kBM, kBN = Tile::kBN;
  constexpr int kMSteps = kBM / 16;  // k-steps of dV and dK (the step's queries)
  const FwdParams& f = p.f;

  extern __shared__ uint8_t smem_raw[];
  uint8_t* const smem = ptx::align_smem<1024>(smem_raw);
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

  const bwd::Walk walk = bwd::Walk::of<kMask, kBN, kBM>(n0, f);

  sm90::copy_tile<kD, kBN>(sK, k, f.k_row, n0, f.seqlen_k, tid);
  sm90::copy_tile<kD, kBN>(sV, v, f.v_row, n0, f.seqlen_k, tid);
  ptx::cp_async_commit();

  auto load_step = [&](int it, int stage) {
    const int head = walk.head(it, kv_head, f.group);
    const int m0 = walk.m_block(it) * kBM;
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
      stats[kBM + tid] = in ? p.delta[(int64_t(batch) * f.group * gridDim.y + head) * p.stats_rows + row] : 0.f;
    }
  };
  if (walk.steps > 0) load_step(0, 0);

  float acc_dk[kD / 2], acc_dv[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) acc_dk[i] = acc_dv[i] = 0.f;

  const int wg_key0 = wg * 64;                       // this warpgroup's keys in the block
  const int key_mine = n0 + wg_key0 + warp * 16 + g;  // + 8 * h: this thread's rows of S^T
  // This warpgroup's part of a step's dQ: rows [dq_row0, + 64), columns [dq_col0, + 64).
  const int dq_row0 = Tile::kSplitRows ? wg * 64 : 0;
  const int dq_col0 = Tile::kSplitRows ? 0 : wg * 64;

#pragma unroll 1
  for (int it = 0; it < walk.steps; ++it) {
    const int stage = it & 1;
    ptx::cp_async_wait<0>();          // this thread's copies of the step (and K, V) have landed ...
    ptx::fence_proxy_async_shared();  // ... visible to wgmma's reads ...
    __syncthreads();                  // ... for every thread's; the other stage and dS^T are free
    if (it + 1 < walk.steps) load_step(it + 1, stage ^ 1);
    const uint32_t sQ = sStage0 + stage * 2 * Tile::kQBytes, sDo = sQ + Tile::kQBytes;
    const float* lse2 = s_stats + stage * 2 * kBM;
    const int head = walk.head(it, kv_head, f.group);
    const int m_block = walk.m_block(it);
    const int m0 = m_block * kBM;

    // S^T and dP^T in two commit groups, so that P^T's exponentials overlap dP^T's product.
    float s[kBM / 2], dp[kBM / 2];
    ptx::wgmma_fence();
    bwd90::issue_scores<T, Tile>(s, sK, sQ, wg_key0);
    ptx::wgmma_commit();
    bwd90::issue_scores<T, Tile>(dp, sV, sDo, wg_key0);
    ptx::wgmma_commit();
    bwd90::scores_to_grads<Tile, kMask>(s, dp, lse2, lse2 + kBM, m0, n0, key_mine, t, f);
    uint32_t p_frag[kMSteps][4], ds_frag[kMSteps][4];
    bwd90::to_a_fragments<T>(p_frag, s);
    bwd90::to_a_fragments<T>(ds_frag, dp);

    // dV += P^T dO and dK += dS^T Q.
    ptx::wgmma_fence();
    bwd90::issue_key_grad<T, Tile>(acc_dv, p_frag, sDo);
    bwd90::issue_key_grad<T, Tile>(acc_dk, ds_frag, sQ);
    ptx::wgmma_commit();

    bwd90::store_ds_t<Tile>(ds_tile, ds_frag, wg_key0, warp, g, t);
    ptx::fence_proxy_async_shared();  // the stores, visible to wgmma ...
    __syncthreads();                  // ... of both warpgroups

    float dq[32];
    ptx::wgmma_fence();
    bwd90::issue_dq<T, Tile>(dq, sDs, sK, dq_row0, dq_col0);
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
    ptx::fence_registers(dq);
    ptx::fence_registers(acc_dv);
    ptx::fence_registers(acc_dk);

    // Into the accumulator, fragment order: float4 i4 of thread tid_wg at (i4 * 128 + tid_wg) * 4.
    float* acc = bwd90::dq_accum_part<Tile>(p, batch, head, m_block, wg);
#pragma unroll
    for (int i4 = 0; i4 < 8; ++i4)
      atomicAdd(reinterpret_cast<float4*>(acc) + i4 * 128 + tid_wg,
                make_float4(dq[4 * i4], dq[4 * i4 + 1], dq[4 * i4 + 2], dq[4 * i4 + 3]));
  }

  ptx::cp_async_wait<0>();  // a CTA with no step still has its K/V copies in flight
  bwd90::store_dk_dv<T, Tile>(p, acc_dk, acc_dv, n0 + wg_key0 + warp * 16, kv_head, batch, g, t);
}

// The warp-specialized backward (config "wgmma.ws"): the same products per query block,
// organised as FlashAttention-3's backward.
//
//  * Warpgroup 0 gives its registers away (setmaxnreg.dec) and holds two roles: its warp 0
//    issues TMA loads (K and V once; per step Q with lse2 and dO with delta, each pair on
//    a barrier of its own in two-slot rings, so dO may land while S^T runs), its warp 1
//    adds each step's dQ into the fp32 accumulator with one bulk reduce-add a warpgroup
//    (cp.reduce.async.bulk: the L2 does the adds, no atomics from the consumers).
//  * Warpgroups 1 and 2 (240 registers each) compute, 64 keys each, without a CTA-wide
//    barrier: per step S^T, dP^T, then dV += P^T dO while dS^T goes to shared memory (two
//    buffers, so the one barrier of the two warpgroups a step is enough), then dQ = dS K
//    and dK += dS^T Q; dQ's fragment is staged in shared memory while dK runs.
//  * lse2 and delta come padded to whole query blocks (the delta kernel writes both), so a
//    step's stats are one aligned bulk copy each; rows past Sq read as zeros from TMA and
//    have P = 0.
namespace bwd_ws {

constexpr int kThreads = 384;  // producer / dQ-writer warpgroup + two consumer warpgroups
// setmaxnreg moves registers only within the launch's 168 a thread: 128 x 24 + 256 x 240.
constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;

enum NamedBarrier : int {
  kDsReady = 1,  // both consumer warpgroups' dS^T halves are in shared memory
  kDqFull = 2,   // + consumer warpgroup: its staged dQ may be added (with the writer warp)
  kDqEmpty = 4,  // + consumer warpgroup: the writer has read its staged dQ out
};

template <int kHeadDim>
struct Tile : FlashBwdWgmmaTile<kHeadDim> {
  using Base = FlashBwdWgmmaTile<kHeadDim>;
  static constexpr int kThreads = bwd_ws::kThreads;
  static constexpr int kDqBytes = Base::kDqPart * 4;  // a warpgroup's staged dQ (fp32)
  static constexpr int kStatsBytes = Base::kBM * 4;   // lse2 or delta of a step
  // K, V; two slots of Q, dO, dS^T; two staged dQ parts; two slots of lse2, of delta; the
  // barriers (K/V, and full / empty of the Q and dO rings); + 1024: re-aligned in the kernel.
  static constexpr int kBarrierBytes = 9 * 8;
  static constexpr int kSmemBytes = 2 * Base::kKBytes + 2 * (2 * Base::kQBytes + Base::kDsBytes) + 2 * kDqBytes +
                                    4 * kStatsBytes + kBarrierBytes + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

// Shared-memory addresses (every tile starts a 1024-byte swizzle atom).
template <class Cfg>
struct Smem {
  uint32_t k, v, q, dout, ds, dq, lse2, delta, bars;
  __device__ explicit Smem(uint32_t base) {
    k = base;
    v = k + Cfg::kKBytes;
    q = v + Cfg::kKBytes;        // + slot * kQBytes
    dout = q + 2 * Cfg::kQBytes;  // + slot * kQBytes
    ds = dout + 2 * Cfg::kQBytes;  // + slot * kDsBytes
    dq = ds + 2 * Cfg::kDsBytes;   // + warpgroup * kDqBytes
    lse2 = dq + 2 * Cfg::kDqBytes;  // + slot * kStatsBytes
    delta = lse2 + 2 * Cfg::kStatsBytes;
    bars = delta + 2 * Cfg::kStatsBytes;
  }
  // Barriers: K/V full; Q full, Q empty, dO full, dO empty (+ 8 * slot).
  __device__ uint32_t kv_full() const { return bars; }
  __device__ uint32_t q_full(int slot) const { return bars + 8 + 8 * slot; }
  __device__ uint32_t q_empty(int slot) const { return bars + 24 + 8 * slot; }
  __device__ uint32_t do_full(int slot) const { return bars + 40 + 8 * slot; }
  __device__ uint32_t do_empty(int slot) const { return bars + 56 + 8 * slot; }
};

// Deterministic dQ: the key blocks add into a query block's accumulator one at a time, in
// the order their walks would reach it anyway, so few wait. Without a mask every walk
// covers every query block, and key block n starts its walk at query block n * M / N (N key
// blocks, M query blocks: the rotation), so query block m is reached first by the last
// key block starting at or before it, then by the ones before that, cyclically. With a mask
// a later key block's walk starts later and ends later, so it reaches m first: the order is
// descending, and key block n's turn is the number of later key blocks that see m; the grid
// then runs the last key block first (owned_key_block), so a key block waits only on CTAs
// that started before it, and any grid size makes progress. Without a mask a key block may
// wait on any other of its head's, which must all fit on the GPU at once (the host's check).
template <Mask kMask>
__device__ __forceinline__ int owned_key_block(const BwdParams& p) {
  return kMask != Mask::kNone && p.dq_turns != nullptr ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x);
}
template <class Cfg, Mask kMask>
__device__ __forceinline__ int walk_rotation(int n, const FwdParams& f) {
  if constexpr (kMask != Mask::kNone) return 0;
  const int64_t m_blocks = (f.seqlen_q + Cfg::kBM - 1) / Cfg::kBM;
  return int(int64_t(n) * m_blocks / gridDim.x);
}
template <class Cfg, Mask kMask>
__device__ __forceinline__ int dq_turn(int n, int m, const FwdParams& f) {
  const int n_blocks = gridDim.x;
  if constexpr (kMask == Mask::kNone) {
    const int64_t m_blocks = (f.seqlen_q + Cfg::kBM - 1) / Cfg::kBM;
    const int64_t latest = ((m + 1) * int64_t(n_blocks) - 1) / m_blocks;  // starting at or before m
    const int first = int(latest < n_blocks - 1 ? latest : n_blocks - 1);
    return (first - n + n_blocks) % n_blocks;
  } else {
    int turn = 0;
    for (int later = n + 1; later < n_blocks; ++later, ++turn) {  // they are contiguous
      const bwd::QueryBlocks b = bwd::query_blocks_seeing<kMask, Cfg::kBN, Cfg::kBM>(later * Cfg::kBN, f);
      if (m < b.begin || m >= b.begin + b.count) break;
    }
    return turn;
  }
}

template <class Cfg>
__device__ __forceinline__ void produce(const CUtensorMap* map_q, const CUtensorMap* map_k, const CUtensorMap* map_v,
                                        const CUtensorMap* map_do, const BwdParams& p, const Smem<Cfg>& sm,
                                        const bwd::Walk& walk, int n0, int kv_head, int batch) {
  constexpr int kCols = Cfg::kD / 64;  // 64-column blocks of a row
  ptx::prefetch_tensor_map(map_q);
  ptx::prefetch_tensor_map(map_do);
  ptx::mbar_arrive_expect_tx(sm.kv_full(), 2 * Cfg::kKBytes);
#pragma unroll
  for (int cb = 0; cb < kCols; ++cb) {
    ptx::tma_load_4d(sm.k + cb * Cfg::kBN * 128, map_k, sm.kv_full(), cb * 64, n0, kv_head, batch);
    ptx::tma_load_4d(sm.v + cb * Cfg::kBN * 128, map_v, sm.kv_full(), cb * 64, n0, kv_head, batch);
  }
  const int heads_q = p.f.group * gridDim.y;
#pragma unroll 1
  for (int it = 0; it < walk.steps; ++it) {
    const int slot = it & 1;
    const uint32_t phase = (it >> 1) & 1;
    const int head = walk.head(it, kv_head, p.f.group), m0 = walk.m_block(it) * Cfg::kBM;
    const int64_t stats = (int64_t(batch) * heads_q + head) * p.stats_rows + m0;
    // Q and lse2, once the consumers are done with the slot's last ones (a fresh barrier's
    // "previous" phase counts as done).
    ptx::mbar_wait(sm.q_empty(slot), phase ^ 1u);
    ptx::mbar_arrive_expect_tx(sm.q_full(slot), Cfg::kQBytes + Cfg::kStatsBytes);
#pragma unroll
    for (int cb = 0; cb < kCols; ++cb)
      ptx::tma_load_4d(sm.q + slot * Cfg::kQBytes + cb * Cfg::kBM * 128, map_q, sm.q_full(slot), cb * 64, m0, head,
                       batch);
    ptx::bulk_load(sm.lse2 + slot * Cfg::kStatsBytes, p.lse2 + stats, Cfg::kStatsBytes, sm.q_full(slot));
    // dO and delta.
    ptx::mbar_wait(sm.do_empty(slot), phase ^ 1u);
    ptx::mbar_arrive_expect_tx(sm.do_full(slot), Cfg::kQBytes + Cfg::kStatsBytes);
#pragma unroll
    for (int cb = 0; cb < kCols; ++cb)
      ptx::tma_load_4d(sm.dout + slot * Cfg::kQBytes + cb * Cfg::kBM * 128, map_do, sm.do_full(slot), cb * 64, m0,
                       head, batch);
    ptx::bulk_load(sm.delta + slot * Cfg::kStatsBytes, p.delta + stats, Cfg::kStatsBytes, sm.do_full(slot));
  }
}

// The writer warp: each step's two staged dQ parts added into the accumulator; with
// p.dq_turns, in each query block's fixed order of key blocks (dq_turn).
template <class Cfg, Mask kMask>
__device__ __forceinline__ void write_dq(const BwdParams& p, const Smem<Cfg>& sm, const bwd::Walk& walk, int kv_head,
                                         int batch, int lane) {
  if (walk.steps == 0) return;  // no consumer waits on the barriers below
  ptx::named_barrier_arrive<160>(kDqEmpty + 0);  // both buffers start empty
  ptx::named_barrier_arrive<160>(kDqEmpty + 1);
  const int heads_q = p.f.group * gridDim.y, m_blocks_all = (p.f.seqlen_q + Cfg::kBM - 1) / Cfg::kBM;
#pragma unroll 1
  for (int it = 0; it < walk.steps; ++it) {
    const int head = walk.head(it, kv_head, p.f.group), m_block = walk.m_block(it);
    if (p.dq_turns == nullptr) {
#pragma unroll
      for (int wg = 0; wg < 2; ++wg) {
        ptx::named_barrier_sync<160>(kDqFull + wg);
        if (lane == 0)
          ptx::bulk_reduce_add_f32(bwd90::dq_accum_part<Cfg>(p, batch, head, m_block, wg),
                                   sm.dq + wg * Cfg::kDqBytes, Cfg::kDqBytes);
        ptx::bulk_wait_read_if<0>(lane == 0);
        __syncwarp();
        if (it + 1 < walk.steps) ptx::named_barrier_arrive<160>(kDqEmpty + wg);
      }
    } else {
      ptx::named_barrier_sync<160>(kDqFull + 0);
      ptx::named_barrier_sync<160>(kDqFull + 1);
      int* const turns = p.dq_turns + (int64_t(batch) * heads_q + head) * m_blocks_all + m_block;
      if (lane == 0) {
        ptx::counter_wait_eq(turns, dq_turn<Cfg, kMask>(owned_key_block<kMask>(p), m_block, p.f));
#pragma unroll
        for (int wg = 0; wg < 2; ++wg)
          ptx::bulk_reduce_add_f32(bwd90::dq_accum_part<Cfg>(p, batch, head, m_block, wg),
                                   sm.dq + wg * Cfg::kDqBytes, Cfg::kDqBytes);
      }
      ptx::bulk_wait_read_if<0>(lane == 0);
      __syncwarp();
      // The consumers may stage the next dQ once the adds have read this one; the next key
      // block's turn waits for the adds themselves.
      if (it + 1 < walk.steps) {
        ptx::named_barrier_arrive<160>(kDqEmpty + 0);
        ptx::named_barrier_arrive<160>(kDqEmpty + 1);
      }
      if (lane == 0) ptx::counter_release_increment(turns);  // once the adds are done
    }
  }
  if (lane == 0) ptx::bulk_wait_all();  // the staged dQ is read before the CTA's memory goes
}

template <typename T, class Cfg, Mask kMask>
__device__ __forceinline__ void consume(const BwdParams& p, uint8_t* smem, const Smem<Cfg>& sm, const bwd::Walk& walk,
                                        int n0, int kv_head, int batch) {
  constexpr int kD = Cfg::kD, kBM = Cfg::kBM, kMSteps = kBM / 16;
  const FwdParams& f = p.f;
  const int wg = int(threadIdx.x) / 128 - 1, tid_wg = int(threadIdx.x) % 128, warp = tid_wg / 32, lane = tid_wg % 32;
  const int g = lane / 4, t = lane % 4;
  const int wg_key0 = wg * 64;
  const int key_mine = n0 + wg_key0 + warp * 16 + g;
  const int dq_row0 = Cfg::kSplitRows ? wg * 64 : 0;
  const int dq_col0 = Cfg::kSplitRows ? 0 : wg * 64;
  const uint32_t smem_base = ptx::smem_addr(smem);
  const auto generic = [&](uint32_t addr) { return smem + (addr - smem_base); };
  float4* const dq_stage = reinterpret_cast<float4*>(generic(sm.dq + wg * Cfg::kDqBytes));

  float acc_dk[kD / 2], acc_dv[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) acc_dk[i] = acc_dv[i] = 0.f;

  if (walk.steps > 0) ptx::mbar_wait(sm.kv_full(), 0);

  // Every wgmma of a step is waited for within the step: one in flight across the loop's
  // back edge makes ptxas serialize them all (C7515).
#pragma unroll 1
  for (int it = 0; it < walk.steps; ++it) {
    const int slot = it & 1;
    const uint32_t phase = (it >> 1) & 1;
    const int m0 = walk.m_block(it) * kBM;
    const uint32_t sQ = sm.q + slot * Cfg::kQBytes, sDo = sm.dout + slot * Cfg::kQBytes;
    const uint32_t sDs = sm.ds + slot * Cfg::kDsBytes;
    const float* lse2 = reinterpret_cast<const float*>(generic(sm.lse2 + slot * Cfg::kStatsBytes));
    const float* delta = reinterpret_cast<const float*>(generic(sm.delta + slot * Cfg::kStatsBytes));

    // S^T as soon as Q is in, dP^T as soon as dO is (two commit groups).
    float s[kBM / 2], dp[kBM / 2];
    ptx::mbar_wait(sm.q_full(slot), phase);
    ptx::wgmma_fence();
    bwd90::issue_scores<T, Cfg>(s, sm.k, sQ, wg_key0);
    ptx::wgmma_commit();
    ptx::mbar_wait(sm.do_full(slot), phase);
    bwd90::issue_scores<T, Cfg>(dp, sm.v, sDo, wg_key0);
    ptx::wgmma_commit();
    bwd90::scores_to_grads<Cfg, kMask>(s, dp, lse2, delta, m0, n0, key_mine, t, f);
    uint32_t p_frag[kMSteps][4], ds_frag[kMSteps][4];
    bwd90::to_a_fragments<T>(p_frag, s);
    bwd90::to_a_fragments<T>(ds_frag, dp);

    // dV += P^T dO while dS^T goes to shared memory; the slot's buffer was last read by the
    // dQ products of step it - 2, which both warpgroups waited for before step it - 1's
    // barrier.
    ptx::wgmma_fence();
    bwd90::issue_key_grad<T, Cfg>(acc_dv, p_frag, sDo);
    ptx::wgmma_commit();
    bwd90::store_ds_t<Cfg>(generic(sDs), ds_frag, wg_key0, warp, g, t);
    ptx::fence_proxy_async_shared();  // the stores, visible to wgmma ...
    ptx::named_barrier_sync<256>(kDsReady);  // ... of both warpgroups

    // dQ's part, then dK += dS^T Q; dQ is staged while dK runs.
    float dq[32];
    ptx::wgmma_fence();
    bwd90::issue_dq<T, Cfg>(dq, sDs, sm.k, dq_row0, dq_col0);
    ptx::wgmma_commit();
    bwd90::issue_key_grad<T, Cfg>(acc_dk, ds_frag, sQ);
    ptx::wgmma_commit();
    ptx::wgmma_wait<1>();  // dV and dQ are done: dO is read
    ws::keep_registers(p_frag);
    ptx::fence_registers(dq);
    // Every consumer thread arrives once its own reads of the slot are done (racecheck sees
    // no ordering through a warp's single arrival after __syncwarp).
    ptx::mbar_arrive_if(sm.do_empty(slot), true);
    ptx::named_barrier_sync<160>(kDqEmpty + wg);
#pragma unroll
    for (int i4 = 0; i4 < 8; ++i4)  // the accumulator's fragment order
      dq_stage[i4 * 128 + tid_wg] = make_float4(dq[4 * i4], dq[4 * i4 + 1], dq[4 * i4 + 2], dq[4 * i4 + 3]);
    ptx::fence_proxy_async_shared();  // visible to the bulk reduce-add
    ptx::named_barrier_arrive<160>(kDqFull + wg);
    ptx::wgmma_wait<0>();  // dK is done: Q is read
    ws::keep_registers(ds_frag);
    ptx::fence_registers(acc_dv);
    ptx::fence_registers(acc_dk);
    ptx::mbar_arrive_if(sm.q_empty(slot), true);
  }
  bwd90::store_dk_dv<T, Cfg>(p, acc_dk, acc_dv, n0 + wg_key0 + warp * 16, kv_head, batch, g, t);
}

// dK and dV of 128 keys of one K/V head and their part of dQ, as the wgmma kernel (grid
// (ceil(Sk / 128), Hkv, B)); block: 384 threads; dynamic shared memory Cfg::kSmemBytes.
// Q, K, V and dO through 4-D tensor maps over [B, H, S, D] (boxes of 64 columns, kBM rows
// for Q and dO, 128 for K and V); p.lse2 and p.delta padded to p.stats_rows.
template <typename T, class Cfg, Mask kMask>
__global__ void __launch_bounds__(kThreads, 1)
    flash_attention_bwd_ws_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                                  const __grid_constant__ CUtensorMap map_v,
                                  const __grid_constant__ CUtensorMap map_do, const __grid_constant__ BwdParams p) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* const smem = ptx::align_smem<1024>(smem_raw);
  const Smem<Cfg> sm(ptx::smem_addr(smem));
  const int n_block = owned_key_block<kMask>(p), n0 = n_block * Cfg::kBN, kv_head = blockIdx.y, batch = blockIdx.z;
  const bwd::Walk walk = bwd::Walk::of<kMask, Cfg::kBN, Cfg::kBM>(
      n0, p.f, p.dq_turns != nullptr ? walk_rotation<Cfg, kMask>(n_block, p.f) : 0);
  if (threadIdx.x == 0) {
    ptx::mbar_init(sm.kv_full(), 1);
#pragma unroll
    for (int slot = 0; slot < 2; ++slot) {
      ptx::mbar_init(sm.q_full(slot), 1);
      ptx::mbar_init(sm.q_empty(slot), 256);  // every consumer thread
      ptx::mbar_init(sm.do_full(slot), 1);
      ptx::mbar_init(sm.do_empty(slot), 256);
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();
  // The role, broadcast from lane 0 so that ptxas sees a warp-uniform branch.
  const int warp = __shfl_sync(0xffffffffu, int(threadIdx.x / 32), 0);
  if (warp < 4) {
    ptx::registers_decrease<kProducerRegisters>();
    if (warp == 0 && threadIdx.x == 0 && walk.steps > 0)
      produce<Cfg>(&map_q, &map_k, &map_v, &map_do, p, sm, walk, n0, kv_head, batch);
    else if (warp == 1)
      write_dq<Cfg, kMask>(p, sm, walk, kv_head, batch, int(threadIdx.x) % 32);
  } else {
    ptx::registers_increase<kConsumerRegisters>();
    consume<T, Cfg, kMask>(p, smem, sm, walk, n0, kv_head, batch);
  }
}

}  // namespace bwd_ws

// dQ = softmax_scale * dq_accum in rows (grid: (ceil(Sq / kBM), Hq, B), 256 threads): each
// thread reads the eight float4s it would have added (the fragment order above) and puts its
// elements' pairs into a shared [kBM x D] tile (rows padded by 16 bytes: the pairs of a warp's
// store land in distinct banks); the block then writes whole rows in 16-byte vectors (dq's
// rows are 16-byte aligned: the entry point checks).
template <typename T, typename Tile>
__global__ void __launch_bounds__(Tile::kThreads) flash_attention_bwd_dq_convert_kernel(const BwdParams p) {
  constexpr int kBM = Tile::kBM, kD = Tile::kD, kPitch = kD + 8;  // elements a shared row
  __shared__ alignas(16) T tile[kBM * kPitch];
  const int tid = threadIdx.x, wg = tid / 128, tid_wg = tid % 128, warp = tid_wg / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int m_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const float* acc = p.dq_accum + ((int64_t(batch) * gridDim.y + head) * gridDim.x + m_block) * (kBM * kD) +
                     wg * Tile::kDqPart;
  const int row0 = (Tile::kSplitRows ? wg * 64 : 0) + warp * 16 + g;
  const int col0 = (Tile::kSplitRows ? 0 : wg * 64) + 2 * t;
#pragma unroll
  for (int i4 = 0; i4 < 8; ++i4) {  // i4: the 8-column group j of the m64n64 accumulator
    const float4 a = reinterpret_cast<const float4*>(acc)[i4 * 128 + tid_wg];
    *reinterpret_cast<uint32_t*>(tile + row0 * kPitch + col0 + 8 * i4) =
        pack2<T>(a.x * p.softmax_scale, a.y * p.softmax_scale);
    *reinterpret_cast<uint32_t*>(tile + (row0 + 8) * kPitch + col0 + 8 * i4) =
        pack2<T>(a.z * p.softmax_scale, a.w * p.softmax_scale);
  }
  __syncthreads();
  constexpr int kChunks = kD / 8;  // 16-byte vectors a row
  T* dq = static_cast<T*>(p.dq) + batch * p.dq_batch + head * p.dq_head;
#pragma unroll
  for (int i = tid; i < kBM * kChunks; i += Tile::kThreads) {
    const int r = i / kChunks, c = i % kChunks, row = m_block * kBM + r;
    if (row < p.f.seqlen_q)
      *reinterpret_cast<uint4*>(dq + int64_t(row) * p.dq_row + 8 * c) =
          *reinterpret_cast<const uint4*>(tile + r * kPitch + 8 * c);
  }
}

}  // namespace gks::kernels::attention
