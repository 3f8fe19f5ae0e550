// SPDX-License-Identifier: Apache-2.0
// What the attention kernels share: the parameters, a block's place in the grid and the
// K/V tiles it walks, the masks, the online-softmax step and the end of a row. The forward
// kernels (fwd_sm80.cuh on mma.sync, fwd_sm90.cuh on wgmma) hold scores in the mma
// accumulator layout: a thread (g, t) = (lane / 4, lane % 4) has rows g and g + 8 of its
// 16-row slice and, of each 8-key column group j, keys 8j + 2t and 8j + 2t + 1; a row's
// four threads are a quad (lanes 4g .. 4g + 3). The functions below take one row's scores
// through an accessor s(j, e): key 8j + 2t + e of the row.
//
// Semantics (see gks/attention.h): query row i sees keys j in
// [i + Sk - Sq - left, i + Sk - Sq + right] (a window aligned bottom-right; causal is
// right = 0), keys past Sk never seen; a row that sees no key gives o = 0 and lse = -inf;
// lse is the natural log. A softcap maps the scaled scores through cap * tanh(s / cap).
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
  float scale_log2;   // softmax_scale * log2(e); log2(e) with a softcap (the cap scales)
  // The window's bounds as the kernel's Mask reads them (Mask::kRight: window_right, 0 for
  // causal; Mask::kLocal: both, each clamped on the host to where it stops mattering).
  int window_left;
  int window_right;
  // softcap > 0: a score s becomes softcap * tanh(s * softcap_pre), softcap_pre =
  // softmax_scale / softcap; 0: no cap.
  float softcap;
  float softcap_pre;
  // Varlen (flash_attention_varlen_fwd): sequence b is rows [cu_seqlens_q[b],
  // cu_seqlens_q[b + 1]) of the packed q, o and lse and keys [cu_seqlens_k[b], + its length
  // or seqused_k[b]) of k and v; the batch strides are 0 and total_q / total_k the packed
  // rows. Null cu_seqlens_q: a dense batch.
  const int* cu_seqlens_q;
  const int* cu_seqlens_k;
  const int* seqused_k;
  int64_t total_q, total_k;
  // Varlen over a paged KV cache (page_table set): k and v are [num_pages, page_size, Hkv,
  // D] (k_page, v_page: the page strides) and key j of sequence b is row j % page_size of
  // page page_table[b * page_table_stride + j / page_size]; its keys are seqused_k[b] (or
  // cu_seqlens_k[b + 1] - cu_seqlens_k[b]) clamped to [0, capacity = pages per sequence *
  // page_size]. A page index outside [0, num_pages) reads as zeros.
  const int* page_table;
  int64_t page_table_stride;
  int page_size, num_pages, pages_per_seq;
  int64_t k_page, v_page;
};

// Where a varlen call's sequence b lies in the packed tensors: rows [q0, q0 + seqlen_q) of
// q, o and lse and, without a page table, keys [k0, k0 + seqlen_k) of k and v. Every bound
// is clamped into the packed tensors, so cu_seqlens that decrease or pass the totals
// shorten or empty a sequence and never reach outside them.
struct SequenceRows {
  int64_t q0, seqlen_q, k0, seqlen_k;
};
__device__ __forceinline__ SequenceRows sequence_rows(const FwdParams& in, int b) {
  const auto clamp = [](int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : (x > hi ? hi : x); };
  SequenceRows r;
  r.q0 = clamp(in.cu_seqlens_q[b], 0, in.total_q);
  r.seqlen_q = clamp(in.cu_seqlens_q[b + 1], r.q0, in.total_q) - r.q0;
  if (in.page_table != nullptr) {  // keys through the sequence's row of the page table
    const int64_t capacity = int64_t(in.pages_per_seq) * in.page_size;
    const int64_t listed = in.cu_seqlens_k == nullptr ? capacity
                                                       : int64_t(in.cu_seqlens_k[b + 1]) - in.cu_seqlens_k[b];
    r.k0 = 0;
    r.seqlen_k = clamp(in.seqused_k != nullptr ? in.seqused_k[b] : listed, 0, capacity);
    return r;
  }
  r.k0 = clamp(in.cu_seqlens_k[b], 0, in.total_k);
  r.seqlen_k = clamp(in.cu_seqlens_k[b + 1], r.k0, in.total_k) - r.k0;
  if (in.seqused_k != nullptr) r.seqlen_k = clamp(in.seqused_k[b], 0, r.seqlen_k);
  return r;
}

// A varlen call's sequence b as a one-sequence FwdParams (its rows at the base pointers, its
// lengths as seqlen_q / seqlen_k), read once by the CTA.
template <typename T>
__device__ __forceinline__ FwdParams sequence_params(const FwdParams& in, int b, const SequenceRows& r) {
  FwdParams p = in;
  p.q = static_cast<const T*>(in.q) + r.q0 * in.q_row;
  p.o = static_cast<T*>(in.o) + r.q0 * in.o_row;
  p.lse = in.lse + r.q0 * in.lse_row;
  p.seqlen_q = static_cast<int>(r.seqlen_q);
  p.seqlen_k = static_cast<int>(r.seqlen_k);
  if (in.page_table != nullptr) {
    p.page_table = in.page_table + int64_t(b) * in.page_table_stride;
  } else {
    p.k = static_cast<const T*>(in.k) + r.k0 * in.k_row;
    p.v = static_cast<const T*>(in.v) + r.k0 * in.v_row;
  }
  return p;
}
template <typename T>
__device__ __forceinline__ FwdParams sequence_params(const FwdParams& in, int b) {
  return sequence_params<T>(in, b, sequence_rows(in, b));
}

// Which key bounds a kernel instance applies, beyond Sk: none; a right bound only (causal,
// or a window with left unbounded), p.window_right after the diagonal; or both bounds.
enum class Mask { kNone, kRight, kLocal };

// A CTA's query block and (batch, head) from a grid of (query blocks, Hq, B): causal CTAs
// run longest-first (the last query blocks see the most keys); and where the heads' rows
// start.
template <typename T, Mask kMask>
struct BlockHeads {
  int m_block, head, batch, kv_head;

  __device__ __forceinline__ explicit BlockHeads(const FwdParams& p) : BlockHeads(p, first_m_block()) {}
  // Query block m_block of the grid's (head, batch); a varlen CTA walks several (its p has
  // the sequence's rows at the base and batch strides 0).
  __device__ __forceinline__ BlockHeads(const FwdParams& p, int m_block)
      : m_block(m_block), head(blockIdx.y), batch(blockIdx.z), kv_head(int(blockIdx.y) / p.group) {}
  static __device__ __forceinline__ int first_m_block() {
    return kMask == Mask::kRight ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x);
  }
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

// The keys [lo, hi) query row `row` sees (clamped to [0, Sk]; lo >= hi: none). 64-bit
// sums: a row index plus Sk plus a window can pass 2^31.
template <Mask kMask>
__device__ __forceinline__ int2 key_range(int row, const FwdParams& p) {
  const int64_t diag = int64_t(row) + p.seqlen_k - p.seqlen_q;
  int hi = p.seqlen_k, lo = 0;
  if constexpr (kMask != Mask::kNone)
    hi = int(max(int64_t(0), min(int64_t(p.seqlen_k), diag + p.window_right + 1)));
  if constexpr (kMask == Mask::kLocal)
    lo = int(max(int64_t(0), min(int64_t(p.seqlen_k), diag - p.window_left)));
  return make_int2(lo, hi);
}

// The walk over K/V tiles of a block of query rows [m0, m0 + kBM): the tiles of kBN keys
// that any of its rows sees, [n_min, n_max), visited from the last to the first. Tiles
// some row sees only in part need masks: those reaching past what the block's first row
// sees (the first passes of the walk) and those starting before what its last row sees
// (the last passes); the passes between them carry no mask code.
struct BlockWalk {
  int n_min, n_max;
  int masked_top;     // the first passes that need masks
  int masked_bottom;  // the last passes that need masks (disjoint from the first)

  __device__ __forceinline__ int blocks() const { return n_max - n_min; }
};

template <int kBM, int kBN, Mask kMask>
__device__ __forceinline__ BlockWalk block_walk(int m0, const FwdParams& p) {
  const int last = min(m0 + kBM, p.seqlen_q) - 1;
  const int2 first_keys = key_range<kMask>(m0, p), last_keys = key_range<kMask>(last, p);
  BlockWalk w;
  w.n_max = (last_keys.y + kBN - 1) / kBN;
  w.n_min = first_keys.x / kBN;
  if (w.n_max <= w.n_min || last_keys.y <= first_keys.x) {
    w.n_min = w.n_max = 0;  // no row sees a key
    w.masked_top = w.masked_bottom = 0;
    return w;
  }
  // Tile n is whole for every row when n * kBN >= last_keys.x and (n + 1) * kBN <=
  // first_keys.y (lo and hi grow with the row).
  const int whole_end = max(w.n_min, first_keys.y / kBN);                    // exclusive
  const int whole_begin = min(w.n_max, (last_keys.x + kBN - 1) / kBN);
  w.masked_top = w.n_max - max(whole_end, whole_begin);
  w.masked_bottom = min(whole_begin, whole_end) - w.n_min;
  if (whole_begin >= whole_end) {  // no whole tile: every pass is masked
    w.masked_top = w.blocks();
    w.masked_bottom = 0;
  }
  return w;
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

// Keys outside the row's [lo, hi): -inf. n0 is the tile's first key.
template <int kNTiles, class S>
__device__ __forceinline__ void mask_row(S&& s, int n0, int t, int2 keys) {
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
    const int col = n0 + j * 8 + 2 * t;
    if (col < keys.x || col >= keys.y) s(j, 0) = -INFINITY;
    if (col + 1 < keys.x || col + 1 >= keys.y) s(j, 1) = -INFINITY;
  }
}

// Gemma-2's softcap on a thread's kN raw scores: cap * tanh(s * scale / cap), with the
// hardware's tanh (about 2^-11 relative error: below the 16-bit rounding of P).
template <int kN>
__device__ __forceinline__ void apply_softcap(float* s, const FwdParams& p) {
#pragma unroll
  for (int i = 0; i < kN; ++i) s[i] = p.softcap * ptx::tanh_approx(s[i] * p.softcap_pre);
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

// The query blocks a CTA of the mma.sync / wgmma kernels computes, attend(p, m_block) each.
// Dense: its one block (first_m_block). Varlen: its sequence's (sequence_params) blocks
// first, + gridDim.x, ..., so a sequence longer than the grid's max_seqlen_q is still
// computed whole.
template <typename T, Mask kMask, bool kVarlen, int kBlockM, class Attend>
__device__ __forceinline__ void for_each_query_block(const FwdParams& params, Attend&& attend) {
  const int first = BlockHeads<T, kMask>::first_m_block();
  if constexpr (!kVarlen) {
    attend(params, first);
  } else {
    const FwdParams p = sequence_params<T>(params, int(blockIdx.z));
    for (int m_block = first; m_block * kBlockM < p.seqlen_q; m_block += gridDim.x) {
      attend(p, m_block);
      __syncthreads();  // the next block's copies overwrite the tiles this one read
    }
  }
}

}  // namespace gks::kernels::attention
