// SPDX-License-Identifier: Apache-2.0
// The C++ API's core host logic: tensor views, row layouts and the row skeleton's plan
// helpers. None of these touch a GPU, so they run in CI on a machine without one.
#include <gtest/gtest.h>

#include <string>

#include "gks/gks.h"
#include "rows/plan.h"

#include "test_util.h"

namespace {

using gks_test::expect_error;
using gks_test::kGpu;

TEST(TensorRef, ContiguousStridesByDefault) {
  const auto t = gks::TensorRef::make(nullptr, gks::DType::kFloat32, {2, 3, 4}, kGpu);
  EXPECT_EQ(t.strides[0], 12);
  EXPECT_EQ(t.strides[1], 4);
  EXPECT_EQ(t.strides[2], 1);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.shape_string(), "[2, 3, 4]");
}

TEST(RowLayout, MergesContiguousLeadingDims) {
  const auto t = gks::TensorRef::make(nullptr, gks::DType::kFloat32, {2, 3, 5}, kGpu);
  const auto rows = gks::row_layout(t, "op", "x");
  EXPECT_EQ(rows.rows, 6);
  EXPECT_EQ(rows.cols, 5);
  ASSERT_EQ(rows.ndims, 1);
  EXPECT_EQ(rows.row_offset(4), 20);
}

TEST(RowLayout, KeepsStridedLeadingDims) {
  // A [2, 3, 5] view of a [2, 4, 8] buffer: rows are 8 apart, the outer dim 32 apart.
  const auto t =
      gks::TensorRef::make(nullptr, gks::DType::kFloat32, {2, 3, 5}, kGpu, {32, 8, 1});
  const auto rows = gks::row_layout(t, "op", "x");
  ASSERT_EQ(rows.ndims, 2);
  EXPECT_EQ(rows.rows, 6);
  EXPECT_EQ(rows.row_offset(0), 0);
  EXPECT_EQ(rows.row_offset(2), 16);
  EXPECT_EQ(rows.row_offset(3), 32);
  EXPECT_EQ(rows.row_offset(5), 48);
  EXPECT_TRUE(rows.rows_aligned_to(8));
  EXPECT_FALSE(rows.rows_aligned_to(16));
}

TEST(RowLayout, RejectsNonContiguousLastDim) {
  const auto t = gks::TensorRef::make(nullptr, gks::DType::kFloat32, {4, 6}, kGpu, {1, 4});
  expect_error([&] { gks::row_layout(t, "gks.op", "x"); }, gks::ErrorKind::kInvalidArgument,
               "argument 'x' must be contiguous in its last dim");
}

TEST(RowPlan, WarpPerRowTakesTheFewestAccessesALaneThatCover) {
  gks::detail::RowPlan base;
  base.vec = 8;
  for (int64_t accesses : {1, 31, 32, 33, 64, 65, 128, 129, 256}) {
    const auto p = gks::detail::warp_per_row(base, accesses);
    EXPECT_EQ(p.kind, gks::detail::RowPlan::Kind::kRegisters);
    EXPECT_EQ(p.vec, 8);
    EXPECT_EQ(p.threads_per_row, 32);
    EXPECT_EQ(p.rows_per_block, 4);
    EXPECT_GE(32 * p.vecs_per_thread, accesses);
    EXPECT_LT(16 * p.vecs_per_thread, accesses > 32 ? accesses : 32) << accesses;
  }
}

TEST(RowPlan, FitRegistersGrowsThreadsThenAccessesThenClusters) {
  gks::detail::RowPlan p;
  ASSERT_TRUE(gks::detail::fit_registers(1000, 4, 4, 1024, 1, p));
  EXPECT_EQ(p.threads_per_row, 256);
  EXPECT_EQ(p.vecs_per_thread, 4);
  EXPECT_EQ(p.cluster, 1);
  ASSERT_TRUE(gks::detail::fit_registers(6000, 4, 8, 1024, 1, p));
  EXPECT_EQ(p.threads_per_row, 1024);
  EXPECT_EQ(p.vecs_per_thread, 8);
  ASSERT_TRUE(gks::detail::fit_registers(6000, 4, 4, 256, 8, p));
  EXPECT_EQ(p.threads_per_row, 256);
  EXPECT_EQ(p.cluster, 8);
  gks::detail::RowPlan untouched;
  EXPECT_FALSE(gks::detail::fit_registers(100000, 4, 8, 1024, 1, untouched));
  EXPECT_TRUE(untouched == gks::detail::RowPlan{});
}

}  // namespace
