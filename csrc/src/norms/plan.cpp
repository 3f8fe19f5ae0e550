// SPDX-License-Identifier: Apache-2.0
#include "norms/plan.h"

#include <algorithm>
#include <iterator>

#include "core/launch.h"
#include "gks/norms.h"
#include "softmax/plan.h"

namespace gks::detail {

namespace {

using Path = RmsNormConfig::Path;
// The heuristic's defaults: 4 accesses a thread, CTAs of up to 1024 threads.
constexpr RmsNormConfig kHeuristic{"", Path::kRegisters, 4, 1024};

// The looped kernel at the fewest threads per row (128 to 1024: the most rows an SM) for
// which every row in flight fits in half the L2, so the second pass reads it from L2.
// False (plan untouched) if even 1024 threads a row have too many rows in flight.
bool plan_looped(int64_t cols, DType dtype, const DeviceLimits& limits, RowPlan& plan) {
  const int64_t row_bytes = cols * dtype_size(dtype);
  for (int threads = 128; threads <= 1024; threads *= 2) {
    if (int64_t(limits.sms) * (limits.max_threads_per_sm / threads) * row_bytes <= limits.l2_bytes / 2) {
      plan.kind = RowPlan::Kind::kLooped;
      plan.threads_per_row = threads;
      return true;
    }
  }
  return false;
}

}  // namespace

RowPlan plan_rmsnorm(int64_t cols, DType dtype, bool aligned16, int config,
                     const DeviceLimits& limits) {
  RowPlan plan;
  plan.vec = aligned16 ? int(16 / dtype_size(dtype)) : 1;
  const int64_t accesses = ceil_div(std::max<int64_t>(cols, 1), plan.vec);
  const bool heuristic = config < 0 || config >= int(std::size(kRmsNormConfigs));
  const RmsNormConfig& c = heuristic ? kHeuristic : kRmsNormConfigs[config];
  if (c.path == Path::kRegisters) {
    // `vecs` 16-byte accesses a thread (4 raw registers each), CTAs of up to `max_threads`,
    // split over a cluster beyond that (sm_90, 16-byte aligned rows only).
    const int max_cluster = aligned16 && limits.clusters ? 8 : 1;
    // Short rows: a warp per row, four rows per block, no block barrier (the heuristic: up
    // to 2 accesses a lane; longer rows do better in a block, see below).
    if (accesses <= 32 * (heuristic ? 2 : c.vecs)) return warp_per_row(plan, accesses);
    // The heuristic loops over fp32 rows of 512 to 1024 accesses (2048 to 4096 elements:
    // 16 KB rows or less, so 8 rows of 256 threads an SM fit half the L2), and holds every
    // other row in registers while one CTA can: 2 accesses a thread up to 512 threads, then
    // 4, then 8; past that it splits the row over a cluster. (docs/perf/norms.md has what
    // each choice measured against the others.)
    if (heuristic) {
      if (dtype_size(dtype) == 4 && plan.vec > 1 && accesses >= 512 && accesses <= 1024 &&
          plan_looped(cols, dtype, limits, plan))
        return plan;
      if (fit_registers(accesses, 2, 2, 512, 1, plan) || fit_registers(accesses, 4, 4, 1024, 1, plan) ||
          fit_registers(accesses, 8, 8, 1024, 1, plan))
        return plan;
    }
    // Rows too long for the config's shape try wider ones before looping.
    if (fit_registers(accesses, c.vecs, c.vecs, c.max_threads, max_cluster, plan) ||
        fit_registers(accesses, c.vecs, c.vecs, 1024, max_cluster, plan) ||
        fit_registers(accesses, 8, 8, 1024, max_cluster, plan))
      return plan;
  }
  // Looped: the fewest threads per row (so the most rows per SM) for which every row in
  // flight still fits in half the L2, else 1024; or the config's own.
  plan.kind = RowPlan::Kind::kLooped;
  plan.threads_per_row = 1024;
  if (c.path == Path::kLooped && c.looped_threads > 0)
    plan.threads_per_row = c.looped_threads;
  else
    plan_looped(cols, dtype, limits, plan);
  return plan;
}

RowPlan plan_rmsnorm_bwd(int64_t cols, DType dtype, bool aligned16, int config, const DeviceLimits& limits) {
  RowPlan plan;
  plan.vec = aligned16 ? int(16 / dtype_size(dtype)) : 1;
  const int64_t accesses = ceil_div(std::max<int64_t>(cols, 1), plan.vec);
  const bool heuristic = config < 0 || config >= int(std::size(kRmsNormBwdConfigs));
  const RmsNormConfig& c = kRmsNormBwdConfigs[heuristic ? 0 : config];
  bool held = false;
  if (c.path == Path::kRegisters) {
    if (accesses <= 32 * c.vecs) {
      plan = warp_per_row(plan, accesses);  // 1 to 4 accesses a lane
      held = true;
    } else {
      // Rows too long for the config's shape take 2 accesses a thread up to 1024 threads.
      held = fit_registers(accesses, c.vecs, c.vecs, c.max_threads, 1, plan) ||
             fit_registers(accesses, 2, 2, 1024, 1, plan);
    }
  }
  if (!held) {
    plan.kind = RowPlan::Kind::kLooped;
    plan.threads_per_row = 512;
    plan.vecs_per_thread = 1;
    plan.rows_per_block = 1;
  }
  // As many blocks as the SMs hold at once at the shape's occupancy (RmsNormBwdRow::
  // min_blocks: 1024 threads an SM, 512 for 4 accesses a thread): one wave, each block
  // walking its share of the rows, so the column sums take one workspace row a block.
  const int threads = plan.threads_per_row * plan.rows_per_block;
  const int per_sm = plan.kind == RowPlan::Kind::kRegisters && plan.vecs_per_thread > 2 ? 512 : 1024;
  plan.max_blocks = int64_t(limits.sms) * std::max(1, per_sm / threads);
  return plan;
}

RowPlan plan_softmax_rmsnorm(int64_t cols, DType dtype, bool aligned16, int config, bool clusters,
                             int64_t smem_per_block) {
  const SoftmaxConfig* c = config >= 0 && config < int(std::size(kSoftmaxRmsNormConfigs))
                               ? &kSoftmaxRmsNormConfigs[config]
                               : nullptr;
  return plan_softmax_rows(cols, dtype, aligned16, c, true, clusters, smem_per_block);
}

bool plan_rmsnorm_quant(int64_t cols, DType dtype, bool aligned16, bool group, RowPlan& plan) {
  plan = RowPlan{};
  plan.vec = aligned16 ? int(16 / dtype_size(dtype)) : 1;
  const int64_t accesses = ceil_div(std::max<int64_t>(cols, 1), plan.vec);
  const bool block_rows = group && plan.vec == 1;  // a group is 128 one-element lanes
  if (!block_rows && accesses <= 32 * 8) {
    plan = warp_per_row(plan, accesses);
    return true;
  }
  // Up to 4 accesses a thread first (the fp32 results sit beside the row in registers), then 8.
  if (!fit_registers(accesses, accesses <= 64 * 4 ? 1 : 4, 8, 1024, 1, plan)) return false;
  if (block_rows && plan.threads_per_row < 128) plan.threads_per_row = 128;
  return true;
}

}  // namespace gks::detail
