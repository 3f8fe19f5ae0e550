// SPDX-License-Identifier: Apache-2.0
// The fused epilogue's arithmetic on the device (EpilogueTerms, epilogue_terms.h), for every
// GEMM path: the Hopper kernel's store paths and split-K reduction (sm90/epilogue.cuh), and
// apply_epilogue_kernel, which finishes an fp32 product computed elsewhere (the WMMA
// fallback's) or an empty one (K = 0).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gks/kernels/activation.cuh"
#include "gks/kernels/gemm/epilogue_terms.h"
#include "gks/kernels/vec.cuh"

namespace gks::kernels::gemm {

__device__ __forceinline__ float epilogue_row_scale(const EpilogueTerms& e, int64_t row) {
  return e.row_scale ? e.row_scale[row * e.row_scale_stride] : 1.f;
}

__device__ __forceinline__ float epilogue_col_scale(const EpilogueTerms& e, int64_t col) {
  return e.col_scale ? e.col_scale[col * e.col_scale_stride] : 1.f;
}

__device__ __forceinline__ float epilogue_bias(const EpilogueTerms& e, int64_t col) {
  if (!e.bias) return 0.f;
  const int64_t i = col * e.bias_stride;
  if (e.bias_kind == 0) return static_cast<const float*>(e.bias)[i];
  if (e.bias_kind == 1) return __half2float(static_cast<const __half*>(e.bias)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(e.bias)[i]);
}

// The gated unit of a gate and its up (e.gated != 0).
__device__ __forceinline__ float epilogue_gated(const EpilogueTerms& e, float gate, float up) {
  return activation_at(e.gated - 1, gate) * up;
}

// c [m, n or n / 2 gated] (ldc, OutT) = the epilogue of y [m, n] (fp32, ldy), or of a
// zero product when y is null (K = 0). One output element a thread, grid-stride.
template <typename OutT>
__global__ void __launch_bounds__(256)
    apply_epilogue_kernel(const float* y, int64_t ldy, OutT* c, int64_t ldc, int m, int n, EpilogueTerms e) {
  const int n_out = e.gated ? n / 2 : n;
  const int64_t total = int64_t(m) * n_out;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / n_out;
    const int col = int(i - row * n_out);
    const float sa = epilogue_row_scale(e, row);
    auto term = [&](int col_in) {
      const float acc = y ? y[row * ldy + col_in] : 0.f;
      return acc * sa * epilogue_col_scale(e, col_in) + epilogue_bias(e, col_in);
    };
    const float v = e.gated ? epilogue_gated(e, term(2 * col), term(2 * col + 1)) : term(col);
    c[row * ldc + col] = from_float<OutT>(v);
  }
}

}  // namespace gks::kernels::gemm
