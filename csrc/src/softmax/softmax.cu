// SPDX-License-Identifier: Apache-2.0
#include "gks/softmax.h"

#include "core/launch.h"
#include "gks/device_limits.h"
#include "rows/check.h"
#include "softmax/launch.h"
#include "softmax/plan.h"

namespace gks {

namespace detail {
bool softmax_plan_has_kernel(const RowPlan& plan, DType dtype, int64_t cols) {
  return softmax_rows_have_kernel<kernels::rows::SoftmaxRow>(plan, dtype, cols);
}
}  // namespace detail

void softmax(const SoftmaxArgs& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.softmax";
  const TensorRef &x = args.x, &y = args.y;
  const detail::RowViews rows = detail::check_rows(x, y, kOp);
  detail::check_listed_config(args.config, kSoftmaxConfigs, kOp);
  if (validating_only() || rows.x.rows == 0 || rows.x.cols == 0) return;
  const int64_t vec = 16 / dtype_size(x.dtype);
  const bool aligned = detail::rows_aligned({x.data, y.data}, {&rows.x, &rows.y}, vec);
  const detail::RowPlan plan = detail::plan_softmax(rows.x.cols, x.dtype, aligned, args.config,
                                                    detail::device_limits(x.device.index).smem_per_block);
  kernels::rows::SoftmaxParams params{x.data, nullptr, y.data, rows.x, rows.y, rows.x.rows, rows.x.cols, 0.f};
  params.stage_row = plan.row_smem_bytes > 0;
  const detail::DeviceGuard guard(x.device.index);
  GKS_DISPATCH_FLOAT(x.dtype, {
    detail::launch_softmax_rows<kernels::rows::SoftmaxRow, scalar_t>(plan, params, stream, kOp);
  });
  detail::check_launch(kOp);
}

}  // namespace gks
