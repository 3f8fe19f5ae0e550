// SPDX-License-Identifier: Apache-2.0
#include "gks/rmsnorm.h"

#include <algorithm>

#include "gks/kernels/rmsnorm.cuh"
#include "launch.h"

namespace gks {
namespace detail {

// Register-resident rows need at most this many 16-byte accesses per thread.
constexpr int kMaxVecsPerThread = 8;

RmsNormPlan plan_rmsnorm(int64_t cols, DType dtype, bool aligned16, int config,
                         const DeviceLimits& limits) {
  RmsNormPlan plan;
  plan.vec = aligned16 ? int(16 / dtype_size(dtype)) : 1;
  const int64_t accesses = ceil_div(std::max<int64_t>(cols, 1), plan.vec);
  const bool fits_registers = accesses <= 1024 * kMaxVecsPerThread;
  // Short rows: a warp per row, four rows per block, read once, no block barrier.
  if (accesses <= 32 * kMaxVecsPerThread && config != 1) {
    plan.threads_per_row = 32;
    plan.rows_per_block = 4;
    plan.vecs_per_thread = accesses <= 32 ? 1 : accesses <= 64 ? 2 : accesses <= 128 ? 4 : 8;
    return plan;
  }
  // Longer rows. Measured on the H200 (2026-11-29, bench --configs): fp32 rows run best
  // looped (32768x4096: 96% of copy bandwidth vs 90% in registers; 8192x32768: 90% vs 72%),
  // 16-bit rows best in registers (32768x4096: 92% vs 83%; 8192x32768: 75% vs 58%).
  const bool prefer_registers = config == 0 || (config == -1 && dtype_size(dtype) == 2);
  if (prefer_registers && fits_registers) {
    // A block per row, as few threads as keep each thread at <= 8 accesses.
    int threads = 64;
    while (int64_t(threads) * kMaxVecsPerThread < accesses) threads *= 2;
    plan.threads_per_row = threads;
    plan.vecs_per_thread = kMaxVecsPerThread;
    return plan;
  }
  // Looped: the fewest threads per row (so the most rows per SM) for which every row in
  // flight still fits in half the L2, so the second pass reads from L2.
  plan.kind = RmsNormPlan::Kind::kLooped;
  const int64_t row_bytes = cols * dtype_size(dtype);
  int threads = 128;
  while (threads < 1024 &&
         int64_t(limits.sms) * (limits.max_threads_per_sm / threads) * row_bytes > limits.l2_bytes / 2)
    threads *= 2;
  plan.threads_per_row = threads;
  return plan;
}

namespace {

using kernels::RmsNormParams;

template <typename T, int kVec, int kThreads, int kVecs, int kRows>
void launch_registers(const RmsNormParams& p, cudaStream_t stream) {
  const dim3 block(kThreads, kRows);
  const auto grid = static_cast<unsigned>(ceil_div(p.rows, kRows));
  kernels::rmsnorm_registers_kernel<T, kVec, kThreads, kVecs, kRows><<<grid, block, 0, stream>>>(p);
}

template <typename T, int kVec>
void launch_plan(const RmsNormPlan& plan, const RmsNormParams& p, cudaStream_t stream) {
  if (plan.kind == RmsNormPlan::Kind::kLooped) {
    const auto grid = static_cast<unsigned>(p.rows);
    switch (plan.threads_per_row) {
      case 128: return kernels::rmsnorm_looped_kernel<T, kVec, 128><<<grid, 128, 0, stream>>>(p);
      case 256: return kernels::rmsnorm_looped_kernel<T, kVec, 256><<<grid, 256, 0, stream>>>(p);
      case 512: return kernels::rmsnorm_looped_kernel<T, kVec, 512><<<grid, 512, 0, stream>>>(p);
      default: return kernels::rmsnorm_looped_kernel<T, kVec, 1024><<<grid, 1024, 0, stream>>>(p);
    }
  }
  if (plan.threads_per_row == 32) {
    switch (plan.vecs_per_thread) {
      case 1: return launch_registers<T, kVec, 32, 1, 4>(p, stream);
      case 2: return launch_registers<T, kVec, 32, 2, 4>(p, stream);
      case 4: return launch_registers<T, kVec, 32, 4, 4>(p, stream);
      default: return launch_registers<T, kVec, 32, 8, 4>(p, stream);
    }
  }
  switch (plan.threads_per_row) {
    case 64: return launch_registers<T, kVec, 64, 8, 1>(p, stream);
    case 128: return launch_registers<T, kVec, 128, 8, 1>(p, stream);
    case 256: return launch_registers<T, kVec, 256, 8, 1>(p, stream);
    case 512: return launch_registers<T, kVec, 512, 8, 1>(p, stream);
    default: return launch_registers<T, kVec, 1024, 8, 1>(p, stream);
  }
}

}  // namespace
}  // namespace detail

void rmsnorm(const RmsNormArgs& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.rmsnorm";
  const TensorRef &x = args.x, &w = args.weight, &y = args.y;
  check_cuda(x, kOp, "x");
  check_dtype_float(x, kOp, "x");
  check_same_device(x, "x", w, "weight", kOp);
  check_same_device(x, "x", y, "y", kOp);
  check_same_dtype(x, "x", w, "weight", kOp);
  check_same_dtype(x, "x", y, "y", kOp);
  const RowLayout x_rows = row_layout(x, kOp, "x");
  check_same_shape(x, "x", y, "y", kOp);
  const RowLayout y_rows = row_layout(y, kOp, "y");
  GKS_CHECK(w.ndim == 1 && w.shape[0] == x_rows.cols, kInvalidArgument)
      << kOp << ": argument 'weight' must have shape [" << x_rows.cols
      << "] (the last dim of x), got " << w.shape_string();
  GKS_CHECK(w.strides[0] == 1 || w.shape[0] <= 1, kInvalidArgument)
      << kOp << ": argument 'weight' must be contiguous, got stride " << w.strides[0];
  GKS_CHECK(args.eps >= 0.f, kInvalidArgument)
      << kOp << ": argument 'eps' must be >= 0, got " << args.eps;
  GKS_CHECK(args.config >= -1 && args.config <= 1, kInvalidArgument)
      << kOp << ": argument 'config' must be -1 (heuristic), 0 (registers) or 1 (looped), got "
      << args.config;
  GKS_CHECK(x_rows.rows <= int64_t(INT32_MAX), kInvalidArgument)
      << kOp << ": at most 2^31 - 1 rows are supported, got " << x_rows.rows;
  if (x_rows.rows == 0 || x_rows.cols == 0) return;

  const int64_t vec = 16 / dtype_size(x.dtype);
  const bool aligned = detail::aligned16(x.data) && detail::aligned16(y.data) &&
                       detail::aligned16(w.data) && x_rows.rows_aligned_to(vec) &&
                       y_rows.rows_aligned_to(vec);
  const detail::RmsNormPlan plan =
      detail::plan_rmsnorm(x_rows.cols, x.dtype, aligned, args.config, detail::device_limits(x.device.index));
  const kernels::RmsNormParams params{x.data, w.data,         y.data, x_rows,
                                      y_rows, x_rows.rows, x_rows.cols, args.eps};
  const detail::DeviceGuard guard(x.device.index);
  GKS_DISPATCH_FLOAT(x.dtype, {
    if (plan.vec == 1)
      detail::launch_plan<scalar_t, 1>(plan, params, stream);
    else
      detail::launch_plan<scalar_t, kernels::kVec16<scalar_t>>(plan, params, stream);
  });
  detail::check_launch(kOp);
}

}  // namespace gks
