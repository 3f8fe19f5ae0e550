// SPDX-License-Identifier: Apache-2.0
#include <iterator>

#include "core/launch.h"
#include "gks/kernels/rows/norm.cuh"
#include "gks/norms.h"
#include "norms/plan.h"
#include "rows/check.h"
#include "rows/launch.h"

namespace gks {

namespace detail {
bool rmsnorm_plan_has_kernel(const RowPlan& plan, DType dtype) {
  bool found = false;
  with_row_elements(dtype, plan, [&](auto t, auto vec) {
    found = row_kernel_exists<kernels::rows::RmsNormRow<typename decltype(t)::type, decltype(vec)::value>>(plan);
  });
  return found;
}
}  // namespace detail

void rmsnorm(const RmsNormArgs& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.rmsnorm";
  const TensorRef &x = args.x, &w = args.weight, &y = args.y;
  const detail::RowViews rows = detail::check_rows(x, y, kOp);
  detail::check_row_weight(w, x, y, rows.x.cols, kOp);
  detail::check_eps(args.eps, kOp);
  detail::check_row_config(args.config, int(std::size(kRmsNormConfigs)), "kRmsNormConfigs", kOp);
  if (validating_only() || rows.x.rows == 0 || rows.x.cols == 0) return;
  const int64_t vec = 16 / dtype_size(x.dtype);
  // 16-byte accesses need 16-byte aligned rows of a whole number of vectors (each access
  // then lies wholly inside a row or wholly past it); anything else goes element by element.
  const bool aligned = detail::rows_aligned({x.data, y.data, w.data}, {&rows.x, &rows.y}, vec) &&
                       rows.x.cols % vec == 0;
  const detail::RowPlan plan = detail::plan_rmsnorm(rows.x.cols, x.dtype, aligned, args.config,
                                                    detail::device_limits(x.device.index));
  const kernels::rows::RmsNormParams params{x.data, w.data,      y.data,      rows.x,
                                            rows.y, rows.x.rows, rows.x.cols, args.eps};
  const detail::DeviceGuard guard(x.device.index);
  detail::with_row_elements(x.dtype, plan, [&](auto t, auto vec) {
    using Row = kernels::rows::RmsNormRow<typename decltype(t)::type, decltype(vec)::value>;
    detail::launch_rows<Row>(plan, params, stream, kOp);
  });
  detail::check_launch(kOp);
}

}  // namespace gks
