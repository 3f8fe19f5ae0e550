// SPDX-License-Identifier: Apache-2.0
// softmax_rmsnorm: softmax's rows (softmax/launch.h) with the fused functor, and the fused
// op's own staged kernel.
#include <algorithm>
#include <climits>

#include "core/launch.h"
#include "gks/kernels/rows/norm.cuh"
#include "gks/norms.h"
#include "norms/plan.h"
#include "rows/check.h"
#include "softmax/launch.h"
#include "softmax/plan.h"

namespace gks {
namespace detail {
namespace {

constexpr const char* kOp = "gks.softmax_rmsnorm";
constexpr int kStagedThreads = 1024;
constexpr int kStagedWeightSlots = 4;
constexpr int kMaxCluster = 8;

template <typename T, int kBuffers, int kWeightSlots>
void launch_staged_kernel(const RowPlan& plan, const kernels::rows::SoftmaxParams& p, int device,
                          const DeviceLimits& limits, cudaStream_t stream) {
  constexpr int kVec = kernels::kVec16<T>;
  constexpr int kVecs = sizeof(T) == 4 ? 8 : 4;  // a row of up to 32768 elements
  constexpr auto kKernel = kernels::rows::softmax_rmsnorm_staged_kernel<T, kVec, kStagedThreads,
                                                                        kVecs, kBuffers, kWeightSlots>;
  GKS_CHECK(plan.vecs_per_thread == kVecs && plan.threads_per_row == kStagedThreads &&
                plan.row_buffers == kBuffers && plan.weight_slots == kWeightSlots,
            kInvalidArgument)
      << kOp << ": internal error: no staged kernel of " << plan.threads_per_row << " threads x "
      << plan.vecs_per_thread << " accesses, " << plan.row_buffers << " row buffers, "
      << plan.weight_slots << " of the weight staged";
  const int64_t smem = staged_smem_bytes(plan);
  // The default carveout: what the block's shared memory leaves is L1, where the weight is
  // read where it is not staged.
  prepare_smem_kernel<kKernel>(int(smem), device, /*max_carveout=*/false);
  const auto grid = static_cast<unsigned>(std::min<int64_t>(p.rows, limits.sms));  // one block an SM
  // Early start (sm_90): back to back, a call's launch overlaps the previous kernel's tail.
  const LaunchConfig launch(dim3(grid), dim3(kStagedThreads), size_t(smem), stream, 1,
                            /*early_start=*/limits.compute_capability >= 90);
  cudaLaunchKernelEx(&launch.config, kKernel, p);  // errors surface in check_launch
}

template <typename T>
void launch_staged(const RowPlan& plan, const kernels::rows::SoftmaxParams& p, int device,
                   const DeviceLimits& limits, cudaStream_t stream) {
  if constexpr (sizeof(T) < 4) {  // two fp32 rows of 32768 take 256 KiB
    if (plan.row_buffers == 2)
      return launch_staged_kernel<T, 2, kStagedWeightSlots>(plan, p, device, limits, stream);
  }
  if (plan.weight_slots == kStagedWeightSlots)
    return launch_staged_kernel<T, 1, kStagedWeightSlots>(plan, p, device, limits, stream);
  launch_staged_kernel<T, 1, 0>(plan, p, device, limits, stream);
}

}  // namespace

bool softmax_rmsnorm_plan_has_kernel(const RowPlan& plan, DType dtype, int64_t cols) {
  if (plan.kind == RowPlan::Kind::kStaged) {
    const int vecs = dtype_size(dtype) == 4 ? 8 : 4;
    return plan.threads_per_row == kStagedThreads && plan.vecs_per_thread == vecs &&
           (plan.weight_slots == 0 || plan.weight_slots == kStagedWeightSlots) &&
           (plan.row_buffers == 1 || (plan.row_buffers == 2 && dtype_size(dtype) == 2 &&
                                      plan.weight_slots == kStagedWeightSlots));
  }
  return softmax_rows_have_kernel<kernels::rows::SoftmaxRmsNormRow>(plan, dtype, cols);
}

}  // namespace detail

void softmax_rmsnorm(const SoftmaxRmsNormArgs& args, cudaStream_t stream) {
  using detail::kOp;
  const TensorRef &x = args.x, &w = args.weight, &y = args.y;
  const detail::RowViews rows = detail::check_rows(x, y, kOp);
  detail::check_row_weight(w, x, y, rows.x.cols, kOp);
  detail::check_eps(args.eps, kOp);
  detail::check_listed_config(args.config, kSoftmaxRmsNormConfigs, kOp);
  if (validating_only() || rows.x.rows == 0 || rows.x.cols == 0) return;
  const int64_t vec = 16 / dtype_size(x.dtype);
  const bool aligned = detail::rows_aligned({x.data, y.data, w.data}, {&rows.x, &rows.y}, vec);
  // Clusters split one row over several CTAs, one grid block each: the grid must hold them.
  const detail::DeviceLimits limits = detail::device_limits(x.device.index);
  const bool cluster_config =
      args.config >= 0 && kSoftmaxRmsNormConfigs[args.config].path == SoftmaxConfig::Path::kCluster;
  const bool clusters = cluster_config && limits.clusters &&
                        rows.x.rows <= int64_t(INT32_MAX) / detail::kMaxCluster;
  const detail::RowPlan plan = detail::plan_softmax_rmsnorm(
      rows.x.cols, x.dtype, aligned, args.config, clusters, limits.smem_per_block);
  const kernels::rows::SoftmaxParams params{x.data, w.data,      y.data,      rows.x,
                                            rows.y, rows.x.rows, rows.x.cols, args.eps};
  const detail::DeviceGuard guard(x.device.index);
  GKS_DISPATCH_FLOAT(x.dtype, {
    if (plan.kind == detail::RowPlan::Kind::kStaged)
      detail::launch_staged<scalar_t>(plan, params, x.device.index, limits, stream);
    else
      detail::launch_softmax_rows<kernels::rows::SoftmaxRmsNormRow, scalar_t>(plan, params, stream,
                                                                              kOp);
  });
  detail::check_launch(kOp);
}

}  // namespace gks
