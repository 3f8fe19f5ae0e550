// SPDX-License-Identifier: Apache-2.0
// cross_entropy_fwd / cross_entropy_bwd: CrossEntropyRow (kernels/rows/ce.cuh) on the row
// skeleton, a warp or a block a row (loss/plan.h), 16-byte accesses where the rows allow.
#include "core/config.h"
#include "core/launch.h"
#include "gks/error.h"
#include "gks/kernels/rows/ce.cuh"
#include "gks/loss.h"
#include "loss/plan.h"
#include "rows/check.h"
#include "rows/launch.h"

namespace gks {

namespace {

constexpr const char* kFwdOp = "gks.cross_entropy";
constexpr const char* kBwdOp = "gks.cross_entropy_backward";

// logits [T, V] float, V >= 1, last dim contiguous; its row layout.
RowLayout check_logits(const TensorRef& logits, const char* op) {
  check_cuda(logits, op, "logits");
  check_dtype_float(logits, op, "logits");
  GKS_CHECK(logits.ndim == 2, kInvalidArgument)
      << op << ": argument 'logits' must be [T, V] (tokens x classes), got " << logits.shape_string();
  GKS_CHECK(logits.shape[1] >= 1, kInvalidArgument)
      << op << ": argument 'logits' must have at least one class (V >= 1), got " << logits.shape_string();
  GKS_CHECK(logits.shape[1] <= INT32_MAX, kInvalidArgument)
      << op << ": argument 'logits' rows hold " << logits.shape[1] << " classes; at most 2^31 - 1";
  return row_layout(logits, op, "logits");
}

// A 1-D [T] tensor on the logits' device.
void check_rows_vector(const TensorRef& v, const char* name, const TensorRef& logits, const char* op) {
  check_same_device(logits, "logits", v, name, op);
  GKS_CHECK(v.ndim == 1 && v.shape[0] == logits.shape[0], kInvalidArgument)
      << op << ": argument '" << name << "' must have shape [" << logits.shape[0]
      << "] (a value for each row of logits), got " << v.shape_string();
}

void check_target(const TensorRef& target, const TensorRef& logits, const char* op) {
  check_same_device(logits, "logits", target, "target", op);
  GKS_CHECK(target.dtype == DType::kInt64 || target.dtype == DType::kInt32, kUnsupportedDtype)
      << op << ": argument 'target' must be int64 or int32, got " << dtype_name(target.dtype);
  check_rows_vector(target, "target", logits, op);
}

kernels::rows::CrossEntropyParams base_params(const TensorRef& logits, const RowLayout& rows,
                                              const TensorRef& target, int64_t ignore_index) {
  kernels::rows::CrossEntropyParams p{};
  p.logits = logits.data;
  p.logits_rows = rows;
  p.target = target.data;
  p.target_stride = target.strides[0];
  p.target_64 = target.dtype == DType::kInt64;
  p.rows = rows.rows;
  p.cols = rows.cols;
  p.ignore_index = ignore_index;
  return p;
}

template <bool kBackward>
void launch(const detail::RowPlan& plan, DType dtype, const kernels::rows::CrossEntropyParams& p,
            cudaStream_t stream, const char* op) {
  detail::with_row_elements(dtype, plan, [&](auto t, auto vec) {
    using Row = kernels::rows::CrossEntropyRow<typename decltype(t)::type, decltype(vec)::value, kBackward>;
    detail::launch_rows<Row>(plan, p, stream, op);
  });
}

}  // namespace

namespace detail {
bool cross_entropy_plan_has_kernel(const RowPlan& plan, DType dtype, bool backward) {
  bool found = false;
  with_row_elements(dtype, plan, [&](auto t, auto vec) {
    using T = typename decltype(t)::type;
    constexpr int kVec = decltype(vec)::value;
    found = backward ? row_kernel_exists<kernels::rows::CrossEntropyRow<T, kVec, true>>(plan)
                     : row_kernel_exists<kernels::rows::CrossEntropyRow<T, kVec, false>>(plan);
  });
  return found;
}
}  // namespace detail

void cross_entropy_fwd(const CrossEntropyFwdArgs& args, cudaStream_t stream) {
  const TensorRef &logits = args.logits, &target = args.target, &loss = args.loss, &lse = args.lse;
  const RowLayout rows = check_logits(logits, kFwdOp);
  check_target(target, logits, kFwdOp);
  check_rows_vector(loss, "loss", logits, kFwdOp);
  GKS_CHECK(loss.dtype == DType::kFloat32 || loss.dtype == logits.dtype, kUnsupportedDtype)
      << kFwdOp << ": argument 'loss' must be float32 or the dtype of 'logits' (" << dtype_name(logits.dtype)
      << "), got " << dtype_name(loss.dtype);
  check_rows_vector(lse, "lse", logits, kFwdOp);
  check_dtype(lse, DType::kFloat32, kFwdOp, "lse");
  check_outputs({{&loss, "loss"}, {&lse, "lse"}}, {{&logits, "logits"}, {&target, "target"}}, kFwdOp);
  detail::check_listed_config(args.config, kCrossEntropyConfigs, kFwdOp);
  if (validating_only() || rows.rows == 0) return;

  const int64_t vec = 16 / dtype_size(logits.dtype);
  const bool aligned = detail::rows_aligned({logits.data}, {&rows}, vec);
  const detail::RowPlan plan = detail::plan_cross_entropy(rows.cols, logits.dtype, aligned, args.config);
  kernels::rows::CrossEntropyParams p = base_params(logits, rows, target, args.ignore_index);
  p.loss = loss.data;
  p.loss_stride = loss.strides[0];
  p.loss_fp32 = loss.dtype == DType::kFloat32;
  p.lse_out = static_cast<float*>(lse.data);
  p.lse_out_stride = lse.strides[0];
  const detail::DeviceGuard guard(logits.device.index);
  launch<false>(plan, logits.dtype, p, stream, kFwdOp);
  detail::check_launch(kFwdOp);
}

void cross_entropy_bwd(const CrossEntropyBwdArgs& args, cudaStream_t stream) {
  const TensorRef &logits = args.logits, &target = args.target, &lse = args.lse, &dloss = args.dloss;
  const TensorRef& dlogits = args.dlogits;
  const RowLayout rows = check_logits(logits, kBwdOp);
  check_target(target, logits, kBwdOp);
  check_rows_vector(lse, "lse", logits, kBwdOp);
  check_dtype(lse, DType::kFloat32, kBwdOp, "lse");
  check_rows_vector(dloss, "dloss", logits, kBwdOp);
  check_dtype(dloss, DType::kFloat32, kBwdOp, "dloss");
  check_same_device(logits, "logits", dlogits, "dlogits", kBwdOp);
  check_same_dtype(logits, "logits", dlogits, "dlogits", kBwdOp);
  check_same_shape(logits, "logits", dlogits, "dlogits", kBwdOp);
  const RowLayout out_rows = row_layout(dlogits, kBwdOp, "dlogits");
  // dlogits may be exactly logits: each element is read before it is written, by one thread.
  check_outputs({{&dlogits, "dlogits"}},
                {{&logits, "logits"}, {&target, "target"}, {&lse, "lse"}, {&dloss, "dloss"}}, kBwdOp, "logits");
  detail::check_listed_config(args.config, kCrossEntropyConfigs, kBwdOp);
  if (validating_only() || rows.rows == 0) return;

  const int64_t vec = 16 / dtype_size(logits.dtype);
  const bool aligned = detail::rows_aligned({logits.data, dlogits.data}, {&rows, &out_rows}, vec);
  const detail::RowPlan plan = detail::plan_cross_entropy(rows.cols, logits.dtype, aligned, args.config, true);
  kernels::rows::CrossEntropyParams p = base_params(logits, rows, target, args.ignore_index);
  p.lse = static_cast<const float*>(lse.data);
  p.lse_stride = lse.strides[0];
  p.dloss = static_cast<const float*>(dloss.data);
  p.dloss_stride = dloss.strides[0];
  p.dlogits = dlogits.data;
  p.dlogits_rows = out_rows;
  const detail::DeviceGuard guard(logits.device.index);
  launch<true>(plan, logits.dtype, p, stream, kBwdOp);
  detail::check_launch(kBwdOp);
}

}  // namespace gks
