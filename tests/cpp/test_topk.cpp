// SPDX-License-Identifier: Apache-2.0
// Host-side logic of the topk family (gks::top_k): validation, which must throw naming the
// argument before anything touches a GPU, and the planner (topk/plan.h), whose every plan
// must have a kernel and fit its shared memory.
#include <gtest/gtest.h>

#include "gks/gks.h"
#include "topk/plan.h"

#include "test_util.h"

namespace {

using gks::DType;
using gks::ErrorKind;
using gks::TensorRef;
using gks_test::expect_error;
using gks_test::kGpu;

// x [rows, cols] of `dtype`, values and indices [rows, k].
gks::TopKArgs args(int64_t rows, int64_t cols, int64_t k, DType dtype = DType::kFloat32) {
  gks::TopKArgs a;
  a.x = TensorRef::make(gks_test::fake_address(1), dtype, {rows, cols}, kGpu);
  a.values = TensorRef::make(gks_test::fake_address(2), dtype, {rows, k}, kGpu);
  a.indices = TensorRef::make(gks_test::fake_address(3), DType::kInt64, {rows, k}, kGpu);
  a.k = k;
  return a;
}

TEST(TopK, TakesGoodArgumentsWithoutLaunching) {
  EXPECT_NO_THROW(gks::top_k(args(0, 16, 4), nullptr));      // no rows
  EXPECT_NO_THROW(gks::top_k(args(8, 16, 0), nullptr));      // k = 0
  EXPECT_NO_THROW(gks::top_k(args(3, 0, 0), nullptr));       // empty rows, k = 0
  gks::ValidateOnly validating;
  EXPECT_NO_THROW(gks::top_k(args(8, 16, 16), nullptr));     // k = N
  EXPECT_NO_THROW(gks::top_k(args(64, 131072, 2048, DType::kBFloat16), nullptr));
  auto a = args(4, 100, 10, DType::kFloat16);
  a.sorted = false;
  a.config = gks::kNumTopKConfigs - 1;
  EXPECT_NO_THROW(gks::top_k(a, nullptr));
  // Strided rows of x and of the outputs (last dims contiguous).
  a = args(4, 100, 10);
  a.x = TensorRef::make(gks_test::fake_address(1), DType::kFloat32, {4, 100}, kGpu, {256, 1});
  a.values = TensorRef::make(gks_test::fake_address(2), DType::kFloat32, {4, 10}, kGpu, {32, 1});
  EXPECT_NO_THROW(gks::top_k(a, nullptr));
}

TEST(TopK, RefusesAKOutsideZeroToMinOfNAnd2048) {
  expect_error([] { gks::top_k(args(2, 16, 17), nullptr); }, ErrorKind::kInvalidArgument,
               "gks.top_k: argument 'k' must be from 0 to min(N, 2048) = 16 (N = 16, x's last dim), got 17");
  expect_error([] { gks::top_k(args(2, 16, -1), nullptr); }, ErrorKind::kInvalidArgument, "got -1");
  expect_error([] { gks::top_k(args(2, 4096, 2049), nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'k' must be from 0 to min(N, 2048) = 2048 (N = 4096, x's last dim), got 2049");
  expect_error([] { gks::top_k(args(0, 16, 17), nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'k'");  // refused with no rows too
}

TEST(TopK, RefusesBadX) {
  auto a = args(2, 16, 4, DType::kInt32);
  expect_error([&] { gks::top_k(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "gks.top_k: argument 'x' must be float32, float16 or bfloat16, got int32");
  a = args(2, 16, 4);
  a.x.device = gks_test::kCpu;
  expect_error([&] { gks::top_k(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'x' must be a CUDA tensor");
  a = args(2, 16, 4);
  a.x = TensorRef::make(gks_test::fake_address(1), DType::kFloat32, {16, 2}, kGpu, {1, 16});
  a.values = TensorRef::make(gks_test::fake_address(2), DType::kFloat32, {16, 2}, kGpu);
  expect_error([&] { gks::top_k(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'x' must be contiguous in its last dim");
  a = args(2, 16, 0);
  a.x = TensorRef::make(gks_test::fake_address(1), DType::kFloat32, {}, kGpu);
  expect_error([&] { gks::top_k(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'x' must have 1 to 8 dims, got 0");
}

TEST(TopK, RefusesBadOutputs) {
  auto a = args(2, 16, 4);
  a.values = TensorRef::make(gks_test::fake_address(2), DType::kFloat32, {2, 5}, kGpu);
  expect_error([&] { gks::top_k(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'values' must have shape [2, 4] (x's with the last dim k), got [2, 5]");
  a = args(2, 16, 4);
  a.values.dtype = DType::kFloat16;
  expect_error([&] { gks::top_k(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'values' must have the dtype of 'x'");
  a = args(2, 16, 4);
  a.indices.dtype = DType::kInt32;
  expect_error([&] { gks::top_k(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'indices' must be int64, got int32");
  a = args(2, 16, 4);
  a.indices = TensorRef::make(gks_test::fake_address(3), DType::kInt64, {3, 4}, kGpu);
  expect_error([&] { gks::top_k(a, nullptr); }, ErrorKind::kInvalidArgument, "argument 'indices' must have shape");
  a = args(2, 16, 4);
  a.values = TensorRef::make(gks_test::fake_address(1), DType::kFloat32, {2, 4}, kGpu);  // inside x
  expect_error([&] { gks::top_k(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'values' must not share memory with argument 'x'");
  a = args(2, 16, 4);
  a.indices.data = a.values.data;
  expect_error([&] { gks::top_k(a, nullptr); }, ErrorKind::kInvalidArgument, "must not share memory");
  a = args(2, 16, 4);
  a.values = TensorRef::make(gks_test::fake_address(2), DType::kFloat32, {2, 4}, kGpu, {0, 1});
  expect_error([&] { gks::top_k(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'values' must hold each of its elements once");
  a = args(2, 16, 4);
  a.config = gks::kNumTopKConfigs;
  expect_error([&] { gks::top_k(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'config' must be -1 (heuristic) or an index below");
}

gks::detail::DeviceLimits h200() { return {}; }
gks::detail::DeviceLimits a100() {
  gks::detail::DeviceLimits d;
  d.sms = 108;
  d.clusters = false;
  d.smem_per_block = 163 << 10;
  d.compute_capability = 80;
  return d;
}

TEST(TopKPlan, SplitsFewLongRowsOverAClusterAndKeepsTheSliceInSharedMemory) {
  const auto p = gks::detail::plan_top_k(64, 131072, 2048, true, 4, h200(), -1);
  EXPECT_EQ(p.cluster, 8);
  EXPECT_EQ(p.threads, 1024);
  EXPECT_EQ(p.slice, 16384);
  EXPECT_TRUE(p.cache);
  EXPECT_EQ(p.sort_cap, 2048);
  EXPECT_EQ(p.smem_bytes, 2048 * 8 + 16384 * 4);
  // Without clusters: one CTA a row, the row too long for shared memory.
  const auto q = gks::detail::plan_top_k(64, 131072, 50, true, 4, a100(), -1);
  EXPECT_EQ(q.cluster, 1);
  EXPECT_EQ(q.slice, 131072);
  EXPECT_FALSE(q.cache);
  EXPECT_EQ(q.sort_cap, 64);
  // Many short rows: one small CTA a row; unsorted needs no sort buffer.
  const auto r = gks::detail::plan_top_k(4096, 256, 16, false, 2, h200(), -1);
  EXPECT_EQ(r.cluster, 1);
  EXPECT_EQ(r.threads, 256);
  EXPECT_EQ(r.sort_cap, 0);
  // A forced cluster config where clusters do not exist runs one CTA a row.
  const auto f = gks::detail::plan_top_k(2, 100000, 5, true, 2, a100(), 4);
  EXPECT_EQ(f.cluster, 1);
  EXPECT_EQ(f.threads, 1024);
}

TEST(TopKPlan, EveryPlanHasAKernelAndFitsItsSharedMemory) {
  const int64_t rows_list[] = {1, 7, 64, 132, 4096, 100000};
  const int64_t cols_list[] = {1, 7, 129, 2049, 4097, 8193, 32768, 131072, 151936, 262144, 1 << 22};
  for (const auto& device : {h200(), a100()})
    for (int64_t rows : rows_list)
      for (int64_t cols : cols_list)
        for (int64_t k : {int64_t(1), int64_t(50), int64_t(1024), int64_t(2048)})
          for (bool sorted : {true, false})
            for (int elem : {2, 4})
              for (int config = -1; config < gks::kNumTopKConfigs; ++config) {
                if (k > cols) continue;
                const auto p = gks::detail::plan_top_k(rows, cols, k, sorted, elem, device, config);
                SCOPED_TRACE(testing::Message() << rows << "x" << cols << " k " << k << " config " << config);
                EXPECT_TRUE(p.threads == 256 || p.threads == 1024);
                EXPECT_TRUE(p.cluster == 1 || p.cluster == 2 || p.cluster == 4 || p.cluster == 8);
                EXPECT_TRUE(p.cluster == 1 || (device.clusters && p.threads == 1024));
                // Slices cover the row (a forced cluster on a short row leaves ranks empty,
                // which the kernel takes).
                EXPECT_EQ(p.slice, (cols + p.cluster - 1) / p.cluster);
                EXPECT_LE(p.smem_bytes, device.smem_per_block);
                EXPECT_LE(p.smem_bytes, gks::detail::topk_smem_budget(p.threads, device));
                if (sorted) {
                  EXPECT_GE(p.sort_cap, k);
                  EXPECT_LT(p.sort_cap, 2 * k);
                } else {
                  EXPECT_EQ(p.sort_cap, 0);
                }
              }
}

}  // namespace
