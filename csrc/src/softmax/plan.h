// SPDX-License-Identifier: Apache-2.0
// The softmax family's launch planner (pure: host tests check it without a GPU). Its rows
// are also the fused softmax_rmsnorm's (norms/plan.h), which adds two shapes of its own.
#pragma once

#include <cstdint>

#include "gks/softmax.h"
#include "gks/tensor.h"
#include "rows/plan.h"

namespace gks::detail {

// softmax's plan for rows of `cols` elements; aligned16: base pointers and rows 16-byte
// aligned; config: -1 or an index into kSoftmaxConfigs; smem_per_block: the shared memory a
// block may opt in to (0 rules out keeping a looped row there).
RowPlan plan_softmax(int64_t cols, DType dtype, bool aligned16, int config = -1, int64_t smem_per_block = 0);

// The plan of softmax's rows or (fused) softmax_rmsnorm's: `config` is the forced config's
// table entry (nullptr: the heuristic). clusters: the device has thread block clusters
// (sm_90+); smem_per_block: the shared memory a block may opt in to (0 rules out the staged
// kernel).
RowPlan plan_softmax_rows(int64_t cols, DType dtype, bool aligned16, const SoftmaxConfig* config,
                          bool fused, bool clusters, int64_t smem_per_block);

// True when the library compiled softmax's kernel for the plan (host tests check every plan).
bool softmax_plan_has_kernel(const RowPlan& plan, DType dtype, int64_t cols);

// The dynamic shared memory of a staged plan, in bytes.
int64_t staged_smem_bytes(const RowPlan& plan);

}  // namespace gks::detail
