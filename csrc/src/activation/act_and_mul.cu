// SPDX-License-Identifier: Apache-2.0
// act_and_mul: ActAndMulRow in looped blocks, one a row, as many threads as its outputs keep
// busy (128 to 1024).
#include "core/launch.h"
#include "gks/activation.h"
#include "gks/error.h"
#include "gks/kernels/rows/act.cuh"
#include "rows/check.h"
#include "rows/launch.h"

namespace gks {

void act_and_mul(const ActAndMulArgs& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.act_and_mul";
  const TensorRef &x = args.x, &y = args.y;
  check_cuda(x, kOp, "x");
  check_dtype_float(x, kOp, "x");
  const RowLayout x_rows = row_layout(x, kOp, "x");
  GKS_CHECK(x_rows.cols % 2 == 0, kInvalidArgument)
      << kOp << ": argument 'x' must have an even last dim (gate, then up), got " << x.shape_string();
  check_same_device(x, "x", y, "y", kOp);
  check_same_dtype(x, "x", y, "y", kOp);
  bool shape_ok = y.ndim == x.ndim;
  for (int i = 0; shape_ok && i < x.ndim; ++i)
    shape_ok = y.shape[i] == (i == x.ndim - 1 ? x.shape[i] / 2 : x.shape[i]);
  GKS_CHECK(shape_ok, kInvalidArgument) << kOp << ": argument 'y' must have the shape of 'x' with its last dim "
                                        << "halved, got " << y.shape_string() << " for x " << x.shape_string();
  const RowLayout y_rows = row_layout(y, kOp, "y");
  check_outputs({{&y, "y"}}, {{&x, "x"}}, kOp);
  const int64_t d = x_rows.cols / 2;
  if (validating_only() || x_rows.rows == 0 || d == 0) return;
  const int64_t vec16 = 16 / dtype_size(x.dtype);
  const bool aligned = detail::rows_aligned({x.data, y.data}, {&x_rows, &y_rows}, vec16) && d % vec16 == 0;
  detail::RowPlan plan;
  plan.kind = detail::RowPlan::Kind::kLooped;
  plan.vec = aligned ? int(vec16) : 1;
  const int64_t vecs = d / plan.vec;
  plan.threads_per_row = vecs <= 512 ? 128 : vecs <= 1024 ? 256 : vecs <= 2048 ? 512 : 1024;
  const kernels::rows::ActAndMulParams params{x.data, y.data, x_rows, y_rows, x_rows.rows, d};
  const detail::DeviceGuard guard(x.device.index);
  const auto launch = [&](auto act) {
    detail::with_row_elements(x.dtype, plan, [&](auto t, auto vec) {
      using Row = kernels::rows::ActAndMulRow<typename decltype(t)::type, decltype(vec)::value, decltype(act)::value>;
      detail::launch_rows<Row>(plan, params, stream, kOp);
    });
  };
  switch (args.activation) {
    case Activation::kSilu: launch(std::integral_constant<int, 0>{}); break;
    case Activation::kGelu: launch(std::integral_constant<int, 1>{}); break;
    case Activation::kGeluTanh: launch(std::integral_constant<int, 2>{}); break;
  }
  detail::check_launch(kOp);
}

}  // namespace gks
