// SPDX-License-Identifier: Apache-2.0
// What the attention kernels share: the parameters, a block's place in the grid and the
// K/V tiles it walks, the masks, the online-softmax step and the end of a row. The forward
// kernels (fwd_sm80.cuh on mma.sync, fwd_sm90.cuh on wgmma) hold scores in the mma
// accumulator layout: a thread (g, t) = (lane / 4, lane % 4) has rows g and g + 8 of its
// 16-row slice and, of each 8-key column group j, keys 8j + 2t and 8j + 2t + 1; a row's
// four threads are a quad (lanes 4g .. 4g + 3). The functions below take one row's scores
// through an accessor s(j, e): key 8j + 2t + e of the row.
//
// Semantics (see gks/attention.h): causal aligned bottom-right (query row i sees keys
// j <= i + Sk - Sq), keys past Sk never seen; a row that sees no key gives o = 0 and
// lse = -inf; lse is the natural log.
#pragma once

#include <cstdint>

#include "gks/kernels/ptx/common.cuh"

namespace gks::kernels::attention {

struct FwdParams {
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

// A CTA's query block and (batch, head) from a grid of (query blocks, Hq, B): causal CTAs
// run longest-first (the last query blocks see the most keys); and where the heads' rows
// start.
template <typename T, bool kCausal>
struct BlockHeads {
  int m_block, head, batch, kv_head;

  __device__ __forceinline__ explicit BlockHeads(const FwdParams& p)
      : m_block(kCausal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x)),
        head(blockIdx.y),
        batch(blockIdx.z),
        kv_head(int(blockIdx.y) / p.group) {}
  __device__ __forceinline__ const T* q(const FwdParams& p) const {
    return static_cast<const T*>(p.q) + batch * p.q_batch + head * p.q_head;
  }
  __device__ __forceinline__ const T* k(const FwdParams& p) const {
    return static_cast<const T*>(p.k) + batch * p.k_batch + kv_head * p.k_head;
  }
  __device__ __forceinline__ const T* v(const FwdParams& p) const {
    return static_cast<const T*>(p.v) + batch * p.v_batch + kv_head * p.v_head;
  }
  // o and lse are only needed at the end; computed there to keep registers free.
  __device__ __forceinline__ T* o(const FwdParams& p) const {
    return static_cast<T*>(p.o) + batch * p.o_batch + head * p.o_head;
  }
  __device__ __forceinline__ float* lse(const FwdParams& p) const {
    return p.lse + batch * p.lse_batch + head * p.lse_head;
  }
};

// The walk over K/V tiles. A block of kBM query rows from m0 visits the tiles of kBN keys
// that any of its rows sees, from the last to the first: all ceil(Sk / kBN) of them, or
// (causal) those up to its last row's diagonal. (The kernels count them inline: as a
// function the count moved ptxas's schedule of the causal kernels.) diag_offset = Sk - Sq:
// query row i sees keys j < i + 1 + diag_offset (causal) and j < Sk.

// Tile n needs masks when it reaches past Sk or (causal) past what the block's first row
// sees: (n + 1) * kBN > visible_to_all. The walk goes from the last tile down, so the
// masked passes are its first ones.
template <int kBN, bool kCausal>
__device__ __forceinline__ int masked_passes(int n_blocks, int m0, int seqlen_k, int diag_offset) {
  const int visible_to_all = kCausal ? min(seqlen_k, m0 + diag_offset + 1) : seqlen_k;
  const int first_masked = max(visible_to_all, 0) / kBN;
  return max(0, n_blocks - first_masked);
}

// The first key query row `row` does not see.
template <bool kCausal>
__device__ __forceinline__ int key_limit(int row, int seqlen_k, int diag_offset) {
  return kCausal ? min(seqlen_k, row + 1 + diag_offset) : seqlen_k;
}

// A block whose rows see no key: o = 0 (16-byte stores of kChunks a row) and lse = -inf.
template <int kBM, int kChunks, int kThreads, typename T>
__device__ __forceinline__ void write_unseen_rows(T* o, float* lse, const FwdParams& p, int m0,
                                                  int tid) {
  for (int idx = tid; idx < kBM * kChunks; idx += kThreads) {
    const int row = m0 + idx / kChunks;
    if (row < p.seqlen_q)
      *reinterpret_cast<uint4*>(o + int64_t(row) * p.o_row + (idx % kChunks) * 8) =
          make_uint4(0, 0, 0, 0);
  }
  for (int r = tid; r < kBM; r += kThreads)
    if (m0 + r < p.seqlen_q) lse[int64_t(m0 + r) * p.lse_row] = -INFINITY;
}

// Keys past Sk and, causal, above the diagonal: -inf. `limit`: the row's key_limit; n0 the
// tile's first key.
template <int kNTiles, class S>
__device__ __forceinline__ void mask_row(S&& s, int n0, int t, int limit) {
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
    const int col = n0 + j * 8 + 2 * t;
    if (col >= limit) s(j, 0) = -INFINITY;
    if (col + 1 >= limit) s(j, 1) = -INFINITY;
  }
}

// One row's online-softmax step over a tile: the running max (of raw scores) takes the
// tile's, the scores become exp2(s * scale_log2 - max * scale_log2), the running sum is
// rescaled and added to. Returns the factor O's row must be rescaled by (1 when the max did
// not move). In a kMasked pass a row may have seen only masked keys (max -inf): it shifts by
// 0, so that exp2(-inf - shift) is 0 rather than NaN; unmasked scores are finite.
// The correction takes the difference of the maxes first, so it is exactly 1 when the max
// did not move: old * scale_log2 - shift would contract to an fma that keeps shift's
// rounding error, a factor 1 +- 1.7e-7 that compounds over the tiles into lse.
template <bool kMasked, int kNTiles, class S>
__device__ __forceinline__ float softmax_step(S&& s, float& row_max, float& row_sum,
                                              float scale_log2) {
  float mx = row_max;
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) mx = fmaxf(mx, fmaxf(s(j, 0), s(j, 1)));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const bool none_seen = kMasked && mx == -INFINITY;  // then row_max is -inf too: -inf - -inf
  const float shift = none_seen ? 0.f : mx * scale_log2;
  const float correction = none_seen ? 1.f : ptx::ex2_approx_ftz((row_max - mx) * scale_log2);
  row_max = mx;
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
    s(j, 0) = ptx::ex2_approx_ftz(fmaf(s(j, 0), scale_log2, -shift));
    s(j, 1) = ptx::ex2_approx_ftz(fmaf(s(j, 1), scale_log2, -shift));
    sum += s(j, 0) + s(j, 1);
  }
  row_sum = row_sum * correction + sum;
  return correction;
}

// The end of row `row`: its quad's sums added; lane t == 0 writes its lse where the row
// exists, ln(sum_j 2^(s_j * scale_log2)) = ln2 * (max * scale_log2 + log2(sum)), or -inf
// for a row that saw no key (sum 0). Returns the row's normalizer 1 / sum (0 for such a
// row). A NaN score makes the sum NaN, which is not 0: lse and o are NaN, not "no key".
__device__ __forceinline__ float finish_row(float row_sum, float row_max, int row, int t,
                                            const FwdParams& p, float* lse) {
  float sum = row_sum;
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  if (t == 0 && row < p.seqlen_q) {
    lse[int64_t(row) * p.lse_row] =
        sum != 0.f ? (row_max * p.scale_log2 + __log2f(sum)) * 0.69314718055994531f : -INFINITY;
  }
  return sum != 0.f ? 1.f / sum : 0.f;
}

}  // namespace gks::kernels::attention
