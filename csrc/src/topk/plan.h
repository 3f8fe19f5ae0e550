// SPDX-License-Identifier: Apache-2.0
// top_k's launch plan: pure, host-testable (tests/cpp/test_topk.cpp).
#pragma once

#include <cstdint>

#include "gks/device_limits.h"

namespace gks::detail {

struct TopKPlan {
  int threads = 256;    // a CTA: 256 or 1024
  int cluster = 1;      // CTAs a row: 1, 2, 4 or 8 (more than 1 only where clusters exist)
  int slice = 0;        // elements of a row a CTA takes: ceil(N / cluster)
  bool cache = false;   // the CTA keeps its slice's keys in shared memory after the first sweep
  int sort_cap = 0;     // the bitonic sort's length (the power of two >= k), 0 when unsorted
  int64_t smem_bytes = 0;  // dynamic shared memory a CTA
};

// The shared memory a CTA may take for its sort buffer and cached slice. A CTA of 1024
// threads has an SM to itself (its registers fill the SM's), so it may take most of the
// SM's shared memory; smaller CTAs keep to about half, so that two share an SM (their
// sweeps overlap each other's barriers).
inline int64_t topk_smem_budget(int threads, const DeviceLimits& device) {
  const int64_t budget = threads >= 1024 ? int64_t(200) << 10 : int64_t(112) << 10;
  return budget < device.smem_per_block ? budget : device.smem_per_block;
}

// rows x cols (N) of elem_bytes-wide values, k of them a row (1 <= k <= N). config: -1 for
// the heuristic, else the index of a kTopKConfigs entry (checked by the caller).
TopKPlan plan_top_k(int64_t rows, int64_t cols, int64_t k, bool sorted, int elem_bytes,
                    const DeviceLimits& device, int config);

}  // namespace gks::detail
