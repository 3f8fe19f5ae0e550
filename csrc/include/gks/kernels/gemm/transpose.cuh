// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>

namespace gks::kernels::gemm {

// dst = src^T for 8-bit matrices (int8, fp8: bytes alike): src [rows, cols] (leading
// dimension ld_src) -> dst [cols, rows] (leading dimension ld_dst). The 8-bit GEMMs use it
// to give each kernel the layout of b it reads: the Hopper kernel's wgmma takes 8-bit
// operands K-major only ([N, K]), int8_gemm's mma.sync kernel reads b row-major ([K, N]).
// A block moves a 64 x 64 byte tile through shared memory: 16-byte row reads where src
// allows, then each thread gathers 16 consecutive src rows of one column and writes them as
// one 16-byte store. dst's leading dimension is a multiple of 16 and its base 16-byte
// aligned, so every store is whole; columns of dst past `rows` (up to ld_dst) are written
// as zero.
constexpr int kTransposeTile = 64;
constexpr int kTransposeThreads = 256;

struct TransposeBytesParams {
  const int8_t* src;
  int64_t ld_src;
  int8_t* dst;
  int64_t ld_dst;  // a multiple of 16, >= rows
  int rows, cols;  // of src
  bool src_vec;    // src's base and leading dimension are 16-byte aligned
};

__global__ void __launch_bounds__(kTransposeThreads)
    transpose_bytes_kernel(const TransposeBytesParams p) {
  // Rows of 68 bytes: the gathers of a warp (4 row offsets 16 apart x 8 columns) fall in
  // distinct words or share one (a broadcast), up to two ways.
  constexpr int kPitch = kTransposeTile + 4;
  __shared__ __align__(16) uint8_t tile[kTransposeTile * kPitch];
  const int t = threadIdx.x;
  const int c0 = blockIdx.x * kTransposeTile;
  const int row_tiles = (p.rows + kTransposeTile - 1) / kTransposeTile;
  for (int rt = blockIdx.y; rt < row_tiles; rt += gridDim.y) {
    const int r0 = rt * kTransposeTile;
    {  // Load: thread t reads 16 bytes of src row r0 + t / 4, columns c0 + 16 (t % 4) ..
      const int r = t / 4, c = (t % 4) * 16;
      const int row = r0 + r, col = c0 + c;
      uint32_t words[4] = {0, 0, 0, 0};
      if (row < p.rows) {
        const int8_t* src = p.src + int64_t(row) * p.ld_src + col;
        if (p.src_vec && col + 16 <= p.cols) {
          const uint4 v = *reinterpret_cast<const uint4*>(src);
          words[0] = v.x, words[1] = v.y, words[2] = v.z, words[3] = v.w;
        } else {
#pragma unroll
          for (int e = 0; e < 16; ++e)
            if (col + e < p.cols) words[e / 4] |= uint32_t(uint8_t(src[e])) << (8 * (e % 4));
        }
      }
#pragma unroll
      for (int w = 0; w < 4; ++w) *reinterpret_cast<uint32_t*>(tile + r * kPitch + c + 4 * w) = words[w];
    }
    __syncthreads();
    {  // Store: thread t writes dst row c0 + t / 4, columns r0 + 16 (t % 4) .. + 15.
      const int c = t / 4, rc = (t % 4) * 16;
      const int col = c0 + c, row = r0 + rc;
      if (col < p.cols && row < p.ld_dst) {
        uint32_t words[4] = {0, 0, 0, 0};
#pragma unroll
        for (int e = 0; e < 16; ++e) words[e / 4] |= uint32_t(tile[(rc + e) * kPitch + c]) << (8 * (e % 4));
        *reinterpret_cast<uint4*>(p.dst + int64_t(col) * p.ld_dst + row) =
            make_uint4(words[0], words[1], words[2], words[3]);
      }
    }
    __syncthreads();  // the next tile overwrites this one
  }
}

}  // namespace gks::kernels::gemm
