// SPDX-License-Identifier: Apache-2.0
// The C++ API's core host logic: tensor views, row layouts and the row skeleton's plan
// helpers. None of these touch a GPU, so they run in CI on a machine without one.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

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

// Views of one buffer (byte offsets from a fake base address): shares_memory is exact.
gks::TensorRef view(int64_t offset_elems, gks::DType dtype, std::initializer_list<int64_t> shape,
                    std::initializer_list<int64_t> strides = {}) {
  auto* base = reinterpret_cast<char*>(uintptr_t(1) << 40);
  return gks::TensorRef::make(base + offset_elems * gks::dtype_size(dtype), dtype, shape, kGpu, strides);
}

TEST(SharesMemory, SeparateAdjacentAndInterleavedViews) {
  using gks::Sharing;
  const auto f32 = gks::DType::kFloat32;
  // Adjacent, not overlapping: [0, 64) and [64, 128).
  EXPECT_EQ(gks::shares_memory(view(0, f32, {8, 8}), view(64, f32, {8, 8})), Sharing::kNo);
  EXPECT_EQ(gks::shares_memory(view(0, f32, {8, 8}), view(63, f32, {8, 8})), Sharing::kYes);
  // x = buf[:, :8] and y = buf[:, 8:] of a [1000, 16] buffer: interleaved, apart, and
  // decided in a few steps (the budget would not cover one per row).
  EXPECT_EQ(gks::shares_memory(view(0, f32, {1000000, 8}, {16, 1}), view(8, f32, {1000000, 8}, {16, 1})),
            Sharing::kNo);
  EXPECT_EQ(gks::shares_memory(view(0, f32, {1000000, 8}, {16, 1}), view(7, f32, {1000000, 8}, {16, 1})),
            Sharing::kYes);
  // Bytes of different dtypes: an int8 view over the last byte of a float.
  EXPECT_EQ(gks::shares_memory(view(0, f32, {4}), view(15, gks::DType::kInt8, {1})), Sharing::kYes);
  EXPECT_EQ(gks::shares_memory(view(0, f32, {4}), view(16, gks::DType::kInt8, {1})), Sharing::kNo);
  // Empty views share nothing.
  EXPECT_EQ(gks::shares_memory(view(0, f32, {0, 8}), view(0, f32, {8, 8})), Sharing::kNo);
}

TEST(SharesMemory, AgreesWithEnumerationOnRandomViews) {
  // Random strided views (positive, negative, zero and interleaved strides) at random offsets
  // of one buffer, checked against the set of bytes each one touches.
  std::mt19937 rng(1234);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const gks::DType dtypes[] = {gks::DType::kInt8, gks::DType::kFloat16, gks::DType::kFloat32};
  auto random_view = [&]() {
    gks::TensorRef t;
    t.dtype = dtypes[pick(0, 2)];
    t.device = kGpu;
    t.ndim = pick(1, 3);
    int64_t low = 0;
    for (int d = 0; d < t.ndim; ++d) {
      t.shape[d] = pick(1, 5);
      t.strides[d] = pick(-9, 9);
      if (t.strides[d] < 0) low += (t.shape[d] - 1) * t.strides[d];
    }
    t.data = reinterpret_cast<char*>(uintptr_t(1) << 40) + (pick(0, 40) - low) * gks::dtype_size(t.dtype);
    return t;
  };
  auto bytes_of = [](const gks::TensorRef& t) {
    std::set<intptr_t> bytes;
    const int64_t e = gks::dtype_size(t.dtype);
    int64_t idx[3] = {0, 0, 0};
    for (int64_t i = 0; i < t.numel(); ++i) {
      int64_t off = 0, r = i;
      for (int d = t.ndim - 1; d >= 0; --d) {
        idx[d] = r % t.shape[d];
        r /= t.shape[d];
        off += idx[d] * t.strides[d];
      }
      for (int64_t b = 0; b < e; ++b) bytes.insert(reinterpret_cast<intptr_t>(t.data) + off * e + b);
    }
    return bytes;
  };
  int shared = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const auto a = random_view(), b = random_view();
    const auto ab = bytes_of(a), bb = bytes_of(b);
    bool common = false;
    for (intptr_t x : ab) common = common || bb.count(x);
    shared += common;
    const gks::Sharing s = gks::shares_memory(a, b);
    ASSERT_NE(int(s), int(gks::Sharing::kUndecided)) << "trial " << trial;
    ASSERT_EQ(s == gks::Sharing::kYes, common)
        << "trial " << trial << ": " << a.shape_string() << " vs " << b.shape_string();
  }
  EXPECT_GT(shared, 400);  // both answers were exercised
  EXPECT_LT(shared, 3600);
}

TEST(CheckOutputs, RefusesRepeatedElementsAndSharedMemory) {
  const auto f32 = gks::DType::kFloat32;
  const auto x = view(0, f32, {4, 8});
  expect_error([&] { gks::check_output(view(100, f32, {4, 8}, {0, 1}), "gks.op", "y"); },
               gks::ErrorKind::kInvalidArgument, "argument 'y' must hold each of its elements once, got stride 0");
  expect_error([&] { gks::check_output(view(100, f32, {4, 8}, {4, 1}), "gks.op", "y"); },
               gks::ErrorKind::kInvalidArgument, "each dim, in order of stride, must step past");
  gks::check_output(view(100, f32, {4, 8}, {1, 4}), "gks.op", "y");  // a transposed view is fine
  gks::check_output(view(100, f32, {1, 8}, {0, 1}), "gks.op", "y");  // stride 0 over size 1
  // y may be exactly x (in place) where the op says so, and nothing else that meets x.
  const auto y_in_place = view(0, f32, {4, 8});
  gks::check_outputs({{&y_in_place, "y"}}, {{&x, "x"}}, "gks.op", "x");
  expect_error([&] { gks::check_outputs({{&y_in_place, "y"}}, {{&x, "x"}}, "gks.op"); },
               gks::ErrorKind::kInvalidArgument, "argument 'y' must not share memory with argument 'x'");
  const auto y_shifted = view(1, f32, {4, 8});
  expect_error([&] { gks::check_outputs({{&y_shifted, "y"}}, {{&x, "x"}}, "gks.op", "x"); },
               gks::ErrorKind::kInvalidArgument, "unless it is exactly 'x'");
  const auto w = view(30, f32, {8});  // [30, 38): meets y_shifted, [1, 33)
  const auto y_apart = view(200, f32, {4, 8});
  expect_error([&] { gks::check_outputs({{&y_shifted, "y"}}, {{&w, "weight"}}, "gks.op", "x"); },
               gks::ErrorKind::kInvalidArgument, "argument 'y' must not share memory with argument 'weight'");
  gks::check_outputs({{&y_apart, "y"}}, {{&x, "x"}, {&w, "weight"}}, "gks.op");
  // Two outputs may not share memory either.
  const auto scale = view(230, f32, {4});
  expect_error([&] { gks::check_outputs({{&y_apart, "q"}, {&scale, "scale"}}, {{&x, "x"}}, "gks.op"); },
               gks::ErrorKind::kInvalidArgument, "argument 'scale' must not share memory with argument 'q'");
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
