// SPDX-License-Identifier: Apache-2.0
#include "rows/plan.h"

namespace gks::detail {

const char* row_plan_kind_name(RowPlan::Kind kind) {
  switch (kind) {
    case RowPlan::Kind::kRegisters: return "registers";
    case RowPlan::Kind::kLooped: return "looped";
    case RowPlan::Kind::kStaged: return "staged";
    default: return "tiled";
  }
}

RowPlan warp_per_row(RowPlan plan, int64_t accesses) {
  plan.kind = RowPlan::Kind::kRegisters;
  plan.threads_per_row = 32;
  plan.rows_per_block = 4;
  plan.cluster = 1;
  int vecs = 1;
  while (32 * int64_t(vecs) < accesses) vecs *= 2;
  plan.vecs_per_thread = vecs;
  return plan;
}

bool fit_registers(int64_t accesses, int vecs, int max_vecs, int max_threads, int max_cluster,
                   RowPlan& plan) {
  int threads = 64, cluster = 1;
  while (int64_t(threads) * vecs < accesses && (threads < max_threads || vecs < max_vecs)) {
    if (threads < max_threads)
      threads *= 2;
    else
      vecs *= 2;
  }
  while (cluster < max_cluster && int64_t(threads) * vecs * cluster < accesses) cluster *= 2;
  if (int64_t(threads) * vecs * cluster < accesses) return false;
  plan.kind = RowPlan::Kind::kRegisters;
  plan.threads_per_row = threads;
  plan.vecs_per_thread = vecs;
  plan.rows_per_block = 1;
  plan.cluster = cluster;
  return true;
}

}  // namespace gks::detail
