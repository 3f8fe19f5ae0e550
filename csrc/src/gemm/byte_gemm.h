// SPDX-License-Identifier: Apache-2.0
// What the 8-bit GEMMs (int8_gemm, gemm_fp8) share on the host: b in either layout (row-major
// [K, N], or K-major: the transposed view of a row-major [N, K]), per-row / per-column
// scales of any stride, and the byte transpose that gives wgmma its K-major B.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gks/gemm.h"

namespace gks::detail {

// An 8-bit GEMM's operands once validated.
struct ByteOperands {
  GemmOperands ops;       // ops.b is meaningful only when b is row-major
  bool b_k_major = false;
  GemmMatrix b_storage;   // b's storage, row-major: [K, N], or [N, K] when K-major
};

// gemm_operands for an 8-bit GEMM whose b may also be K-major (stride(0) == 1 and
// stride(1) != 1, with more than one row and column): its shape is checked as a row-major
// b's, its storage is then the row-major [N, K] matrix of leading dimension stride(1).
ByteOperands byte_operands(const TensorRef& a, const char* a_name, const TensorRef& b,
                           const char* b_name, const TensorRef& c, int config, int config_count,
                           const char* op, const GemmEpilogue* epi = nullptr, bool epi_scales = true);

// The checks of what sits beside the operands: the scales and c on a's device, c float16,
// bfloat16 or float32 (the dequantized output).
void check_scales_and_output(const TensorRef& a, const char* a_name, const TensorRef& a_scale,
                             const TensorRef& b_scale, const TensorRef& c, const char* op);

// The stride between the scales of a per-row ([len, 1] or [len]; column = true) or
// per-column ([1, len] or [len]) fp32 scale tensor on the GPU. Errors name `op` and `arg`.
int64_t scale_stride(const TensorRef& s, int64_t len, bool column, const char* op, const char* arg);

// dst = src^T for the row-major 8-bit matrix `src`, into `dst` (leading dimension ld_dst, a
// multiple of 16), on `stream`.
void transpose_bytes(const GemmMatrix& src, void* dst, int64_t ld_dst, cudaStream_t stream,
                     const char* op);

// Rows of a transposed copy are padded to 16 bytes (TMA and cp.async want that).
inline int64_t padded_ld(int64_t cols) { return (cols + 15) / 16 * 16; }

}  // namespace gks::detail
