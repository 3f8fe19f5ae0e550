// SPDX-License-Identifier: Apache-2.0
#include "loss/plan.h"

#include "gks/loss.h"

namespace gks::detail {

namespace {
constexpr int kUnroll = 4;            // accesses a thread has in flight a step (CrossEntropyRow)
constexpr int64_t kWarpSteps = 4;     // a warp a row up to this many steps
constexpr int64_t kBlock256Steps = 8;  // 256 threads a row up to this many steps, else 512
}  // namespace

RowPlan plan_cross_entropy(int64_t cols, DType dtype, bool aligned16, int config, bool backward) {
  RowPlan plan;
  plan.vec = aligned16 ? int(16 / dtype_size(dtype)) : 1;
  int threads = 0;
  if (config >= 0 && config < int(sizeof(kCrossEntropyConfigs) / sizeof(kCrossEntropyConfigs[0]))) {
    threads = kCrossEntropyConfigs[config].threads_per_row;
  } else {
    const int64_t accesses = (cols + plan.vec - 1) / plan.vec;
    threads = accesses <= 32 * kUnroll * kWarpSteps                      ? 32
              : backward || accesses <= 256 * kUnroll * kBlock256Steps ? 256
                                                                       : 512;
  }
  if (threads == 32) {
    plan.kind = RowPlan::Kind::kRegisters;
    plan.threads_per_row = 32;
    plan.vecs_per_thread = kUnroll;
    plan.rows_per_block = 4;
  } else {
    plan.kind = RowPlan::Kind::kLooped;
    plan.threads_per_row = threads;
  }
  return plan;
}

}  // namespace gks::detail
