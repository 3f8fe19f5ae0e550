// SPDX-License-Identifier: Apache-2.0
// The activation family: the gated activations of a transformer's MLP.
//  - act_and_mul: y = act(gate) * up over the last dim, where x [..., 2d] holds gate in its
//    first half and up in its second (the layout of a fused gate/up projection), y [..., d];
//    act one of silu (x * sigmoid(x)), gelu (erf form) and gelu_tanh (the tanh
//    approximation). fp32 math, y in x's dtype.
#pragma once

#include <cuda_runtime_api.h>

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

}  // namespace gks
