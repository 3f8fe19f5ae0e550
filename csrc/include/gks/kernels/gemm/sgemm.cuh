// SPDX-License-Identifier: Apache-2.0
// SGEMM device code: c = a @ b in fp32 with FFMA (no Tensor Cores, no TF32).
//
// A block computes a kBlockM x kBlockN tile of c, walking K in kBlockK steps through a
// kStages-deep ring of shared-memory tiles filled by cp.async (multistage_k_loop:
// copies for tile k + S - 1 in flight while tile k is computed, each k-step's operands
// loaded into registers while the previous step's FFMAs run). Each warp owns a kWarpM x kWarpN sub-tile and
// each thread a kThreadM x kThreadN block of it, held in registers, as 4 x 4 pieces spread
// so that a warp's shared-memory reads are 16-byte loads of consecutive addresses.
//
// Shared layout:
//   A is stored transposed, As[k][m] (row stride kBlockM + 4 floats): the inner loop reads
//   four consecutive m at one k as one float4. The transpose happens in the copy itself,
//   with 4-byte cp.async per element (a 16-byte copy cannot scatter). Either a thread
//   copies kAPerThread consecutive k of one row (one pointer, immediate offsets), or
//   (kACopyByRows, the faster layout on H100/H200) one k of kAPerThread rows, so that a
//   warp's copy instruction covers whole 32-byte sectors of 32 / kBlockK rows.
//   B is stored as it is in memory, Bs[k][n], filled by 16-byte cp.async when b's rows
//   are 16-byte aligned (else 4-byte copies); a warp reads one k-row per step.
// Edges: copies for elements outside the matrix have src-size 0 and write zeros, so the
// inner loop needs no predicates; only the final stores are bounds-checked. Rows and
// columns outside the matrix are known per thread before the K loop; only the last k-tile
// (when K is not a multiple of kBlockK) takes the per-element checked path.
#pragma once

#include <cstdint>

#include "gks/kernels/gemm/common.cuh"

namespace gks::kernels::gemm {

template <int kWarpsM_, int kWarpsN_, int kLanesM_, int kThreadM_, int kThreadN_, int kBlockK_,
          int kStages_, int kMinBlocks_ = 512 / (kWarpsM_ * kWarpsN_ * 32), bool kACopyByRows_ = false>
struct SgemmTile {
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = kWarpsN_;
  static constexpr int kLanesM = kLanesM_, kLanesN = 32 / kLanesM_;
  static constexpr int kThreadM = kThreadM_, kThreadN = kThreadN_;
  static constexpr int kBlockK = kBlockK_, kStages = kStages_;
  static constexpr int kThreads = kWarpsM * kWarpsN * 32;
  static constexpr int kWarpM = kLanesM * kThreadM, kWarpN = kLanesN * kThreadN;
  static constexpr int kBlockM = kWarpsM * kWarpM, kBlockN = kWarpsN * kWarpN;
  static constexpr int kStrideA = kBlockM + 4;  // floats per k-row of As
  static constexpr int kStrideB = kBlockN;      // floats per k-row of Bs
  static constexpr int kStageFloats = kBlockK * (kStrideA + kStrideB);
  static constexpr int kSmemBytes = kStages * kStageFloats * 4;
  // Blocks per SM the register budget must allow (the default, 16 warps per SM, caps a
  // thread at 128 registers).
  static constexpr int kMinBlocks = kMinBlocks_;
  // How a thread's A copies are laid out: false, kAPerThread consecutive k of one row (one
  // pointer, immediate offsets); true, one k of kAPerThread rows spaced kThreads / kBlockK
  // apart, so that each copy instruction of a warp touches 32 / kBlockK rows (fewer L1
  // sectors per instruction) at the price of a 64-bit address per copy.
  static constexpr bool kACopyByRows = kACopyByRows_;

  static_assert(32 % kLanesM == 0, "lanes must tile a warp");
  static_assert(kThreadM % 4 == 0 && kThreadN % 4 == 0, "thread tiles are made of 4x4 pieces");
  // Each thread copies kAPerThread consecutive k of one row of the A tile.
  static constexpr int kAPerThread = kBlockM * kBlockK / kThreads;
  static_assert((kBlockM * kBlockK) % kThreads == 0 &&
                    (kACopyByRows ? kThreads % kBlockK == 0 : kBlockK % kAPerThread == 0),
                "A tile copies must divide evenly among the threads");
  static_assert(kAPerThread <= 32, "row mask is 32 bits");
  static_assert(kBlockN % 4 == 0 && kThreads % (kBlockN / 4) == 0 &&
                    (kBlockK * kBlockN / 4) % kThreads == 0,
                "B tile 16-byte copies must divide evenly among the threads");
  static_assert(kThreads % kBlockN == 0 && (kBlockK * kBlockN) % kThreads == 0,
                "B tile 4-byte copies must divide evenly among the threads");
  static_assert(kStages >= 2, "at least double buffering");
};

struct SgemmParams {
  const float* a;
  const float* b;
  float* c;
  GemmShape s;
  bool c_vec4;  // c rows are 16-byte aligned: store float4s
};

// Issues the cp.async copies of the k-tiles into the shared ring, in order (tile 0, 1, ...):
// it keeps running pointers that step by one tile per call. Everything that does not
// change along K (which row and columns this thread copies, whether they lie inside the
// matrix) is worked out once, in the constructor; an out-of-range row or column keeps a
// pointer into the matrix that never moves and copies with src-size 0.
template <class Cfg, bool kVecB>
struct SgemmLoader {
  static constexpr int kAPerThread = Cfg::kAPerThread;
  static constexpr bool kByRows = Cfg::kACopyByRows;
  static constexpr int kAThreadsPerRow = kByRows ? 1 : Cfg::kBlockK / kAPerThread;
  static constexpr int kARowStep = Cfg::kThreads / Cfg::kBlockK;  // by-rows layout only
  // B, 16-byte path: chunk (b_row + i * kRowStepB, b_col .. b_col + 3), i < kCopiesB.
  // 4-byte path: element (b_row + i * kRowStepB, b_col).
  static constexpr int kBWidth = kVecB ? 4 : 1;
  static constexpr int kBPerRow = Cfg::kBlockN / kBWidth;
  static constexpr int kRowStepB = Cfg::kThreads / kBPerRow;
  static constexpr int kCopiesB = Cfg::kBlockK * kBPerRow / Cfg::kThreads;

  const float* a_ptr;  // (row, k0 + a_k) of the next tile, or the matrix base
  const float* b_ptr;  // (k0 + b_row, b_col) of the next tile, or the matrix base
  const float* a_base;
  const float* b_base;
  int64_t b_tile_step;  // elements between tiles: kBlockK rows, or 0 for a dead column
  int64_t ldb;
  int64_t a_row_step;   // by-rows layout: kARowStep rows, in elements
  uint32_t a_rows_ok;   // by-rows layout: bit j, row j of this thread is inside the matrix
  bool a_all_rows_ok;   // by-rows layout: every row of this thread is inside the matrix
  int a_bytes;  // 4 when this thread's row is inside the matrix, else 0
  int b_bytes;  // bytes of each B copy inside the matrix's columns (0, 4, ..., 16)
  int a_step;   // kBlockK, or 0 for a dead row
  int k;
  int next_k0;  // first k of the next tile to load

  static __device__ __forceinline__ int a_row() {
    return kByRows ? threadIdx.x / Cfg::kBlockK : threadIdx.x / kAThreadsPerRow;
  }
  static __device__ __forceinline__ int a_k() {
    return kByRows ? threadIdx.x % Cfg::kBlockK : (threadIdx.x % kAThreadsPerRow) * kAPerThread;
  }
  static __device__ __forceinline__ int b_row() { return threadIdx.x / kBPerRow; }
  static __device__ __forceinline__ int b_col() { return (threadIdx.x % kBPerRow) * kBWidth; }

  __device__ __forceinline__ SgemmLoader(const SgemmParams& p, int m0, int n0) {
    k = p.s.k;
    next_k0 = 0;
    ldb = p.s.ldb;
    a_base = p.a;
    b_base = p.b;
    const bool row_ok = m0 + a_row() < p.s.m;
    a_bytes = row_ok ? 4 : 0;
    a_step = row_ok ? Cfg::kBlockK : 0;
    a_ptr = row_ok ? p.a + int64_t(m0 + a_row()) * p.s.lda + a_k() : p.a;
    a_row_step = int64_t(kARowStep) * p.s.lda;
    a_rows_ok = 0;
    if constexpr (kByRows) {
#pragma unroll
      for (int j = 0; j < kAPerThread; ++j)
        if (m0 + a_row() + j * kARowStep < p.s.m) a_rows_ok |= 1u << j;
    }
    a_all_rows_ok = a_rows_ok == (kAPerThread == 32 ? ~0u : (1u << kAPerThread) - 1u);
    const int cols_left = p.s.n - (n0 + b_col());
    b_bytes = cols_left >= kBWidth ? 4 * kBWidth : (cols_left > 0 ? cols_left * 4 : 0);
    b_ptr = b_bytes > 0 ? p.b + int64_t(b_row()) * p.s.ldb + n0 + b_col() : p.b;
    b_tile_step = b_bytes > 0 ? int64_t(Cfg::kBlockK) * p.s.ldb : 0;
  }

  __device__ __forceinline__ void load(float* As, float* Bs) {
    float* a_dst = As + a_k() * Cfg::kStrideA + a_row();
    float* b_dst = Bs + b_row() * Cfg::kStrideB + b_col();
    if (next_k0 + Cfg::kBlockK <= k) {  // a full tile: only the row/column checks
      if constexpr (kByRows) {
        if (a_all_rows_ok) {  // no per-row select: one 64-bit add a copy (interior blocks)
          const float* src = a_ptr;
#pragma unroll
          for (int j = 0; j < kAPerThread; ++j, src += a_row_step)
            cp_async_zfill<4>(a_dst + j * kARowStep, src, 4);
        } else {
#pragma unroll
          for (int j = 0; j < kAPerThread; ++j) {
            const bool ok = (a_rows_ok >> j) & 1u;
            cp_async_zfill<4>(a_dst + j * kARowStep, ok ? a_ptr + j * a_row_step : a_base,
                                    ok ? 4 : 0);
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < kAPerThread; ++j)
          cp_async_zfill<4>(a_dst + j * Cfg::kStrideA, a_ptr + j, a_bytes);
      }
#pragma unroll
      for (int i = 0; i < kCopiesB; ++i)
        cp_async_zfill<4 * kBWidth>(b_dst + i * kRowStepB * Cfg::kStrideB,
                                          b_ptr + int64_t(i * kRowStepB) * ldb, b_bytes);
    } else {  // the last, partial tile: also check k per element
      if constexpr (kByRows) {
        const bool k_ok = next_k0 + a_k() < k;
#pragma unroll
        for (int j = 0; j < kAPerThread; ++j) {
          const bool ok = k_ok && ((a_rows_ok >> j) & 1u);
          cp_async_zfill<4>(a_dst + j * kARowStep, ok ? a_ptr + j * a_row_step : a_base,
                                  ok ? 4 : 0);
        }
      } else {
#pragma unroll
        for (int j = 0; j < kAPerThread; ++j) {
          const bool ok = a_bytes > 0 && next_k0 + a_k() + j < k;
          cp_async_zfill<4>(a_dst + j * Cfg::kStrideA, ok ? a_ptr + j : a_base,
                                  ok ? 4 : 0);
        }
      }
#pragma unroll
      for (int i = 0; i < kCopiesB; ++i) {
        const bool ok = b_bytes > 0 && next_k0 + b_row() + i * kRowStepB < k;
        const float* src = ok ? b_ptr + int64_t(i * kRowStepB) * ldb : b_base;
        cp_async_zfill<4 * kBWidth>(b_dst + i * kRowStepB * Cfg::kStrideB, src,
                                          ok ? b_bytes : 0);
      }
    }
    next_k0 += Cfg::kBlockK;
    a_ptr += a_step;
    b_ptr += b_tile_step;
  }
};

template <class Cfg, bool kVecB>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    sgemm_kernel(const SgemmParams p) {
  extern __shared__ __align__(16) float smem[];
  constexpr int kTM = Cfg::kThreadM, kTN = Cfg::kThreadN;
  const TileCoord tile = raster_tile<8>(blockIdx.x, p.s.tiles_m, p.s.tiles_n);
  const int m0 = tile.m * Cfg::kBlockM;
  const int n0 = tile.n * Cfg::kBlockN;
  const int k_tiles = (p.s.k + Cfg::kBlockK - 1) / Cfg::kBlockK;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_m = (warp / Cfg::kWarpsN) * Cfg::kWarpM;
  const int warp_n = (warp % Cfg::kWarpsN) * Cfg::kWarpN;
  const int lane_n = lane % Cfg::kLanesN, lane_m = lane / Cfg::kLanesN;
  // Piece g of the thread's rows starts at a_off + g * kLanesM * 4 (likewise for columns).
  const int a_off = warp_m + lane_m * 4;
  const int b_off = warp_n + lane_n * 4;

  float acc[kTM][kTN];
#pragma unroll
  for (int i = 0; i < kTM; ++i)
#pragma unroll
    for (int j = 0; j < kTN; ++j) acc[i][j] = 0.f;

  auto stage_a = [&](int s) { return smem + s * Cfg::kStageFloats; };
  auto stage_b = [&](int s) { return smem + s * Cfg::kStageFloats + Cfg::kBlockK * Cfg::kStrideA; };

  // A thread's operands of one k-step: its kThreadM values of A and kThreadN of B, each read
  // as float4s of consecutive addresses across the warp.
  struct Frags {
    float a[kTM], b[kTN];
  };
  SgemmLoader<Cfg, kVecB> loader(p, m0, n0);
  multistage_k_loop<Cfg::kStages, Cfg::kBlockK, Frags>(
      k_tiles, [&](int stage) { loader.load(stage_a(stage), stage_b(stage)); },
      [&](Frags& f, int stage, int kk) {
        const float* As = stage_a(stage) + kk * Cfg::kStrideA + a_off;
        const float* Bs = stage_b(stage) + kk * Cfg::kStrideB + b_off;
#pragma unroll
        for (int g = 0; g < kTM / 4; ++g) {
          const float4 v = *reinterpret_cast<const float4*>(As + g * Cfg::kLanesM * 4);
          f.a[4 * g] = v.x, f.a[4 * g + 1] = v.y, f.a[4 * g + 2] = v.z, f.a[4 * g + 3] = v.w;
        }
#pragma unroll
        for (int h = 0; h < kTN / 4; ++h) {
          const float4 v = *reinterpret_cast<const float4*>(Bs + h * Cfg::kLanesN * 4);
          f.b[4 * h] = v.x, f.b[4 * h + 1] = v.y, f.b[4 * h + 2] = v.z, f.b[4 * h + 3] = v.w;
        }
      },
      [&](const Frags& f) {
#pragma unroll
        for (int i = 0; i < kTM; ++i)
#pragma unroll
          for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(f.a[i], f.b[j], acc[i][j]);
      });

#pragma unroll
  for (int g = 0; g < kTM / 4; ++g) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = m0 + a_off + g * Cfg::kLanesM * 4 + r;
      if (row >= p.s.m) continue;
      float* c_row = p.c + int64_t(row) * p.s.ldc;
#pragma unroll
      for (int h = 0; h < kTN / 4; ++h) {
        const int col = n0 + b_off + h * Cfg::kLanesN * 4;
        const float* v = &acc[g * 4 + r][h * 4];
        if (p.c_vec4 && col + 4 <= p.s.n) {
          *reinterpret_cast<float4*>(c_row + col) = make_float4(v[0], v[1], v[2], v[3]);
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j)
            if (col + j < p.s.n) c_row[col + j] = v[j];
        }
      }
    }
  }
}

}  // namespace gks::kernels::gemm
