// SPDX-License-Identifier: Apache-2.0
// INT8 GEMM device code: acc = a_q @ b_q in int32 on Tensor Cores (mma.sync m16n8k32),
// then c = float(acc) * a_scale[row] * b_scale[col] in the output dtype.
//
// A block computes a kBlockM x kBlockN tile of c; each warp a (16 kTilesM) x (8 kNB)
// sub-tile as kTilesM x kNB mma tiles of 16 x 8. K is walked in kBlockK steps (bytes)
// through a kStages-deep ring of shared tiles filled by 16-byte cp.async.
//
// Operand fragments:
//   A (row-major, K contiguous) is what mma's "row" A wants: ldmatrix.x4 reads a 16 x 32
//   byte tile straight into the fragment.
//   B is row-major [K, N] (N contiguous) but mma's "col" B wants 4 consecutive k of one
//   column in each register, a transpose that ldmatrix (16-bit granularity) cannot do for
//   bytes. Each lane instead reads 4 consecutive k-rows of kNB bytes (columns
//   kNB * j .. kNB * j + kNB - 1, j = lane / 4) and transposes 4 x 4 byte blocks with
//   byte permutes (prmt). Lane l then holds, for each of its kNB columns, the 4 k it must
//   give mma; so mma tile t's column j is warp column kNB * j + t. The accumulator layout
//   follows: lane l ends with the 2 kNB consecutive columns 2 kNB (l % 4) .. + 2 kNB - 1
//   of rows l / 4 and l / 4 + 8 of each m tile, so the epilogue writes 16-32 contiguous
//   bytes per row per lane.
//
// Shared layout (bytes, 16-byte chunks XOR-swizzled by row so reads and cp.async writes
// are bank-conflict free without padding):
//   As[m][k]: chunk c of row r lives at chunk c ^ f(r), f = (r >> 1) & 3 for 64-byte rows
//   (the 8 rows of an ldmatrix phase cover all 8 bank groups), r & 7 for 128-byte rows.
//   Bs[k][n]: chunk c of row r lives at c ^ (((r >> 2) & 3) << 1): the 4 rows 4q + i that
//   lanes q = 0..3 read at once land on 4 different chunk pairs.
//
// Edges: out-of-range bytes are zero-filled (cp.async src-size), so the MMA loop has no
// predicates; the epilogue checks bounds. Operands whose rows are not 16-byte aligned are
// copied byte by byte through registers (kAligned = false).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gks/kernels/gemm/common.cuh"
#include "gks/kernels/vec.cuh"

namespace gks::kernels::gemm {

template <int kWarpsM_, int kWarpsN_, int kTilesM_, int kNB_, int kBlockK_, int kStages_>
struct Int8Tile {
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = kWarpsN_;
  static constexpr int kTilesM = kTilesM_;  // m16 tiles per warp
  static constexpr int kNB = kNB_;          // n8 tiles per warp = bytes per lane per B row
  static constexpr int kBlockK = kBlockK_, kStages = kStages_;
  static constexpr int kThreads = kWarpsM * kWarpsN * 32;
  static constexpr int kWarpM = 16 * kTilesM, kWarpN = 8 * kNB;
  static constexpr int kBlockM = kWarpsM * kWarpM, kBlockN = kWarpsN * kWarpN;
  static constexpr int kChunksA = kBlockK / 16;  // 16-byte chunks per row of As
  static constexpr int kChunksB = kBlockN / 16;  // per row of Bs
  static constexpr int kStageBytes = kBlockM * kBlockK + kBlockK * kBlockN;
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static constexpr int kMinBlocks = kTilesM * kNB * 4 > 64 ? 1 : 2;

  static_assert(kNB == 4 || kNB == 8 || kNB == 16, "a lane reads 4, 8 or 16 bytes per B row");
  static_assert(kBlockK % 32 == 0, "mma steps K by 32");
  static_assert(kChunksA == 4 || kChunksA == 8, "A swizzle is defined for 64- and 128-byte rows");
  static_assert(kChunksB >= 4, "B swizzle needs rows of at least 64 bytes");
  static_assert((kBlockM * kChunksA) % kThreads == 0 && kThreads % kChunksA == 0,
                "A tile copies must divide evenly among the threads");
  static_assert((kBlockK * kChunksB) % kThreads == 0 && kThreads % kChunksB == 0,
                "B tile copies must divide evenly among the threads");
  static_assert((kBlockM * kBlockK) % kThreads == 0 && (kBlockK * kBlockN) % kThreads == 0,
                "byte-wise copies must divide evenly among the threads");
  static_assert(kStages >= 2, "at least double buffering");
};

struct Int8GemmParams {
  const int8_t* a;
  const int8_t* b;
  const float* a_scale;
  const float* b_scale;
  void* c;
  GemmShape s;
  int64_t a_scale_stride, b_scale_stride;
  int c_kind;  // 0 float32, 1 float16, 2 bfloat16
  bool c_vec;  // c rows are 16-byte aligned
};

template <int kChunks>
__device__ __forceinline__ int swizzle_a(int row, int chunk) {
  if constexpr (kChunks == 4) {
    return chunk ^ ((row >> 1) & 3);
  } else {
    return chunk ^ (row & 7);
  }
}

template <int kChunks>
__device__ __forceinline__ int swizzle_b(int row, int chunk) {
  constexpr int kMask = (kChunks >= 8 ? 8 : kChunks) - 1;
  return chunk ^ ((((row >> 2) & 3) << 1) & kMask);
}

// Copies k-tile `kt` of A and B into one stage of the ring (checked path: any block).
template <class Cfg, bool kAligned>
__device__ __forceinline__ void int8_load_tile(const Int8GemmParams& p, int m0, int n0, int kt,
                                               int8_t* As, int8_t* Bs) {
  const int tid = threadIdx.x;
  const int k0 = kt * Cfg::kBlockK;
  if constexpr (kAligned) {
    {
      constexpr int kRowStep = Cfg::kThreads / Cfg::kChunksA;
      constexpr int kCopies = Cfg::kBlockM * Cfg::kChunksA / Cfg::kThreads;
      const int chunk = tid % Cfg::kChunksA;
      const int k_left = p.s.k - (k0 + chunk * 16);
      const int bytes = k_left >= 16 ? 16 : (k_left > 0 ? k_left : 0);
#pragma unroll
      for (int i = 0; i < kCopies; ++i) {
        const int r = tid / Cfg::kChunksA + i * kRowStep;
        const bool ok = bytes > 0 && m0 + r < p.s.m;
        const int8_t* src = ok ? p.a + int64_t(m0 + r) * p.s.lda + k0 + chunk * 16 : p.a;
        cp_async_zfill<16>(As + r * Cfg::kBlockK + swizzle_a<Cfg::kChunksA>(r, chunk) * 16,
                                 src, ok ? bytes : 0);
      }
    }
    {
      constexpr int kRowStep = Cfg::kThreads / Cfg::kChunksB;
      constexpr int kCopies = Cfg::kBlockK * Cfg::kChunksB / Cfg::kThreads;
      const int chunk = tid % Cfg::kChunksB;
      const int n_left = p.s.n - (n0 + chunk * 16);
      const int bytes = n_left >= 16 ? 16 : (n_left > 0 ? n_left : 0);
#pragma unroll
      for (int i = 0; i < kCopies; ++i) {
        const int r = tid / Cfg::kChunksB + i * kRowStep;
        const bool ok = bytes > 0 && k0 + r < p.s.k;
        const int8_t* src = ok ? p.b + int64_t(k0 + r) * p.s.ldb + n0 + chunk * 16 : p.b;
        cp_async_zfill<16>(Bs + r * Cfg::kBlockN + swizzle_b<Cfg::kChunksB>(r, chunk) * 16,
                                 src, ok ? bytes : 0);
      }
    }
  } else {
    constexpr int kCopiesA = Cfg::kBlockM * Cfg::kBlockK / Cfg::kThreads;
#pragma unroll 4
    for (int i = 0; i < kCopiesA; ++i) {
      const int e = tid + i * Cfg::kThreads;
      const int r = e / Cfg::kBlockK, kb = e % Cfg::kBlockK;
      const bool ok = m0 + r < p.s.m && k0 + kb < p.s.k;
      As[r * Cfg::kBlockK + swizzle_a<Cfg::kChunksA>(r, kb / 16) * 16 + kb % 16] =
          ok ? p.a[int64_t(m0 + r) * p.s.lda + k0 + kb] : int8_t(0);
    }
    constexpr int kCopiesB = Cfg::kBlockK * Cfg::kBlockN / Cfg::kThreads;
#pragma unroll 4
    for (int i = 0; i < kCopiesB; ++i) {
      const int e = tid + i * Cfg::kThreads;
      const int r = e / Cfg::kBlockN, nb = e % Cfg::kBlockN;
      const bool ok = k0 + r < p.s.k && n0 + nb < p.s.n;
      Bs[r * Cfg::kBlockN + swizzle_b<Cfg::kChunksB>(r, nb / 16) * 16 + nb % 16] =
          ok ? p.b[int64_t(k0 + r) * p.s.ldb + n0 + nb] : int8_t(0);
    }
  }
}

// Issues the copies of the k-tiles in order. Blocks wholly inside the matrix take a fast
// path for every full k-tile (running pointers, no predicates); the rest take the checked one.
template <class Cfg, bool kAligned>
struct Int8Loader {
  static constexpr int kRowStepA = Cfg::kThreads / Cfg::kChunksA;
  static constexpr int kCopiesA = Cfg::kBlockM * Cfg::kChunksA / Cfg::kThreads;
  static constexpr int kRowStepB = Cfg::kThreads / Cfg::kChunksB;
  static constexpr int kCopiesB = Cfg::kBlockK * Cfg::kChunksB / Cfg::kThreads;

  const int8_t* a_ptr;
  const int8_t* b_ptr;
  int next_kt;
  bool interior;

  __device__ __forceinline__ Int8Loader(const Int8GemmParams& p, int m0, int n0) {
    next_kt = 0;
    interior = kAligned && m0 + Cfg::kBlockM <= p.s.m && n0 + Cfg::kBlockN <= p.s.n;
    const int tid = threadIdx.x;
    a_ptr = interior ? p.a + int64_t(m0 + tid / Cfg::kChunksA) * p.s.lda +
                           (tid % Cfg::kChunksA) * 16
                     : p.a;
    b_ptr = interior ? p.b + int64_t(tid / Cfg::kChunksB) * p.s.ldb + n0 +
                           (tid % Cfg::kChunksB) * 16
                     : p.b;
  }

  __device__ __forceinline__ void load(const Int8GemmParams& p, int m0, int n0, int8_t* As,
                                       int8_t* Bs) {
    const int kt = next_kt++;
    if (interior && (kt + 1) * Cfg::kBlockK <= p.s.k) {
      const int tid = threadIdx.x;
      const int ca = tid % Cfg::kChunksA, cb = tid % Cfg::kChunksB;
#pragma unroll
      for (int i = 0; i < kCopiesA; ++i) {
        const int r = tid / Cfg::kChunksA + i * kRowStepA;
        cp_async_zfill<16>(As + r * Cfg::kBlockK + swizzle_a<Cfg::kChunksA>(r, ca) * 16,
                                 a_ptr + int64_t(i * kRowStepA) * p.s.lda, 16);
      }
#pragma unroll
      for (int i = 0; i < kCopiesB; ++i) {
        const int r = tid / Cfg::kChunksB + i * kRowStepB;
        cp_async_zfill<16>(Bs + r * Cfg::kBlockN + swizzle_b<Cfg::kChunksB>(r, cb) * 16,
                                 b_ptr + int64_t(i * kRowStepB) * p.s.ldb, 16);
      }
      a_ptr += Cfg::kBlockK;
      b_ptr += int64_t(Cfg::kBlockK) * p.s.ldb;
    } else {
      int8_load_tile<Cfg, kAligned>(p, m0, n0, kt, As, Bs);
    }
  }
};

// Transposes a 4 x 4 block of bytes: in w[i] byte j is element (i, j); out o[j] byte i.
__device__ __forceinline__ void transpose4x4(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3,
                                             uint32_t (&o)[4]) {
  const uint32_t t0 = __byte_perm(w0, w1, 0x5140);  // w0.0 w1.0 w0.1 w1.1
  const uint32_t t1 = __byte_perm(w0, w1, 0x7362);  // w0.2 w1.2 w0.3 w1.3
  const uint32_t t2 = __byte_perm(w2, w3, 0x5140);
  const uint32_t t3 = __byte_perm(w2, w3, 0x7362);
  o[0] = __byte_perm(t0, t2, 0x5410);  // w0.0 w1.0 w2.0 w3.0
  o[1] = __byte_perm(t0, t2, 0x7632);
  o[2] = __byte_perm(t1, t3, 0x5410);
  o[3] = __byte_perm(t1, t3, 0x7632);
}

// Reads the kNB bytes of one B row this lane needs, as kNB / 4 words.
template <int kNB>
__device__ __forceinline__ void load_b_row(const int8_t* p, uint32_t (&w)[kNB / 4]) {
  if constexpr (kNB == 4) {
    w[0] = *reinterpret_cast<const uint32_t*>(p);
  } else if constexpr (kNB == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x, w[1] = v.y;
  } else {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  }
}

// Writes kCount consecutive outputs of one row (cols col .. col + kCount - 1), converted
// and bounds-checked, 16 bytes at a time where c's rows allow.
template <int kCount, typename OutT>
__device__ __forceinline__ void int8_store_row(OutT* row, int col, int n, bool vec,
                                               const float (&v)[kCount]) {
  constexpr int kPer16 = 16 / sizeof(OutT);
  static_assert(kCount % kPer16 == 0, "whole 16-byte stores");
  if (vec && col + kCount <= n) {
#pragma unroll
    for (int x = 0; x < kCount; x += kPer16) {
      Vec<OutT, kPer16> out;
#pragma unroll
      for (int j = 0; j < kPer16; ++j) out.v[j] = from_float<OutT>(v[x + j]);
      *reinterpret_cast<Vec<OutT, kPer16>*>(row + col + x) = out;
    }
  } else {
#pragma unroll
    for (int x = 0; x < kCount; ++x)
      if (col + x < n) row[col + x] = from_float<OutT>(v[x]);
  }
}

template <class Cfg, bool kAligned>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    int8_gemm_kernel(const Int8GemmParams p) {
  extern __shared__ __align__(128) int8_t i8_smem[];
  constexpr int kTM = Cfg::kTilesM, kNB = Cfg::kNB;
  const TileCoord tile = raster_tile<8>(blockIdx.x, p.s.tiles_m, p.s.tiles_n);
  const int m0 = tile.m * Cfg::kBlockM;
  const int n0 = tile.n * Cfg::kBlockN;
  const int k_tiles = (p.s.k + Cfg::kBlockK - 1) / Cfg::kBlockK;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_m = (warp / Cfg::kWarpsN) * Cfg::kWarpM;
  const int warp_n = (warp % Cfg::kWarpsN) * Cfg::kWarpN;

  int acc[kTM][kNB][4];
#pragma unroll
  for (int i = 0; i < kTM; ++i)
#pragma unroll
    for (int t = 0; t < kNB; ++t)
#pragma unroll
      for (int x = 0; x < 4; ++x) acc[i][t][x] = 0;

  auto stage_a = [&](int s) { return i8_smem + s * Cfg::kStageBytes; };
  auto stage_b = [&](int s) { return i8_smem + s * Cfg::kStageBytes + Cfg::kBlockM * Cfg::kBlockK; };

  Int8Loader<Cfg, kAligned> loader(p, m0, n0);
#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (s < k_tiles) loader.load(p, m0, n0, stage_a(s), stage_b(s));
    cp_async_commit();
  }

  // Per-lane fragment coordinates (see the header comment).
  const int a_row = lane & 15;       // ldmatrix: row within the m16 tile this lane addresses
  const int a_half = lane >> 4;      // ... and which 16-byte half of the k32 step
  const int b_q = lane & 3;          // k group: rows 4 b_q .. 4 b_q + 3 of each k16 half
  const int b_col = warp_n + kNB * (lane >> 2);  // first of this lane's kNB columns

  int read_stage = 0, write_stage = Cfg::kStages - 1;
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<Cfg::kStages - 2>();
    __syncthreads();  // tile kt visible; every warp done with tile kt - 1 (write_stage)
    if (kt + Cfg::kStages - 1 < k_tiles)
      loader.load(p, m0, n0, stage_a(write_stage), stage_b(write_stage));
    cp_async_commit();
    write_stage = write_stage + 1 == Cfg::kStages ? 0 : write_stage + 1;

    const int8_t* As = stage_a(read_stage);
    const int8_t* Bs = stage_b(read_stage);
    read_stage = read_stage + 1 == Cfg::kStages ? 0 : read_stage + 1;
#pragma unroll
    for (int ks = 0; ks < Cfg::kBlockK / 32; ++ks) {
      uint32_t af[kTM][4];
#pragma unroll
      for (int i = 0; i < kTM; ++i) {
        const int r = warp_m + 16 * i + a_row;
        const int chunk = swizzle_a<Cfg::kChunksA>(r, 2 * ks + a_half);
        ptx::ldmatrix_x4(af[i], smem_addr(As + r * Cfg::kBlockK + chunk * 16));
      }
      uint32_t bf[kNB][2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t w[4][kNB / 4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = 32 * ks + 16 * h + 4 * b_q + i;
          const int chunk = swizzle_b<Cfg::kChunksB>(r, b_col / 16);
          load_b_row<kNB>(Bs + r * Cfg::kBlockN + chunk * 16 + b_col % 16, w[i]);
        }
#pragma unroll
        for (int x = 0; x < kNB / 4; ++x) {
          uint32_t o[4];
          transpose4x4(w[0][x], w[1][x], w[2][x], w[3][x], o);
#pragma unroll
          for (int c = 0; c < 4; ++c) bf[4 * x + c][h] = o[c];
        }
      }
#pragma unroll
      for (int i = 0; i < kTM; ++i)
#pragma unroll
        for (int t = 0; t < kNB; ++t) ptx::mma_m16n8k32_s8(acc[i][t], af[i], bf[t][0], bf[t][1]);
    }
  }
  cp_async_wait<0>();

  // Epilogue: lane holds columns col0 .. col0 + 2 kNB - 1 of rows g and g + 8 per m tile.
  const int g = lane >> 2;
  const int col0 = n0 + warp_n + 2 * kNB * (lane & 3);
  float sb[2 * kNB];
#pragma unroll
  for (int x = 0; x < 2 * kNB; ++x)
    sb[x] = col0 + x < p.s.n ? p.b_scale[int64_t(col0 + x) * p.b_scale_stride] : 0.f;
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = m0 + warp_m + 16 * i + g + 8 * hr;
      if (row >= p.s.m) continue;
      const float sa = p.a_scale[int64_t(row) * p.a_scale_stride];
      float v[2 * kNB];
#pragma unroll
      for (int x = 0; x < kNB; ++x) {
        v[x] = __int2float_rn(acc[i][x][2 * hr]) * sa * sb[x];
        v[kNB + x] = __int2float_rn(acc[i][x][2 * hr + 1]) * sa * sb[kNB + x];
      }
      const int64_t offset = int64_t(row) * p.s.ldc;
      if (p.c_kind == 1)
        int8_store_row(static_cast<__half*>(p.c) + offset, col0, p.s.n, p.c_vec, v);
      else if (p.c_kind == 2)
        int8_store_row(static_cast<__nv_bfloat16*>(p.c) + offset, col0, p.s.n, p.c_vec, v);
      else
        int8_store_row(static_cast<float*>(p.c) + offset, col0, p.s.n, p.c_vec, v);
    }
  }
}

}  // namespace gks::kernels::gemm
