// SPDX-License-Identifier: Apache-2.0
#include "gks/quantize.h"

#include <algorithm>

#include "core/launch.h"
#include "gks/kernels/rows/quantize.cuh"
#include "quantize/plan.h"
#include "rows/launch.h"

namespace gks {
namespace detail {

namespace {

// scale must be `like` with its last dim 1: [..., 1].
void check_scale_shape(const TensorRef& like, const char* like_name, const TensorRef& scale,
                       const char* op) {
  bool ok = scale.ndim == like.ndim && scale.ndim >= 1;
  for (int d = 0; ok && d + 1 < like.ndim; ++d) ok = scale.shape[d] == like.shape[d];
  ok = ok && scale.shape[scale.ndim - 1] == 1;
  if (ok) return;
  TensorRef expected = like;
  expected.shape[like.ndim - 1] = 1;
  GKS_CHECK(false, kInvalidArgument)
      << op << ": argument 'scale' must have shape " << expected.shape_string() << " ('"
      << like_name << "' with its last dim 1), got " << scale.shape_string();
}

}  // namespace

bool quantize_int8_plan_has_kernel(const RowPlan& plan, DType dtype) {
  return row_plan_has_kernel<kernels::rows::QuantizeRow, 16>(plan, dtype);
}

bool dequantize_int8_plan_has_kernel(const RowPlan& plan, DType out_dtype) {
  return row_plan_has_kernel<kernels::rows::DequantizeRow>(plan, out_dtype);
}

}  // namespace detail

void quantize_int8(const QuantizeInt8Args& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.quantize_int8";
  const TensorRef &x = args.x, &q = args.q, &scale = args.scale;
  check_cuda(x, kOp, "x");
  check_dtype_float(x, kOp, "x");
  check_same_device(x, "x", q, "q", kOp);
  check_same_device(x, "x", scale, "scale", kOp);
  check_dtype(q, DType::kInt8, kOp, "q");
  check_dtype(scale, DType::kFloat32, kOp, "scale");
  const RowLayout x_rows = row_layout(x, kOp, "x");
  check_same_shape(x, "x", q, "q", kOp);
  const RowLayout q_rows = row_layout(q, kOp, "q");
  detail::check_scale_shape(x, "x", scale, kOp);
  const RowLayout scale_rows = row_layout(scale, kOp, "scale");
  check_outputs({{&q, "q"}, {&scale, "scale"}}, {{&x, "x"}}, kOp);
  // Rows of length 0 still get their scale (0); only no rows at all launches nothing.
  if (validating_only() || x_rows.rows == 0) return;

  const int64_t x_vec = 16 / dtype_size(x.dtype);
  const bool aligned = detail::aligned16(x.data) && detail::aligned16(q.data) &&
                       x_rows.rows_aligned_to(x_vec) && q_rows.rows_aligned_to(16);
  const detail::RowPlan plan = detail::plan_quantize_int8(x_rows.cols, x.dtype, aligned);
  const kernels::rows::QuantizeInt8Params params{x.data,      static_cast<int8_t*>(q.data),
                                           static_cast<float*>(scale.data),
                                           x_rows,      q_rows,
                                           scale_rows,  x_rows.rows,
                                           x_rows.cols};
  const detail::DeviceGuard guard(x.device.index);
  detail::launch_row_plan<kernels::rows::QuantizeRow, 16>(plan, x.dtype, params, stream, kOp);
  detail::check_launch(kOp);
}

void dequantize_int8(const DequantizeInt8Args& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.dequantize_int8";
  const TensorRef &q = args.q, &scale = args.scale, &out = args.out;
  check_cuda(q, kOp, "q");
  check_dtype(q, DType::kInt8, kOp, "q");
  check_same_device(q, "q", scale, "scale", kOp);
  check_same_device(q, "q", out, "out", kOp);
  check_dtype(scale, DType::kFloat32, kOp, "scale");
  check_dtype_float(out, kOp, "out");
  const RowLayout q_rows = row_layout(q, kOp, "q");
  detail::check_scale_shape(q, "q", scale, kOp);
  const RowLayout scale_rows = row_layout(scale, kOp, "scale");
  check_same_shape(q, "q", out, "out", kOp);
  const RowLayout out_rows = row_layout(out, kOp, "out");
  check_outputs({{&out, "out"}}, {{&q, "q"}, {&scale, "scale"}}, kOp);
  if (validating_only() || q_rows.rows == 0 || q_rows.cols == 0) return;

  // A chunk is one 16-byte store of out and a 4- or 8-byte load of q.
  const int64_t out_vec = 16 / dtype_size(out.dtype);
  const bool aligned = reinterpret_cast<uintptr_t>(q.data) % out_vec == 0 &&
                       detail::aligned16(out.data) && q_rows.rows_aligned_to(out_vec) &&
                       out_rows.rows_aligned_to(out_vec);
  const detail::RowPlan plan = detail::plan_dequantize_int8(q_rows.cols, out.dtype, aligned);
  const int64_t col_blocks = detail::ceil_div(
      q_rows.cols, int64_t(plan.vec) * plan.threads_per_row * plan.vecs_per_thread);
  const int64_t row_blocks = detail::ceil_div(q_rows.rows, plan.rows_per_block);
  const kernels::rows::DequantizeInt8Params params{static_cast<const int8_t*>(q.data),
                                             static_cast<const float*>(scale.data),
                                             out.data,
                                             q_rows,
                                             scale_rows,
                                             out_rows,
                                             q_rows.rows,
                                             q_rows.cols,
                                             col_blocks,
                                             col_blocks * row_blocks};
  const detail::DeviceGuard guard(q.device.index);
  detail::launch_row_plan<kernels::rows::DequantizeRow>(plan, out.dtype, params, stream, kOp);
  detail::check_launch(kOp);
}

}  // namespace gks
