// SPDX-License-Identifier: Apache-2.0
// Tensor Core GEMM through nvcuda::wmma (mma.sync): c[M, N] = a[M, K] @ b[K, N] with fp16
// or bf16 inputs and fp32 accumulation; c is fp32 or the input dtype.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "gks/gemm_common.h"
#include "gks/tensor.h"

namespace gks {

struct WmmaGemmArgs {
  TensorRef a;  // [M, K] float16 or bfloat16, row-major (stride(1) == 1), any leading dim
  TensorRef b;  // [K, N] a's dtype, row-major, any leading dimension
  TensorRef c;  // [M, N] float32 or a's dtype, row-major, any leading dimension
  int config = -1;  // index into detail::wmma_gemm_configs(); -1 = heuristic pick
};

// Validates the arguments (throws gks::Error naming the bad one) and launches on `stream`.
// Transposed views (stride(0) == 1) are rejected: pass a contiguous copy.
void wmma_gemm(const WmmaGemmArgs& args, cudaStream_t stream);

namespace detail {
const std::vector<GemmConfigInfo>& wmma_gemm_configs();
int wmma_gemm_heuristic(int64_t m, int64_t n, int64_t k, int num_sms);
}  // namespace detail

}  // namespace gks
