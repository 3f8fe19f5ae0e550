// SPDX-License-Identifier: Apache-2.0
// What the three GEMMs (sgemm, wmma_gemm, int8_gemm) share on the host: the description of
// a compiled tile config, the validated view of a row-major matrix operand, and the
// config-selection helpers. Operands are row-major with any leading dimension:
// stride(1) == 1 and stride(0) >= cols. A transposed view (stride(0) == 1) is rejected with
// a message that says so; pass a contiguous copy instead.
#pragma once

#include <cstdint>
#include <vector>

#include "gks/tensor.h"

namespace gks {

// One compiled tile config of a GEMM. `name` is stable (the autotune cache stores indices
// and a hash of the names, so reordering or renaming configs invalidates old entries).
struct GemmConfigInfo {
  const char* name;
  int block_m;
  int block_n;
  int block_k;
  int threads;
  int stages;
};

namespace detail {

// A validated 2-D row-major operand: element (r, c) lives at data + r * ld + c.
struct GemmMatrix {
  void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;  // elements between row starts (>= cols; equal to cols when rows <= 1)
};

// Checks that `t` is 2-D (gemm_matrix's rank check, on its own for callers that size an
// output from the operands before validating them). Errors name `op` and `arg`.
void check_matrix_rank(const TensorRef& t, const char* op, const char* arg);

// Checks that `t` is a 2-D CUDA tensor of shape [rows, cols] (either bound may be -1 for
// "any"), row-major (stride(1) == 1 when cols > 1, stride(0) >= cols when rows > 1), and
// returns its view. Errors name `op` and `arg`.
GemmMatrix gemm_matrix(const TensorRef& t, const char* op, const char* arg, int64_t rows,
                       int64_t cols);

// True when the matrix's rows can be read with 16-byte accesses: the base pointer is
// 16-byte aligned and the leading dimension is a multiple of 16 bytes.
bool gemm_rows_aligned16(const GemmMatrix& m, int64_t elem_bytes);

// The number of multiprocessors of `device`, cached per device (the heuristics need it).
int device_sm_count(int device);

// Checks `config` against the list (-1 = heuristic) and throws a gks::Error naming the
// argument otherwise.
void check_gemm_config(int config, int count, const char* op);

// The largest dims any GEMM accepts: M, N and K must each fit in int32 (offsets are 64-bit).
void check_gemm_dims(int64_t m, int64_t n, int64_t k, const char* op);

// The operands of c = a @ b once their shapes are checked: a [M, K], b [K, N], c [M, N].
struct GemmOperands {
  GemmMatrix a, b, c;
  int64_t m = 0, n = 0, k = 0;
};

// The shape checks every GEMM shares (after its own device and dtype checks): each operand
// a row-major matrix (gemm_matrix), b's rows equal to a's columns, c [M, N], `config` in
// [-1, config_count), and M, N, K in range. Errors name the arguments as given.
GemmOperands gemm_operands(const TensorRef& a, const char* a_name, const TensorRef& b,
                           const char* b_name, const TensorRef& c, int config, int config_count,
                           const char* op);

// The dtype and device checks of the 16-bit GEMMs (wmma_gemm, gemm), then gemm_operands:
// a and b float16 or bfloat16, one dtype, on one CUDA device; c float32 or a's dtype.
GemmOperands half_gemm_operands(const TensorRef& a, const TensorRef& b, const TensorRef& c,
                                int config, int config_count, const char* op);

// What the heuristic knows about a config beyond its tile shape: how many blocks fit on an
// SM and how close to peak its inner loop runs once the GPU is full (a relative guess; the
// autotuner measures the real thing).
struct GemmConfigTraits {
  int blocks_per_sm;
  double efficiency;
};

// Picks the config with the best estimated throughput for an M x N output: its efficiency
// x the share of the last wave that is busy x the share of the tiles' area inside the
// matrix (padding waste). Ties go to the earlier config. Pure, so host tests can check it.
int pick_gemm_config(const std::vector<GemmConfigInfo>& configs,
                     const std::vector<GemmConfigTraits>& traits, int64_t m, int64_t n,
                     int num_sms);

// Tiles a config's block shape needs to cover an M x N output.
int64_t gemm_tile_count(const GemmConfigInfo& c, int64_t m, int64_t n);

}  // namespace detail
}  // namespace gks
