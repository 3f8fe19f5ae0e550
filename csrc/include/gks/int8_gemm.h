// SPDX-License-Identifier: Apache-2.0
// INT8 GEMM on Tensor Cores (mma.sync m16n8k32, int32 accumulation) with a dequantizing
// epilogue: c[m, n] = float(sum_k a_q[m, k] * b_q[k, n]) * a_scale[m] * b_scale[n].
// a_q and a_scale are what gks.quantize_int8(a) returns (per-row symmetric); b_q, b_scale
// come from quantizing b column-wise (quantize b.T per row, transpose the results back).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "gks/gemm_common.h"
#include "gks/tensor.h"

namespace gks {

struct Int8GemmArgs {
  TensorRef a;        // [M, K] int8, row-major (stride(1) == 1), any leading dimension
  TensorRef b;        // [K, N] int8, row-major (stride(1) == 1), any leading dimension
  TensorRef a_scale;  // [M, 1] or [M] float32, any stride
  TensorRef b_scale;  // [1, N] or [N] float32, any stride
  TensorRef c;        // [M, N] float16, bfloat16 or float32, row-major, any leading dim
  int config = -1;    // index into detail::int8_gemm_configs(); -1 = heuristic pick
};

// Validates the arguments (throws gks::Error naming the bad one) and launches on `stream`.
// Transposed views (stride(0) == 1, e.g. b_q = q.T of a [N, K] tensor) are rejected: pass
// a contiguous copy.
void int8_gemm(const Int8GemmArgs& args, cudaStream_t stream);

namespace detail {
const std::vector<GemmConfigInfo>& int8_gemm_configs();
int int8_gemm_heuristic(int64_t m, int64_t n, int64_t k, int num_sms);
}  // namespace detail

}  // namespace gks
