// SPDX-License-Identifier: Apache-2.0
// Device helpers the GEMM kernels share: cp.async with zero fill, the checked operand-tile
// copies, the tile raster, and the parameters every GEMM kernel takes.
#pragma once

#include <cstdint>

namespace gks::kernels::gemm {

// The parts of a GEMM launch that do not depend on the element types. Offsets are formed
// in int64 (row * ld), so matrices past 2^31 elements are fine.
struct GemmShape {
  int m, n, k;
  int64_t lda, ldb, ldc;
  int tiles_m, tiles_n;
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies `src_bytes` (0..kBytes) from global `src` to shared `dst` and zero-fills the rest
// of the kBytes destination; with src_bytes == 0 nothing is read (the caller still passes
// an address inside the tensor). 16-byte copies bypass L1 (.cg); smaller ones cannot.
template <int kBytes>
__device__ __forceinline__ void cp_async_zfill(void* dst, const void* src, int src_bytes) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes");
  const uint32_t d = smem_addr(dst);
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(d), "l"(src),
                 "n"(kBytes), "r"(src_bytes));
  }
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

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
