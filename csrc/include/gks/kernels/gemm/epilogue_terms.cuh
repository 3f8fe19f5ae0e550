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

// The terms are read without branches: they are inlined at every column pair of the
// unrolled stores, and a branch each made the Hopper kernels far slower to compile. An
// absent term reads a constant (stride 0) instead.
static __device__ const float kEpilogueOne = 1.f;
static __device__ const uint32_t kEpilogueZero = 0;  // 0.f, and a 16-bit 0 in its low half

__device__ __forceinline__ float epilogue_row_scale(const EpilogueTerms& e, int64_t row) {
  const float* s = e.row_scale ? e.row_scale : &kEpilogueOne;
  return s[row * (e.row_scale ? e.row_scale_stride : 0)];
}

__device__ __forceinline__ float epilogue_col_scale(const EpilogueTerms& e, int64_t col) {
  const float* s = e.col_scale ? e.col_scale : &kEpilogueOne;
  return s[col * (e.col_scale ? e.col_scale_stride : 0)];
}

// One read at one address: 32 bits of an fp32 bias, or 16 of a 16-bit one, widened (bf16:
// the high half of an fp32; fp16: __half2float).
__device__ __forceinline__ float epilogue_bias(const EpilogueTerms& e, int64_t col) {
  const bool wide = e.bias_kind == 0;
  const char* base = e.bias ? static_cast<const char*>(e.bias) : reinterpret_cast<const char*>(&kEpilogueZero);
  const char* at = base + col * (e.bias ? e.bias_stride * (wide ? 4 : 2) : 0);
  const uint32_t bits = wide ? *reinterpret_cast<const uint32_t*>(at) : *reinterpret_cast<const uint16_t*>(at);
  return wide ? __uint_as_float(bits)
       : e.bias_kind == 2 ? __uint_as_float(bits << 16)
                          : __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}

// Whether c's columns take terms of their own (a scale, a bias, or a gated unit): the
// Hopper kernel's direct stores apply row scales only, and leave those to the other paths.
__device__ __forceinline__ bool has_column_terms(const EpilogueTerms& e) {
  return e.col_scale || e.bias || e.gated;
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
