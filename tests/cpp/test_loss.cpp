// SPDX-License-Identifier: Apache-2.0
// Host-side logic of the loss family (gks::cross_entropy_fwd / cross_entropy_bwd): the
// validation, which must throw before anything touches a GPU, and the planner, every plan of
// which must name a compiled kernel.
#include <gtest/gtest.h>

#include <iterator>

#include "gks/gks.h"
#include "loss/plan.h"

#include "test_util.h"

namespace {

using gks::DType;
using gks::ErrorKind;
using gks::TensorRef;
using gks_test::expect_error;
using gks_test::kGpu;

gks::CrossEntropyFwdArgs fwd_args(int64_t rows, int64_t cols, DType dtype = DType::kBFloat16) {
  gks::CrossEntropyFwdArgs a;
  a.logits = TensorRef::make(gks_test::fake_address(1), dtype, {rows, cols}, kGpu);
  a.target = TensorRef::make(gks_test::fake_address(2), DType::kInt64, {rows}, kGpu);
  a.loss = TensorRef::make(gks_test::fake_address(3), DType::kFloat32, {rows}, kGpu);
  a.lse = TensorRef::make(gks_test::fake_address(4), DType::kFloat32, {rows}, kGpu);
  return a;
}

gks::CrossEntropyBwdArgs bwd_args(int64_t rows, int64_t cols, DType dtype = DType::kBFloat16) {
  gks::CrossEntropyBwdArgs a;
  a.logits = TensorRef::make(gks_test::fake_address(1), dtype, {rows, cols}, kGpu);
  a.target = TensorRef::make(gks_test::fake_address(2), DType::kInt32, {rows}, kGpu);
  a.lse = TensorRef::make(gks_test::fake_address(3), DType::kFloat32, {rows}, kGpu);
  a.dloss = TensorRef::make(gks_test::fake_address(4), DType::kFloat32, {rows}, kGpu, {0});  // expanded
  a.dlogits = TensorRef::make(gks_test::fake_address(5), dtype, {rows, cols}, kGpu);
  return a;
}

TEST(CrossEntropy, TakesEmptyBatchesStridedRowsAndTheOutputsItDocuments) {
  EXPECT_NO_THROW(gks::cross_entropy_fwd(fwd_args(0, 32000), nullptr));
  EXPECT_NO_THROW(gks::cross_entropy_bwd(bwd_args(0, 7), nullptr));
  gks::ValidateOnly validating;
  auto f = fwd_args(8, 1000);
  f.logits = TensorRef::make(gks_test::fake_address(1), DType::kBFloat16, {8, 1000}, kGpu, {1064, 1});
  f.loss.dtype = DType::kBFloat16;  // the logits' dtype: the per-row losses as the op returns them
  EXPECT_NO_THROW(gks::cross_entropy_fwd(f, nullptr));
  auto b = bwd_args(8, 1000);
  b.dlogits = b.logits;  // in place
  EXPECT_NO_THROW(gks::cross_entropy_bwd(b, nullptr));
}

TEST(CrossEntropy, RefusesBadLogits) {
  auto a = fwd_args(4, 16);
  a.logits = TensorRef::make(gks_test::fake_address(1), DType::kBFloat16, {16}, kGpu);
  expect_error([&] { gks::cross_entropy_fwd(a, nullptr); }, ErrorKind::kInvalidArgument,
               "gks.cross_entropy: argument 'logits' must be [T, V] (tokens x classes), got [16]");
  a = fwd_args(4, 0);
  expect_error([&] { gks::cross_entropy_fwd(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'logits' must have at least one class (V >= 1), got [4, 0]");
  a = fwd_args(4, 16, DType::kInt32);
  expect_error([&] { gks::cross_entropy_fwd(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'logits' must be float32, float16 or bfloat16");
  a = fwd_args(4, 16);
  a.logits = TensorRef::make(gks_test::fake_address(1), DType::kBFloat16, {4, 16}, kGpu, {1, 4});
  expect_error([&] { gks::cross_entropy_fwd(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'logits' must be contiguous in its last dim");
  a = fwd_args(4, 16);
  a.logits.device = gks_test::kCpu;
  expect_error([&] { gks::cross_entropy_fwd(a, nullptr); }, ErrorKind::kInvalidArgument,
               "gks.cross_entropy: argument 'logits' must be a CUDA tensor");
}

TEST(CrossEntropy, RefusesBadTargetsAndOutputs) {
  auto a = fwd_args(4, 16);
  a.target = TensorRef::make(gks_test::fake_address(2), DType::kInt64, {3}, kGpu);
  expect_error([&] { gks::cross_entropy_fwd(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'target' must have shape [4] (a value for each row of logits), got [3]");
  a = fwd_args(4, 16);
  a.target.dtype = DType::kFloat32;
  expect_error([&] { gks::cross_entropy_fwd(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'target' must be int64 or int32, got float32");
  a = fwd_args(4, 16);
  a.loss.dtype = DType::kFloat16;
  expect_error([&] { gks::cross_entropy_fwd(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'loss' must be float32 or the dtype of 'logits' (bfloat16), got float16");
  a = fwd_args(4, 16);
  a.lse.dtype = DType::kBFloat16;
  expect_error([&] { gks::cross_entropy_fwd(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'lse' must be float32, got bfloat16");
  a = fwd_args(4, 16);
  a.lse = a.loss;
  expect_error([&] { gks::cross_entropy_fwd(a, nullptr); }, ErrorKind::kInvalidArgument,
               "must not share memory");
  a = fwd_args(4, 16);
  a.loss = TensorRef::make(gks_test::fake_address(3), DType::kFloat32, {4}, kGpu, {0});
  expect_error([&] { gks::cross_entropy_fwd(a, nullptr); }, ErrorKind::kInvalidArgument, "argument 'loss'");
  a = fwd_args(4, 16);
  a.config = 3;
  expect_error([&] { gks::cross_entropy_fwd(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'config' must be -1 (heuristic), 0 (warp), 1 (block-256) or 2 (block-512), got 3");
}

TEST(CrossEntropy, BackwardRefusesBadArguments) {
  auto b = bwd_args(4, 16);
  b.dloss.dtype = DType::kFloat16;
  expect_error([&] { gks::cross_entropy_bwd(b, nullptr); }, ErrorKind::kUnsupportedDtype,
               "gks.cross_entropy_backward: argument 'dloss' must be float32, got float16");
  b = bwd_args(4, 16);
  b.lse = TensorRef::make(gks_test::fake_address(3), DType::kFloat32, {5}, kGpu);
  expect_error([&] { gks::cross_entropy_bwd(b, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'lse' must have shape [4]");
  b = bwd_args(4, 16);
  b.dlogits.dtype = DType::kFloat32;
  expect_error([&] { gks::cross_entropy_bwd(b, nullptr); }, ErrorKind::kUnsupportedDtype, "argument 'dlogits'");
  b = bwd_args(4, 16);
  b.dlogits = TensorRef::make(gks_test::fake_address(5), DType::kBFloat16, {4, 15}, kGpu);
  expect_error([&] { gks::cross_entropy_bwd(b, nullptr); }, ErrorKind::kInvalidArgument, "argument 'dlogits'");
  b = bwd_args(4, 16);
  b.dlogits = TensorRef::make(static_cast<char*>(gks_test::fake_address(1)) + 32, DType::kBFloat16, {4, 16},
                              kGpu);  // a row past logits' start: overlaps it
  expect_error([&] { gks::cross_entropy_bwd(b, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'dlogits' must not share memory with argument 'logits'");
}

TEST(CrossEntropyPlan, WarpRowsForShortRowsBlocksForLongOnes) {
  using Kind = gks::detail::RowPlan::Kind;
  const auto p = [](int64_t cols) { return gks::detail::plan_cross_entropy(cols, DType::kBFloat16, true); };
  EXPECT_EQ(p(1).kind, Kind::kRegisters);
  EXPECT_EQ(p(4096).threads_per_row, 32);
  EXPECT_EQ(p(32000).kind, Kind::kLooped);
  EXPECT_EQ(p(32000).threads_per_row, 256);
  EXPECT_EQ(p(131072).threads_per_row, 512);
  EXPECT_EQ(gks::detail::plan_cross_entropy(131072, DType::kBFloat16, true, -1, /*backward=*/true).threads_per_row, 256);
  EXPECT_EQ(gks::detail::plan_cross_entropy(4096, DType::kBFloat16, true, -1, /*backward=*/true).threads_per_row, 32);
  EXPECT_EQ(p(131072).vec, 8);
  EXPECT_EQ(gks::detail::plan_cross_entropy(131072, DType::kFloat32, false).vec, 1);
  EXPECT_EQ(gks::detail::plan_cross_entropy(7, DType::kFloat32, true, 2).threads_per_row, 512);
}

TEST(CrossEntropyPlan, EveryPlanHasAKernel) {
  for (int64_t cols = 1; cols <= 300000; cols += cols < 5000 ? 1 : 997) {
    for (auto dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      for (bool aligned : {true, false}) {
        for (int config = -1; config < int(std::size(gks::kCrossEntropyConfigs)); ++config) {
          for (bool backward : {false, true})
            ASSERT_TRUE(gks::detail::cross_entropy_plan_has_kernel(
                gks::detail::plan_cross_entropy(cols, dtype, aligned, config, backward), dtype, backward))
                << cols << " " << config;
        }
      }
    }
  }
}

}  // namespace
