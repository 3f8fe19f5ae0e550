// SPDX-License-Identifier: Apache-2.0
// The Hopper GEMM's epilogues: how a consumer warpgroup's accumulators become c. The
// kernel's second policy, Epilogue<Scales>: Scales says what happens to an accumulator
// (NoScales: nothing, the grouped GEMMs and gemm calls without a term; Fused: the fused
// epilogue of Params::epi, epilogue_terms.h: c = float(acc) * row_scale[row] *
// col_scale[col] + bias[col], then with a gated unit act(gate) * up of each interleaved
// column pair, c N / 2 wide: gemm's options, int8_gemm's and gemm_fp8's scales); the
// store path is picked per call:
//  * split-K partial sums (k_splits > 1): raw sums into the workspace, finished by
//    split_k_reduce_kernel;
//  * TMA stores (c_tma: a 16-bit c whose rows are 16-byte aligned, no split-K, no erf gelu
//    unit, and room beside the ring for two 8 KiB buffers a consumer warpgroup): each
//    64 x 64 sub-tile is converted in registers, written to a buffer by stmatrix in the
//    128-byte swizzle, and stored by one thread's cp.async.bulk.tensor, which also clips
//    the edges. Fewer instructions between a tile's last wgmma and the next tile's first
//    than the direct path: no shuffles, no per-lane stores. A silu or gelu_tanh unit makes
//    a sub-tile 64 x 32 outputs (store_atom_tma_gated: the 64-byte swizzle);
//  * direct (c_vec: c's rows 16-byte aligned, and no column terms: row scales at most): the
//    four lanes of a quad swap values with shuffles so that each holds 8 adjacent columns
//    of a row, one 16-byte store (two for fp32), no shared memory and no barrier;
//  * staged (any other c): 64 x 32 fp32 chunks in a private shared buffer (rows padded to
//    40 floats: the float2 writes of a half-warp and the 16-byte reads hit distinct banks)
//    written out row-contiguously, converting to the output dtype. A gated unit's
//    activations (any of the three) run there in a loop that is not unrolled.
// Code size is compile time here: every term and activation inlined at each column pair
// of an unrolled store is copied per config, store path and output type. The column terms
// (epilogue_terms.cuh, read without branches) live in the TMA and staged paths only, the
// activations in one rolled loop; with them in every path and unrolled, a config took 3x
// as long to compile as without the epilogue (now 1.5x).
// The accumulators are never reinterpreted as integers: ptxas would then move them between
// register classes inside the main loop and serialize its wgmmas.
#pragma once

#include <cuda.h>  // CUtensorMap (types only)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "gks/kernels/gemm/epilogue_terms.cuh"
#include "gks/kernels/gemm/sm90/scheduler.cuh"
#include "gks/kernels/gemm/sm90/tile.cuh"
#include "gks/kernels/ptx/sm90.cuh"
#include "gks/kernels/vec.cuh"

namespace gks::kernels::gemm::sm90 {

// An accumulator as it is (fp16 / bf16 GEMM).
struct NoScales {
  static constexpr bool kApplies = false;
};

// The fused epilogue, float(acc) * row(row) * col(col) + bias(col) in that order (the
// references' and int8_gemm's), then p.epi.gated's unit: row(), col() and bias() give a row's
// and a column's terms inside c (1, 1 and 0 where Params::epi has none); the store paths
// give the rows and columns past the edge scale 0 and bias 0 (never stored).
struct Fused {
  static constexpr bool kApplies = true;
  static __device__ __forceinline__ float row(const Params& p, int64_t row) {
    return epilogue_row_scale(p.epi, row);
  }
  static __device__ __forceinline__ float col(const Params& p, int col) { return epilogue_col_scale(p.epi, col); }
  static __device__ __forceinline__ float bias(const Params& p, int col) { return epilogue_bias(p.epi, col); }
  // The terms of column col, zero past the edge.
  static __device__ __forceinline__ void column(const Params& p, int col, float& scale, float& add) {
    scale = col < p.n ? Fused::col(p, col) : 0.f;
    add = col < p.n ? Fused::bias(p, col) : 0.f;
  }
};

// The column terms (scale, bias) of this thread's column pair in each of kGroups 8-column
// groups from column col0, read all at once before the stores that use them: the stores'
// shared-memory asm (stmatrix, barriers) orders memory, so a read placed between them
// would wait its full latency each time, for every column pair of every tile.
template <class Scales, int kGroups>
__device__ __forceinline__ void column_terms(const Params& p, int col0, int lane, float (&scale)[kGroups][2],
                                             float (&add)[kGroups][2]) {
#pragma unroll
  for (int j = 0; j < kGroups; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) Scales::column(p, col0 + 8 * j + 2 * (lane % 4) + e, scale[j][e], add[j][e]);
}

// Calls f(Type<OutT>{}) with c's element type OutT: float (c_kind 0), else the 16-bit type
// c_kind names. The fp16/bf16 GEMM's 16-bit output is always its input type, so only that
// one is compiled for it; 8-bit inputs (int8, fp8) may write either.
template <typename T>
struct Type {
  using type = T;
};
template <class Op, class F>
__device__ __forceinline__ void with_c_type(int c_kind, F&& f) {
  if (c_kind == 0) {
    f(Type<float>{});
  } else if constexpr (sizeof(typename Op::In) == 1) {
    if (c_kind == 1)
      f(Type<__half>{});
    else
      f(Type<__nv_bfloat16>{});
  } else {
    f(Type<typename Op::In>{});
  }
}

// Reads a staged 64 x kCols chunk out to c (rows from row0, columns from chunk_col of c's
// n_out; column j of the chunk at float kStride j of its row) as OutT, 16 bytes a store
// where c allows, masked at the edges and to the rows the tile may write.
template <typename OutT, int kCols, int kStride = 1>
__device__ __forceinline__ void write_chunk(const Params& p, const float* stage_buf, int64_t row0,
                                            int chunk_col, int n_out, const TileRows& rows) {
  constexpr int kPer = 16 / int(sizeof(OutT));  // outputs per 16-byte store
  constexpr int kVecs = kCols / kPer;
  const int t = threadIdx.x % 128;
#pragma unroll
  for (int i = t; i < 64 * kVecs; i += 128) {
    const int r = i / kVecs, v = i % kVecs;
    const int64_t row = row0 + r;
    const int col = chunk_col + v * kPer;
    if (col >= n_out || !rows.keep(p, row)) continue;
    float vals[kPer];
#pragma unroll
    for (int e = 0; e < kPer; e += 4) {
      const float* at = stage_buf + r * kEpiloguePitch + (v * kPer + e) * kStride;
      if constexpr (kStride == 1) {
        const float4 q = *reinterpret_cast<const float4*>(at);
        vals[e] = q.x, vals[e + 1] = q.y, vals[e + 2] = q.z, vals[e + 3] = q.w;
      } else {
#pragma unroll
        for (int f = 0; f < 4; ++f) vals[e + f] = at[f * kStride];
      }
    }
    OutT* dst = static_cast<OutT*>(p.c) + rows.c_offset + row * p.ldc + col;
    if (p.c_vec && col + kPer <= n_out) {
      Vec<OutT, kPer> out;
#pragma unroll
      for (int e = 0; e < kPer; ++e) out.v[e] = from_float<OutT>(vals[e]);
      *reinterpret_cast<Vec<OutT, kPer>*>(dst) = out;
    } else {
#pragma unroll
      for (int e = 0; e < kPer; ++e)
        if (col + e < n_out) dst[e] = from_float<OutT>(vals[e]);
    }
  }
}

// Writes one 64 x kBlockN accumulator atom of a consumer warpgroup to c, in 64 x 32
// chunks staged through `stage_buf` (gated: 64 x 16 outputs a chunk, one a column pair,
// each written over its gate's float). `row0`/`col0`: the atom's first element in the
// product.
template <class Op, class Cfg, class Scales>
__device__ __forceinline__ void store_atom_staged(const Params& p,
                                                  const typename Op::Acc (&acc)[Cfg::kAccum],
                                                  float* stage_buf, int barrier_id, int64_t row0,
                                                  int col0, const TileRows& rows) {
  const int t = threadIdx.x % 128;
  const int warp = t / 32, lane = t % 32;
  // Accumulator fragment of m64nN: register 4j + {0,1} holds row warp*16 + lane/4,
  // columns 8j + 2*(lane%4) + {0,1}; registers 4j + {2,3} the same columns 8 rows down.
  const int r = warp * 16 + lane / 4;
  float sa_lo = 1.f, sa_hi = 1.f;  // the scales of this thread's two rows
  bool gated = false;
  if constexpr (Scales::kApplies) {
    sa_lo = row0 + r < p.m ? Scales::row(p, row0 + r) : 0.f;
    sa_hi = row0 + r + 8 < p.m ? Scales::row(p, row0 + r + 8) : 0.f;
    gated = p.epi.gated != 0;
  }
#pragma unroll
  for (int chunk = 0; chunk < Cfg::kBlockN / kEpilogueCols; ++chunk) {
    const int chunk_col = col0 + chunk * kEpilogueCols;
    if (chunk_col >= p.n) break;  // uniform across the warpgroup
    float sb[kEpilogueCols / 8][2], bias[kEpilogueCols / 8][2];  // this thread's columns' terms
    if constexpr (Scales::kApplies) column_terms<Scales, kEpilogueCols / 8>(p, chunk_col, lane, sb, bias);
    ptx::named_barrier_sync<128>(barrier_id);  // the previous chunk has been read out
#pragma unroll
    for (int jj = 0; jj < kEpilogueCols / 8; ++jj) {
      const int j = chunk * (kEpilogueCols / 8) + jj;
      const int col = jj * 8 + 2 * (lane % 4);
      float2 lo, hi;
      if constexpr (Scales::kApplies) {
        const float *sc = sb[jj], *bi = bias[jj];
        lo = make_float2(float(acc[4 * j]) * sa_lo * sc[0] + bi[0], float(acc[4 * j + 1]) * sa_lo * sc[1] + bi[1]);
        hi = make_float2(float(acc[4 * j + 2]) * sa_hi * sc[0] + bi[0], float(acc[4 * j + 3]) * sa_hi * sc[1] + bi[1]);
      } else {
        lo = make_float2(acc[4 * j], acc[4 * j + 1]);
        hi = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
      }
      *reinterpret_cast<float2*>(stage_buf + r * kEpiloguePitch + col) = lo;
      *reinterpret_cast<float2*>(stage_buf + (r + 8) * kEpiloguePitch + col) = hi;
    }
    ptx::named_barrier_sync<128>(barrier_id);
    if (gated) {
      // Each (gate, up) pair of the chunk becomes its output, over the gate, by the one
      // thread that reads it; a loop kept rolled, so the activations are inlined once a
      // chunk rather than at every column pair.
#pragma unroll 1
      for (int i = t; i < 64 * (kEpilogueCols / 2); i += 128) {
        float* pair = stage_buf + (i / (kEpilogueCols / 2)) * kEpiloguePitch + 2 * (i % (kEpilogueCols / 2));
        pair[0] = epilogue_gated(p.epi, pair[0], pair[1]);
      }
      ptx::named_barrier_sync<128>(barrier_id);
    }
    with_c_type<Op>(p.c_kind, [&](auto out) {
      using OutT = typename decltype(out)::type;
      if (gated)
        write_chunk<OutT, kEpilogueCols / 2, 2>(p, stage_buf, row0, chunk_col / 2, p.n / 2, rows);
      else
        write_chunk<OutT, kEpilogueCols>(p, stage_buf, row0, chunk_col, p.n, rows);
    });
  }
}

// Lanes 4q..4q+3 of a quad each hold one 32-bit value of four column groups (e[i]: group
// i); afterwards lane q's e[p] is lane p's value of group q, so that a lane holds one
// group's eight adjacent columns. Two butterfly rounds of shuffles.
template <typename W>
__device__ __forceinline__ void quad_transpose(W (&e)[4], int lane) {
#pragma unroll
  for (int d = 1; d <= 2; d <<= 1) {
    const bool upper = (lane & d) != 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (i & d) continue;
      const W received = __shfl_xor_sync(0xffffffffu, upper ? e[i] : e[i | d], d);
      if (upper)
        e[i] = received;
      else
        e[i | d] = received;
    }
  }
}

// Writes one 64 x kBlockN accumulator atom to c (rows 16-byte aligned) straight from
// registers, with no shared memory and no barrier. Each quad of lanes swaps its values
// (quad_transpose) so that a lane owns 8 adjacent columns of a row: one 16-byte store for a
// 16-bit c, two for fp32. Masked at the edges and to the rows the tile may write.
template <class Op, typename OutT, class Cfg, class Scales>
__device__ __forceinline__ void store_atom_direct(const Params& p,
                                                  const typename Op::Acc (&acc)[Cfg::kAccum],
                                                  int64_t row0, int col0, const TileRows& rows) {
  // Per column pair: two floats (fp32 c), or one 32-bit word of two 16-bit values.
  constexpr bool kFloat = sizeof(OutT) == 4;
  using Pair = Vec<OutT, 2>;
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
  const int quad_lane = lane % 4;
  const int64_t first_row = row0 + warp * 16 + lane / 4;  // and 8 rows below
  const bool row_ok[2] = {rows.keep(p, first_row), rows.keep(p, first_row + 8)};
  float sa[2] = {1.f, 1.f};  // the scales of this thread's two rows
  if constexpr (Scales::kApplies) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
      sa[h] = first_row + 8 * h < p.m ? Scales::row(p, first_row + 8 * h) : 0.f;
  }
#pragma unroll
  for (int g = 0; g < Cfg::kBlockN / 32; ++g) {  // four 8-column groups at a time
    // lo/hi[h][i]: the even and odd column of this thread's pair in group 4g + i, row h.
    float lo[2][4], hi[2][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int j = 4 * g + i;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        lo[h][i] = float(acc[4 * j + 2 * h]);
        hi[h][i] = float(acc[4 * j + 2 * h + 1]);
        if constexpr (Scales::kApplies) {
          lo[h][i] = lo[h][i] * sa[h];
          hi[h][i] = hi[h][i] * sa[h];
        }
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t packed[4];
      if constexpr (kFloat) {
        quad_transpose(lo[h], lane);
        quad_transpose(hi[h], lane);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          Pair pair;
          pair.v[0] = from_float<OutT>(lo[h][i]);
          pair.v[1] = from_float<OutT>(hi[h][i]);
          packed[i] = *reinterpret_cast<const uint32_t*>(&pair);
        }
        quad_transpose(packed, lane);
      }
      const int64_t row = first_row + 8 * h;
      const int col = col0 + 32 * g + 8 * quad_lane;  // this lane's group
      if (!row_ok[h] || col >= p.n) continue;
      OutT* dst = static_cast<OutT*>(p.c) + rows.c_offset + row * p.ldc + col;
      if (col + 8 <= p.n) {
        if constexpr (kFloat) {
          reinterpret_cast<float4*>(dst)[0] = make_float4(lo[h][0], hi[h][0], lo[h][1], hi[h][1]);
          reinterpret_cast<float4*>(dst)[1] = make_float4(lo[h][2], hi[h][2], lo[h][3], hi[h][3]);
        } else {
          *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
        }
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          if (col + e >= p.n) break;
          if constexpr (kFloat)
            dst[e] = e % 2 ? hi[h][e / 2] : lo[h][e / 2];
          else
            dst[e] = reinterpret_cast<const Pair*>(&packed[e / 2])->v[e % 2];
        }
      }
    }
  }
}

// Writes one 64 x kBlockN accumulator atom to a 16-bit c through shared memory and TMA:
// each 64 x 64 sub-tile goes by stmatrix (no shuffles) into one of the warpgroup's two
// buffers, in the 128-byte swizzle map_c reads with, and one thread stores it with
// cp.async.bulk.tensor; TMA clips rows and columns past the edges. `sub` counts the
// warpgroup's sub-tiles (which buffer). Buffer reuse: before the barrier that publishes
// sub-tile s, the storing thread waits until the store of s - 1 has read its buffer, which
// sub-tile s + 1 then overwrites.
template <class Op, typename OutT, class Cfg, class Scales>
__device__ __forceinline__ void store_atom_tma(const Params& p,
                                               const typename Op::Acc (&acc)[Cfg::kAccum],
                                               const CUtensorMap* map_c, uint32_t buffers,
                                               int barrier_id, int row0, int col0, int& sub) {
  using Pair = Vec<OutT, 2>;
  const int t = threadIdx.x % 128, lane = t % 32, warp = t / 32;
  // stmatrix addresses: lanes 8i..8i+7 name the rows of matrix i; matrices 0 / 1 are the
  // top / bottom 8 rows of an 8-column group, 2 / 3 those of the next group.
  const int st_row = warp * 16 + lane % 8 + 8 * ((lane / 8) % 2);
  const int st_group = lane / 16;
  float sa[2] = {1.f, 1.f};  // the scales of this thread's two fragment rows
  if constexpr (Scales::kApplies) {
    const int64_t first_row = int64_t(row0) + warp * 16 + lane / 4;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      sa[h] = first_row + 8 * h < p.m ? Scales::row(p, first_row + 8 * h) : 0.f;
  }
#pragma unroll
  for (int s = 0; s < Cfg::kBlockN / kSubtileCols; ++s) {
    const int sub_col = col0 + s * kSubtileCols;
    if (sub_col >= p.n) break;  // uniform across the warpgroup
    const uint32_t buffer = buffers + uint32_t(sub % kStoreBuffers) * kSubtileBytes;
    float sb[kSubtileCols / 8][2], bias[kSubtileCols / 8][2];  // this thread's columns' terms
    if constexpr (Scales::kApplies) column_terms<Scales, kSubtileCols / 8>(p, sub_col, lane, sb, bias);
#pragma unroll
    for (int jj = 0; jj < kSubtileCols / 8; jj += 2) {
      uint32_t r[4];
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int j = s * (kSubtileCols / 8) + jj + q;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          Pair pair;
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float v = float(acc[4 * j + 2 * h + e]);
            if constexpr (Scales::kApplies) v = v * sa[h] * sb[jj + q][e] + bias[jj + q][e];
            pair.v[e] = from_float<OutT>(v);
          }
          r[2 * q + h] = *reinterpret_cast<const uint32_t*>(&pair);
        }
      }
      // 16-byte chunk jj + st_group of row st_row, at its 128-byte-swizzled place.
      const int chunk = (jj + st_group) ^ (st_row % 8);
      ptx::stmatrix_x4(buffer + uint32_t(st_row * 128 + chunk * 16), r);
    }
    ptx::fence_proxy_async_shared();
    ptx::bulk_wait_read_if<0>(t == 0);
    ptx::named_barrier_sync<128>(barrier_id);
    ptx::tma_store_2d_if(map_c, buffer, sub_col, row0, t == 0);
    ++sub;
  }
}

// The gated units of a sigmoid form, g * sigmoid(a g + b g^3): silu (a = 1, b = 0: the very
// expression of activation<kSilu>) and gelu_tanh (0.5 (1 + tanh z) = sigmoid(2 z)). One
// inlined body for both, with no branch, at each output of the unrolled TMA store; erf's
// gelu would inline a second one, and stages instead.
__device__ __forceinline__ float sigmoid_gated(float a, float b, float gate, float up) {
  const float z = gate * fmaf(b, gate * gate, a);
  return gate / (1.f + __expf(-z)) * up;
}

// store_atom_tma with a gated unit (silu or gelu_tanh): each 64 x 64 sub-tile of the
// product gives the 64 x 32 outputs of its (gate, up) column pairs. A thread's pair of an
// 8-column group is one output, so two groups give an output group of 8 in which the
// thread holds the outputs of columns q and 4 + q (q = lane % 4); two shuffles within the
// quad turn these into the columns 2q, 2q + 1 that stmatrix takes (the fragment layout),
// into a 64-byte-swizzled buffer that map_c (boxes of 64 x 32) stores.
template <class Op, typename OutT, class Cfg, class Scales>
__device__ __forceinline__ void store_atom_tma_gated(const Params& p,
                                                     const typename Op::Acc (&acc)[Cfg::kAccum],
                                                     const CUtensorMap* map_c, uint32_t buffers,
                                                     int barrier_id, int row0, int col0, int& sub) {
  using Pair = Vec<OutT, 2>;
  const int t = threadIdx.x % 128, lane = t % 32, warp = t / 32, q = lane % 4;
  const int st_row = warp * 16 + lane % 8 + 8 * ((lane / 8) % 2);
  const int st_group = lane / 16;
  const int quad = lane & ~3;
  // silu: z = gate; gelu_tanh: z = 2 sqrt(2 / pi) (gate + 0.044715 gate^3).
  const bool tanh_form = p.epi.gated == 3;
  const float a = tanh_form ? 1.5957691216057308f : 1.f;
  const float b = tanh_form ? 1.5957691216057308f * 0.044715f : 0.f;
  float sa[2];  // the scales of this thread's two fragment rows
  {
    const int64_t first_row = int64_t(row0) + warp * 16 + lane / 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) sa[h] = first_row + 8 * h < p.m ? Scales::row(p, first_row + 8 * h) : 0.f;
  }
#pragma unroll
  for (int s = 0; s < Cfg::kBlockN / kSubtileCols; ++s) {
    const int sub_col = col0 + s * kSubtileCols;
    if (sub_col >= p.n) break;  // uniform across the warpgroup
    const uint32_t buffer = buffers + uint32_t(sub % kStoreBuffers) * kSubtileBytes;
    float sb[kSubtileCols / 8][2], bias[kSubtileCols / 8][2];  // this thread's columns' terms
    column_terms<Scales, kSubtileCols / 8>(p, sub_col, lane, sb, bias);
#pragma unroll
    for (int og = 0; og < kSubtileCols / 16; og += 2) {  // output groups og, og + 1 of 4
      uint32_t r[4];
#pragma unroll
      for (int g2 = 0; g2 < 2; ++g2) {
        const int jj0 = 2 * (og + g2);  // its two 8-column groups in the sub-tile
        const int j0 = s * (kSubtileCols / 8) + jj0;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          Pair w;
#pragma unroll
          for (int d = 0; d < 2; ++d) {
            const int j = j0 + d;
            const float gate = float(acc[4 * j + 2 * h]) * sa[h] * sb[jj0 + d][0] + bias[jj0 + d][0];
            const float up = float(acc[4 * j + 2 * h + 1]) * sa[h] * sb[jj0 + d][1] + bias[jj0 + d][1];
            w.v[d] = from_float<OutT>(sigmoid_gated(a, b, gate, up));
          }
          const uint32_t word = *reinterpret_cast<const uint32_t*>(&w);
          const uint32_t wa = __shfl_sync(0xffffffffu, word, quad | ((2 * q) & 3));
          const uint32_t wb = __shfl_sync(0xffffffffu, word, quad | ((2 * q + 1) & 3));
          // Columns 2q, 2q + 1: the first group's outputs of lanes 2q, 2q + 1 (q < 2), or the
          // second's of lanes 2q - 4, 2q - 3.
          r[2 * g2 + h] = __byte_perm(wa, wb, q < 2 ? 0x5410 : 0x7632);
        }
      }
      // 16-byte chunk og + st_group of row st_row (64 bytes), at its 64-byte-swizzled place.
      const int chunk = (og + st_group) ^ ((st_row >> 1) & 3);
      ptx::stmatrix_x4(buffer + uint32_t(st_row * 64 + chunk * 16), r);
    }
    ptx::fence_proxy_async_shared();
    ptx::bulk_wait_read_if<0>(t == 0);
    ptx::named_barrier_sync<128>(barrier_id);
    ptx::tma_store_2d_if(map_c, buffer, sub_col / 2, row0, t == 0);
    ++sub;
  }
}

// Split-K: writes one 64 x kBlockN atom's raw sums to this split's slice of p.partial,
// straight from the fragment (two consecutive columns a store), masked at the edges.
template <class Op, class Cfg>
__device__ __forceinline__ void store_partial(const Params& p,
                                              const typename Op::Acc (&acc)[Cfg::kAccum], int split,
                                              int64_t row0, int col0) {
  using Acc = typename Op::Acc;
  const int t = threadIdx.x % 128;
  const int warp = t / 32, lane = t % 32;
  Acc* slice = static_cast<Acc*>(p.partial) + int64_t(split) * p.m * p.n;
  const bool pairs = p.n % 2 == 0;  // an even column then starts an 8-byte-aligned pair
#pragma unroll
  for (int j = 0; j < Cfg::kBlockN / 8; ++j) {
    const int col = col0 + 8 * j + 2 * (lane % 4);
    if (col >= p.n) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // rows warp*16 + lane/4 and 8 below (see store_atom_staged)
      const int64_t row = row0 + warp * 16 + lane / 4 + 8 * h;
      if (row >= p.m) continue;
      Acc* dst = slice + row * p.n + col;
      if (pairs) {
        Vec<Acc, 2> v;
        v.v[0] = acc[4 * j + 2 * h];
        v.v[1] = acc[4 * j + 2 * h + 1];
        *reinterpret_cast<Vec<Acc, 2>*>(dst) = v;
      } else {
        dst[0] = acc[4 * j + 2 * h];
        if (col + 1 < p.n) dst[1] = acc[4 * j + 2 * h + 1];
      }
    }
  }
}

template <typename OutT>
__device__ __forceinline__ void store_one(const Params& p, int64_t row, int col, float v) {
  static_cast<OutT*>(p.c)[row * p.ldc + col] = from_float<OutT>(v);
}

// Split-K: c = the sum of the splits' partial sums, in split order (deterministic), then
// through the epilogue as the other paths take it; one output element a thread (gated: one
// output, two sums).
template <class Op, class Scales>
__global__ void __launch_bounds__(256) split_k_reduce_kernel(const __grid_constant__ Params p) {
  using Acc = typename Op::Acc;
  ptx::wait_for_prior_grids();  // the partial sums of the GEMM kernel before it
  ptx::allow_dependent_grids();
  const int64_t total = int64_t(p.m) * p.n;
  const int gated = Scales::kApplies ? p.epi.gated : 0;
  const int n_out = gated ? p.n / 2 : p.n;
  const Acc* partial = static_cast<const Acc*>(p.partial);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < int64_t(p.m) * n_out;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / n_out;
    const int col = int(i - row * n_out);
    auto value = [&](int col_in) {  // element (row, col_in) of the product, through the terms
      const int64_t at = row * p.n + col_in;
      Acc sum = partial[at];
      for (int s = 1; s < p.k_splits; ++s) sum += partial[s * total + at];
      if constexpr (Scales::kApplies)
        return float(sum) * Scales::row(p, row) * Scales::col(p, col_in) + Scales::bias(p, col_in);
      else
        return float(sum);
    };
    const float v = gated ? epilogue_gated(p.epi, value(2 * col), value(2 * col + 1)) : value(col);
    with_c_type<Op>(p.c_kind, [&](auto out) { store_one<typename decltype(out)::type>(p, row, col, v); });
  }
}

template <class Scales_>
struct Epilogue {
  using Scales = Scales_;

  // Stores consumer warpgroup wg's atoms of a tile (rows from wg_row, columns from col0)
  // into the rows the scheduler gives it (TileRows; split-K and TMA stores are never
  // grouped, so they write c's own rows).
  // The warpgroup's share of the epilogue's shared memory: `stage_buf`, a staged chunk, or
  // `store_buffers`, its TMA store buffers (1024-byte aligned, as the swizzle needs); `sub`
  // counts the sub-tiles it has stored through them.
  template <class Op, class Cfg>
  static __device__ __forceinline__ void store(
      const Params& p, const typename Op::Acc (&acc)[Cfg::kAtomsM][Cfg::kAccum],
      const CUtensorMap* map_c, float* stage_buf, uint32_t store_buffers, int& sub, int split,
      int64_t wg_row, int col0, int wg, const TileRows& rows) {
#pragma unroll
    for (int a = 0; a < Cfg::kAtomsM; ++a) {
      // Uniform across the warpgroup. (A cluster along N may have a tile wholly past N.)
      if (wg_row + a * 64 >= rows.end || col0 >= p.n) break;
      if (p.k_splits > 1) {
        store_partial<Op, Cfg>(p, acc[a], split, wg_row + a * 64, col0);
      } else if (Cfg::kTmaStore && p.c_tma) {
        if constexpr (Cfg::kTmaStore) {
          with_c_type<Op>(p.c_kind, [&](auto out) {
            using OutT = typename decltype(out)::type;
            if constexpr (sizeof(OutT) == 2) {
              // int8_gemm has no gated unit: not compiled for it.
              if constexpr (Scales::kApplies && !std::is_same_v<typename Op::In, int8_t>) {
                if (p.epi.gated) {
                  store_atom_tma_gated<Op, OutT, Cfg, Scales>(p, acc[a], map_c, store_buffers, kEpilogue + wg,
                                                              int(wg_row) + a * 64, col0, sub);
                  return;
                }
              }
              store_atom_tma<Op, OutT, Cfg, Scales>(p, acc[a], map_c, store_buffers, kEpilogue + wg,
                                                    int(wg_row) + a * 64, col0, sub);
            }
          });
        }
      } else if (p.c_vec && !(Scales::kApplies && has_column_terms(p.epi))) {
        with_c_type<Op>(p.c_kind, [&](auto out) {
          store_atom_direct<Op, typename decltype(out)::type, Cfg, Scales>(p, acc[a],
                                                                          wg_row + a * 64, col0, rows);
        });
      } else {
        store_atom_staged<Op, Cfg, Scales>(p, acc[a], stage_buf, kEpilogue + wg,
                                           wg_row + a * 64, col0, rows);
      }
    }
  }

  // The TMA stores finish before the CTA (and its shared memory) goes away.
  template <class Cfg>
  static __device__ __forceinline__ void drain(const Params& p) {
    if (Cfg::kTmaStore && p.c_tma && threadIdx.x % 128 == 0) ptx::bulk_wait_all();
  }
};

}  // namespace gks::kernels::gemm::sm90
