// SPDX-License-Identifier: Apache-2.0
#include "gks/gemm.h"

#include <cuda_runtime_api.h>

#include <climits>

#include "gks/device_limits.h"

namespace gks::detail {

void check_matrix_rank(const TensorRef& t, const char* op, const char* arg) {
  GKS_CHECK(t.ndim == 2, kInvalidArgument)
      << op << ": argument '" << arg << "' must be a 2-D matrix, got " << t.ndim
      << " dims (shape " << t.shape_string() << ")";
}

GemmMatrix gemm_matrix(const TensorRef& t, const char* op, const char* arg, int64_t rows,
                       int64_t cols) {
  check_cuda(t, op, arg);
  check_matrix_rank(t, op, arg);
  GKS_CHECK(t.shape[0] >= 0 && t.shape[1] >= 0, kInvalidArgument)
      << op << ": argument '" << arg << "' has a negative size " << t.shape_string();
  GKS_CHECK((rows < 0 || t.shape[0] == rows) && (cols < 0 || t.shape[1] == cols),
            kInvalidArgument)
      << op << ": argument '" << arg << "' must have shape [" << (rows < 0 ? "*" : "")
      << (rows < 0 ? "" : std::to_string(rows)) << ", " << (cols < 0 ? "*" : "")
      << (cols < 0 ? "" : std::to_string(cols)) << "], got " << t.shape_string();
  GemmMatrix m;
  m.data = t.data;
  m.rows = t.shape[0];
  m.cols = t.shape[1];
  const bool transposed = t.strides[0] == 1 && t.shape[0] > 1 && t.shape[1] > 1;
  GKS_CHECK(t.strides[1] == 1 || m.cols <= 1, kInvalidArgument)
      << op << ": argument '" << arg << "' must be row-major with a contiguous last dim "
      << "(stride(1) == 1), got strides (" << t.strides[0] << ", " << t.strides[1] << ")"
      << (transposed ? "; transposed views are not accepted, pass a contiguous copy" : "");
  GKS_CHECK(t.strides[0] >= m.cols || m.rows <= 1, kInvalidArgument)
      << op << ": argument '" << arg << "' must have a leading dimension (stride(0)) of at "
      << "least its " << m.cols << " columns, got " << t.strides[0];
  m.ld = m.rows <= 1 ? m.cols : t.strides[0];
  return m;
}

bool gemm_rows_aligned16(const GemmMatrix& m, int64_t elem_bytes) {
  const bool base = reinterpret_cast<uintptr_t>(m.data) % 16 == 0;
  return base && (m.ld * elem_bytes) % 16 == 0;
}

int device_sm_count(int device) { return device_limits(device).sms; }

void check_gemm_config(int config, int count, const char* op) {
  GKS_CHECK(config >= -1 && config < count, kInvalidArgument)
      << op << ": argument 'config' must be -1 (heuristic) or a config index in [0, "
      << count << "), got " << config;
}

void check_gemm_dims(int64_t m, int64_t n, int64_t k, const char* op) {
  GKS_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, kInvalidArgument)
      << op << ": M, N and K must each be below 2^31, got M=" << m << ", N=" << n
      << ", K=" << k;
}

GemmOperands gemm_operands(const TensorRef& a, const char* a_name, const TensorRef& b,
                           const char* b_name, const TensorRef& c, int config, int config_count,
                           const char* op, const GemmEpilogue* epi, bool epi_scales) {
  GemmOperands ops;
  ops.a = gemm_matrix(a, op, a_name, -1, -1);
  ops.b = gemm_matrix(b, op, b_name, -1, -1);
  GKS_CHECK(ops.b.rows == ops.a.cols, kInvalidArgument)
      << op << ": argument '" << b_name << "' must have shape [K, N] with K = " << ops.a.cols
      << " (the columns of '" << a_name << "', " << a.shape_string() << "), got "
      << b.shape_string();
  const int64_t c_cols =
      epi ? check_gemm_epilogue(*epi, ops.a.rows, ops.b.cols, a, epi_scales, op) : ops.b.cols;
  ops.c = gemm_matrix(c, op, "c", ops.a.rows, c_cols);
  check_gemm_config(config, config_count, op);
  ops.m = ops.a.rows;
  ops.n = ops.b.cols;
  ops.k = ops.a.cols;
  check_gemm_dims(ops.m, ops.n, ops.k, op);
  return ops;
}

int pick_gemm_config(const std::vector<GemmConfigInfo>& configs,
                     const std::vector<GemmConfigTraits>& traits, int64_t m, int64_t n,
                     int num_sms) {
  int best = 0;
  double best_score = -1.0;
  for (size_t i = 0; i < configs.size(); ++i) {
    const GemmConfigInfo& c = configs[i];
    const int64_t tiles_m = (m + c.block_m - 1) / c.block_m;
    const int64_t tiles_n = (n + c.block_n - 1) / c.block_n;
    const int64_t tiles = tiles_m * tiles_n;
    const int64_t slots = int64_t(num_sms > 0 ? num_sms : 1) * traits[i].blocks_per_sm;
    const int64_t waves = (tiles + slots - 1) / slots;
    const double busy = double(tiles) / double(waves * slots);
    const double inside = double(m) * double(n) /
                          (double(tiles_m * c.block_m) * double(tiles_n * c.block_n));
    const double score = traits[i].efficiency * busy * inside;
    if (score > best_score * 1.0001) {
      best = int(i);
      best_score = score;
    }
  }
  return best;
}

int64_t gemm_tile_count(const GemmConfigInfo& c, int64_t m, int64_t n) {
  return ((m + c.block_m - 1) / c.block_m) * ((n + c.block_n - 1) / c.block_n);
}

GemmOperands half_gemm_operands(const TensorRef& a, const TensorRef& b, const TensorRef& c,
                                int config, int config_count, const char* op, const GemmEpilogue* epi) {
  // The device comes first, so a CPU tensor is reported as such on any machine.
  check_cuda(a, op, "a");
  GKS_CHECK(a.dtype == DType::kFloat16 || a.dtype == DType::kBFloat16, kUnsupportedDtype)
      << op << ": argument 'a' must be float16 or bfloat16, got " << dtype_name(a.dtype);
  check_same_device(a, "a", b, "b", op);
  check_same_device(a, "a", c, "c", op);
  check_same_dtype(a, "a", b, "b", op);
  GKS_CHECK(c.dtype == DType::kFloat32 || c.dtype == a.dtype, kUnsupportedDtype)
      << op << ": argument 'c' must be float32 or the dtype of 'a' (" << dtype_name(a.dtype)
      << "), got " << dtype_name(c.dtype);
  GemmOperands ops = gemm_operands(a, "a", b, "b", c, config, config_count, op, epi);
  const GemmEpilogue none;
  const GemmEpilogue& e = epi ? *epi : none;
  check_outputs({{&c, "c"}},
                {{&a, "a"},
                 {&b, "b"},
                 {e.bias ? &*e.bias : nullptr, "bias"},
                 {e.row_scale ? &*e.row_scale : nullptr, "row_scale"},
                 {e.col_scale ? &*e.col_scale : nullptr, "col_scale"}},
                op);
  return ops;
}

}  // namespace gks::detail
