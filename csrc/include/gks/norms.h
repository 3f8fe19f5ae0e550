// SPDX-License-Identifier: Apache-2.0
// RMSNorm over the last dim: y = x / sqrt(mean(x^2) + eps) * weight, fp32 math.
#pragma once

#include <cuda_runtime_api.h>

#include "gks/device_limits.h"
#include "gks/tensor.h"

namespace gks {

struct RmsNormArgs {
  TensorRef x;       // [..., N], fp32/fp16/bf16, last dim contiguous, any row strides
  TensorRef weight;  // [N], x's dtype, contiguous
  TensorRef y;       // x's shape and dtype, last dim contiguous, any row strides
  float eps = 1e-6f;
  // Kernel shape: -1 picks by heuristic, else an index into kRmsNormConfigs (see
  // kernels/rmsnorm.cuh for the two kernels).
  int config = -1;
};

// Names of the configs `RmsNormArgs::config` selects, in index order:
//  registers-8x16B  rows in registers, each thread holding up to 8 16-byte accesses;
//  looped           each row walked twice, the second time from L2;
//  registers-4x16B  rows in registers, up to 4 accesses a thread (more threads per row);
//  cluster-256t     as registers-4x16B, but CTAs of at most 256 threads, a row split over
//                   a thread block cluster of up to 8 CTAs beyond that (sm_90);
//  registers-2x16B  rows in registers, up to 2 accesses a thread (twice the threads of
//                   registers-4x16B);
//  looped-512t      looped with 512 threads a row whatever the row's length (the shape
//                   torch.compile runs fp32 rows of 4096 in: two passes, 512 threads).
// Rows that do not fit a config's shape fall back to a wider one, and then to looped.
inline constexpr const char* kRmsNormConfigs[] = {"registers-8x16B", "looped", "registers-4x16B",
                                                  "cluster-256t", "registers-2x16B", "looped-512t"};
inline constexpr int kRmsNormConfigCount = 6;

// Validates the arguments (throws gks::Error) and launches on `stream`.
void rmsnorm(const RmsNormArgs& args, cudaStream_t stream);

namespace detail {
// How a launch covers the rows. Chosen by plan_rmsnorm from the row length alone, so it is
// a pure function that host tests can check without a GPU.
struct RmsNormPlan {
  enum class Kind { kRegisters, kLooped };
  Kind kind = Kind::kRegisters;
  int vec = 1;              // elements per memory access (16 bytes' worth, or 1 when unaligned)
  int threads_per_row = 32;
  int vecs_per_thread = 1;  // kRegisters: accesses each thread keeps in registers
  int rows_per_block = 1;
  int cluster = 1;          // kRegisters: CTAs (a thread block cluster) sharing one row
};
RmsNormPlan plan_rmsnorm(int64_t cols, DType dtype, bool aligned16, int config = -1,
                         const DeviceLimits& limits = DeviceLimits{});
}  // namespace detail

}  // namespace gks
