// SPDX-License-Identifier: Apache-2.0
// quantize_fp8 / dequantize_fp8: validation, plans, launches (kernels/rows/quantize_fp8.cuh).
#include <algorithm>
#include <cstdint>
#include <optional>

#include "core/launch.h"
#include "core/workspace.h"
#include "gks/kernels/rows/quantize_fp8.cuh"
#include "gks/quantize.h"
#include "quantize/plan.h"
#include "rows/launch.h"

namespace gks {

const char* fp8_granularity_name(Fp8Granularity granularity) {
  switch (granularity) {
    case Fp8Granularity::kTensor: return "tensor";
    case Fp8Granularity::kToken: return "token";
    case Fp8Granularity::kGroup: return "group";
    default: return "block";
  }
}

namespace detail {

namespace {

constexpr int64_t kFp8Group = kernels::rows::fp8q::kGroup;

void check_fp8_options(Fp8Granularity granularity, int group_size, const char* op) {
  GKS_CHECK(granularity == Fp8Granularity::kTensor || granularity == Fp8Granularity::kToken ||
                granularity == Fp8Granularity::kGroup || granularity == Fp8Granularity::kBlock,
            kInvalidArgument)
      << op << ": argument 'granularity' must be 'tensor', 'token', 'group' or 'block'";
  GKS_CHECK(group_size == kFp8Group, kInvalidArgument)
      << op << ": argument 'group_size' must be 128 (1 x 128 groups, 128 x 128 blocks), got " << group_size;
}

// The scale's shape for data `x` (named `x_name`) at the granularity; 2-D x for kBlock.
TensorRef fp8_scale_shape(const TensorRef& x, const char* x_name, Fp8Granularity g, const char* op) {
  TensorRef want = x;
  if (g == Fp8Granularity::kTensor) {
    want.ndim = 1;
    want.shape[0] = 1;
    return want;
  }
  GKS_CHECK(x.ndim >= 1, kInvalidArgument) << op << ": argument '" << x_name << "' must have at least 1 dim, got a scalar";
  if (g == Fp8Granularity::kToken) {
    want.shape[x.ndim - 1] = 1;
  } else if (g == Fp8Granularity::kGroup) {
    want.shape[x.ndim - 1] = ceil_div(x.shape[x.ndim - 1], kFp8Group);
  } else {
    GKS_CHECK(x.ndim == 2, kInvalidArgument)
        << op << ": argument '" << x_name << "' must be 2-D [M, K] for granularity 'block', got " << x.ndim << " dims";
    want.shape[0] = ceil_div(x.shape[0], kFp8Group);
    want.shape[1] = ceil_div(x.shape[1], kFp8Group);
  }
  return want;
}

void check_fp8_scale(const TensorRef& like, const char* like_name, const TensorRef& scale, Fp8Granularity g,
                     const char* op) {
  const TensorRef want = fp8_scale_shape(like, like_name, g, op);
  bool ok = scale.ndim == want.ndim;
  for (int d = 0; ok && d < want.ndim; ++d) ok = scale.shape[d] == want.shape[d];
  GKS_CHECK(ok, kInvalidArgument) << op << ": argument 'scale' must have shape " << want.shape_string()
                                  << " for granularity '" << fp8_granularity_name(g) << "', got "
                                  << scale.shape_string();
}

void check_call(cudaError_t err, const char* op) {
  GKS_CHECK(err == cudaSuccess, kCudaError) << op << ": " << cudaGetErrorString(err);
}

// Blocks of the grid-striding kernels: enough to fill any GPU, few enough to keep the
// per-tensor absmax's atomics rare.
constexpr int64_t kMaxGrid = 4096;

}  // namespace

bool quantize_fp8_token_plan_has_kernel(const RowPlan& plan, DType dtype) {
  return row_plan_has_kernel<kernels::rows::QuantizeFp8TokenRow, 16>(plan, dtype);
}

bool quantize_fp8_groups_plan_has_kernel(const RowPlan& plan, DType dtype) {
  using kernels::rows::QuantizeFp8GroupRow;
  bool found = false;
  GKS_DISPATCH_FLOAT(dtype, {
    found = plan.vec == 16 && row_kernel_exists<QuantizeFp8GroupRow<scalar_t, true, false>>(plan) &&
            row_kernel_exists<QuantizeFp8GroupRow<scalar_t, false, false>>(plan) &&
            row_kernel_exists<QuantizeFp8GroupRow<scalar_t, true, true>>(plan) &&
            row_kernel_exists<QuantizeFp8GroupRow<scalar_t, false, true>>(plan);
  });
  return found;
}

bool dequantize_fp8_plan_has_kernel(const RowPlan& plan, DType out_dtype) {
  return row_plan_has_kernel<kernels::rows::DequantizeFp8Row>(plan, out_dtype);
}

}  // namespace detail

void quantize_fp8(const QuantizeFp8Args& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.quantize_fp8";
  const TensorRef &x = args.x, &q = args.q, &scale = args.scale;
  const Fp8Granularity g = args.granularity;
  check_cuda(x, kOp, "x");
  check_dtype_float(x, kOp, "x");
  check_same_device(x, "x", q, "q", kOp);
  check_same_device(x, "x", scale, "scale", kOp);
  check_dtype(q, DType::kFloat8E4M3, kOp, "q");
  check_dtype(scale, DType::kFloat32, kOp, "scale");
  detail::check_fp8_options(g, args.group_size, kOp);
  const RowLayout x_rows = row_layout(x, kOp, "x");
  check_same_shape(x, "x", q, "q", kOp);
  const RowLayout q_rows = row_layout(q, kOp, "q");
  detail::check_fp8_scale(x, "x", scale, g, kOp);
  const RowLayout scale_rows = row_layout(scale, kOp, "scale");
  check_outputs({{&q, "q"}, {&scale, "scale"}}, {{&x, "x"}}, kOp);
  if (validating_only()) return;

  namespace kr = kernels::rows;
  const int64_t rows = x_rows.rows, cols = x_rows.cols;
  // Nothing to do without groups; an empty tensor still has its one scale (0), and rows of
  // length 0 their per-token scales (0, written by the kernel as quantize_int8's).
  const bool empty = rows == 0 || (cols == 0 && g != Fp8Granularity::kToken);
  if (empty && g != Fp8Granularity::kTensor) return;
  const detail::DeviceGuard guard(x.device.index);
  if (empty) {
    detail::check_call(cudaMemsetAsync(scale.data, 0, sizeof(float), stream), kOp);
    return;
  }
  kr::QuantizeFp8Params p{x.data,      static_cast<uint8_t*>(q.data), static_cast<float*>(scale.data),
                          x_rows,      q_rows,
                          scale_rows,  rows,
                          cols,        args.scale_ue8m0,
                          0,           0,
                          nullptr};
  const int64_t x_vec = 16 / dtype_size(x.dtype);
  const bool aligned = detail::aligned16(x.data) && detail::aligned16(q.data) && x_rows.rows_aligned_to(x_vec) &&
                       q_rows.rows_aligned_to(16);

  if (g == Fp8Granularity::kToken) {
    const detail::RowPlan plan = detail::plan_quantize_int8(cols, x.dtype, aligned);
    detail::launch_row_plan<kr::QuantizeFp8TokenRow, 16>(plan, x.dtype, p, stream, kOp);
  } else if (g == Fp8Granularity::kBlock) {
    p.col_blocks = detail::ceil_div(cols, detail::kFp8Group);
    p.blocks = detail::ceil_div(rows, detail::kFp8Group) * p.col_blocks;
    const auto grid = static_cast<unsigned>(std::min(p.blocks, detail::kMaxGrid * 4));
    GKS_DISPATCH_FLOAT(x.dtype, {
      const auto launch = [&](auto vector) {
        using Row = kr::QuantizeFp8BlockTile<scalar_t, decltype(vector)::value>;
        kr::tiled_kernel<Row, typename Row::Shape><<<grid, Row::kThreads, 0, stream>>>(p);
      };
      if (aligned)
        launch(std::true_type{});
      else
        launch(std::false_type{});
    });
  } else {
    const bool tensor = g == Fp8Granularity::kTensor;
    // Per tensor: the absmax pass into a zeroed word, then the group kernel with that scale.
    std::optional<detail::StreamBuffer> absmax;
    if (tensor) {
      absmax.emplace(sizeof(uint32_t), x.device.index, stream, kOp, "the tensor's absmax");
      p.tensor_absmax = absmax->get<uint32_t>();
      detail::check_call(cudaMemsetAsync(p.tensor_absmax, 0, sizeof(uint32_t), stream), kOp);
      kr::QuantizeFp8Params a = p;
      a.col_blocks = detail::ceil_div(cols, int64_t(256) * kr::fp8q::kChunk);
      a.blocks = rows * a.col_blocks;
      const auto grid = static_cast<unsigned>(std::min(a.blocks, detail::kMaxGrid));
      GKS_DISPATCH_FLOAT(x.dtype, {
        if (aligned)
          kr::fp8_tensor_absmax_kernel<scalar_t, true><<<grid, 256, 0, stream>>>(a);
        else
          kr::fp8_tensor_absmax_kernel<scalar_t, false><<<grid, 256, 0, stream>>>(a);
      });
    }
    const detail::RowPlan plan = detail::plan_quantize_fp8_groups(cols);
    p.col_blocks = detail::ceil_div(cols, int64_t(plan.vec) * plan.threads_per_row * plan.vecs_per_thread);
    p.blocks = p.col_blocks * detail::ceil_div(rows, plan.rows_per_block);
    GKS_DISPATCH_FLOAT(x.dtype, {
      const auto launch = [&](auto vector, auto per_tensor) {
        using Row = kr::QuantizeFp8GroupRow<scalar_t, decltype(vector)::value, decltype(per_tensor)::value>;
        detail::launch_rows<Row>(plan, p, stream, kOp);
      };
      if (aligned)
        tensor ? launch(std::true_type{}, std::true_type{}) : launch(std::true_type{}, std::false_type{});
      else
        tensor ? launch(std::false_type{}, std::true_type{}) : launch(std::false_type{}, std::false_type{});
    });
  }
  detail::check_launch(kOp);
}

void dequantize_fp8(const DequantizeFp8Args& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.dequantize_fp8";
  const TensorRef &q = args.q, &scale = args.scale, &out = args.out;
  const Fp8Granularity g = args.granularity;
  check_cuda(q, kOp, "q");
  check_dtype(q, DType::kFloat8E4M3, kOp, "q");
  check_same_device(q, "q", scale, "scale", kOp);
  check_same_device(q, "q", out, "out", kOp);
  check_dtype(scale, DType::kFloat32, kOp, "scale");
  check_dtype_float(out, kOp, "out");
  detail::check_fp8_options(g, args.group_size, kOp);
  const RowLayout q_rows = row_layout(q, kOp, "q");
  detail::check_fp8_scale(q, "q", scale, g, kOp);
  const RowLayout scale_rows = row_layout(scale, kOp, "scale");
  check_same_shape(q, "q", out, "out", kOp);
  const RowLayout out_rows = row_layout(out, kOp, "out");
  check_outputs({{&out, "out"}}, {{&q, "q"}, {&scale, "scale"}}, kOp);
  if (validating_only() || q_rows.rows == 0 || q_rows.cols == 0) return;

  const int64_t out_vec = 16 / dtype_size(out.dtype);
  const bool aligned = reinterpret_cast<uintptr_t>(q.data) % out_vec == 0 && detail::aligned16(out.data) &&
                       q_rows.rows_aligned_to(out_vec) && out_rows.rows_aligned_to(out_vec);
  // The same data movement as dequantize_int8's (a byte in, an element of out): its plan.
  const detail::RowPlan plan = detail::plan_dequantize_int8(q_rows.cols, out.dtype, aligned);
  const int64_t col_blocks =
      detail::ceil_div(q_rows.cols, int64_t(plan.vec) * plan.threads_per_row * plan.vecs_per_thread);
  const kernels::rows::DequantizeFp8Params p{static_cast<const uint8_t*>(q.data),
                                             static_cast<const float*>(scale.data),
                                             out.data,
                                             q_rows,
                                             scale_rows,
                                             out_rows,
                                             q_rows.rows,
                                             q_rows.cols,
                                             col_blocks,
                                             col_blocks * detail::ceil_div(q_rows.rows, plan.rows_per_block),
                                             static_cast<int>(g)};
  const detail::DeviceGuard guard(q.device.index);
  detail::launch_row_plan<kernels::rows::DequantizeFp8Row>(plan, out.dtype, p, stream, kOp);
  detail::check_launch(kOp);
}

}  // namespace gks
