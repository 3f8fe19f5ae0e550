// SPDX-License-Identifier: Apache-2.0
// Device code the sm_80 GEMM kernels (sgemm, wmma, int8) share: the checked operand-tile
// copies, the multistage K loop, the tile raster, and the shape every GEMM kernel takes.
#pragma once

#include <cstdint>

#include "gks/kernels/ptx/sm80.cuh"

namespace gks::kernels::gemm {

// The parts of a GEMM launch that do not depend on the element types. Offsets are formed
// in int64 (row * ld), so matrices past 2^31 elements are fine.
struct GemmShape {
  int m, n, k;
  int64_t lda, ldb, ldc;
  int tiles_m, tiles_n;
};

using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::cp_async_zfill;
using ptx::smem_addr;

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

// The K loop of the cp.async GEMMs (the "multistage" pipeline): a ring of kStages shared
// tiles, copies for tile kt + kStages - 1 in flight while tile kt is computed, and each tile
// consumed in kSteps k-steps whose register fragments are double-buffered: step s + 1's
// fragments load before step s's math issues. The barrier for tile kt + 1 sits before the
// last step of tile kt, so the next tile's first fragments load while that step's math runs
// and no warp waits on shared memory at a tile boundary with nothing to issue (docs/perf/gemm.md
// has what a barrier at the top of each tile cost instead).
//
//   issue_tile(stage): start the copies of the next k-tile (tile 0, 1, ... in call order) into
//                      ring slot `stage`. A cp.async group is committed at every slot where
//                      a call could be, made or not, so "kStages - 2 groups pending" always
//                      means "the next tile has landed".
//   load_frags(frags, stage, step): fill `frags` from ring slot `stage`, k-step `step`.
//   mma(frags): the math of one k-step.
template <int kStages, int kSteps, class Frags, class IssueTile, class LoadFrags, class Mma>
__device__ __forceinline__ void multistage_k_loop(int k_tiles, IssueTile&& issue_tile,
                                                  LoadFrags&& load_frags, Mma&& mma) {
  static_assert(kStages >= 2 && kSteps >= 1, "a ring of at least two tiles");
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) issue_tile(s);
    cp_async_commit();
  }
  Frags frags[2];
  cp_async_wait<kStages - 2>();
  __syncthreads();
  int read_stage = 0, write_stage = kStages - 1;
  load_frags(frags[0], read_stage, 0);
  for (int kt = 0; kt < k_tiles; ++kt) {
#pragma unroll
    for (int step = 0; step < kSteps; ++step) {
      if (step == 0) {
        // Every warp passed the barrier inside tile kt - 1 after loading its last
        // fragments, so that tile's slot (write_stage) is free.
        if (kt + kStages - 1 < k_tiles) issue_tile(write_stage);
        cp_async_commit();
        write_stage = write_stage + 1 == kStages ? 0 : write_stage + 1;
      }
      if (step == kSteps - 1) {
        cp_async_wait<kStages - 2>();
        __syncthreads();  // tile kt + 1 visible to all (past the end: an unused slot)
        read_stage = read_stage + 1 == kStages ? 0 : read_stage + 1;
        load_frags(frags[(step + 1) % 2], read_stage, 0);
      } else {
        load_frags(frags[(step + 1) % 2], read_stage, step + 1);
      }
      mma(frags[step % 2]);
    }
  }
  cp_async_wait<0>();  // no copy may still be landing when the caller reuses shared memory
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
