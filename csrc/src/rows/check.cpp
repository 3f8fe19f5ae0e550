// SPDX-License-Identifier: Apache-2.0
#include "rows/check.h"

#include <cstdint>

#include "gks/error.h"

namespace gks::detail {

RowViews check_rows(const TensorRef& x, const TensorRef& y, const char* op, const char* y_name) {
  check_cuda(x, op, "x");
  check_dtype_float(x, op, "x");
  check_same_device(x, "x", y, y_name, op);
  check_same_dtype(x, "x", y, y_name, op);
  RowViews rows{row_layout(x, op, "x"), {}};
  check_same_shape(x, "x", y, y_name, op);
  rows.y = row_layout(y, op, y_name);
  check_outputs({{&y, y_name}}, {{&x, "x"}}, op, "x");  // y may be x: the op in place
  return rows;
}

void check_row_weight(const TensorRef& w, const TensorRef& x, const TensorRef& y, int64_t cols,
                      const char* op, const char* name, const char* y_name) {
  check_same_device(x, "x", w, name, op);
  check_same_dtype(x, "x", w, name, op);
  GKS_CHECK(w.ndim == 1 && w.shape[0] == cols, kInvalidArgument)
      << op << ": argument '" << name << "' must have shape [" << cols << "] (the last dim of x), got "
      << w.shape_string();
  GKS_CHECK(w.strides[0] == 1 || w.shape[0] <= 1, kInvalidArgument)
      << op << ": argument '" << name << "' must be contiguous, got stride " << w.strides[0];
  check_apart({&y, y_name}, {&w, name}, op);  // y itself was checked with x (check_rows)
}

void check_eps(float eps, const char* op) {
  GKS_CHECK(eps >= 0.f, kInvalidArgument) << op << ": argument 'eps' must be >= 0, got " << eps;
}

void check_row_config(int config, int count, const char* table, const char* op) {
  GKS_CHECK(config >= -1 && config < count, kInvalidArgument)
      << op << ": argument 'config' must be -1 (heuristic) or an index below " << count
      << " into " << table << ", got " << config;
}

bool rows_aligned(std::initializer_list<const void*> data, std::initializer_list<const RowLayout*> rows,
                  int64_t vec) {
  for (const void* p : data)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  for (const RowLayout* r : rows)
    if (!r->rows_aligned_to(vec)) return false;
  return true;
}

}  // namespace gks::detail
