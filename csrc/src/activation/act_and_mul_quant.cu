// SPDX-License-Identifier: Apache-2.0
// act_and_mul_quant: ActAndMulQuantRow (kernels/rows/act.cuh) in looped blocks, one a row, with
// act_and_mul's thread counts; the e4m3 per-group output is QuantOutFp8Group's.
#include "core/launch.h"
#include "gks/activation.h"
#include "gks/error.h"
#include "gks/kernels/rows/act.cuh"
#include "rows/check.h"
#include "rows/launch.h"

namespace gks {

void act_and_mul_quant(const ActAndMulQuantArgs& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.act_and_mul_quant";
  const TensorRef &x = args.x, &q = args.q, &scale = args.scale;
  check_cuda(x, kOp, "x");
  check_dtype_float(x, kOp, "x");
  const RowLayout x_rows = row_layout(x, kOp, "x");
  GKS_CHECK(x_rows.cols % 2 == 0, kInvalidArgument)
      << kOp << ": argument 'x' must have an even last dim (gate, then up), got " << x.shape_string();
  const int64_t d = x_rows.cols / 2;
  GKS_CHECK(d % 128 == 0, kInvalidArgument)
      << kOp << ": argument 'x' must have a last dim of 2d with d a multiple of 128 (1 x 128 groups), got "
      << x.shape_string();
  check_same_device(x, "x", q, "q", kOp);
  check_same_device(x, "x", scale, "scale", kOp);
  check_dtype(q, DType::kFloat8E4M3, kOp, "q");
  check_dtype(scale, DType::kFloat32, kOp, "scale");
  TensorRef want = x;
  want.shape[x.ndim - 1] = d;
  bool ok = q.ndim == want.ndim;
  for (int i = 0; ok && i < want.ndim; ++i) ok = q.shape[i] == want.shape[i];
  GKS_CHECK(ok, kInvalidArgument) << kOp << ": argument 'q' must have shape " << want.shape_string()
                                  << " ('x' with its last dim halved), got " << q.shape_string();
  const RowLayout q_rows = row_layout(q, kOp, "q");
  want.shape[x.ndim - 1] = d / 128;
  ok = scale.ndim == want.ndim;
  for (int i = 0; ok && i < want.ndim; ++i) ok = scale.shape[i] == want.shape[i];
  GKS_CHECK(ok, kInvalidArgument) << kOp << ": argument 'scale' must have shape " << want.shape_string()
                                  << " for granularity 'group', got " << scale.shape_string();
  const RowLayout scale_rows = row_layout(scale, kOp, "scale");
  check_outputs({{&q, "q"}, {&scale, "scale"}}, {{&x, "x"}}, kOp);
  if (validating_only() || x_rows.rows == 0 || d == 0) return;

  const int64_t vec16 = 16 / dtype_size(x.dtype);
  const bool aligned = detail::rows_aligned({x.data}, {&x_rows}, vec16) && d % vec16 == 0 &&
                       detail::aligned16(q.data) && q_rows.rows_aligned_to(vec16);
  detail::RowPlan plan;
  plan.kind = detail::RowPlan::Kind::kLooped;
  plan.vec = aligned ? int(vec16) : 1;
  const int64_t vecs = d / plan.vec;
  plan.threads_per_row = vecs <= 512 ? 128 : vecs <= 1024 ? 256 : vecs <= 2048 ? 512 : 1024;
  kernels::rows::ActAndMulQuantParams params{};
  static_cast<kernels::rows::ActAndMulParams&>(params) = {x.data, nullptr, x_rows, q_rows, x_rows.rows, d};
  params.out = {static_cast<uint8_t*>(q.data), static_cast<float*>(scale.data), q_rows, scale_rows, args.scale_ue8m0};
  const detail::DeviceGuard guard(x.device.index);
  const auto launch = [&](auto act) {
    detail::with_row_elements(x.dtype, plan, [&](auto t, auto vec) {
      using Row = kernels::rows::ActAndMulQuantRow<typename decltype(t)::type, decltype(vec)::value,
                                                   decltype(act)::value>;
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
