// SPDX-License-Identifier: Apache-2.0
#include "topk/plan.h"

#include <climits>

#include "gks/topk.h"

namespace gks::detail {

TopKPlan plan_top_k(int64_t rows, int64_t cols, int64_t k, bool sorted, int elem_bytes,
                    const DeviceLimits& device, int config) {
  TopKPlan plan;
  if (config >= 0) {
    plan.threads = kTopKConfigs[config].threads;
    plan.cluster = device.clusters ? kTopKConfigs[config].cluster : 1;
  } else {
    // A row split over a cluster when the rows alone would not fill the GPU twice over and
    // each CTA keeps at least 4096 elements (below that the cluster's barriers cost more
    // than the split saves).
    if (device.clusters) {
      while (plan.cluster < 8 && rows * plan.cluster < 2 * int64_t(device.sms) &&
             cols >= 2 * plan.cluster * int64_t(4096))
        plan.cluster *= 2;
    }
    plan.threads = (cols + plan.cluster - 1) / plan.cluster > 2048 ? 1024 : 256;
  }
  while (plan.cluster > 1 && rows * plan.cluster > INT32_MAX) plan.cluster /= 2;  // grid.x
  plan.slice = int((cols + plan.cluster - 1) / plan.cluster);
  if (sorted) {
    plan.sort_cap = 1;
    while (plan.sort_cap < k) plan.sort_cap *= 2;
  }
  const int64_t sort_bytes = int64_t(plan.sort_cap) * 8;
  // Keys kept in shared memory spare the sweeps after the first their global reads (up to 3
  // for 32-bit keys, 1 for 16-bit ones): kept when the slice is more than a couple of
  // elements a thread and fits the budget.
  const int64_t cache_bytes = int64_t(plan.slice) * elem_bytes;
  const int64_t budget = topk_smem_budget(plan.threads, device);
  plan.cache = plan.slice > 2 * plan.threads && sort_bytes + cache_bytes <= budget;
  plan.smem_bytes = sort_bytes + (plan.cache ? cache_bytes : 0);
  return plan;
}

}  // namespace gks::detail
