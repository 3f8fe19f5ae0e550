// SPDX-License-Identifier: Apache-2.0
// The loss family: cross entropy of logits [T, V] against integer targets [T], forward and
// backward, without a [T, V] softmax in memory.
//  - cross_entropy_fwd: per row, lse = log(sum_j exp(x_j)) (fp32) and loss = lse - x[target]
//    (fp32, or written in the logits' dtype). One pass over the row: an online max and
//    rescaled sum.
//  - cross_entropy_bwd: dlogits = (exp(x - lse) - onehot(target)) * dloss[row], in the
//    logits' dtype. One pass: read the row, write its gradient.
// The reduction over rows ('mean', 'sum') is the caller's: a sum over T of the fp32 losses
// (gks/_torch_ops/loss.py).
//
// Rows: a target equal to ignore_index gives loss 0 and a zero gradient row (whatever the
// row's values). Any other target outside [0, V) cannot be refused on the host without a
// synchronisation: its row gives loss NaN and a NaN gradient row. Non-finite logits follow
// torch's F.cross_entropy: a row holding a NaN or +inf, or all -inf, has lse = NaN and so
// loss NaN (unless ignored); a -inf target logit in an otherwise finite row gives loss +inf
// and a finite gradient.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gks/tensor.h"

namespace gks {

// How many threads share a row (the `config` argument forces one; -1 leaves it to the
// heuristic): a warp a row (four rows a block) for short rows, a block of 256 or 512 threads
// a row for long ones.
struct CrossEntropyConfig {
  const char* name;  // stable: tables key on it
  int threads_per_row;
};

inline constexpr CrossEntropyConfig kCrossEntropyConfigs[] = {
    {"warp", 32},
    {"block-256", 256},
    {"block-512", 512},
};

struct CrossEntropyFwdArgs {
  TensorRef logits;  // [T, V], fp32/fp16/bf16, V >= 1, last dim contiguous, any row stride
  TensorRef target;  // [T], int64 or int32, any stride
  TensorRef loss;    // [T], float32 or the logits' dtype: each row's loss
  TensorRef lse;     // [T], float32: each row's log-sum-exp (what the backward reads)
  int64_t ignore_index = -100;
  int config = -1;   // -1: the heuristic; else an index into kCrossEntropyConfigs
};

struct CrossEntropyBwdArgs {
  TensorRef logits;   // as in the forward
  TensorRef target;   // as in the forward
  TensorRef lse;      // [T] float32, the forward's
  TensorRef dloss;    // [T] float32, the gradient of each row's loss; any stride (0 too)
  TensorRef dlogits;  // the logits' shape and dtype, last dim contiguous; may be logits itself
  int64_t ignore_index = -100;
  int config = -1;
};

// Validate the arguments (throw gks::Error naming the argument) and launch on `stream`.
void cross_entropy_fwd(const CrossEntropyFwdArgs& args, cudaStream_t stream);
void cross_entropy_bwd(const CrossEntropyBwdArgs& args, cudaStream_t stream);

}  // namespace gks
