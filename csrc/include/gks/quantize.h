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

// ---- FP8 e4m3 (torch.float8_e4m3fn) with fp32 scales ----
//
// One scale per group of x, by granularity:
//   kTensor: the whole tensor, scale [1];
//   kToken:  a row (the last dim), scale [..., 1];
//   kGroup:  1 x 128 along the last dim (DeepSeek-V3's activations), scale [..., ceil(K / 128)]
//            (row-major: the group index is the last dim);
//   kBlock:  128 x 128 of a 2-D x [M, K] (DeepSeek-V3's weights), scale
//            [ceil(M / 128), ceil(K / 128)].
// The last group or block of a dim that is not a multiple of 128 is partial (its absmax is
// over the elements it has). group_size must be 128.
//
//   quantize_fp8:    absmax = max |x| over the group (NaN-propagating; 0 when empty)
//                    scale  = absmax / 448, one IEEE fp32 division; with scale_ue8m0 then
//                             rounded up to a power of two, at least 2^-126 (UE8M0 scales;
//                             0, inf and NaN stay)
//                    v      = x / scale, one IEEE fp32 division; 0 where scale is 0
//                    q      = e4m3(clamp(v, -448, 448)), round to nearest even; NaN stays NaN
//   dequantize_fp8:  out    = q * scale (fp32 product, then out's dtype)
// What follows: an all-zero group gives scale 0 and q 0, never NaN; a group holding a NaN
// gives scale NaN and q NaN throughout; one holding +-inf (no NaN) gives scale inf, q NaN
// at the infinities and 0 elsewhere (it dequantizes to NaN: flagged, not clipped).
// Per tensor takes two passes over x (an atomic-max absmax pass, then the quantize pass,
// which mostly re-reads x from DRAM): its scale depends on every element. The CUDA kernels
// divide as quantize_int8's do (Markstein's correctly rounded quotient on the fast path).
enum class Fp8Granularity { kTensor, kToken, kGroup, kBlock };

struct QuantizeFp8Args {
  TensorRef x;      // [..., K] (2-D for kBlock), fp32/fp16/bf16, last dim contiguous, any row strides
  TensorRef q;      // x's shape, float8_e4m3fn, last dim contiguous, any row strides
  TensorRef scale;  // fp32, the granularity's shape (above), last dim contiguous
  Fp8Granularity granularity = Fp8Granularity::kToken;
  int group_size = 128;
  bool scale_ue8m0 = false;
};

struct DequantizeFp8Args {
  TensorRef q;      // [..., K] (2-D for kBlock), float8_e4m3fn, last dim contiguous
  TensorRef scale;  // fp32, laid out as quantize_fp8 gives it for the granularity
  TensorRef out;    // q's shape, fp32/fp16/bf16, last dim contiguous, any row strides
  Fp8Granularity granularity = Fp8Granularity::kToken;
  int group_size = 128;
};

void quantize_fp8(const QuantizeFp8Args& args, cudaStream_t stream);
void dequantize_fp8(const DequantizeFp8Args& args, cudaStream_t stream);

// The granularity's name as the Python API spells it ("tensor", "token", "group", "block").
const char* fp8_granularity_name(Fp8Granularity granularity);

}  // namespace gks
