// SPDX-License-Identifier: Apache-2.0
// The argument checks the row ops share (each throws gks::Error naming the op and the
// argument), and the alignment that picks their accesses.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/config.h"
#include "gks/tensor.h"

namespace gks::detail {

// The row layouts of a float x [..., N] and of y, x's shape and dtype on x's device; y holds
// each element once and shares no memory with x, unless it is exactly x (in place). y_name:
// the output's name in messages.
struct RowViews {
  RowLayout x, y;
};
RowViews check_rows(const TensorRef& x, const TensorRef& y, const char* op, const char* y_name = "y");

// weight (or the tensor `name` names, e.g. a bias): [N] (x's last dim), x's dtype and device,
// contiguous, sharing no memory with y (named y_name).
void check_row_weight(const TensorRef& weight, const TensorRef& x, const TensorRef& y, int64_t cols,
                      const char* op, const char* name = "weight", const char* y_name = "y");

// eps >= 0.
void check_eps(float eps, const char* op);

// config: -1 (the heuristic) or an index below `count` into the op's config table, named
// in the message.
void check_row_config(int config, int count, const char* table, const char* op);

// True when every pointer is 16-byte aligned and every layout's rows start `vec` elements
// apart (so each row's accesses are 16-byte aligned too).
bool rows_aligned(std::initializer_list<const void*> data, std::initializer_list<const RowLayout*> rows,
                  int64_t vec);

}  // namespace gks::detail
