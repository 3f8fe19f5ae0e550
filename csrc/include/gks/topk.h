// SPDX-License-Identifier: Apache-2.0
// The topk family: selection of the largest values of each row.
//  - top_k: the k largest values of each row of x [..., N] and their indices (int64), in
//    torch.topk's order (largest=True): every NaN above +inf, -0.0 equal to 0.0, and equal
//    values taken by the lower index first. sorted: values in descending order (ties by
//    ascending index); unsorted: the values above the k-th largest in index order, then the
//    ones equal to it in index order. Values are x's own elements (bits and all).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gks/tensor.h"

namespace gks {

// The most values top_k selects a row (its sort holds them in shared memory).
constexpr int64_t kTopKMaxK = 2048;

struct TopKArgs {
  TensorRef x;        // [..., N] fp32/fp16/bf16, last dim contiguous, any leading strides
  TensorRef values;   // [..., k], x's dtype, last dim contiguous, apart from x and indices
  TensorRef indices;  // [..., k], int64, last dim contiguous, apart from x and values
  int64_t k = 0;      // 0 <= k <= min(N, kTopKMaxK)
  bool sorted = true;
  int config = -1;    // -1: the heuristic; else an index into kTopKConfigs
};

// One launch shape of top_k: threads a CTA, and CTAs a row (a thread block cluster, which
// needs sm_90: elsewhere a config with a cluster runs one CTA a row).
struct TopKConfig {
  const char* name;
  int threads;
  int cluster;
};

inline constexpr TopKConfig kTopKConfigs[] = {
    {"cta256", 256, 1},        {"cta1024", 1024, 1},      {"cluster2", 1024, 2},
    {"cluster4", 1024, 4},     {"cluster8", 1024, 8},
};
inline constexpr int kNumTopKConfigs = int(sizeof(kTopKConfigs) / sizeof(kTopKConfigs[0]));

// Validates the arguments (throws gks::Error naming the argument) and launches on `stream`.
void top_k(const TopKArgs& args, cudaStream_t stream);

}  // namespace gks
