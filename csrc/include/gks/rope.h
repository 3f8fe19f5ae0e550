// SPDX-License-Identifier: Apache-2.0
// The rope family: rotary position embeddings on the query and key heads of attention.
//  - apply_rope: each token's q and k heads rotated by its position's angles, read from a
//    cos/sin cache. The first rotary_dim of each head's head_dim values are rotated in
//    rotary_dim / 2 pairs; the rest pass through. NeoX style pairs element i with i +
//    rotary_dim / 2 (the two halves), GPT-J style pairs 2i with 2i + 1 (interleaved). With
//    c = cache[pos, i] and s = cache[pos, rotary_dim / 2 + i], the pair (a, b) becomes
//    (a c - b s, b c + a s). fp32 math, outputs in q's dtype.
//    A position outside [0, max_pos) has no angles: its token's rotated values come out NaN
//    (checked on the device, where a host check would need a synchronisation).
#pragma once

#include <cuda_runtime_api.h>

#include "gks/tensor.h"

namespace gks {

struct ApplyRopeArgs {
  TensorRef q;              // [..., Hq, D], fp32/fp16/bf16, last dim contiguous, any strides
  TensorRef k;              // [..., Hk, D], q's dtype and leading dims and D
  TensorRef cos_sin_cache;  // [max_pos, rotary_dim] fp32, contiguous: cos, then sin, a row
  TensorRef positions;      // int32 or int64, the leading dims of q, contiguous
  TensorRef q_out;          // q's shape and dtype: q itself (in place) or apart from every input
  TensorRef k_out;          // k's shape and dtype: k itself (in place) or apart from every input
  bool is_neox = true;      // NeoX (half-split) pairs; false: GPT-J (interleaved) pairs
};

// Validates the arguments (throws gks::Error) and launches on `stream`.
void apply_rope(const ApplyRopeArgs& args, cudaStream_t stream);

}  // namespace gks
