// SPDX-License-Identifier: Apache-2.0
// The loss family's launch planner (pure: host tests check it without a GPU).
#pragma once

#include <cstdint>

#include "gks/tensor.h"
#include "rows/plan.h"

namespace gks::detail {

// Both cross entropy kernels' plan for rows of `cols` elements of `dtype`; aligned16: base
// pointers and rows 16-byte aligned; config: -1 (heuristic) or an index into
// kCrossEntropyConfigs; backward: the plan of the backward kernel. A warp a row (4 rows a
// block) while a warp's four accesses a thread cover the row in a few steps, else a block of
// 256 threads a row; the forward takes 512 for the longest rows (vocabularies of 64k and up
// at 16 bits), where its 40 registers a thread fit three such blocks an SM (the backward's
// 48 would fit two: it stays at 256, five blocks an SM).
RowPlan plan_cross_entropy(int64_t cols, DType dtype, bool aligned16, int config = -1, bool backward = false);

// True when the library compiled the kernel the plan names (host tests check every plan).
bool cross_entropy_plan_has_kernel(const RowPlan& plan, DType dtype, bool backward);

}  // namespace gks::detail
