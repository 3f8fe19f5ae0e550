// SPDX-License-Identifier: Apache-2.0
// fused_add_rmsnorm: rmsnorm's rows (RmsNormRow with the residual added first) on rmsnorm's
// plans.
#include <iterator>

#include "core/launch.h"
#include "gks/kernels/rows/norm.cuh"
#include "gks/norms.h"
#include "norms/plan.h"
#include "rows/check.h"
#include "rows/launch.h"

namespace gks {

void fused_add_rmsnorm(const FusedAddRmsNormArgs& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.fused_add_rmsnorm";
  const TensorRef &x = args.x, &res = args.residual, &w = args.weight, &y = args.y,
                  &res_out = args.residual_out;
  const detail::RowViews rows = detail::check_rows(x, y, kOp);
  const auto like_x = [&](const TensorRef& t, const char* name) {
    check_same_device(x, "x", t, name, kOp);
    check_same_dtype(x, "x", t, name, kOp);
    check_same_shape(x, "x", t, name, kOp);
    return row_layout(t, kOp, name);
  };
  const RowLayout res_rows = like_x(res, "residual");
  const RowLayout res_out_rows = like_x(res_out, "residual_out");
  // The in-place form is y = x and residual_out = residual; nothing else may meet.
  check_apart({&y, "y"}, {&res, "residual"}, kOp);
  check_outputs({{&res_out, "residual_out"}}, {{&x, "x"}, {&res, "residual"}}, kOp, "residual");
  check_apart({&res_out, "residual_out"}, {&y, "y"}, kOp);
  detail::check_row_weight(w, x, y, rows.x.cols, kOp);
  check_apart({&res_out, "residual_out"}, {&w, "weight"}, kOp);
  detail::check_eps(args.eps, kOp);
  detail::check_row_config(args.config, int(std::size(kRmsNormConfigs)), "kRmsNormConfigs", kOp);
  if (validating_only() || rows.x.rows == 0 || rows.x.cols == 0) return;
  const int64_t vec = 16 / dtype_size(x.dtype);
  const bool aligned =
      detail::rows_aligned({x.data, res.data, w.data, y.data, res_out.data},
                           {&rows.x, &res_rows, &rows.y, &res_out_rows}, vec) &&
      rows.x.cols % vec == 0;
  const detail::RowPlan plan = detail::plan_rmsnorm(rows.x.cols, x.dtype, aligned, args.config,
                                                    detail::device_limits(x.device.index));
  kernels::rows::AddRmsNormParams params{};
  static_cast<kernels::rows::RmsNormParams&>(params) = {x.data, w.data,      y.data,      rows.x,
                                                       rows.y, rows.x.rows, rows.x.cols, args.eps};
  params.residual = res.data;
  params.residual_out = res_out.data;
  params.residual_rows = res_rows;
  params.residual_out_rows = res_out_rows;
  const detail::DeviceGuard guard(x.device.index);
  detail::with_row_elements(x.dtype, plan, [&](auto t, auto vec) {
    using Row = kernels::rows::RmsNormRow<typename decltype(t)::type, decltype(vec)::value, true>;
    detail::launch_rows<Row>(plan, params, stream, kOp);
  });
  detail::check_launch(kOp);
}

}  // namespace gks
