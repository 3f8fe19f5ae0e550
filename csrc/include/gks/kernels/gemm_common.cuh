// SPDX-License-Identifier: Apache-2.0
// Device helpers the GEMM kernels share: the checked operand-tile copies (cp.async itself
// is in cp_async.cuh), the tile raster, and the parameters every GEMM kernel takes.
#pragma once

#include <cstdint>

#include "gks/kernels/cp_async.cuh"

namespace gks::kernels::gemm {

// The parts of a GEMM launch that do not depend on the element types. Offsets are formed
// in int64 (row * ld), so matrices past 2^31 elements are fine.
struct GemmShape {
  int m, n, k;
  int64_t lda, ldb, ldc;
  int tiles_m, tiles_n;
};

using kernels::cp_async_commit;
using kernels::cp_async_wait;
using kernels::cp_async_zfill;
using kernels::smem_addr;

// The checked copy of one operand tile (any block, any k-tile) with 16-byte cp.async
// chunks: tile row r, chunk c (kElems = 16 / sizeof(T) elements) comes from row row0 + r,
// columns col0 + c * kElems... of the row-major matrix g (leading dimension ld, rows x cols),
// and lands at smem + place(r, c). A chunk past the matrix's last row is zero-filled, one
// that runs past its last column copies the columns it has. The caller guarantees 16-byte
// aligned rows (ld and col0 multiples of kElems, g aligned).
template <int kRows, int kChunksPerRow, int kThreads, typename T, class Place>
__device__ __forceinline__ void cp_async_tile_checked(T* smem, const T* g, int64_t ld, int row0,
                                                      int col0, int rows, int cols, Place place) {
  constexpr int kElems = 16 / int(sizeof(T));
  constexpr int kRowStep = kThreads / kChunksPerRow;
  constexpr int kCopies = kRows * kChunksPerRow / kThreads;
  static_assert(kThreads % kChunksPerRow == 0 && kRows * kChunksPerRow % kThreads == 0,
                "the threads must tile the chunks evenly");
  const int tid = threadIdx.x;
  const int chunk = tid % kChunksPerRow;
  const int left = cols - (col0 + chunk * kElems);
  const int bytes = left >= kElems ? 16 : (left > 0 ? left * int(sizeof(T)) : 0);
#pragma unroll
  for (int i = 0; i < kCopies; ++i) {
    const int r = tid / kChunksPerRow + i * kRowStep;
    const bool ok = bytes > 0 && row0 + r < rows;
    const T* src = ok ? g + int64_t(row0 + r) * ld + (col0 + chunk * kElems) : g;
    cp_async_zfill<16>(smem + place(r, chunk), src, ok ? bytes : 0);
  }
}

// The same tile element by element through registers, for operands that are not 16-byte
// aligned: tile element (r, e) lands at smem + place(r, e), zero past the matrix.
template <int kRows, int kCols, int kThreads, typename T, class Place>
__device__ __forceinline__ void copy_tile_elementwise(T* smem, const T* g, int64_t ld, int row0,
                                                      int col0, int rows, int cols, Place place) {
  constexpr int kCopies = kRows * kCols / kThreads;
#pragma unroll 4
  for (int i = 0; i < kCopies; ++i) {
    const int e = threadIdx.x + i * kThreads;
    const int r = e / kCols, c = e % kCols;
    const bool ok = row0 + r < rows && col0 + c < cols;
    smem[place(r, c)] = ok ? g[int64_t(row0 + r) * ld + (col0 + c)] : T(0);
  }
}

// Block id -> output tile, in groups of kGroupM tile rows: consecutive blocks walk down a
// group's rows before moving right, so the blocks in flight share A and B tiles in L2.
struct TileCoord {
  int m, n;
};
template <int kGroupM>
__device__ __forceinline__ TileCoord raster_tile(int block, int tiles_m, int tiles_n) {
  const int per_group = kGroupM * tiles_n;
  const int group = block / per_group;
  const int first_m = group * kGroupM;
  const int rows_in_group = min(tiles_m - first_m, kGroupM);
  const int in_group = block - group * per_group;
  return {first_m + in_group % rows_in_group, in_group / rows_in_group};
}

}  // namespace gks::kernels::gemm
