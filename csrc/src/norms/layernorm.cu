// SPDX-License-Identifier: Apache-2.0
// layernorm: LayerNormRow on rmsnorm's plans.
#include <iterator>
#include <type_traits>

#include "core/launch.h"
#include "gks/kernels/rows/norm.cuh"
#include "gks/norms.h"
#include "norms/plan.h"
#include "rows/check.h"
#include "rows/launch.h"

namespace gks {

void layernorm(const LayerNormArgs& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.layernorm";
  const TensorRef &x = args.x, &w = args.weight, &b = args.bias, &y = args.y;
  const detail::RowViews rows = detail::check_rows(x, y, kOp);
  detail::check_row_weight(w, x, y, rows.x.cols, kOp);
  if (args.has_bias) detail::check_row_weight(b, x, y, rows.x.cols, kOp, "bias");
  detail::check_eps(args.eps, kOp);
  detail::check_row_config(args.config, int(std::size(kRmsNormConfigs)), "kRmsNormConfigs", kOp);
  if (validating_only() || rows.x.rows == 0 || rows.x.cols == 0) return;
  const int64_t vec = 16 / dtype_size(x.dtype);
  const bool aligned =
      detail::rows_aligned({x.data, y.data, w.data, args.has_bias ? b.data : w.data}, {&rows.x, &rows.y}, vec) &&
      rows.x.cols % vec == 0;
  const detail::RowPlan plan = detail::plan_rmsnorm(rows.x.cols, x.dtype, aligned, args.config,
                                                    detail::device_limits(x.device.index));
  const kernels::rows::LayerNormParams params{x.data, w.data, args.has_bias ? b.data : nullptr,
                                              y.data, rows.x, rows.y, rows.x.rows, rows.x.cols,
                                              args.eps};
  const detail::DeviceGuard guard(x.device.index);
  const auto launch = [&](auto bias) {
    detail::with_row_elements(x.dtype, plan, [&](auto t, auto vec) {
      using Row = kernels::rows::LayerNormRow<typename decltype(t)::type, decltype(vec)::value, decltype(bias)::value>;
      detail::launch_rows<Row>(plan, params, stream, kOp);
    });
  };
  if (args.has_bias)
    launch(std::true_type{});
  else
    launch(std::false_type{});
  detail::check_launch(kOp);
}

}  // namespace gks
