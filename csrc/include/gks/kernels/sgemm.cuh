// SPDX-License-Identifier: Apache-2.0
// SGEMM device code: c = a @ b in fp32 with FFMA (no Tensor Cores, no TF32).
//
// A block computes a kBlockM x kBlockN tile of c, walking K in kBlockK steps through a
// kStages-deep ring of shared-memory tiles filled by cp.async (copies for tile k + S - 1
// are in flight while tile k is computed). Each warp owns a kWarpM x kWarpN sub-tile and
// each thread a kThreadM x kThreadN block of it, held in registers, as 4 x 4 pieces spread
// so that a warp's shared-memory reads are 16-byte loads of consecutive addresses.
//
// Shared layout:
//   A is stored transposed, As[k][m] (row stride kBlockM + 4 floats): the inner loop reads
//   four consecutive m at one k as one float4. The transpose happens in the copy itself,
//   with 4-byte cp.async per element (a 16-byte copy cannot scatter); consecutive threads
//   take consecutive k of a row, so global reads stay in 32-byte sectors, and the +4
//   padding puts the 8 k-rows a warp writes on distinct banks.
//   B is stored as it is in memory, Bs[k][n], filled by 16-byte cp.async when b's rows
//   are 16-byte aligned (else 4-byte copies); a warp reads one k-row per step.
// Edges: copies for elements outside the matrix have src-size 0 and write zeros, so the
// inner loop needs no predicates; only the final stores are bounds-checked.
#pragma once

#include <cstdint>

#include "gks/kernels/gemm_common.cuh"

namespace gks::kernels {

template <int kWarpsM_, int kWarpsN_, int kLanesM_, int kThreadM_, int kThreadN_, int kBlockK_,
          int kStages_>
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
  // Blocks per SM the register budget should allow: 16 warps per SM, <= 128 registers.
  static constexpr int kMinBlocks = 512 / kThreads;

  static_assert(32 % kLanesM == 0, "lanes must tile a warp");
  static_assert(kThreadM % 4 == 0 && kThreadN % 4 == 0, "thread tiles are made of 4x4 pieces");
  static_assert(kThreads % kBlockK == 0 && (kBlockM * kBlockK) % kThreads == 0,
                "A tile copies must divide evenly among the threads");
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
  gemm::GemmShape s;
  bool c_vec4;  // c rows are 16-byte aligned: store float4s
};

// Issues the cp.async copies of one k-tile into the shared tiles As, Bs. Everything that
// does not change along K (which rows and columns this thread copies, whether they are
// inside the matrix, their addresses at k = 0) is worked out once, in the constructor.
template <class Cfg, bool kVecB>
struct SgemmLoader {
  // A: element (m, k) -> As[k][m]; this thread copies column a_k of rows
  // a_m + i * kRowStepA, i < kCopiesA.
  static constexpr int kRowStepA = Cfg::kThreads / Cfg::kBlockK;
  static constexpr int kCopiesA = Cfg::kBlockM * Cfg::kBlockK / Cfg::kThreads;
  // B (16-byte path): chunk b_n..b_n+3 of k-rows b_k + i * kRowStepB.
  static constexpr int kChunksPerRowB = Cfg::kBlockN / 4;
  static constexpr int kRowStepB = kVecB ? Cfg::kThreads / kChunksPerRowB : Cfg::kThreads / Cfg::kBlockN;
  static constexpr int kCopiesB = kVecB ? Cfg::kBlockK * kChunksPerRowB / Cfg::kThreads
                                        : Cfg::kBlockK * Cfg::kBlockN / Cfg::kThreads;
  static_assert(kCopiesA <= 32, "row mask is 32 bits");

  const float* a_src;   // element (first row, a_k) of this thread (the matrix base if that
                        // row is outside; then nothing is read from it)
  int64_t a_row_step;   // kRowStepA rows, in elements
  const float* b_src;   // element (b_k, column) of this thread, or the matrix base
  int64_t ldb;
  uint32_t a_rows_ok;   // bit i: row i is inside the matrix
  int b_bytes;          // bytes of each B copy inside the matrix's columns (0, 4, ..., 16)
  int k;                // K

  __device__ __forceinline__ SgemmLoader(const SgemmParams& p, int m0, int n0) {
    const int tid = threadIdx.x;
    k = p.s.k;
    const int a_m = tid / Cfg::kBlockK, a_k = tid % Cfg::kBlockK;
    a_rows_ok = 0;
#pragma unroll
    for (int i = 0; i < kCopiesA; ++i)
      if (m0 + a_m + i * kRowStepA < p.s.m) a_rows_ok |= 1u << i;
    // Rows grow with i, so if the first is outside the matrix all are.
    a_src = (a_rows_ok & 1u) ? p.a + int64_t(m0 + a_m) * p.s.lda + a_k : p.a;
    a_row_step = int64_t(kRowStepA) * p.s.lda;
    ldb = p.s.ldb;
    const int b_n = b_col(), b_k = b_row();
    if constexpr (kVecB) {
      const int cols_left = p.s.n - (n0 + b_n);
      b_bytes = cols_left >= 4 ? 16 : (cols_left > 0 ? cols_left * 4 : 0);
    } else {
      b_bytes = n0 + b_n < p.s.n ? 4 : 0;
    }
    b_src = b_bytes > 0 ? p.b + int64_t(b_k) * p.s.ldb + n0 + b_n : p.b;
  }
  // This thread's B column (first element of its chunk) and first k-row within a tile.
  static __device__ __forceinline__ int b_col() {
    return kVecB ? (threadIdx.x % kChunksPerRowB) * 4 : threadIdx.x % Cfg::kBlockN;
  }
  static __device__ __forceinline__ int b_row() {
    return kVecB ? threadIdx.x / kChunksPerRowB : threadIdx.x / Cfg::kBlockN;
  }

  __device__ __forceinline__ void load(int kt, float* As, float* Bs) const {
    const int k0 = kt * Cfg::kBlockK;
    const int a_k = threadIdx.x % Cfg::kBlockK, a_m = threadIdx.x / Cfg::kBlockK;
    const bool a_k_ok = k0 + a_k < k;
    float* a_dst = As + a_k * Cfg::kStrideA + a_m;
#pragma unroll
    for (int i = 0; i < kCopiesA; ++i) {
      const bool ok = a_k_ok && ((a_rows_ok >> i) & 1u);
      const float* src = ok ? a_src + i * a_row_step + k0 : a_src;
      gemm::cp_async_zfill<4>(a_dst + i * kRowStepA, src, ok ? 4 : 0);
    }
    const int b_k = b_row();
    float* b_dst = Bs + b_k * Cfg::kStrideB + b_col();
#pragma unroll
    for (int i = 0; i < kCopiesB; ++i) {
      const bool ok = b_bytes > 0 && k0 + b_k + i * kRowStepB < k;
      const float* src = ok ? b_src + int64_t(k0 + i * kRowStepB) * ldb : b_src;
      gemm::cp_async_zfill<kVecB ? 16 : 4>(b_dst + i * kRowStepB * Cfg::kStrideB, src,
                                           ok ? b_bytes : 0);
    }
  }
};

template <class Cfg, bool kVecB>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    sgemm_kernel(const SgemmParams p) {
  extern __shared__ __align__(16) float smem[];
  constexpr int kTM = Cfg::kThreadM, kTN = Cfg::kThreadN;
  const gemm::TileCoord tile = gemm::raster_tile<8>(blockIdx.x, p.s.tiles_m, p.s.tiles_n);
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

  const SgemmLoader<Cfg, kVecB> loader(p, m0, n0);
  // Prologue: tiles 0 .. S-2 in flight. Every step commits a group (possibly empty), so
  // "wait until S-2 groups remain" always means "tile kt has landed".
#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (s < k_tiles) loader.load(s, stage_a(s), stage_b(s));
    gemm::cp_async_commit();
  }

  for (int kt = 0; kt < k_tiles; ++kt) {
    gemm::cp_async_wait<Cfg::kStages - 2>();
    // Tile kt is visible to all threads, and all have finished computing tile kt - 1,
    // whose stage the next copy overwrites.
    __syncthreads();
    const int next = kt + Cfg::kStages - 1;
    if (next < k_tiles) {
      const int s = next % Cfg::kStages;
      loader.load(next, stage_a(s), stage_b(s));
    }
    gemm::cp_async_commit();

    const float* As = stage_a(kt % Cfg::kStages);
    const float* Bs = stage_b(kt % Cfg::kStages);
#pragma unroll
    for (int kk = 0; kk < Cfg::kBlockK; ++kk) {
      float av[kTM], bv[kTN];
#pragma unroll
      for (int g = 0; g < kTM / 4; ++g) {
        const float4 v = *reinterpret_cast<const float4*>(
            As + kk * Cfg::kStrideA + a_off + g * Cfg::kLanesM * 4);
        av[g * 4 + 0] = v.x;
        av[g * 4 + 1] = v.y;
        av[g * 4 + 2] = v.z;
        av[g * 4 + 3] = v.w;
      }
#pragma unroll
      for (int h = 0; h < kTN / 4; ++h) {
        const float4 v = *reinterpret_cast<const float4*>(
            Bs + kk * Cfg::kStrideB + b_off + h * Cfg::kLanesN * 4);
        bv[h * 4 + 0] = v.x;
        bv[h * 4 + 1] = v.y;
        bv[h * 4 + 2] = v.z;
        bv[h * 4 + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < kTM; ++i)
#pragma unroll
        for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
  }
  gemm::cp_async_wait<0>();  // no copy may still be landing when the block exits

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

}  // namespace gks::kernels
