// SPDX-License-Identifier: Apache-2.0
// Softmax over the last dim, and softmax(rmsnorm(x) * weight) fused into one kernel.
// fp32 math; the output has x's dtype.
//
// Non-finite input gives what torch.softmax gives: a row holding a NaN or a +inf, and a
// row that is all -inf, comes out all NaN; a -inf entry of any other row comes out 0.
#pragma once

#include <cuda_runtime_api.h>

#include "gks/tensor.h"

namespace gks {

// Kernel shape, for benchmarks and the autotuner: -1 picks by heuristic; 0 holds each row
// in registers (read once) where it fits; 1 walks each row in a loop (see SoftmaxPlan);
// 2 (registers-wide) is 0 with twice the accesses a thread where that fits (half the
// threads a row): fp32 rows, and the fused op's 16-bit rows (32 values a thread, the shape
// Triton's fused kernel runs at 93% of copy bandwidth on an H200 at 32768x4096).
inline constexpr const char* kSoftmaxConfigs[] = {"registers", "looped", "registers-wide"};
// softmax_rmsnorm's: softmax's, and 3 (cluster): 16-byte aligned rows of more than 256
// threads' worth of 16 values split over a thread block cluster of 256-thread CTAs (sm_90;
// up to 8 CTAs, so rows of up to 32768), else as 0; 4 (staged): 16-byte aligned rows of up
// to 32768 elements, a whole number of 16-byte accesses, in persistent 1024-thread blocks
// that fetch their next row into shared memory while they process the current one from
// registers (the first 64 KiB of the weight, too, where they fit), else the heuristic's plan.
inline constexpr const char* kSoftmaxRmsNormConfigs[] = {"registers", "looped", "registers-wide",
                                                         "cluster", "staged"};

struct SoftmaxArgs {
  TensorRef x;  // [..., N], fp32/fp16/bf16, last dim contiguous, any row strides
  TensorRef y;  // x's shape and dtype, last dim contiguous, any row strides
  int config = -1;
};

// y = softmax(x) over the last dim. Validates the arguments (throws gks::Error) and
// launches on `stream`.
void softmax(const SoftmaxArgs& args, cudaStream_t stream);

struct SoftmaxRmsNormArgs {
  TensorRef x;       // [..., N], fp32/fp16/bf16, last dim contiguous, any row strides
  TensorRef weight;  // [N], x's dtype, contiguous
  TensorRef y;       // x's shape and dtype, last dim contiguous, any row strides
  float eps = 1e-6f;
  int config = -1;  // as SoftmaxArgs::config
};

// y = softmax(x / sqrt(mean(x^2) + eps) * weight) over the last dim, in one kernel. The
// normalized row stays in fp32 (it is never rounded to x's dtype); only y is rounded.
void softmax_rmsnorm(const SoftmaxRmsNormArgs& args, cudaStream_t stream);

namespace detail {
// How a launch covers the rows. A pure function of the row length, dtype, alignment and op
// (fused: softmax_rmsnorm), so host tests can check it without a GPU.
struct SoftmaxPlan {
  // kRegisters: the row is read once and held in registers (one read, one write).
  // kLooped: a block walks the row twice (online max/sum, then normalize and write), the
  //   second pass mostly from L2; the fused op adds a first pass for the sum of squares.
  // kStaged (fused op only): as kRegisters in persistent blocks (one an SM) that fetch
  //   their next row into shared memory while they process the current one.
  enum class Kind { kRegisters, kLooped, kStaged };
  Kind kind = Kind::kRegisters;
  int vec = 1;              // elements per memory access (16 bytes' worth, or 1 when unaligned)
  int threads_per_row = 32;
  int vecs_per_thread = 1;  // kRegisters: accesses each thread keeps in registers (as loaded)
  int rows_per_block = 1;
  int cluster = 1;          // kRegisters: CTAs of a thread block cluster that share a row
  int weight_slots = 0;  // kStaged: the weight's accesses a thread copies into shared memory
  int row_buffers = 1;   // kStaged: rows in shared memory at once (2: the next one arrives
                         // through the whole of the current one)
};
// clusters: whether the device has thread block clusters (sm_90+); smem_per_block: the
// shared memory a block may opt in to (0 rules out the staged kernel).
SoftmaxPlan plan_softmax(int64_t cols, DType dtype, bool aligned16, int config = -1,
                         bool fused = false, bool clusters = false, int64_t smem_per_block = 0);
// The dynamic shared memory of a staged plan, in bytes.
int64_t staged_smem_bytes(const SoftmaxPlan& plan);
}  // namespace detail

}  // namespace gks
