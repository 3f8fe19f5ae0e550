// SPDX-License-Identifier: Apache-2.0
// rmsnorm_quant / fused_add_rmsnorm_quant: RmsNormQuantRow (kernels/rows/norm_quant.cuh) over
// the quantized-output policies of quantize_fp8.cuh, on plan_rmsnorm_quant's register plans.
#include "core/launch.h"
#include "gks/kernels/rows/norm_quant.cuh"
#include "gks/norms.h"
#include "norms/plan.h"
#include "rows/check.h"
#include "rows/launch.h"

namespace gks {
namespace detail {

namespace {

// Calls f(Out{}) with the output policy of q's dtype and the granularity.
template <class F>
void with_quant_out(DType q_dtype, Fp8Granularity g, F&& f) {
  namespace kr = kernels::rows;
  if (q_dtype == DType::kInt8)
    f(kr::QuantOutInt8Token{});
  else if (g == Fp8Granularity::kToken)
    f(kr::QuantOutFp8Token{});
  else
    f(kr::QuantOutFp8Group{});
}

template <bool kAdd>
void run(const RmsNormQuantArgs& args, cudaStream_t stream, const char* op) {
  const TensorRef &x = args.x, &w = args.weight, &q = args.q, &scale = args.scale;
  const Fp8Granularity g = args.granularity;
  check_cuda(x, op, "x");
  check_dtype_float(x, op, "x");
  const RowLayout x_rows = row_layout(x, op, "x");
  check_same_device(x, "x", q, "q", op);
  check_same_device(x, "x", scale, "scale", op);
  GKS_CHECK(q.dtype == DType::kInt8 || q.dtype == DType::kFloat8E4M3, kUnsupportedDtype)
      << op << ": argument 'q' must be int8 or float8_e4m3fn, got " << dtype_name(q.dtype);
  check_dtype(scale, DType::kFloat32, op, "scale");
  GKS_CHECK(g == Fp8Granularity::kToken || g == Fp8Granularity::kGroup, kInvalidArgument)
      << op << ": argument 'granularity' must be 'token' or 'group', got '" << fp8_granularity_name(g) << "'";
  GKS_CHECK(g == Fp8Granularity::kToken || q.dtype == DType::kFloat8E4M3, kInvalidArgument)
      << op << ": argument 'granularity' must be 'token' for int8 output, got 'group'";
  const int64_t cols = x_rows.cols;
  GKS_CHECK(g == Fp8Granularity::kToken || cols % 128 == 0, kInvalidArgument)
      << op << ": argument 'x' must have a last dim that is a multiple of 128 for granularity 'group', got "
      << x.shape_string();
  check_same_shape(x, "x", q, "q", op);
  const RowLayout q_rows = row_layout(q, op, "q");
  TensorRef want = x;
  want.shape[x.ndim - 1] = g == Fp8Granularity::kToken ? 1 : cols / 128;
  bool scale_ok = scale.ndim == want.ndim;
  for (int d = 0; scale_ok && d < want.ndim; ++d) scale_ok = scale.shape[d] == want.shape[d];
  GKS_CHECK(scale_ok, kInvalidArgument) << op << ": argument 'scale' must have shape " << want.shape_string()
                                        << " for granularity '" << fp8_granularity_name(g) << "', got "
                                        << scale.shape_string();
  const RowLayout scale_rows = row_layout(scale, op, "scale");
  RowLayout res_rows, res_out_rows;
  if constexpr (kAdd) {
    const auto like_x = [&](const TensorRef& t, const char* name) {
      check_same_device(x, "x", t, name, op);
      check_same_dtype(x, "x", t, name, op);
      check_same_shape(x, "x", t, name, op);
      return row_layout(t, op, name);
    };
    res_rows = like_x(args.residual, "residual");
    res_out_rows = like_x(args.residual_out, "residual_out");
    // residual_out may be residual (in place); nothing else may meet.
    check_outputs({{&args.residual_out, "residual_out"}}, {{&x, "x"}, {&args.residual, "residual"}, {&w, "weight"}},
                  op, "residual");
    check_apart({&q, "q"}, {&args.residual_out, "residual_out"}, op);
    check_apart({&scale, "scale"}, {&args.residual_out, "residual_out"}, op);
    check_apart({&q, "q"}, {&args.residual, "residual"}, op);
    check_apart({&scale, "scale"}, {&args.residual, "residual"}, op);
  }
  check_row_weight(w, x, q, cols, op);
  check_eps(args.eps, op);
  check_outputs({{&q, "q"}, {&scale, "scale"}}, {{&x, "x"}, {&w, "weight"}}, op);

  const int64_t vec = 16 / dtype_size(x.dtype);
  bool aligned = rows_aligned({x.data, w.data}, {&x_rows}, vec) && cols % vec == 0 &&
                 aligned16(q.data) && q_rows.rows_aligned_to(vec);
  if constexpr (kAdd)
    aligned = aligned && rows_aligned({args.residual.data, args.residual_out.data}, {&res_rows, &res_out_rows}, vec);
  RowPlan plan;
  GKS_CHECK(plan_rmsnorm_quant(cols, x.dtype, aligned, g == Fp8Granularity::kGroup, plan), kInvalidArgument)
      << op << ": argument 'x' has rows of " << cols << " elements; the CUDA kernel holds a row in registers, "
      << "at most " << 1024 * 8 * plan.vec << " elements" << (aligned ? "" : " for rows not 16-byte aligned");
  if (validating_only() || x_rows.rows == 0) return;

  namespace kr = kernels::rows;
  kr::RmsNormQuantParams<kAdd> p{};
  static_cast<kr::RmsNormParams&>(p) = {x.data, w.data, nullptr, x_rows, x_rows, x_rows.rows, cols, args.eps};
  if constexpr (kAdd) {
    p.residual = args.residual.data;
    p.residual_out = args.residual_out.data;
    p.residual_rows = res_rows;
    p.residual_out_rows = res_out_rows;
  }
  p.out = {static_cast<uint8_t*>(q.data), static_cast<float*>(scale.data), q_rows, scale_rows, args.scale_ue8m0};
  const DeviceGuard guard(x.device.index);
  with_quant_out(q.dtype, g, [&](auto out) {
    with_row_elements(x.dtype, plan, [&](auto t, auto v) {
      using Row = kr::RmsNormQuantRow<typename decltype(t)::type, decltype(v)::value, kAdd, decltype(out)>;
      launch_rows<Row>(plan, p, stream, op);
    });
  });
  check_launch(op);
}

}  // namespace

bool rmsnorm_quant_plan_has_kernel(const RowPlan& plan, DType dtype, bool group) {
  bool found = false;
  const auto check = [&](auto out) {
    with_row_elements(dtype, plan, [&](auto t, auto v) {
      using T = typename decltype(t)::type;
      using Out = decltype(out);
      found = row_kernel_exists<kernels::rows::RmsNormQuantRow<T, decltype(v)::value, false, Out>>(plan) &&
              row_kernel_exists<kernels::rows::RmsNormQuantRow<T, decltype(v)::value, true, Out>>(plan);
    });
  };
  if (group) {
    check(kernels::rows::QuantOutFp8Group{});
  } else {
    check(kernels::rows::QuantOutFp8Token{});
    const bool fp8 = found;
    check(kernels::rows::QuantOutInt8Token{});
    found = found && fp8;
  }
  return found;
}

}  // namespace detail

void rmsnorm_quant(const RmsNormQuantArgs& args, cudaStream_t stream) {
  detail::run<false>(args, stream, "gks.rmsnorm_quant");
}

void fused_add_rmsnorm_quant(const RmsNormQuantArgs& args, cudaStream_t stream) {
  detail::run<true>(args, stream, "gks.fused_add_rmsnorm_quant");
}

}  // namespace gks
