// SPDX-License-Identifier: Apache-2.0
// The quantize family: symmetric per-row INT8 quantization over the last dim, and its
// inverse.
//
//   quantize_int8:    scale = absmax(row) / 127            (fp32, one per row)
//                     q     = clamp(rint(x / scale), -127, 127)   (int8, rint = half to even)
//   dequantize_int8:  out   = q * scale                     (fp32 product, then out's dtype)
//
// The exact contract, which every backend (CUDA, Triton, Pallas) and gks.reference meet
// bit for bit:
//  1. absmax is the largest |x| of the row, NaN-propagating (a NaN anywhere makes it NaN);
//     the absmax of an empty row is 0.
//  2. scale = absmax / 127, one IEEE fp32 division rounded to nearest.
//  3. v = x / scale, one IEEE fp32 division rounded to nearest (x converted to fp32 first,
//     which is exact for fp16/bf16).
//  4. q = 0 where v is NaN; otherwise q = rint(clamp(v, -127, 127)).
// What follows from it:
//  - an all-zero row gives scale = 0 and q = 0 (0 / 0 is NaN, hence 0), never NaN;
//  - a row holding a NaN gives scale = NaN and q = 0 everywhere;
//  - a row holding +-inf (and no NaN) gives scale = +inf and q = 0 everywhere
//    (finite / inf = 0, inf / inf = NaN), so it dequantizes to NaN: the row is flagged,
//    not silently clipped;
//  - a row whose absmax / 127 underflows to 0 (absmax < 2^-143, only fp32/bf16 subnormals)
//    gives scale = 0 and q = +-127 for its non-zero entries (x / 0 = +-inf, clamped);
//  - for every other row |q * scale - x| <= scale * (0.5 + 2^-17).
// The CUDA kernel does not divide per element: for rows with 2^-64 <= scale <= 2^126 it
// computes v from the correctly rounded reciprocal r = 1 / scale with Markstein's
// correction, q0 = x * r, e = fma(-q0, scale, x), v = fma(e, r, q0), which is the
// correctly rounded x / scale except for quotients far below 1/2 (both then round to 0);
// other rows take true divisions. See kernels/rows/quantize.cuh.
#pragma once

#include <cuda_runtime_api.h>

#include "gks/tensor.h"

namespace gks {

struct QuantizeInt8Args {
  TensorRef x;      // [..., N], fp32/fp16/bf16, last dim contiguous, any row strides
  TensorRef q;      // x's shape, int8, last dim contiguous, any row strides
  TensorRef scale;  // [..., 1] (x's shape with the last dim 1), fp32, any strides
};

struct DequantizeInt8Args {
  TensorRef q;      // [..., N], int8, last dim contiguous, any row strides
  TensorRef scale;  // [..., 1] (q's shape with the last dim 1), fp32, any strides
  TensorRef out;    // q's shape, fp32/fp16/bf16, last dim contiguous, any row strides
};

// Validate the arguments (throw gks::Error naming the bad one) and launch on `stream`.
void quantize_int8(const QuantizeInt8Args& args, cudaStream_t stream);
void dequantize_int8(const DequantizeInt8Args& args, cudaStream_t stream);

}  // namespace gks
