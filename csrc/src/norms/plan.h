// SPDX-License-Identifier: Apache-2.0
// The norms family's launch planners (pure: host tests check them without a GPU).
#pragma once

#include <cstdint>

#include "gks/device_limits.h"
#include "gks/tensor.h"
#include "rows/plan.h"

namespace gks::detail {

// rmsnorm: aligned16, base pointers and rows 16-byte aligned and a whole number of 16-byte
// accesses; config, -1 or an index into kRmsNormConfigs.
RowPlan plan_rmsnorm(int64_t cols, DType dtype, bool aligned16, int config = -1,
                     const DeviceLimits& limits = DeviceLimits{});

// rmsnorm_bwd: registers (warps, then blocks) or looped, as the config asks (-1 or an index
// into kRmsNormBwdConfigs), on a persistent grid (max_blocks: the blocks the device holds
// at the shape's occupancy, RmsNormBwdRow::min_blocks's).
RowPlan plan_rmsnorm_bwd(int64_t cols, DType dtype, bool aligned16, int config = -1,
                         const DeviceLimits& limits = DeviceLimits{});

// softmax_rmsnorm (softmax's rows, softmax/plan.h, and the fused op's cluster and staged
// shapes): config, -1 or an index into kSoftmaxRmsNormConfigs; clusters, the device has
// thread block clusters; smem_per_block, the shared memory a block may opt in to.
RowPlan plan_softmax_rmsnorm(int64_t cols, DType dtype, bool aligned16, int config = -1,
                             bool clusters = false, int64_t smem_per_block = 0);

// rmsnorm_quant / fused_add_rmsnorm_quant: registers only; false when the row does not fit
// (more than 1024 threads x 8 accesses). group: per 1 x 128 group output (one-element
// accesses then need 128+ threads a row).
bool plan_rmsnorm_quant(int64_t cols, DType dtype, bool aligned16, bool group, RowPlan& plan);

// True when the library compiled the op's kernel for the plan (host tests check every plan).
bool rmsnorm_plan_has_kernel(const RowPlan& plan, DType dtype);
bool rmsnorm_bwd_plan_has_kernel(const RowPlan& plan, DType dtype);
bool rmsnorm_quant_plan_has_kernel(const RowPlan& plan, DType dtype, bool group);
bool softmax_rmsnorm_plan_has_kernel(const RowPlan& plan, DType dtype, int64_t cols);

}  // namespace gks::detail
