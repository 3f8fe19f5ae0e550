// SPDX-License-Identifier: Apache-2.0
// merge_state (two states, in place allowed) and merge_states (K stacked states): checks, and
// the launch of kernels/attention/merge.cuh with as many threads a row as its vectors keep
// busy (4 to 32).
#include <algorithm>

#include "core/launch.h"
#include "gks/attention.h"
#include "gks/error.h"
#include "gks/kernels/attention/merge.cuh"
#include "rows/check.h"

namespace gks {
namespace {

namespace ka = kernels::attention;

// Where each row's s sits: s [...] viewed as [..., 1], so any strides are taken.
RowLayout score_rows(const TensorRef& s, const char* op, const char* arg) {
  GKS_CHECK(s.ndim < kMaxDims, kInvalidArgument)
      << op << ": argument '" << arg << "' must have at most " << kMaxDims - 1 << " dims, got " << s.ndim;
  TensorRef column = s;
  column.shape[s.ndim] = 1;
  column.strides[s.ndim] = 1;
  column.ndim = s.ndim + 1;
  return row_layout(column, op, arg);
}

// t must have `shape` (ndim dims) exactly.
void check_shape(const TensorRef& t, const int64_t* shape, int ndim, const char* op, const char* arg,
                 const char* what) {
  bool same = t.ndim == ndim;
  for (int d = 0; same && d < ndim; ++d) same = t.shape[d] == shape[d];
  if (same) return;
  TensorRef want;
  want.ndim = ndim;
  std::copy(shape, shape + ndim, want.shape);
  GKS_CHECK(false, kInvalidArgument) << op << ": argument '" << arg << "' must be " << want.shape_string() << " ("
                             << what << "), got " << t.shape_string();
}

template <typename T, bool kStacked>
void launch(const ka::MergeStateParams& p, bool vec16, cudaStream_t stream) {
  constexpr int kVec = kernels::kVec16<T>;
  const int64_t vecs = vec16 ? p.d / kVec : p.d;
  const int per_row = vecs <= 4 ? 4 : vecs <= 8 ? 8 : vecs <= 16 ? 16 : 32;
  const int64_t blocks = (p.rows + ka::kMergeThreads / per_row - 1) / (ka::kMergeThreads / per_row);
  GKS_CHECK(blocks <= int64_t(INT32_MAX), kInvalidArgument) << "gks.merge_state: too many rows (" << p.rows << ")";
  const auto go = [&](auto vec, auto threads) {
    ka::merge_state_kernel<T, decltype(vec)::value, decltype(threads)::value, kStacked>
        <<<unsigned(blocks), ka::kMergeThreads, 0, stream>>>(p);
  };
  const auto with_threads = [&](auto vec) {
    switch (per_row) {
      case 4: go(vec, std::integral_constant<int, 4>{}); break;
      case 8: go(vec, std::integral_constant<int, 8>{}); break;
      case 16: go(vec, std::integral_constant<int, 16>{}); break;
      default: go(vec, std::integral_constant<int, 32>{}); break;
    }
  };
  if (vec16)
    with_threads(std::integral_constant<int, kVec>{});
  else
    with_threads(std::integral_constant<int, 1>{});
}

template <bool kStacked>
void run(DType dtype, const ka::MergeStateParams& p, bool vec16, int device, cudaStream_t stream,
         const char* op) {
  const detail::DeviceGuard guard(device);
  GKS_DISPATCH_FLOAT(dtype, launch<scalar_t, kStacked>(p, vec16, stream));
  detail::check_launch(op);
}

}  // namespace

void merge_state(const MergeStateArgs& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.merge_state";
  const TensorRef &v_a = args.v_a, &s_a = args.s_a, &v_b = args.v_b, &s_b = args.s_b, &v = args.v, &s = args.s;
  check_cuda(v_a, kOp, "v_a");
  check_dtype_float(v_a, kOp, "v_a");
  const RowLayout a_rows = row_layout(v_a, kOp, "v_a");
  check_same_device(v_a, "v_a", v_b, "v_b", kOp);
  check_same_dtype(v_a, "v_a", v_b, "v_b", kOp);
  check_same_shape(v_a, "v_a", v_b, "v_b", kOp);
  const RowLayout b_rows = row_layout(v_b, kOp, "v_b");
  for (const auto& [t, name] : {std::pair{&s_a, "s_a"}, std::pair{&s_b, "s_b"}}) {
    check_same_device(v_a, "v_a", *t, name, kOp);
    check_dtype(*t, DType::kFloat32, kOp, name);
    check_shape(*t, v_a.shape, v_a.ndim - 1, kOp, name, "v_a's shape without its last dim");
  }
  check_same_device(v_a, "v_a", v, "v", kOp);
  check_same_dtype(v_a, "v_a", v, "v", kOp);
  check_same_shape(v_a, "v_a", v, "v", kOp);
  const RowLayout out_rows = row_layout(v, kOp, "v");
  check_same_device(v_a, "v_a", s, "s", kOp);
  check_dtype(s, DType::kFloat32, kOp, "s");
  check_shape(s, v_a.shape, v_a.ndim - 1, kOp, "s", "v_a's shape without its last dim");
  // The in-place form: v exactly v_a, s exactly s_a (each row's states are read before its
  // outputs are written, by the threads that write them).
  check_outputs({{&v, "v"}}, {{&v_a, "v_a"}, {&s_a, "s_a"}, {&v_b, "v_b"}, {&s_b, "s_b"}}, kOp, "v_a");
  check_outputs({{&s, "s"}}, {{&v_a, "v_a"}, {&s_a, "s_a"}, {&v_b, "v_b"}, {&s_b, "s_b"}}, kOp, "s_a");
  check_apart({&s, "s"}, {&v, "v"}, kOp);

  ka::MergeStateParams p;
  p.v[0] = v_a.data, p.v[1] = v_b.data;
  p.s[0] = static_cast<const float*>(s_a.data), p.s[1] = static_cast<const float*>(s_b.data);
  p.v_rows[0] = a_rows, p.v_rows[1] = b_rows;
  p.s_rows[0] = score_rows(s_a, kOp, "s_a"), p.s_rows[1] = score_rows(s_b, kOp, "s_b");
  p.states = 2;
  p.v_out = v.data, p.s_out = static_cast<float*>(s.data);
  p.v_out_rows = out_rows, p.s_out_rows = score_rows(s, kOp, "s");
  p.rows = a_rows.rows, p.d = a_rows.cols;
  if (validating_only() || p.rows == 0) return;
  const int64_t vec = 16 / dtype_size(v_a.dtype);
  const bool vec16 = p.d % vec == 0 &&
                     detail::rows_aligned({v_a.data, v_b.data, v.data}, {&a_rows, &b_rows, &out_rows}, vec);
  run<false>(v_a.dtype, p, vec16, v_a.device.index, stream, kOp);
}

void merge_states(const MergeStatesArgs& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.merge_states";
  const TensorRef &v = args.v, &s = args.s, &v_out = args.v_out, &s_out = args.s_out;
  check_cuda(v, kOp, "v");
  check_dtype_float(v, kOp, "v");
  GKS_CHECK(v.ndim >= 2 && v.ndim <= kMaxDims, kInvalidArgument)
      << kOp << ": argument 'v' must be [..., K, D] (2 to " << kMaxDims << " dims), got " << v.shape_string();
  // v without its state dim: [..., D], the rows; state k of a row is v_state_stride further.
  TensorRef rows_view = v;
  rows_view.ndim = v.ndim - 1;
  rows_view.shape[v.ndim - 2] = v.shape[v.ndim - 1];
  rows_view.strides[v.ndim - 2] = v.strides[v.ndim - 1];
  const RowLayout v_rows = row_layout(rows_view, kOp, "v");
  check_same_device(v, "v", s, "s", kOp);
  check_dtype(s, DType::kFloat32, kOp, "s");
  check_shape(s, v.shape, v.ndim - 1, kOp, "s", "v's shape without its last dim");
  check_same_device(v, "v", v_out, "v_out", kOp);
  check_same_dtype(v, "v", v_out, "v_out", kOp);
  check_shape(v_out, rows_view.shape, rows_view.ndim, kOp, "v_out", "v's shape without its state dim");
  const RowLayout out_rows = row_layout(v_out, kOp, "v_out");
  check_same_device(v, "v", s_out, "s_out", kOp);
  check_dtype(s_out, DType::kFloat32, kOp, "s_out");
  check_shape(s_out, v.shape, v.ndim - 2, kOp, "s_out", "v's shape without its last two dims");
  check_outputs({{&v_out, "v_out"}, {&s_out, "s_out"}}, {{&v, "v"}, {&s, "s"}}, kOp);

  TensorRef s_rows_view = s;  // s without its state dim
  s_rows_view.ndim = s.ndim - 1;
  ka::MergeStateParams p;
  p.v[0] = v.data;
  p.s[0] = static_cast<const float*>(s.data);
  p.v_rows[0] = v_rows;
  p.s_rows[0] = score_rows(s_rows_view, kOp, "s");
  p.v_state_stride = v.strides[v.ndim - 2];
  p.s_state_stride = s.strides[s.ndim - 1];
  const int64_t states = v.shape[v.ndim - 2];
  GKS_CHECK(states <= int64_t(INT32_MAX), kInvalidArgument)
      << kOp << ": argument 'v': at most 2^31 - 1 states, got " << states;
  p.states = int(states);
  p.v_out = v_out.data, p.s_out = static_cast<float*>(s_out.data);
  p.v_out_rows = out_rows, p.s_out_rows = score_rows(s_out, kOp, "s_out");
  p.rows = v_rows.rows, p.d = v_rows.cols;
  if (validating_only() || p.rows == 0) return;
  const int64_t vec = 16 / dtype_size(v.dtype);
  const bool vec16 = p.d % vec == 0 && (states <= 1 || p.v_state_stride % vec == 0) &&
                     detail::rows_aligned({v.data, v_out.data}, {&v_rows, &out_rows}, vec);
  run<true>(v.dtype, p, vec16, v.device.index, stream, kOp);
}

}  // namespace gks
