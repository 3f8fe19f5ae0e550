// SPDX-License-Identifier: Apache-2.0
// The activation family: the gated activations of a transformer's MLP.
//  - act_and_mul: y = act(gate) * up over the last dim, where x [..., 2d] holds gate in its
//    first half and up in its second (the layout of a fused gate/up projection), y [..., d];
//    act one of silu (x * sigmoid(x)), gelu (erf form) and gelu_tanh (the tanh
//    approximation). fp32 math, y in x's dtype.
#pragma once

#include <cuda_runtime_api.h>

#include "gks/quantize.h"
#include "gks/tensor.h"

namespace gks {

enum class Activation { kSilu, kGelu, kGeluTanh };

struct ActAndMulArgs {
  TensorRef x;  // [..., 2d], fp32/fp16/bf16, last dim contiguous, any row strides
  TensorRef y;  // [..., d], x's dtype, last dim contiguous, any row strides; apart from x
  Activation activation = Activation::kSilu;
};

// Validates the arguments (throws gks::Error) and launches on `stream`.
void act_and_mul(const ActAndMulArgs& args, cudaStream_t stream);

// act_and_mul_quant: y = act(gate) * up as act_and_mul's, in fp32 (never rounded to x's
// dtype), quantized to fp8 e4m3 per 1 x 128 group of the last dim, quantize_fp8's contract
// on y (scale = absmax / 448, UE8M0 with scale_ue8m0): the input of an fp8 GEMM with
// DeepSeek-V3's activation scales, in one pass. d must be a multiple of 128.
struct ActAndMulQuantArgs {
  TensorRef x;      // [..., 2d], fp32/fp16/bf16, last dim contiguous, any row strides
  TensorRef q;      // [..., d], float8_e4m3fn, last dim contiguous
  TensorRef scale;  // [..., d / 128], fp32
  Activation activation = Activation::kSilu;
  bool scale_ue8m0 = false;
};

void act_and_mul_quant(const ActAndMulQuantArgs& args, cudaStream_t stream);

}  // namespace gks
