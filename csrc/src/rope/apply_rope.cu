// SPDX-License-Identifier: Apache-2.0
// apply_rope: RopeRow in looped blocks, one a token, 16-byte accesses where the heads and the
// rotary halves allow.
#include "core/launch.h"
#include "gks/error.h"
#include "gks/kernels/rows/rope.cuh"
#include "gks/rope.h"
#include "rows/check.h"
#include "rows/launch.h"

namespace gks {
namespace {

// Row-major strides over every dim of size > 1 (the cache and the positions are read by
// index, not through a row layout).
void check_contiguous(const TensorRef& t, const char* arg) {
  int64_t expect = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    GKS_CHECK(t.shape[d] <= 1 || t.strides[d] == expect, kInvalidArgument)
        << "gks.apply_rope: argument '" << arg << "' must be contiguous";
    expect *= t.shape[d];
  }
}

}  // namespace

void apply_rope(const ApplyRopeArgs& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.apply_rope";
  const TensorRef &q = args.q, &k = args.k, &cs = args.cos_sin_cache, &pos = args.positions;
  const TensorRef &q_out = args.q_out, &k_out = args.k_out;
  check_cuda(q, kOp, "q");
  check_dtype_float(q, kOp, "q");
  GKS_CHECK(q.ndim >= 3, kInvalidArgument)
      << kOp << ": argument 'q' must be [..., heads, head_dim] with at least one token dim, got "
      << q.shape_string();
  check_same_device(q, "q", k, "k", kOp);
  check_same_dtype(q, "q", k, "k", kOp);
  bool k_ok = k.ndim == q.ndim && k.shape[k.ndim - 1] == q.shape[q.ndim - 1];
  for (int d = 0; k_ok && d < q.ndim - 2; ++d) k_ok = k.shape[d] == q.shape[d];
  GKS_CHECK(k_ok, kInvalidArgument) << kOp << ": argument 'k' must have q's token dims and head_dim (any "
                                    << "number of heads), got " << k.shape_string() << " for q "
                                    << q.shape_string();
  const RowLayout q_rows = row_layout(q, kOp, "q"), k_rows = row_layout(k, kOp, "k");
  const int64_t head_dim = q.shape[q.ndim - 1];
  const int64_t heads_q = q.shape[q.ndim - 2], heads_k = k.shape[k.ndim - 2];

  check_same_device(q, "q", cs, "cos_sin_cache", kOp);
  check_dtype(cs, DType::kFloat32, kOp, "cos_sin_cache");
  GKS_CHECK(cs.ndim == 2, kInvalidArgument)
      << kOp << ": argument 'cos_sin_cache' must be [max_pos, rotary_dim], got " << cs.shape_string();
  const int64_t max_pos = cs.shape[0], rotary_dim = cs.shape[1];
  GKS_CHECK(rotary_dim % 2 == 0 && rotary_dim >= 2 && rotary_dim <= head_dim, kInvalidArgument)
      << kOp << ": argument 'cos_sin_cache' must have an even rotary_dim (its last dim) from 2 to "
      << "head_dim (" << head_dim << "), got " << rotary_dim;
  check_contiguous(cs, "cos_sin_cache");

  check_same_device(q, "q", pos, "positions", kOp);
  GKS_CHECK(pos.dtype == DType::kInt32 || pos.dtype == DType::kInt64, kUnsupportedDtype)
      << kOp << ": argument 'positions' must be int32 or int64, got " << dtype_name(pos.dtype);
  bool pos_ok = pos.ndim == q.ndim - 2;
  for (int d = 0; pos_ok && d < pos.ndim; ++d) pos_ok = pos.shape[d] == q.shape[d];
  GKS_CHECK(pos_ok, kInvalidArgument) << kOp << ": argument 'positions' must have q's token dims "
                                      << "(q's shape but its last two), got " << pos.shape_string()
                                      << " for q " << q.shape_string();
  check_contiguous(pos, "positions");

  const auto like = [&](const TensorRef& out, const TensorRef& in, const char* name, const char* in_name) {
    check_same_device(in, in_name, out, name, kOp);
    check_same_dtype(in, in_name, out, name, kOp);
    check_same_shape(in, in_name, out, name, kOp);
    return row_layout(out, kOp, name);
  };
  const RowLayout q_out_rows = like(q_out, q, "q_out", "q"), k_out_rows = like(k_out, k, "k_out", "k");
  // In place is q_out = q and k_out = k exactly; nothing else may meet.
  check_outputs({{&q_out, "q_out"}}, {{&q, "q"}, {&k, "k"}, {&cs, "cos_sin_cache"}, {&pos, "positions"}}, kOp, "q");
  check_outputs({{&k_out, "k_out"}}, {{&q, "q"}, {&k, "k"}, {&cs, "cos_sin_cache"}, {&pos, "positions"}}, kOp, "k");
  check_apart({&k_out, "k_out"}, {&q_out, "q_out"}, kOp);
  int64_t tokens = 1;
  for (int d = 0; d < q.ndim - 2; ++d) tokens *= q.shape[d];
  if (validating_only() || tokens == 0 || heads_q + heads_k == 0) return;
  GKS_CHECK((heads_q + heads_k) * head_dim <= INT32_MAX, kInvalidArgument)
      << kOp << ": a token's heads hold " << (heads_q + heads_k) * head_dim << " values; at most 2^31 - 1";

  const int64_t vec16 = 16 / dtype_size(q.dtype);
  const int64_t half = rotary_dim / 2;
  // NeoX: both halves start on a 16-byte access; GPT-J: the rotated values are whole accesses.
  const bool units_fit = args.is_neox ? half % vec16 == 0 : rotary_dim % vec16 == 0;
  const bool aligned = units_fit && detail::rows_aligned({q.data, k.data, q_out.data, k_out.data},
                                                         {&q_rows, &k_rows, &q_out_rows, &k_out_rows}, vec16);
  detail::RowPlan plan;
  plan.kind = detail::RowPlan::Kind::kLooped;
  plan.vec = aligned ? int(vec16) : 1;
  const int64_t pairs = (heads_q + heads_k) * half;
  plan.threads_per_row = pairs / (aligned ? vec16 : 1) > 256 ? 256 : 128;
  kernels::rows::RopeParams params{};
  params.q = q.data, params.k = k.data, params.q_out = q_out.data, params.k_out = k_out.data;
  params.q_rows = q_rows, params.k_rows = k_rows, params.q_out_rows = q_out_rows, params.k_out_rows = k_out_rows;
  params.cos_sin = static_cast<const float*>(cs.data);
  params.positions = pos.data;
  params.positions_64 = pos.dtype == DType::kInt64;
  // A head written in place copies its own pass-through values onto themselves: harmless.
  params.copy_rest = rotary_dim < head_dim && (q_out.data != q.data || k_out.data != k.data);
  params.rows = tokens;
  params.max_pos = max_pos;
  params.heads_q = int(heads_q), params.heads_k = int(heads_k);
  params.head_dim = int(head_dim), params.rotary_dim = int(rotary_dim);
  const detail::DeviceGuard guard(q.device.index);
  const auto launch = [&](auto neox) {
    detail::with_row_elements(q.dtype, plan, [&](auto t, auto vec) {
      using Row = kernels::rows::RopeRow<typename decltype(t)::type, decltype(vec)::value, decltype(neox)::value>;
      detail::launch_rows<Row>(plan, params, stream, kOp);
    });
  };
  if (args.is_neox)
    launch(std::true_type{});
  else
    launch(std::false_type{});
  detail::check_launch(kOp);
}

}  // namespace gks
