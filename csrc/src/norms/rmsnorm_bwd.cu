// SPDX-License-Identifier: Apache-2.0
// rmsnorm_bwd: RmsNormBwdRow (kernels/rows/norm_bwd.cuh) on the row skeleton, a persistent
// grid (plan_rmsnorm_bwd) whose blocks write their column sums of dy * xhat to a
// stream-ordered temporary, then rmsnorm_bwd_dweight_kernel adds them up into dweight.
#include <algorithm>
#include <optional>

#include "core/config.h"
#include "core/launch.h"
#include "core/workspace.h"
#include "gks/kernels/rows/norm_bwd.cuh"
#include "gks/norms.h"
#include "norms/plan.h"
#include "rows/check.h"
#include "rows/launch.h"

namespace gks {

namespace detail {
bool rmsnorm_bwd_plan_has_kernel(const RowPlan& plan, DType dtype) {
  return row_plan_has_kernel<kernels::rows::RmsNormBwdRow>(plan, dtype);
}
}  // namespace detail

void rmsnorm_bwd(const RmsNormBwdArgs& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.rmsnorm_bwd";
  const TensorRef &dy = args.dy, &x = args.x, &w = args.weight, &dx = args.dx, &dw = args.dweight;
  const detail::RowViews rows = detail::check_rows(x, dx, kOp, "dx");
  check_same_device(x, "x", dy, "dy", kOp);
  check_same_dtype(x, "x", dy, "dy", kOp);
  check_same_shape(x, "x", dy, "dy", kOp);
  const RowLayout dy_rows = row_layout(dy, kOp, "dy");
  detail::check_row_weight(w, x, dx, rows.x.cols, kOp, "weight", "dx");
  // dx may be exactly x (each element is read before it is written, by the thread that
  // writes it); nothing else may meet. Checked before dweight's shape, so that an expanded
  // or overlapping dweight is named as such.
  check_outputs({{&dx, "dx"}, {&dw, "dweight"}}, {{&x, "x"}, {&dy, "dy"}, {&w, "weight"}}, kOp, "x");
  detail::check_row_weight(dw, x, dx, rows.x.cols, kOp, "dweight", "dx");
  detail::check_eps(args.eps, kOp);
  detail::check_listed_config(args.config, kRmsNormBwdConfigs, kOp);
  const int64_t n_rows = rows.x.rows, cols = rows.x.cols;
  if (validating_only() || cols == 0) return;

  const int64_t vec = 16 / dtype_size(x.dtype);
  // 16-byte accesses need 16-byte aligned rows of a whole number of vectors, as rmsnorm's.
  const bool aligned = detail::rows_aligned({dy.data, x.data, w.data, dx.data}, {&dy_rows, &rows.x, &rows.y}, vec) &&
                       cols % vec == 0;
  const detail::RowPlan plan = detail::plan_rmsnorm_bwd(cols, x.dtype, aligned, args.config,
                                                        detail::device_limits(x.device.index));
  const int64_t blocks = detail::row_grid(plan, detail::ceil_div(n_rows, plan.rows_per_block));
  const detail::DeviceGuard guard(x.device.index);
  std::optional<detail::StreamBuffer> parts;
  if (blocks > 0) {
    parts.emplace(size_t(blocks) * size_t(cols) * sizeof(float), x.device.index, stream, kOp,
                  "dweight's partial sums");
    kernels::rows::RmsNormBwdParams params{};
    params.dy = dy.data;
    params.x = x.data;
    params.weight = w.data;
    params.dx = dx.data;
    params.dweight_parts = parts->get<float>();
    params.dy_rows = dy_rows;
    params.x_rows = rows.x;
    params.dx_rows = rows.y;
    params.rows = n_rows;
    params.cols = cols;
    params.eps = args.eps;
    detail::launch_row_plan<kernels::rows::RmsNormBwdRow>(plan, x.dtype, params, stream, kOp);
  }
  // With no rows the sum is 0: the kernel writes it from no parts.
  const float* part_data = parts ? parts->get<float>() : nullptr;
  const dim3 block(kernels::rows::kDweightCols, kernels::rows::kDweightSlices);
  const auto grid = static_cast<unsigned>(detail::ceil_div(cols, int64_t(kernels::rows::kDweightCols)));
  GKS_DISPATCH_FLOAT(w.dtype, {
    kernels::rows::rmsnorm_bwd_dweight_kernel<scalar_t>
        <<<grid, block, 0, stream>>>(part_data, blocks, cols, static_cast<scalar_t*>(dw.data));
  });
  detail::check_launch(kOp);
}

}  // namespace gks
