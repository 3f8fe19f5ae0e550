// SPDX-License-Identifier: Apache-2.0
// The fused epilogue of the GEMMs (gks::gemm, gks::gemm_fp8, and the scales of
// gks::int8_gemm's Hopper path), as the kernels read it: plain data, shared by the host
// launchers (gks/gemm.h) and the device code (epilogue_terms.cuh).
//
//   y = float(acc) * row_scale[row] * col_scale[col] + bias[col]      (fp32, in that order)
//   c = y, or with `gated` c[:, j] = act(y[:, 2j]) * y[:, 2j + 1] (c has N / 2 columns)
//
// A null pointer drops its term. Interleaving gate and up columns puts both in one thread's
// accumulator registers (a fragment's column pair), so the gated unit costs no exchange.
#pragma once

#include <cstdint>

namespace gks::kernels::gemm {

struct EpilogueTerms {
  const float* row_scale = nullptr;  // element row * row_scale_stride (stride 0: one scale)
  int64_t row_scale_stride = 0;
  const float* col_scale = nullptr;  // element col * col_scale_stride
  int64_t col_scale_stride = 0;
  const void* bias = nullptr;  // element col * bias_stride, of bias_kind
  int64_t bias_stride = 0;
  int bias_kind = 0;  // 0 float32, 1 float16, 2 bfloat16 (c_kind's numbering)
  int gated = 0;      // 0: none; else 1 + gks::Activation (1 silu, 2 gelu, 3 gelu_tanh)
};

// Whether any term is given. The Hopper kernels without one run an instantiation that
// has no epilogue code at all: the terms' reads slow a plain product's tiles down.
inline constexpr bool has_terms(const EpilogueTerms& e) {
  return e.row_scale != nullptr || e.col_scale != nullptr || e.bias != nullptr || e.gated != 0;
}

}  // namespace gks::kernels::gemm
