// SPDX-License-Identifier: Apache-2.0
// top_k: validation, the plan (topk/plan.h) and the launch of rows::topk_kernel, one CTA a
// row or a thread block cluster a row (sm_90).
#include <type_traits>

#include "core/launch.h"
#include "gks/error.h"
#include "gks/kernels/rows/topk.cuh"
#include "gks/topk.h"
#include "rows/check.h"
#include "topk/plan.h"

namespace gks {
namespace {

constexpr const char* kOp = "gks.top_k";

// The output's expected shape: x's with the last dim k.
void check_output_shape(const TensorRef& x, const TensorRef& out, int64_t k, const char* name) {
  bool ok = out.ndim == x.ndim;
  for (int d = 0; ok && d < x.ndim - 1; ++d) ok = out.shape[d] == x.shape[d];
  ok = ok && out.shape[out.ndim - 1] == k;
  if (ok) return;
  TensorRef expect = x;
  expect.shape[x.ndim - 1] = k;
  GKS_CHECK(false, kInvalidArgument) << kOp << ": argument '" << name << "' must have shape "
                                     << expect.shape_string() << " (x's with the last dim k), got "
                                     << out.shape_string();
}

template <typename T, int kThreads, int kCluster, bool kCache>
void launch(const detail::TopKPlan& plan, const kernels::rows::TopKParams& params, int device,
            int64_t smem_limit, cudaStream_t stream) {
  constexpr auto kernel = kernels::rows::topk_kernel<T, kThreads, kCluster, kCache>;
  // Once per device and kernel, so for the most any plan gives it (its threads' budget),
  // not this plan's bytes, which a later call's plan may pass.
  detail::prepare_smem_kernel<kernel>(int(smem_limit), device);
  const dim3 grid(unsigned(params.rows * kCluster));
  if constexpr (kCluster == 1) {
    kernel<<<grid, kThreads, plan.smem_bytes, stream>>>(params);
  } else {
    detail::LaunchConfig config(grid, dim3(kThreads), plan.smem_bytes, stream, kCluster, false);
    cudaLaunchKernelEx(&config.config, kernel, params);
  }
}

template <typename T, int kThreads, int kCluster>
void launch_cached(const detail::TopKPlan& plan, const kernels::rows::TopKParams& params, int device,
                   int64_t smem_limit, cudaStream_t stream) {
  if (plan.cache)
    launch<T, kThreads, kCluster, true>(plan, params, device, smem_limit, stream);
  else
    launch<T, kThreads, kCluster, false>(plan, params, device, smem_limit, stream);
}

template <typename T>
void dispatch(const detail::TopKPlan& plan, const kernels::rows::TopKParams& params, int device,
              int64_t smem_limit, cudaStream_t stream) {
  // Clusters split long rows, so they take 1024 threads a CTA (the planner's only choice).
  switch (plan.cluster) {
    case 2: return launch_cached<T, 1024, 2>(plan, params, device, smem_limit, stream);
    case 4: return launch_cached<T, 1024, 4>(plan, params, device, smem_limit, stream);
    case 8: return launch_cached<T, 1024, 8>(plan, params, device, smem_limit, stream);
    default:
      if (plan.threads == 256) return launch_cached<T, 256, 1>(plan, params, device, smem_limit, stream);
      return launch_cached<T, 1024, 1>(plan, params, device, smem_limit, stream);
  }
}

}  // namespace

void top_k(const TopKArgs& args, cudaStream_t stream) {
  const TensorRef &x = args.x, &values = args.values, &indices = args.indices;
  check_cuda(x, kOp, "x");
  check_dtype_float(x, kOp, "x");
  const RowLayout x_rows = row_layout(x, kOp, "x");
  const int64_t cols = x_rows.cols;
  const int64_t most = cols < kTopKMaxK ? cols : kTopKMaxK;
  GKS_CHECK(args.k >= 0 && args.k <= most, kInvalidArgument)
      << kOp << ": argument 'k' must be from 0 to min(N, " << kTopKMaxK << ") = " << most
      << " (N = " << cols << ", x's last dim), got " << args.k;
  GKS_CHECK(cols <= INT32_MAX, kInvalidArgument)
      << kOp << ": argument 'x' must have rows of at most 2^31 - 1 values, got " << cols;
  detail::check_row_config(args.config, kNumTopKConfigs, "kTopKConfigs", kOp);

  check_same_device(x, "x", values, "values", kOp);
  check_same_dtype(x, "x", values, "values", kOp);
  check_output_shape(x, values, args.k, "values");
  check_same_device(x, "x", indices, "indices", kOp);
  check_dtype(indices, DType::kInt64, kOp, "indices");
  check_output_shape(x, indices, args.k, "indices");
  const RowLayout values_rows = row_layout(values, kOp, "values");
  const RowLayout indices_rows = row_layout(indices, kOp, "indices");
  check_outputs({{&values, "values"}, {&indices, "indices"}}, {{&x, "x"}}, kOp);

  if (validating_only() || x_rows.rows == 0 || args.k == 0) return;

  const detail::DeviceLimits limits = detail::device_limits(x.device.index);
  const detail::TopKPlan plan =
      detail::plan_top_k(x_rows.rows, cols, args.k, args.sorted, int(dtype_size(x.dtype)), limits, args.config);
  kernels::rows::TopKParams params{};
  params.x = x.data;
  params.values = values.data;
  params.indices = static_cast<int64_t*>(indices.data);
  params.x_rows = x_rows, params.values_rows = values_rows, params.indices_rows = indices_rows;
  params.rows = x_rows.rows;
  params.cols = int(cols);
  params.k = int(args.k);
  params.slice = plan.slice;
  params.sort_cap = plan.sort_cap;
  params.sorted = args.sorted;
  const detail::DeviceGuard guard(x.device.index);
  const int64_t smem_limit = detail::topk_smem_budget(plan.threads, limits);
  GKS_DISPATCH_FLOAT(x.dtype, dispatch<scalar_t>(plan, params, x.device.index, smem_limit, stream));
  detail::check_launch(kOp);
}

}  // namespace gks
