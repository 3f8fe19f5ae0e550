// SPDX-License-Identifier: Apache-2.0
// The softmax family: softmax over the last dim, fp32 math, the output in x's dtype.
//
// Non-finite input gives what torch.softmax gives: a row holding a NaN or a +inf, and a
// row that is all -inf, comes out all NaN; a -inf entry of any other row comes out 0.
#pragma once

#include <cuda_runtime_api.h>

#include "gks/tensor.h"

namespace gks {

// A kernel shape the `config` argument of softmax (and of the fused softmax_rmsnorm, see
// gks/norms.h) forces; -1 leaves it to the heuristic.
struct SoftmaxConfig {
  enum class Path {
    kRegisters,  // each row held in registers (read once) where it fits, else looped
    kLooped,     // each row walked in a loop: online max/sum, then normalize and write
    kCluster,    // softmax_rmsnorm only: long rows split over a thread block cluster
    kStaged,     // softmax_rmsnorm only: persistent blocks that fetch their next row ahead
  };
  const char* name;  // stable: the autotuner's tables key on the names
  Path path;
  bool wide = false;  // kRegisters: twice the accesses a thread where that fits (half the threads)
  // kLooped, softmax only: the row stays in shared memory between the two walks, where it
  // fits (16-byte aligned rows of whole accesses up to the block's shared memory).
  bool stage_row = false;
};

// registers; looped; registers-wide: registers with twice the accesses a thread where that
// fits (half the threads a row): fp32 rows, and the fused op's 16-bit rows; looped-smem:
// looped, the row read from HBM once (kept in shared memory for the second walk), else as
// looped. The heuristic: registers where the row fits them, else looped with the row in
// shared memory where it fits (as looped-smem), else looped.
inline constexpr SoftmaxConfig kSoftmaxConfigs[] = {
    {"registers", SoftmaxConfig::Path::kRegisters},
    {"looped", SoftmaxConfig::Path::kLooped},
    {"registers-wide", SoftmaxConfig::Path::kRegisters, /*wide=*/true},
    {"looped-smem", SoftmaxConfig::Path::kLooped, /*wide=*/false, /*stage_row=*/true},
};

struct SoftmaxArgs {
  TensorRef x;  // [..., N], fp32/fp16/bf16, last dim contiguous, any row strides
  TensorRef y;  // x's shape and dtype, last dim contiguous, any row strides; may be x (in place)
  int config = -1;  // -1: the heuristic; else an index into kSoftmaxConfigs
};

// y = softmax(x) over the last dim. Validates the arguments (throws gks::Error) and
// launches on `stream`.
void softmax(const SoftmaxArgs& args, cudaStream_t stream);

}  // namespace gks
