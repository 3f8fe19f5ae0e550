// SPDX-License-Identifier: Apache-2.0
// The argument checks the row ops share (each throws gks::Error naming the op and the
// argument), and the alignment that picks their accesses.
#pragma once

#include <cstdint>
#include <cstddef>
#include <initializer_list>
#include <sstream>

#include "gks/error.h"
#include "gks/tensor.h"

namespace gks::detail {

// The row layouts of a float x [..., N] and of y, x's shape and dtype on x's device.
struct RowViews {
  RowLayout x, y;
};
RowViews check_rows(const TensorRef& x, const TensorRef& y, const char* op);

// weight: [N] (x's last dim), x's dtype and device, contiguous.
void check_row_weight(const TensorRef& weight, const TensorRef& x, int64_t cols, const char* op);

// eps >= 0.
void check_eps(float eps, const char* op);

// config: -1 (the heuristic) or an index below `count` into the op's config table, named
// in the message.
void check_row_config(int config, int count, const char* table, const char* op);

// The same, the message listing the configs: "-1 (heuristic), 0 (registers), ... or 4
// (staged)". Config is a table entry with a `name`.
template <class Config, size_t kCount>
void check_listed_config(int config, const Config (&table)[kCount], const char* op) {
  if (config >= -1 && config < int(kCount)) return;
  std::ostringstream listing;
  listing << "-1 (heuristic)";
  for (size_t i = 0; i < kCount; ++i)
    listing << (i + 1 < kCount ? ", " : " or ") << i << " (" << table[i].name << ")";
  GKS_CHECK(false, kInvalidArgument)
      << op << ": argument 'config' must be " << listing.str() << ", got " << config;
}

// True when every pointer is 16-byte aligned and every layout's rows start `vec` elements
// apart (so each row's accesses are 16-byte aligned too).
bool rows_aligned(std::initializer_list<const void*> data, std::initializer_list<const RowLayout*> rows,
                  int64_t vec);

}  // namespace gks::detail
