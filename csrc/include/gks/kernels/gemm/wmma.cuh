// SPDX-License-Identifier: Apache-2.0
// Tensor Core GEMM through nvcuda::wmma: c = a @ b, fp16/bf16 inputs, fp32 accumulation.
//
// A block computes a kBlockM x kBlockN tile of c; each warp a (16 kFragsM) x (16 kFragsN)
// sub-tile held as 16x16x16 wmma accumulator fragments; wmma::mma_sync compiles to
// mma.sync m16n8k16 (HMMA.16816). Operand fragments come from wmma::load_matrix_sync
// (ldmatrix) for fp16, and from ldmatrix directly for bf16 (see ldmatrix_frag). K is walked
// in kBlockK steps through a kStages-deep ring of shared tiles filled by 16-byte cp.async
// (multistage_k_loop: copies for tile k + S - 1 in flight while tile k is computed,
// each k-step's fragments loaded while the previous step's MMAs run).
//
// Shared layout: As[m][k] with rows of kBlockK + 8 elements and Bs[k][n] with rows of
// kBlockN + 8: the 16 extra bytes per row shift consecutive rows by one 16-byte bank group,
// so the 8 rows an ldmatrix phase reads hit distinct banks. Rows stay 16-byte aligned (for
// cp.async) and fragments 32-byte aligned (for wmma::load_matrix_sync).
//
// Edges: copies for elements outside the matrix have src-size 0 (zero fill), so the MMA
// loop needs no predicates; a chunk straddling the K or N edge copies only its in-range
// bytes. Operands whose rows are not 16-byte aligned go element by element through
// registers instead (kAligned = false): slower, same layout.
//
// Epilogue: each warp stores one accumulator fragment at a time to a private 16 x 16 fp32
// staging tile in shared memory and writes it out with bounds checks, converted to the
// output dtype, 16 bytes at a time where c's rows allow.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdint>
#include <type_traits>

#include "gks/kernels/gemm/common.cuh"
#include "gks/kernels/vec.cuh"

namespace gks::kernels::gemm {

template <int kWarpsM_, int kWarpsN_, int kFragsM_, int kFragsN_, int kBlockK_, int kStages_>
struct WmmaTile {
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = kWarpsN_;
  static constexpr int kFragsM = kFragsM_, kFragsN = kFragsN_;
  static constexpr int kBlockK = kBlockK_, kStages = kStages_;
  static constexpr int kThreads = kWarpsM * kWarpsN * 32;
  static constexpr int kWarpM = 16 * kFragsM, kWarpN = 16 * kFragsN;
  static constexpr int kBlockM = kWarpsM * kWarpM, kBlockN = kWarpsN * kWarpN;
  static constexpr int kStrideA = kBlockK + 8;  // elements per row of As
  static constexpr int kStrideB = kBlockN + 8;  // elements per row of Bs
  static constexpr int kStageElems = kBlockM * kStrideA + kBlockK * kStrideB;
  static constexpr int kStageTile = 16 * 20;  // floats of a warp's epilogue staging tile
  static constexpr int kPipeBytes = kStages * kStageElems * 2;
  static constexpr int kEpilogueBytes = kWarpsM * kWarpsN * kStageTile * 4;
  static constexpr int kSmemBytes = kPipeBytes > kEpilogueBytes ? kPipeBytes : kEpilogueBytes;
  // Accumulators above 64 floats per thread leave room for one block of 8 warps per SM.
  static constexpr int kMinBlocks = kFragsM * kFragsN * 8 > 64 ? 1 : 2;

  static_assert(kBlockK % 16 == 0, "wmma steps K by 16");
  static_assert((kBlockM * kBlockK / 8) % kThreads == 0 && kThreads % (kBlockK / 8) == 0,
                "A tile 16-byte copies must divide evenly among the threads");
  static_assert((kBlockK * kBlockN / 8) % kThreads == 0 && kThreads % (kBlockN / 8) == 0,
                "B tile 16-byte copies must divide evenly among the threads");
  static_assert((kBlockM * kBlockK) % kThreads == 0 && (kBlockK * kBlockN) % kThreads == 0,
                "element-wise copies must divide evenly among the threads");
  static_assert(kStages >= 2, "at least double buffering");
};

// The wmma element type of a storage type.
template <typename T>
struct WmmaElem;
template <>
struct WmmaElem<__half> {
  using type = __half;
};
template <>
struct WmmaElem<__nv_bfloat16> {
  using type = __nv_bfloat16;
};

struct WmmaGemmParams {
  const void* a;
  const void* b;
  void* c;
  GemmShape s;
  bool c_is_f32;  // else c has the input dtype
  bool c_vec;     // c rows are 16-byte aligned: 16-byte stores
};

// Copies k-tile `kt` of A and B into one stage of the ring.
template <class Cfg, bool kAligned>
__device__ __forceinline__ void wmma_load_tile(const WmmaGemmParams& p, int m0, int n0, int kt,
                                               uint16_t* As, uint16_t* Bs) {
  const int k0 = kt * Cfg::kBlockK;
  const auto* a = static_cast<const uint16_t*>(p.a);
  const auto* b = static_cast<const uint16_t*>(p.b);
  if constexpr (kAligned) {  // 8-element chunks into rows padded to kStrideA / kStrideB
    cp_async_tile_checked<Cfg::kBlockM, Cfg::kBlockK / 8, Cfg::kThreads>(
        As, a, p.s.lda, m0, k0, p.s.m, p.s.k, [](int r, int c) { return r * Cfg::kStrideA + c * 8; });
    cp_async_tile_checked<Cfg::kBlockK, Cfg::kBlockN / 8, Cfg::kThreads>(
        Bs, b, p.s.ldb, k0, n0, p.s.k, p.s.n, [](int r, int c) { return r * Cfg::kStrideB + c * 8; });
  } else {  // 2-byte alignment is all we can assume
    copy_tile_elementwise<Cfg::kBlockM, Cfg::kBlockK, Cfg::kThreads>(
        As, a, p.s.lda, m0, k0, p.s.m, p.s.k, [](int r, int c) { return r * Cfg::kStrideA + c; });
    copy_tile_elementwise<Cfg::kBlockK, Cfg::kBlockN, Cfg::kThreads>(
        Bs, b, p.s.ldb, k0, n0, p.s.k, p.s.n, [](int r, int c) { return r * Cfg::kStrideB + c; });
  }
}

// Issues the copies of the k-tiles in order (tile 0, 1, ...). Blocks wholly inside the
// matrix take a fast path for every full k-tile: running pointers and no predicates. Edge
// blocks, the last partial k-tile and unaligned operands take wmma_load_tile's checked path.
template <class Cfg, bool kAligned>
struct WmmaLoader {
  static constexpr int kPerRowA = Cfg::kBlockK / 8, kPerRowB = Cfg::kBlockN / 8;
  static constexpr int kRowStepA = Cfg::kThreads / kPerRowA;
  static constexpr int kRowStepB = Cfg::kThreads / kPerRowB;
  static constexpr int kCopiesA = Cfg::kBlockM * kPerRowA / Cfg::kThreads;
  static constexpr int kCopiesB = Cfg::kBlockK * kPerRowB / Cfg::kThreads;

  const uint16_t* a_ptr;  // this thread's first A chunk in the next tile (interior blocks)
  const uint16_t* b_ptr;  // this thread's first B chunk in the next tile (interior blocks)
  int next_kt;
  bool interior;

  __device__ __forceinline__ WmmaLoader(const WmmaGemmParams& p, int m0, int n0) {
    next_kt = 0;
    interior = kAligned && m0 + Cfg::kBlockM <= p.s.m && n0 + Cfg::kBlockN <= p.s.n;
    const int tid = threadIdx.x;
    const auto* a = static_cast<const uint16_t*>(p.a);
    const auto* b = static_cast<const uint16_t*>(p.b);
    a_ptr = interior ? a + int64_t(m0 + tid / kPerRowA) * p.s.lda + (tid % kPerRowA) * 8 : a;
    b_ptr = interior ? b + int64_t(tid / kPerRowB) * p.s.ldb + n0 + (tid % kPerRowB) * 8 : b;
  }

  __device__ __forceinline__ void load(const WmmaGemmParams& p, int m0, int n0, uint16_t* As,
                                       uint16_t* Bs) {
    const int kt = next_kt++;
    if (interior && (kt + 1) * Cfg::kBlockK <= p.s.k) {
      const int tid = threadIdx.x;
      uint16_t* a_dst = As + (tid / kPerRowA) * Cfg::kStrideA + (tid % kPerRowA) * 8;
      uint16_t* b_dst = Bs + (tid / kPerRowB) * Cfg::kStrideB + (tid % kPerRowB) * 8;
#pragma unroll
      for (int i = 0; i < kCopiesA; ++i)
        cp_async_zfill<16>(a_dst + i * kRowStepA * Cfg::kStrideA,
                                 a_ptr + int64_t(i * kRowStepA) * p.s.lda, 16);
#pragma unroll
      for (int i = 0; i < kCopiesB; ++i)
        cp_async_zfill<16>(b_dst + i * kRowStepB * Cfg::kStrideB,
                                 b_ptr + int64_t(i * kRowStepB) * p.s.ldb, 16);
      a_ptr += Cfg::kBlockK;
      b_ptr += int64_t(Cfg::kBlockK) * p.s.ldb;
    } else {
      wmma_load_tile<Cfg, kAligned>(p, m0, n0, kt, As, Bs);
    }
  }
};

// Loads a 16 x 16 bf16 wmma fragment from shared memory with one ldmatrix.x4 (.trans for
// the row-major B operand). wmma::load_matrix_sync compiles bf16 loads to generic
// per-element loads plus movmatrix transposes (CUDA 13), 3-4x the instructions of the fp16
// path, which gets ldmatrix. On sm_80+ a 16x16x16 bf16 fragment is the register pair set
// of two m16n8k16 mma operands (8 elements per lane), exactly the order ldmatrix.x4 yields
// with lane l addressing row l % 16, column 8 (l / 16) (the fp16 path compiles to the same).
template <bool kTrans, class Frag>
__device__ __forceinline__ void ldmatrix_frag(Frag& frag, const uint16_t* tile, int ld) {
  static_assert(sizeof(frag.x) == 16, "a 16x16 16-bit fragment of 4 registers per lane");
  const int lane = threadIdx.x % 32;
  const uint32_t addr = smem_addr(tile + (lane % 16) * ld + (lane / 16) * 8);
  uint32_t(&r)[4] = *reinterpret_cast<uint32_t(*)[4]>(&frag.x[0]);
  if constexpr (kTrans) {
    ptx::ldmatrix_x4_trans(r, addr);
  } else {
    ptx::ldmatrix_x4(r, addr);
  }
}

// Writes 8 consecutive outputs of one row (cols col .. col + 7), converted, bounds-checked.
template <typename OutT>
__device__ __forceinline__ void wmma_store8(OutT* row, int col, int n, bool vec, const float* v) {
  if (vec && col + 8 <= n) {
    if constexpr (sizeof(OutT) == 4) {
      reinterpret_cast<float4*>(row + col)[0] = make_float4(v[0], v[1], v[2], v[3]);
      reinterpret_cast<float4*>(row + col)[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
      Vec<OutT, 8> out;
#pragma unroll
      for (int j = 0; j < 8; ++j) out.v[j] = from_float<OutT>(v[j]);
      *reinterpret_cast<Vec<OutT, 8>*>(row + col) = out;
    }
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (col + j < n) row[col + j] = from_float<OutT>(v[j]);
  }
}

template <typename T, class Cfg, bool kAligned>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    wmma_gemm_kernel(const WmmaGemmParams p) {
  using namespace nvcuda;
  using Elem = typename WmmaElem<T>::type;
  extern __shared__ __align__(128) uint16_t wmma_smem[];
  const TileCoord tile = raster_tile<8>(blockIdx.x, p.s.tiles_m, p.s.tiles_n);
  const int m0 = tile.m * Cfg::kBlockM;
  const int n0 = tile.n * Cfg::kBlockN;
  const int k_tiles = (p.s.k + Cfg::kBlockK - 1) / Cfg::kBlockK;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_m = (warp / Cfg::kWarpsN) * Cfg::kWarpM;
  const int warp_n = (warp % Cfg::kWarpsN) * Cfg::kWarpN;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[Cfg::kFragsM][Cfg::kFragsN];
#pragma unroll
  for (int i = 0; i < Cfg::kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kFragsN; ++j) wmma::fill_fragment(acc[i][j], 0.f);

  auto stage_a = [&](int s) { return wmma_smem + s * Cfg::kStageElems; };
  auto stage_b = [&](int s) {
    return wmma_smem + s * Cfg::kStageElems + Cfg::kBlockM * Cfg::kStrideA;
  };

  // A warp's operands of one 16-deep k-step.
  struct Frags {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, Elem, wmma::row_major> a[Cfg::kFragsM];
    wmma::fragment<wmma::matrix_b, 16, 16, 16, Elem, wmma::row_major> b[Cfg::kFragsN];
  };
  WmmaLoader<Cfg, kAligned> loader(p, m0, n0);
  multistage_k_loop<Cfg::kStages, Cfg::kBlockK / 16, Frags>(
      k_tiles, [&](int stage) { loader.load(p, m0, n0, stage_a(stage), stage_b(stage)); },
      [&](Frags& f, int stage, int step) {
        const uint16_t* As = stage_a(stage) + warp_m * Cfg::kStrideA + 16 * step;
        const uint16_t* Bs = stage_b(stage) + 16 * step * Cfg::kStrideB + warp_n;
#pragma unroll
        for (int i = 0; i < Cfg::kFragsM; ++i) {
          if constexpr (std::is_same_v<T, __nv_bfloat16>)
            ldmatrix_frag<false>(f.a[i], As + 16 * i * Cfg::kStrideA, Cfg::kStrideA);
          else
            wmma::load_matrix_sync(f.a[i], reinterpret_cast<const Elem*>(As) + 16 * i * Cfg::kStrideA,
                                   Cfg::kStrideA);
        }
#pragma unroll
        for (int j = 0; j < Cfg::kFragsN; ++j) {
          if constexpr (std::is_same_v<T, __nv_bfloat16>)
            ldmatrix_frag<true>(f.b[j], Bs + 16 * j, Cfg::kStrideB);
          else
            wmma::load_matrix_sync(f.b[j], reinterpret_cast<const Elem*>(Bs) + 16 * j,
                                   Cfg::kStrideB);
        }
      },
      [&](const Frags& f) {
#pragma unroll
        for (int i = 0; i < Cfg::kFragsM; ++i)
#pragma unroll
          for (int j = 0; j < Cfg::kFragsN; ++j) wmma::mma_sync(acc[i][j], f.a[i], f.b[j], acc[i][j]);
      });

  // The pipeline's shared memory becomes the staging area once every warp is done reading it
  // (the K loop has waited for every copy).
  __syncthreads();
  float* staging = reinterpret_cast<float*>(wmma_smem) + warp * Cfg::kStageTile;
  const int r = lane / 2, cc = (lane % 2) * 8;
#pragma unroll
  for (int i = 0; i < Cfg::kFragsM; ++i) {
#pragma unroll
    for (int j = 0; j < Cfg::kFragsN; ++j) {
      wmma::store_matrix_sync(staging, acc[i][j], 20, wmma::mem_row_major);
      __syncwarp();
      const int row = m0 + warp_m + 16 * i + r;
      const int col = n0 + warp_n + 16 * j + cc;
      if (row < p.s.m) {
        float v[8];
        const float4 lo = *reinterpret_cast<const float4*>(staging + r * 20 + cc);
        const float4 hi = *reinterpret_cast<const float4*>(staging + r * 20 + cc + 4);
        v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w;
        v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
        if (p.c_is_f32)
          wmma_store8(static_cast<float*>(p.c) + int64_t(row) * p.s.ldc, col, p.s.n, p.c_vec, v);
        else
          wmma_store8(static_cast<T*>(p.c) + int64_t(row) * p.s.ldc, col, p.s.n, p.c_vec, v);
      }
      __syncwarp();  // the next fragment overwrites the staging tile
    }
  }
}

}  // namespace gks::kernels::gemm
