// SPDX-License-Identifier: Apache-2.0
// FlashAttention backward on Ampere/Hopper Tensor Cores (mma.sync m16n8k16, fp32 accumulate),
// deterministic: no atomics, every gradient element summed by one thread in a fixed order.
//
// From o, lse and dO (S the scaled, capped, masked scores, P = exp(S - lse)):
//   delta = rowsum(dO * o)                     flash_attention_bwd_delta_kernel
//   dV = P^T dO, dK = scale dS^T Q             flash_attention_bwd_dkdv_kernel: a CTA owns
//                                              kBlockN keys of one K/V head and walks the
//                                              query blocks of every query head of its group
//   dQ = scale dS K                            flash_attention_bwd_dq_kernel: a CTA owns
//                                              kBlockM query rows and walks their key blocks
// with dP = dO V^T and dS = P * (dP - delta) (times 1 - tanh^2 of the capped score under a
// softcap). The scores and P are computed twice, once in each kernel: the price of a dQ
// that needs no atomics (FlashAttention-2 adds dQ with fp32 atomics from the dK/dV kernel).
// Both walks mirror the forward (fwd_sm80.cuh: its tile copies, swizzle and ldmatrix lanes):
// a warp owns 16 rows (keys in the dK/dV kernel, queries in the dQ kernel) and every
// product's A operand is a warp's rows or its accumulators, so no score leaves registers.
// The streamed tiles are double buffered (cp.async of the next block during this one's
// math). Head dims above 128 take dK and dV in two passes of the dK/dV kernel, one
// accumulator set each (kDkDv = kOnlyDv, then kOnlyDk): both at once would not fit in the
// registers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gks/kernels/attention/common.cuh"
#include "gks/kernels/attention/fwd_sm80.cuh"
#include "gks/kernels/ptx/sm80.cuh"
#include "gks/kernels/vec.cuh"

namespace gks::kernels::attention {

// FwdParams (q, k, v, o, lse and the masks, as the forward reads them) and the backward's
// own tensors.
struct BwdParams {
  FwdParams f;
  const void* dout;  // dO [B, Hq, Sq, Dv]
  int64_t do_batch, do_head, do_row;
  float* delta;      // [B, Hq, stats_rows] contiguous (the library's workspace); varlen
                     // [Hq, total_q] (stats_rows = total_q)
  float* lse2;       // lse in log2 units, delta's layout; written only when not null (for
                     // the warp-specialized kernel's bulk copies; the others read lse)
  int64_t stats_rows;  // delta's rows a head: Sq, or Sq rounded up to whole query blocks
                       // (delta 0, lse2 +inf past Sq), or varlen total_q
  float* dq_accum;   // the wgmma kernels' fp32 dQ (bwd_sm90.cuh; the library's workspace)
  int* dq_turns;     // the warp-specialized kernel, deterministic: [B, Hq, query blocks], zeroed
                     // (how many key blocks have added into each dQ block); null otherwise
  void* dq;
  int64_t dq_batch, dq_head, dq_row;
  void* dk;
  int64_t dk_batch, dk_head, dk_row;
  void* dv;
  int64_t dv_batch, dv_head, dv_row;
  float softmax_scale;
};

// Which accumulators a dK/dV kernel keeps.
enum class DkDv { kBoth, kOnlyDv, kOnlyDk };

// A varlen call's sequence b (p.f.cu_seqlens_q set, batch strides 0) as a one-sequence
// BwdParams: every tensor's base at the sequence's rows (sequence_rows' clamps).
template <typename T>
__device__ __forceinline__ BwdParams sequence_bwd_params(const BwdParams& in, int b) {
  const SequenceRows r = sequence_rows(in.f, b);
  BwdParams p = in;
  p.f = sequence_params<T>(in.f, b, r);
  p.dout = static_cast<const T*>(in.dout) + r.q0 * in.do_row;
  p.delta = in.delta + r.q0;
  if (in.lse2 != nullptr) p.lse2 = in.lse2 + r.q0;
  p.dq = static_cast<T*>(in.dq) + r.q0 * in.dq_row;
  p.dk = static_cast<T*>(in.dk) + r.k0 * in.dk_row;
  p.dv = static_cast<T*>(in.dv) + r.k0 * in.dv_row;
  return p;
}

// The blocks a backward CTA computes, body(p, block, batch) each: dense, its one block
// (blockIdx.x) of batch blockIdx.z; varlen, its sequence's (blockIdx.z) blocks blockIdx.x,
// + gridDim.x, ... while block * kRows < rows(sequence's p) (so a sequence longer than the
// grid's max_seqlen is still computed whole), with batch 0 (the sequence's p is at its rows).
template <typename T, bool kVarlen, int kRows, class Rows, class Body>
__device__ __forceinline__ void for_each_bwd_block(const BwdParams& params, Rows&& rows, Body&& body) {
  if constexpr (!kVarlen) {
    body(params, int(blockIdx.x), int(blockIdx.z));
  } else {
    const BwdParams p = sequence_bwd_params<T>(params, int(blockIdx.z));
    for (int block = blockIdx.x; int64_t(block) * kRows < rows(p); block += gridDim.x) {
      body(p, block, 0);
      __syncthreads();  // the next block's copies overwrite the tiles this one read
    }
  }
}

// The tile shapes (the host reads the same numbers): 4 warps of 16 rows; kBlockM query rows
// a step of the dK/dV kernel, kBlockN keys a step of the dQ kernel.
template <int kHeadDim_, int kHeadDimV_ = kHeadDim_>
struct FlashBwdTile {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDimV_;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRows = 16 * kWarps;              // keys (dK/dV) or queries (dQ) a CTA owns
  static constexpr int kStep = kHeadDim <= 64 ? 64 : 32;  // the rows a step walks
  static constexpr int kChunks = kHeadDim / 8;
  static constexpr int kChunksV = kHeadDimV / 8;
  // Both accumulator sets at once up to D = 128; above, one a pass.
  static constexpr bool kSplitPasses = kHeadDim > 128;
  // Shared memory: the owned rows of the two operands, then two stages of the streamed
  // ones (and, in the dK/dV kernel, each stage's lse and delta).
  static constexpr int kOwnBytes = kRows * (kHeadDim + kHeadDimV) * 2;
  static constexpr int kStageBytes = kStep * (kHeadDim + kHeadDimV) * 2;
  static constexpr int kSmemBytes = kOwnBytes + 2 * kStageBytes + 2 * kStep * 8;
  static_assert(kHeadDim % 32 == 0 && kHeadDimV % 32 == 0, "head dims: multiples of 32 (the swizzle)");
  static_assert((kStep * kChunks) % kThreads == 0 && (kStep * kChunksV) % kThreads == 0 &&
                    (kRows * kChunks) % kThreads == 0 && (kRows * kChunksV) % kThreads == 0,
                "tile copies: whole 16-byte chunks per thread");
};

namespace bwd {

using sm80::LaneChunks;
using sm80::TileCopy;

// Whether key `key` is seen by query `query` (bounds and the mask's window).
template <Mask kMask>
__device__ __forceinline__ bool visible(int key, int query, const FwdParams& p) {
  if (key >= p.seqlen_k || query >= p.seqlen_q) return false;
  const int64_t diag = int64_t(key) - query - (int64_t(p.seqlen_k) - p.seqlen_q);
  if constexpr (kMask != Mask::kNone)
    if (diag > p.window_right) return false;
  if constexpr (kMask == Mask::kLocal)
    if (diag < -int64_t(p.window_left)) return false;
  return true;
}

// The query blocks (kStep rows each) whose rows see a key of [n0, n0 + kKeys): blocks
// [begin, begin + count).
struct QueryBlocks {
  int begin, count;
};
template <Mask kMask, int kKeys, int kStep>
__device__ __forceinline__ QueryBlocks query_blocks_seeing(int n0, const FwdParams& p) {
  const int64_t off = int64_t(p.seqlen_k) - p.seqlen_q;
  const int64_t last_key = int64_t(min(n0 + kKeys, p.seqlen_k)) - 1;
  int64_t i_lo = 0, i_hi = int64_t(p.seqlen_q) - 1;  // the rows, then as blocks
  if constexpr (kMask != Mask::kNone) i_lo = max(i_lo, int64_t(n0) - off - p.window_right);
  if constexpr (kMask == Mask::kLocal) i_hi = min(i_hi, last_key - off + p.window_left);
  const int begin = int(i_lo / kStep);
  return {begin, i_lo > i_hi ? 0 : int(i_hi / kStep) - begin + 1};
}

// A dK/dV CTA's walk over the query blocks that see its kKeys keys, kStep rows a block: step
// it is query block m_begin + it % m_blocks of query head kv_head * group + it / m_blocks
// (GQA: every head of the group).
// The rotation is 0 but for the Hopper kernel's ordered dQ without a mask (bwd_ws::dq_turn).
struct Walk {
  int m_begin, m_blocks, steps, rotation;
  template <Mask kMask, int kKeys, int kStep>
  __device__ static Walk of(int n0, const FwdParams& f, int rotation = 0) {
    const QueryBlocks b = query_blocks_seeing<kMask, kKeys, kStep>(n0, f);
    return {b.begin, b.count, b.count * f.group, rotation};
  }
  __device__ int head(int it, int kv_head, int group) const { return kv_head * group + it / m_blocks; }
  __device__ int m_block(int it) const { return m_begin + (it % m_blocks + rotation) % m_blocks; }
};

// lse as the kernels use it: log2 units, +inf for a row that saw no key (lse = -inf) so that
// its P is exp2(-inf) = 0 everywhere.
__device__ __forceinline__ float lse_log2(float lse) {
  return lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
}

// One score's P and the factor its dS takes beyond P (dP - delta): raw score s (q . k) ->
// z (capped or not) -> P = exp2(z * scale_log2 - lse2); the factor is 1 - tanh^2 under a
// softcap, else 1. Invisible pairs give P = 0.
__device__ __forceinline__ float score_p(float s, float lse2, bool seen, const FwdParams& p, float& factor) {
  float z = s;
  factor = 1.f;
  if (p.softcap != 0.f) {
    const float t = ptx::tanh_approx(s * p.softcap_pre);
    z = p.softcap * t;
    factor = 1.f - t * t;
  }
  return seen ? ptx::ex2_approx_ftz(fmaf(z, p.scale_log2, -lse2)) : 0.f;
}

// Accumulators of two adjacent 8-wide n-tiles as the A operand of the next product (k along
// their 16 columns).
template <typename T>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack2<T>(c0[0], c0[1]);
  a[1] = pack2<T>(c0[2], c0[3]);
  a[2] = pack2<T>(c1[0], c1[1]);
  a[3] = pack2<T>(c1[2], c1[3]);
}

// acc (a warp's 16 rows x kTiles * 8 columns) * scale -> rows [row0, row0 + 16) of a
// [rows, kTiles * 8] matrix at `out` (row stride ld), rows past `rows` skipped.
template <typename T, int kTiles>
__device__ __forceinline__ void store_rows(const float (&acc)[kTiles][4], T* out, int64_t ld, int row0, int rows,
                                           float scale, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + g + 8 * h;
    if (row >= rows) continue;
    T* dst = out + int64_t(row) * ld + 2 * t;
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
      *reinterpret_cast<uint32_t*>(dst + 8 * j) = pack2<T>(acc[j][2 * h] * scale, acc[j][2 * h + 1] * scale);
  }
}

// C[16 x kN] (+)= A[16 x 16 kK] B where A's rows are a warp's 16 rows of a swizzled tile
// (a_lane at row offset a_row) and B's kN columns are rows of another (b_lane, non-trans):
// the S = Q K^T pattern of the forward, k along the tiles' columns.
template <typename T, int kKSteps, int kNTiles, int kChunksA, int kChunksB>
__device__ __forceinline__ void gemm_rows_rows(float (&c)[kNTiles][4], uint32_t sA, const LaneChunks<kChunksA>& a_lane,
                                               int a_row, uint32_t sB, const LaneChunks<kChunksB>& b_lane) {
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    uint32_t a[4];
    ptx::ldmatrix_x4(a, a_lane.at(sA, a_row, kk * 2));
#pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
      uint32_t b[4];
      ptx::ldmatrix_x4(b, b_lane.at(sB, np * 16, kk * 2));
      ptx::mma_m16n8k16<T>(c[2 * np], a, b[0], b[1]);
      ptx::mma_m16n8k16<T>(c[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// C[16 x kN] += A B where A is a warp's accumulators of kKSteps * 16 columns (acc_to_a) and
// B [kKSteps * 16 rows, kN columns] a swizzled tile read transposed (the O += P V pattern).
template <typename T, int kKSteps, int kNTiles, int kChunksB>
__device__ __forceinline__ void gemm_acc_rows(float (&c)[kNTiles][4], const float (&a_acc)[2 * kKSteps][4], uint32_t sB,
                                              const LaneChunks<kChunksB>& b_lane) {
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    uint32_t a[4];
    acc_to_a<T>(a, a_acc[2 * kk], a_acc[2 * kk + 1]);
#pragma unroll
    for (int dp = 0; dp < kNTiles / 2; ++dp) {
      uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, b_lane.at(sB, kk * 16, dp * 2));
      ptx::mma_m16n8k16<T>(c[2 * dp], a, b[0], b[1]);
      ptx::mma_m16n8k16<T>(c[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

template <int kN>
__device__ __forceinline__ void zero(float (&c)[kN][4]) {
#pragma unroll
  for (int j = 0; j < kN; ++j) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.f;
}

}  // namespace bwd

// delta[row] = sum_d dO[row, d] * o[row, d] in fp32 (and lse2, when asked for): kLanes
// lanes a row, each one 16-byte vector of o and of dO (rows are 16-byte aligned: the entry
// point checks), kRows rows a 256-thread block (grid x: row blocks, y: heads, z: batch or
// sequences); dense, every row of [B * Hq * stats_rows] (padding rows past Sq: delta 0,
// lse2 +inf). The host sizes the grid from the same numbers.
template <int kHeadDimV>
struct BwdDeltaTile {
  static constexpr int kChunks = kHeadDimV / 8;  // 16-byte vectors a row
  static constexpr int kLanes = kChunks <= 4 ? 4 : kChunks <= 8 ? 8 : kChunks <= 16 ? 16 : 32;
  static_assert(kChunks <= 32, "head dims up to 256");
  static constexpr int kRows = 256 / kLanes;
};

template <typename T, int kHeadDimV, bool kVarlen = false>
__global__ void __launch_bounds__(256) flash_attention_bwd_delta_kernel(const BwdParams params) {
  using Tile = BwdDeltaTile<kHeadDimV>;
  const int chunk = threadIdx.x % Tile::kLanes, head = blockIdx.y;
  const auto rows = [](const BwdParams& p) { return int64_t(p.f.seqlen_q); };
  for_each_bwd_block<T, kVarlen, Tile::kRows>(params, rows, [&](const BwdParams& p, int block, int batch) {
    const FwdParams& f = p.f;
    const int row = block * Tile::kRows + threadIdx.x / Tile::kLanes;
    // Whole groups of kLanes lanes return together: the shuffles below stay within a group.
    if (row >= (kVarlen ? int64_t(f.seqlen_q) : p.stats_rows)) return;
    const int64_t at = (int64_t(batch) * gridDim.y + head) * p.stats_rows + row;
    if (row >= f.seqlen_q) {  // a padding row: adds nothing (P = exp2(-inf) = 0)
      if (chunk == 0) {
        p.delta[at] = 0.f;
        if (p.lse2 != nullptr) p.lse2[at] = INFINITY;
      }
      return;
    }
    float sum = 0.f;
    if (chunk < Tile::kChunks) {
      using V = Vec<T, 8>;
      const V o = reinterpret_cast<const V*>(static_cast<const T*>(f.o) + batch * f.o_batch + head * f.o_head +
                                             int64_t(row) * f.o_row)[chunk];
      const V d = reinterpret_cast<const V*>(static_cast<const T*>(p.dout) + batch * p.do_batch +
                                             head * p.do_head + int64_t(row) * p.do_row)[chunk];
#pragma unroll
      for (int e = 0; e < 8; ++e) sum = fmaf(float(o.v[e]), float(d.v[e]), sum);
    }
    const unsigned group = Tile::kLanes == 32 ? 0xffffffffu
                                              : ((1u << Tile::kLanes) - 1u) << (threadIdx.x % 32 / Tile::kLanes * Tile::kLanes);
#pragma unroll
    for (int s = Tile::kLanes / 2; s >= 1; s /= 2) sum += __shfl_xor_sync(group, sum, s);
    if (chunk == 0) {
      p.delta[at] = sum;
      if (p.lse2 != nullptr)
        p.lse2[at] = bwd::lse_log2(f.lse[batch * f.lse_batch + head * f.lse_head + int64_t(row) * f.lse_row]);
    }
  });
}

namespace bwd {

// dK and dV of key block n_block (kRows keys) of K/V head blockIdx.y, summed over the query
// heads of its group and every query block that sees one of its keys.
template <typename T, typename Tile, Mask kMask, DkDv kWhich>
__device__ __forceinline__ void dkdv_block(const BwdParams& p, int n_block, int batch) {
  constexpr int kD = Tile::kHeadDim, kDv = Tile::kHeadDimV, kRows = Tile::kRows, kStep = Tile::kStep;
  constexpr int kChunks = Tile::kChunks, kChunksV = Tile::kChunksV, kThreads = Tile::kThreads;
  constexpr int kQTiles = kStep / 8;  // 8-query column tiles of S^T
  constexpr bool kDv_ = kWhich != DkDv::kOnlyDk, kDk_ = kWhich != DkDv::kOnlyDv;
  const FwdParams& f = p.f;

  extern __shared__ __align__(128) unsigned char smem[];
  // Layout: K [kRows][D], V [kRows][Dv], then per stage Q [kStep][D], dO [kStep][Dv]; then
  // per stage lse2 [kStep] and delta [kStep].
  const uint32_t sK = ptx::smem_addr(smem);
  const uint32_t sV = sK + kRows * kD * 2;
  const uint32_t sStage0 = sV + kRows * kDv * 2;
  float* s_stats = reinterpret_cast<float*>(smem + Tile::kOwnBytes + 2 * Tile::kStageBytes);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int n0 = n_block * kRows, kv_head = blockIdx.y;
  const T* k = static_cast<const T*>(f.k) + batch * f.k_batch + kv_head * f.k_head;
  const T* v = static_cast<const T*>(f.v) + batch * f.v_batch + kv_head * f.v_head;

  const bwd::Walk walk = bwd::Walk::of<kMask, kRows, kStep>(n0, f);

  const sm80::TileCopy<kChunks, kThreads> copy(tid);
  const sm80::TileCopy<kChunksV, kThreads> copy_v(tid);
  copy.template operator()<kRows>(sK, k, f.k_row, n0, f.seqlen_k, tid);
  copy_v.template operator()<kRows>(sV, v, f.v_row, n0, f.seqlen_k, tid);
  ptx::cp_async_commit();

  auto load_step = [&](int it, int stage) {
    const int head = walk.head(it, kv_head, f.group);
    const int m0 = walk.m_block(it) * kStep;
    const uint32_t sQ = sStage0 + stage * Tile::kStageBytes, sDo = sQ + kStep * kD * 2;
    const T* q = static_cast<const T*>(f.q) + batch * f.q_batch + head * f.q_head;
    const T* dout = static_cast<const T*>(p.dout) + batch * p.do_batch + head * p.do_head;
    copy.template operator()<kStep>(sQ, q, f.q_row, m0, f.seqlen_q, tid);
    copy_v.template operator()<kStep>(sDo, dout, p.do_row, m0, f.seqlen_q, tid);
    ptx::cp_async_commit();
    if (tid < kStep) {  // read in a later step, after a barrier
      const int row = m0 + tid;
      const bool in = row < f.seqlen_q;
      const float* lse = f.lse + batch * f.lse_batch + head * f.lse_head;
      s_stats[stage * 2 * kStep + tid] = in ? bwd::lse_log2(lse[int64_t(row) * f.lse_row]) : INFINITY;
      s_stats[stage * 2 * kStep + kStep + tid] =
          in ? p.delta[(int64_t(batch) * f.group * gridDim.y + head) * p.stats_rows + row] : 0.f;
    }
  };
  if (walk.steps > 0) load_step(0, 0);

  float acc_dk[kDk_ ? kD / 8 : 1][4], acc_dv[kDv_ ? kDv / 8 : 1][4];
  bwd::zero(acc_dk);
  bwd::zero(acc_dv);

  // Lanes: A operands from this warp's 16 keys (K, V); B from the stage's query rows (Q, dO
  // non-trans for S^T and dP^T; transposed for dK += dS^T Q and dV += P^T dO).
  const int warp_row0 = warp * 16;
  const sm80::LaneChunks<kChunks> a_lane(lane % 16, lane / 16);
  const sm80::LaneChunks<kChunksV> a_lane_v(lane % 16, lane / 16);
  const sm80::LaneChunks<kChunks> b_lane((lane / 16) * 8 + lane % 8, (lane / 8) % 2);
  const sm80::LaneChunks<kChunksV> b_lane_v((lane / 16) * 8 + lane % 8, (lane / 8) % 2);
  const sm80::LaneChunks<kChunks> t_lane(lane % 16, lane / 16);
  const sm80::LaneChunks<kChunksV> t_lane_v(lane % 16, lane / 16);
  const int key_mine = n0 + warp_row0 + g;  // and + 8

#pragma unroll 1
  for (int it = 0; it < walk.steps; ++it) {
    const int stage = it & 1;
    ptx::cp_async_wait<0>();
    __syncthreads();  // this step's tiles (and K, V) are in; the other stage is free
    if (it + 1 < walk.steps) load_step(it + 1, stage ^ 1);
    const uint32_t sQ = sStage0 + stage * Tile::kStageBytes, sDo = sQ + kStep * kD * 2;
    const float* lse2 = s_stats + stage * 2 * kStep;
    const float* delta = lse2 + kStep;
    const int m0 = walk.m_block(it) * kStep;

    // S^T = K Q^T: this warp's 16 keys x the step's queries.
    float s[kQTiles][4];
    bwd::zero(s);
    bwd::gemm_rows_rows<T, kD / 16, kQTiles>(s, sK, a_lane, warp_row0, sQ, b_lane);
    // P^T and the dS factor; the masks per element (query 8j + 2t + e, key g + 8h).
    float factor[kQTiles][4];
#pragma unroll
    for (int j = 0; j < kQTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int q_local = 8 * j + 2 * t + (e & 1);
        const int key = key_mine + 8 * (e >> 1);
        const bool seen = bwd::visible<kMask>(key, m0 + q_local, f);
        s[j][e] = bwd::score_p(s[j][e], lse2[q_local], seen, f, factor[j][e]);
      }
    if constexpr (kDv_) {
      // dV += P^T dO (k along the step's queries).
      bwd::gemm_acc_rows<T, kStep / 16, kDv / 8>(acc_dv, s, sDo, t_lane_v);
    }
    if constexpr (kDk_) {
      // dP^T = V dO^T, then dS^T = P^T (dP^T - delta) * factor in place of dP^T.
      float dp[kQTiles][4];
      bwd::zero(dp);
      bwd::gemm_rows_rows<T, kDv / 16, kQTiles>(dp, sV, a_lane_v, warp_row0, sDo, b_lane_v);
#pragma unroll
      for (int j = 0; j < kQTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[j][e] = s[j][e] * (dp[j][e] - delta[8 * j + 2 * t + (e & 1)]) * factor[j][e];
      // dK += dS^T Q (k along the step's queries).
      bwd::gemm_acc_rows<T, kStep / 16, kD / 8>(acc_dk, dp, sQ, t_lane);
    }
  }

  ptx::cp_async_wait<0>();  // a CTA with no step still has its K/V copies in flight

  if constexpr (kDk_) {
    T* dk = static_cast<T*>(p.dk) + batch * p.dk_batch + kv_head * p.dk_head;
    bwd::store_rows<T, kD / 8>(acc_dk, dk, p.dk_row, n0 + warp_row0, f.seqlen_k, p.softmax_scale, lane);
  }
  if constexpr (kDv_) {
    T* dv = static_cast<T*>(p.dv) + batch * p.dv_batch + kv_head * p.dv_head;
    bwd::store_rows<T, kDv / 8>(acc_dv, dv, p.dv_row, n0 + warp_row0, f.seqlen_k, 1.f, lane);
  }
}

}  // namespace bwd

// Grid: (ceil(Sk / kRows), Hkv, B); varlen (ceil(max_seqlen_k / kRows), Hkv, sequences).
template <typename T, typename Tile, Mask kMask, DkDv kWhich, bool kVarlen = false>
__global__ void __launch_bounds__(Tile::kThreads) flash_attention_bwd_dkdv_kernel(const BwdParams params) {
  const auto rows = [](const BwdParams& p) { return int64_t(p.f.seqlen_k); };
  for_each_bwd_block<T, kVarlen, Tile::kRows>(params, rows, [](const BwdParams& p, int block, int batch) {
    bwd::dkdv_block<T, Tile, kMask, kWhich>(p, block, batch);
  });
}

namespace bwd {

// dQ of query block m_block (kRows rows) of query head blockIdx.y over the key blocks its
// rows see.
template <typename T, typename Tile, Mask kMask>
__device__ __forceinline__ void dq_block(const BwdParams& p, int m_block, int batch) {
  constexpr int kD = Tile::kHeadDim, kDv = Tile::kHeadDimV, kRows = Tile::kRows, kStep = Tile::kStep;
  constexpr int kChunks = Tile::kChunks, kChunksV = Tile::kChunksV, kThreads = Tile::kThreads;
  constexpr int kKTiles = kStep / 8;  // 8-key column tiles of S
  const FwdParams& f = p.f;

  extern __shared__ __align__(128) unsigned char smem[];
  // Layout: Q [kRows][D], dO [kRows][Dv], then per stage K [kStep][D], V [kStep][Dv].
  const uint32_t sQ = ptx::smem_addr(smem);
  const uint32_t sDo = sQ + kRows * kD * 2;
  const uint32_t sStage0 = sDo + kRows * kDv * 2;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int m0 = m_block * kRows, head = blockIdx.y;
  const int kv_head = head / f.group;
  const T* q = static_cast<const T*>(f.q) + batch * f.q_batch + head * f.q_head;
  const T* dout = static_cast<const T*>(p.dout) + batch * p.do_batch + head * p.do_head;
  const T* k = static_cast<const T*>(f.k) + batch * f.k_batch + kv_head * f.k_head;
  const T* v = static_cast<const T*>(f.v) + batch * f.v_batch + kv_head * f.v_head;

  const BlockWalk walk = block_walk<kRows, kStep, kMask>(m0, f);
  const int steps = walk.blocks();

  const sm80::TileCopy<kChunks, kThreads> copy(tid);
  const sm80::TileCopy<kChunksV, kThreads> copy_v(tid);
  copy.template operator()<kRows>(sQ, q, f.q_row, m0, f.seqlen_q, tid);
  copy_v.template operator()<kRows>(sDo, dout, p.do_row, m0, f.seqlen_q, tid);
  ptx::cp_async_commit();
  auto load_step = [&](int it, int stage) {
    const int n0 = (walk.n_min + it) * kStep;
    const uint32_t sK = sStage0 + stage * Tile::kStageBytes, sV = sK + kStep * kD * 2;
    copy.template operator()<kStep>(sK, k, f.k_row, n0, f.seqlen_k, tid);
    copy_v.template operator()<kStep>(sV, v, f.v_row, n0, f.seqlen_k, tid);
    ptx::cp_async_commit();
  };
  if (steps > 0) load_step(0, 0);

  // This thread's rows (g, g + 8 of the warp's 16): lse and delta.
  const int warp_row0 = warp * 16;
  const int row_mine = m0 + warp_row0 + g;
  float lse2[2], delta[2];
  {
    const float* lse = f.lse + batch * f.lse_batch + head * f.lse_head;
    const float* dl = p.delta + (int64_t(batch) * gridDim.y + head) * p.stats_rows;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row_mine + 8 * h;
      const bool in = row < f.seqlen_q;
      lse2[h] = in ? bwd::lse_log2(lse[int64_t(row) * f.lse_row]) : INFINITY;
      delta[h] = in ? dl[row] : 0.f;
    }
  }

  float acc_dq[kD / 8][4];
  bwd::zero(acc_dq);
  const sm80::LaneChunks<kChunks> a_lane(lane % 16, lane / 16);
  const sm80::LaneChunks<kChunksV> a_lane_v(lane % 16, lane / 16);
  const sm80::LaneChunks<kChunks> b_lane((lane / 16) * 8 + lane % 8, (lane / 8) % 2);
  const sm80::LaneChunks<kChunksV> b_lane_v((lane / 16) * 8 + lane % 8, (lane / 8) % 2);
  const sm80::LaneChunks<kChunks> t_lane(lane % 16, lane / 16);

#pragma unroll 1
  for (int it = 0; it < steps; ++it) {
    const int stage = it & 1;
    ptx::cp_async_wait<0>();
    __syncthreads();
    if (it + 1 < steps) load_step(it + 1, stage ^ 1);
    const uint32_t sK = sStage0 + stage * Tile::kStageBytes, sV = sK + kStep * kD * 2;
    const int n0 = (walk.n_min + it) * kStep;

    // S = Q K^T and dP = dO V^T: this warp's 16 queries x the step's keys.
    float s[kKTiles][4], dp[kKTiles][4];
    bwd::zero(s);
    bwd::zero(dp);
    bwd::gemm_rows_rows<T, kD / 16, kKTiles>(s, sQ, a_lane, warp_row0, sK, b_lane);
    bwd::gemm_rows_rows<T, kDv / 16, kKTiles>(dp, sDo, a_lane_v, warp_row0, sV, b_lane_v);
    // dS = P (dP - delta) * factor, in place of dP (row g + 8h, key 8j + 2t + e).
#pragma unroll
    for (int j = 0; j < kKTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1;
        const int key = n0 + 8 * j + 2 * t + (e & 1);
        const bool seen = bwd::visible<kMask>(key, row_mine + 8 * h, f);
        float factor;
        const float pr = bwd::score_p(s[j][e], lse2[h], seen, f, factor);
        dp[j][e] = pr * (dp[j][e] - delta[h]) * factor;
      }
    // dQ += dS K (k along the step's keys).
    bwd::gemm_acc_rows<T, kStep / 16, kD / 8>(acc_dq, dp, sK, t_lane);
  }

  ptx::cp_async_wait<0>();  // a CTA with no step still has its Q/dO copies in flight
  T* dq = static_cast<T*>(p.dq) + batch * p.dq_batch + head * p.dq_head;
  bwd::store_rows<T, kD / 8>(acc_dq, dq, p.dq_row, m0 + warp_row0, f.seqlen_q, p.softmax_scale, lane);
}

}  // namespace bwd

// Grid: (ceil(Sq / kRows), Hq, B); varlen (ceil(max_seqlen_q / kRows), Hq, sequences).
template <typename T, typename Tile, Mask kMask, bool kVarlen = false>
__global__ void __launch_bounds__(Tile::kThreads) flash_attention_bwd_dq_kernel(const BwdParams params) {
  const auto rows = [](const BwdParams& p) { return int64_t(p.f.seqlen_q); };
  for_each_bwd_block<T, kVarlen, Tile::kRows>(params, rows, [](const BwdParams& p, int block, int batch) {
    bwd::dq_block<T, Tile, kMask>(p, block, batch);
  });
}

}  // namespace gks::kernels::attention
