// SPDX-License-Identifier: Apache-2.0
#include "gks/rmsnorm.h"

#include <algorithm>

#include "gks/kernels/rmsnorm.cuh"
#include "launch.h"

namespace gks {
namespace detail {

namespace {
constexpr int kLoopedConfig = 1;
constexpr int kLooped512Config = 5;

// The fewest threads per CTA (64 up to max_threads), then the fewest CTAs per cluster (up to
// max_cluster), for which `vecs` accesses a thread cover the row. False if they cannot.
bool fit_registers(int64_t accesses, int vecs, int max_threads, int max_cluster, RmsNormPlan& plan) {
  int threads = 64, cluster = 1;
  while (threads < max_threads && int64_t(threads) * vecs < accesses) threads *= 2;
  while (cluster < max_cluster && int64_t(threads) * vecs * cluster < accesses) cluster *= 2;
  if (int64_t(threads) * vecs * cluster < accesses) return false;
  plan.threads_per_row = threads;
  plan.vecs_per_thread = vecs;
  plan.cluster = cluster;
  return true;
}

// The looped kernel at the fewest threads per row (128 to 1024: the most rows an SM) for
// which every row in flight fits in half the L2, so the second pass reads it from L2.
// False (plan untouched) if even 1024 threads a row have too many rows in flight.
bool plan_looped(int64_t cols, DType dtype, const DeviceLimits& limits, RmsNormPlan& plan) {
  const int64_t row_bytes = cols * dtype_size(dtype);
  for (int threads = 128; threads <= 1024; threads *= 2) {
    if (int64_t(limits.sms) * (limits.max_threads_per_sm / threads) * row_bytes <= limits.l2_bytes / 2) {
      plan.kind = RmsNormPlan::Kind::kLooped;
      plan.threads_per_row = threads;
      return true;
    }
  }
  return false;
}
}  // namespace

RmsNormPlan plan_rmsnorm(int64_t cols, DType dtype, bool aligned16, int config,
                         const DeviceLimits& limits) {
  RmsNormPlan plan;
  plan.vec = aligned16 ? int(16 / dtype_size(dtype)) : 1;
  const int64_t accesses = ceil_div(std::max<int64_t>(cols, 1), plan.vec);
  if (config != kLoopedConfig && config != kLooped512Config) {
    // Registers: `vecs` 16-byte accesses a thread (4 raw registers each), CTAs of up to
    // `max_threads`, split over a cluster beyond that (sm_90, 16-byte aligned rows only).
    const int vecs = config == 0 ? 8 : config == 4 ? 2 : 4;
    const int max_threads = config == 3 ? 256 : 1024;
    const int max_cluster = aligned16 && limits.clusters ? 8 : 1;
    // Short rows: a warp per row, four rows per block, no block barrier (the heuristic: up
    // to 2 accesses a lane; longer rows do better in a block, see below).
    if (accesses <= 32 * (config == -1 ? 2 : vecs)) {
      plan.threads_per_row = 32;
      plan.rows_per_block = 4;
      plan.vecs_per_thread = accesses <= 32 ? 1 : accesses <= 64 ? 2 : accesses <= 128 ? 4 : 8;
      return plan;
    }
    // The heuristic loops over fp32 rows of 512 to 1024 accesses (2048 to 4096 elements:
    // 16 KB rows or less, so 8 rows of 256 threads an SM fit half the L2), and holds every
    // other row in registers while one CTA can: 2 accesses a thread up to 512 threads, then
    // 4, then 8; past that it splits the row over a cluster. Measured on an H200 (2026-11-30,
    // bench with peers in the same run; µs): fp32 32768x4096 looped 261.2, torch.compile
    // 257.6, registers 512 x 2 263.9-266.0. The same looped kernel lost on 16-bit rows:
    // fp16 32768x4096 140.9 vs registers 133.7, 8192x32768 302.4 vs 267.5 (and fp32
    // 8192x32768 648.7 vs registers 1024 x 8 holding x*w 525.0). One CTA beat a cluster at
    // every bench shape it fits (fp32 8192x32768: 8 CTAs of 256 x 4 572 us).
    if (config == -1) {
      if (dtype_size(dtype) == 4 && plan.vec > 1 && accesses >= 512 && accesses <= 1024 &&
          plan_looped(cols, dtype, limits, plan))
        return plan;
      if (fit_registers(accesses, 2, 512, 1, plan) || fit_registers(accesses, 4, 1024, 1, plan) ||
          fit_registers(accesses, 8, 1024, 1, plan))
        return plan;
    }
    // Rows too long for the config's shape try wider ones before looping.
    if (fit_registers(accesses, vecs, max_threads, max_cluster, plan) ||
        fit_registers(accesses, vecs, 1024, max_cluster, plan) ||
        fit_registers(accesses, 8, 1024, max_cluster, plan))
      return plan;
  }
  // Looped: the fewest threads per row (so the most rows per SM) for which every row in
  // flight still fits in half the L2, else 1024.
  plan.kind = RmsNormPlan::Kind::kLooped;
  plan.threads_per_row = 1024;
  if (config == kLooped512Config)
    plan.threads_per_row = 512;
  else
    plan_looped(cols, dtype, limits, plan);
  return plan;
}

namespace {

using kernels::RmsNormParams;

template <typename T, int kVec, int kThreads, int kVecs, int kRows, int kCluster = 1>
void launch_registers(const RmsNormParams& p, cudaStream_t stream) {
  const auto kernel = kernels::rmsnorm_registers_kernel<T, kVec, kThreads, kVecs, kRows, kCluster>;
  const dim3 block(kThreads, kRows);
  const auto grid = static_cast<unsigned>(ceil_div(p.rows, kRows) * kCluster);
  if constexpr (kCluster == 1) {
    kernel<<<grid, block, 0, stream>>>(p);
  } else {
    const LaunchConfig launch(dim3(grid), block, 0, stream, kCluster, /*early_start=*/false);
    cudaLaunchKernelEx(&launch.config, kernel, p);  // errors surface in check_launch
  }
}

// CTAs of kThreads threads with kVecs accesses each, split over `cluster` CTAs a row.
template <typename T, int kVec, int kThreads, int kVecs>
void launch_cluster(int cluster, const RmsNormParams& p, cudaStream_t stream) {
  switch (cluster) {
    case 1: return launch_registers<T, kVec, kThreads, kVecs, 1, 1>(p, stream);
    case 2: return launch_registers<T, kVec, kThreads, kVecs, 1, 2>(p, stream);
    case 4: return launch_registers<T, kVec, kThreads, kVecs, 1, 4>(p, stream);
    default: return launch_registers<T, kVec, kThreads, kVecs, 1, 8>(p, stream);
  }
}

template <typename T, int kVec, int kVecs>
void launch_block(const RmsNormPlan& plan, const RmsNormParams& p, cudaStream_t stream) {
  // Clusters come only with 16-byte accesses and CTAs of 256 or 1024 threads (plan_rmsnorm
  // grows a cluster only once a config's thread limit is reached).
  if constexpr (kVec > 1) {
    if (plan.cluster > 1) {
      if (plan.threads_per_row == 256) return launch_cluster<T, kVec, 256, kVecs>(plan.cluster, p, stream);
      return launch_cluster<T, kVec, 1024, kVecs>(plan.cluster, p, stream);
    }
  }
  switch (plan.threads_per_row) {
    case 64: return launch_registers<T, kVec, 64, kVecs, 1>(p, stream);
    case 128: return launch_registers<T, kVec, 128, kVecs, 1>(p, stream);
    case 256: return launch_registers<T, kVec, 256, kVecs, 1>(p, stream);
    case 512: return launch_registers<T, kVec, 512, kVecs, 1>(p, stream);
    default: return launch_registers<T, kVec, 1024, kVecs, 1>(p, stream);
  }
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
  if (plan.vecs_per_thread == 2) return launch_block<T, kVec, 2>(plan, p, stream);
  if (plan.vecs_per_thread == 4) return launch_block<T, kVec, 4>(plan, p, stream);
  return launch_block<T, kVec, 8>(plan, p, stream);
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
  GKS_CHECK(args.config >= -1 && args.config < kRmsNormConfigCount, kInvalidArgument)
      << kOp << ": argument 'config' must be -1 (heuristic) or an index below "
      << kRmsNormConfigCount << " into kRmsNormConfigs, got " << args.config;
  if (x_rows.rows == 0 || x_rows.cols == 0) return;

  const int64_t vec = 16 / dtype_size(x.dtype);
  // 16-byte accesses need 16-byte aligned rows of a whole number of vectors (each access
  // then lies wholly inside a row or wholly past it); anything else goes element by element.
  const bool aligned = detail::aligned16(x.data) && detail::aligned16(y.data) &&
                       detail::aligned16(w.data) && x_rows.rows_aligned_to(vec) &&
                       y_rows.rows_aligned_to(vec) && x_rows.cols % vec == 0;
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
