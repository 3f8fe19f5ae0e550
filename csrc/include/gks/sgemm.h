// SPDX-License-Identifier: Apache-2.0
// SGEMM: c[M, N] = a[M, K] @ b[K, N] in fp32 with fp32 FMA arithmetic (no TF32).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "gks/gemm_common.h"
#include "gks/tensor.h"

namespace gks {

struct SgemmArgs {
  TensorRef a;  // [M, K] float32, row-major (stride(1) == 1), any leading dimension
  TensorRef b;  // [K, N] float32, row-major, any leading dimension
  TensorRef c;  // [M, N] float32, row-major, any leading dimension; overwritten
  int config = -1;  // index into detail::sgemm_configs(); -1 = heuristic pick by shape
};

// Validates the arguments (throws gks::Error naming the bad one) and launches on `stream`.
// Transposed views (stride(0) == 1) are rejected: pass a contiguous copy.
void sgemm(const SgemmArgs& args, cudaStream_t stream);

namespace detail {
// The compiled tile configs, in a fixed order (the autotuner's tie band prefers earlier).
const std::vector<GemmConfigInfo>& sgemm_configs();
// The config the heuristic picks for an M x N x K problem on a GPU with `num_sms` SMs.
int sgemm_heuristic(int64_t m, int64_t n, int64_t k, int num_sms);
}  // namespace detail

}  // namespace gks
