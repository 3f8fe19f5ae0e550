// SPDX-License-Identifier: Apache-2.0
// Host-side logic of the C++ API: validation, row layouts and launch plans. None of these
// touch a GPU, so they run in CI on a machine without one.
#include <gtest/gtest.h>

#include <string>

#include "gks/gks.h"

#include "test_util.h"

namespace {

using gks_test::expect_error;
using gks_test::kCpu;
using gks_test::kGpu;

gks::RmsNormArgs valid_args(void* p) {
  gks::RmsNormArgs a;
  a.x = gks::TensorRef::make(p, gks::DType::kFloat16, {4, 8}, kGpu);
  a.weight = gks::TensorRef::make(p, gks::DType::kFloat16, {8}, kGpu);
  a.y = gks::TensorRef::make(p, gks::DType::kFloat16, {4, 8}, kGpu);
  return a;
}

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

TEST(RmsNorm, RejectsCpuTensor) {
  char buf[64];
  auto a = valid_args(buf);
  a.x.device = kCpu;
  expect_error([&] { gks::rmsnorm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'x' must be a CUDA tensor");
}

TEST(RmsNorm, RejectsMismatchedDtype) {
  char buf[64];
  auto a = valid_args(buf);
  a.weight.dtype = gks::DType::kFloat32;
  expect_error([&] { gks::rmsnorm(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'weight' must have the dtype of 'x' (float16), got float32");
}

TEST(RmsNorm, RejectsIntegerInput) {
  char buf[64];
  auto a = valid_args(buf);
  a.x.dtype = a.weight.dtype = a.y.dtype = gks::DType::kInt8;
  expect_error([&] { gks::rmsnorm(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'x' must be float32, float16 or bfloat16, got int8");
}

TEST(RmsNorm, RejectsWeightOfWrongLength) {
  char buf[64];
  auto a = valid_args(buf);
  a.weight.shape[0] = 7;
  expect_error([&] { gks::rmsnorm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'weight' must have shape [8]");
}

TEST(RmsNorm, RejectsOutputOfWrongShape) {
  char buf[64];
  auto a = valid_args(buf);
  a.y.shape[0] = 3;
  expect_error([&] { gks::rmsnorm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'y' must have the shape of 'x'");
}

TEST(RmsNorm, RejectsOtherDevice) {
  char buf[64];
  auto a = valid_args(buf);
  a.weight.device.index = 1;
  expect_error([&] { gks::rmsnorm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'weight' must be on the device of 'x' (cuda:0), got cuda:1");
}

TEST(RmsNorm, RejectsUnknownConfig) {
  char buf[64];
  auto a = valid_args(buf);
  a.config = gks::kRmsNormConfigCount;
  expect_error([&] { gks::rmsnorm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'config' must be -1 (heuristic) or an index below " +
                   std::to_string(gks::kRmsNormConfigCount));
}

TEST(RmsNorm, RejectsNegativeEps) {
  char buf[64];
  auto a = valid_args(buf);
  a.eps = -1.f;
  expect_error([&] { gks::rmsnorm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'eps' must be >= 0");
}

TEST(RmsNormPlan, WarpPerRowForShortRows) {
  const auto p = gks::detail::plan_rmsnorm(512, gks::DType::kBFloat16, true);
  EXPECT_EQ(p.kind, gks::detail::RmsNormPlan::Kind::kRegisters);
  EXPECT_EQ(p.vec, 8);
  EXPECT_EQ(p.threads_per_row, 32);
  EXPECT_EQ(p.vecs_per_thread, 2);  // 512 / 8 = 64 accesses = 32 lanes x 2
  EXPECT_EQ(p.rows_per_block, 4);
  // 128 accesses: a 64-thread block, 2 each (the heuristic); a warp, 4 each (registers-4x16B).
  const auto b = gks::detail::plan_rmsnorm(1024, gks::DType::kBFloat16, true);
  EXPECT_EQ(b.threads_per_row, 64);
  EXPECT_EQ(b.vecs_per_thread, 2);
  EXPECT_EQ(b.rows_per_block, 1);
  const auto w = gks::detail::plan_rmsnorm(1024, gks::DType::kBFloat16, true, 2);
  EXPECT_EQ(w.threads_per_row, 32);
  EXPECT_EQ(w.vecs_per_thread, 4);
  EXPECT_EQ(w.rows_per_block, 4);
}

TEST(RmsNormPlan, RegistersConfigsCoverTheRow) {
  for (int config : {0, 2, 3, 4}) {
    for (int64_t cols : {1025, 4096, 8191, 32768, 262144}) {
      for (auto dtype : {gks::DType::kFloat32, gks::DType::kBFloat16}) {
        const auto p = gks::detail::plan_rmsnorm(cols, dtype, true, config);
        ASSERT_EQ(p.kind, gks::detail::RmsNormPlan::Kind::kRegisters) << cols;
        EXPECT_GE(int64_t(p.threads_per_row) * p.vecs_per_thread * p.vec * p.cluster, cols) << cols;
        EXPECT_EQ(p.rows_per_block, p.threads_per_row > 32 ? 1 : 4);
        EXPECT_LE(p.cluster, 8);
        if (cols > 32768) continue;  // 262144: past every config's shape, the widest one
        // A cluster only once a CTA has its config's most threads.
        if (p.cluster > 1) EXPECT_EQ(p.threads_per_row, config == 3 ? 256 : 1024) << cols;
        EXPECT_LE(p.vecs_per_thread, config == 0 ? 8 : config == 4 ? 2 : 4) << cols;
      }
    }
  }
}

TEST(RmsNormPlan, HeuristicLoopsOverShortFp32RowsAndHoldsTheRest) {
  using gks::detail::plan_rmsnorm;
  using Kind = gks::detail::RmsNormPlan::Kind;
  const auto s = plan_rmsnorm(4096, gks::DType::kFloat32, true);  // 1024 accesses, 16 KB rows
  EXPECT_EQ(s.kind, Kind::kLooped);
  EXPECT_EQ(s.threads_per_row, 256);  // 132 SMs x 8 CTAs x 16 KB = 17 MB <= 25 MB
  EXPECT_EQ(plan_rmsnorm(2048, gks::DType::kFloat32, true).kind, Kind::kLooped);  // 512
  // 16-bit rows, longer fp32 rows and unaligned rows are held in registers.
  const auto h = plan_rmsnorm(4096, gks::DType::kBFloat16, true);  // 512 accesses
  EXPECT_EQ(h.kind, Kind::kRegisters);
  EXPECT_EQ(h.threads_per_row, 256);
  EXPECT_EQ(h.vecs_per_thread, 2);
  const auto m = plan_rmsnorm(8192, gks::DType::kFloat32, true);  // 2048: past 512 x 2
  EXPECT_EQ(m.kind, Kind::kRegisters);
  EXPECT_EQ(m.threads_per_row, 512);
  EXPECT_EQ(m.vecs_per_thread, 4);
  const auto b = plan_rmsnorm(32768, gks::DType::kBFloat16, true);  // 4096 accesses
  EXPECT_EQ(b.kind, Kind::kRegisters);
  EXPECT_EQ(b.threads_per_row, 1024);
  EXPECT_EQ(b.vecs_per_thread, 4);
  const auto f = plan_rmsnorm(32768, gks::DType::kFloat32, true);  // 8192 accesses
  EXPECT_EQ(f.kind, Kind::kRegisters);
  EXPECT_EQ(f.threads_per_row, 1024);
  EXPECT_EQ(f.vecs_per_thread, 8);
  EXPECT_EQ(f.cluster, 1);
  EXPECT_EQ(plan_rmsnorm(4096, gks::DType::kFloat32, false).kind, Kind::kRegisters);
  const auto l = plan_rmsnorm(65536, gks::DType::kFloat32, true);  // past one CTA: a cluster
  EXPECT_EQ(l.kind, Kind::kRegisters);
  EXPECT_EQ(l.cluster, 4);
  EXPECT_EQ(int64_t(l.threads_per_row) * l.vecs_per_thread * l.vec * l.cluster, 65536);
}

TEST(RmsNormPlan, ClustersNeedSm90AndAlignedRows) {
  gks::detail::DeviceLimits a100{108, 40 << 20, 2048, /*clusters=*/false};
  const auto p = gks::detail::plan_rmsnorm(32768, gks::DType::kFloat32, true, 3, a100);
  EXPECT_EQ(p.cluster, 1);
  EXPECT_GE(int64_t(p.threads_per_row) * p.vecs_per_thread * p.vec, 32768);
  EXPECT_EQ(gks::detail::plan_rmsnorm(32768, gks::DType::kFloat32, false, 3).cluster, 1);
  // Without clusters, rows past 1024 threads x 8 accesses loop.
  EXPECT_EQ(gks::detail::plan_rmsnorm(65536, gks::DType::kFloat32, true, 0, a100).kind,
            gks::detail::RmsNormPlan::Kind::kLooped);
}

TEST(RmsNormPlan, LongOrUnalignedRowsLoop) {
  const auto p = gks::detail::plan_rmsnorm(524288, gks::DType::kFloat32, true);
  EXPECT_EQ(p.kind, gks::detail::RmsNormPlan::Kind::kLooped);
  EXPECT_EQ(p.threads_per_row, 1024);
  const auto q = gks::detail::plan_rmsnorm(16385, gks::DType::kFloat32, false);
  EXPECT_EQ(q.vec, 1);
  EXPECT_EQ(q.kind, gks::detail::RmsNormPlan::Kind::kLooped);
  const auto h = gks::detail::plan_rmsnorm(4097, gks::DType::kFloat16, false);
  EXPECT_EQ(h.vec, 1);
  EXPECT_EQ(h.cluster, 1);
  EXPECT_GE(int64_t(h.threads_per_row) * h.vecs_per_thread, 4097);
  EXPECT_EQ(gks::detail::plan_rmsnorm(32768, gks::DType::kFloat16, true, /*config=*/1).kind,
            gks::detail::RmsNormPlan::Kind::kLooped);
}

TEST(RmsNormPlan, LoopedRowsInFlightFitHalfTheL2) {
  gks::detail::DeviceLimits h200{132, 60 << 20, 2048};
  for (int64_t cols : {2048, 4096, 16384}) {
    const auto p = gks::detail::plan_rmsnorm(cols, gks::DType::kFloat32, true, /*config=*/1, h200);
    ASSERT_EQ(p.kind, gks::detail::RmsNormPlan::Kind::kLooped);
    const int64_t in_flight = int64_t(h200.sms) * (h200.max_threads_per_sm / p.threads_per_row);
    EXPECT_LE(in_flight * cols * 4, h200.l2_bytes / 2) << cols;
    // ... and with the fewest threads that do: half as many would not fit.
    if (p.threads_per_row > 128) EXPECT_GT(2 * in_flight * cols * 4, h200.l2_bytes / 2) << cols;
  }
}

TEST(RmsNormPlan, Looped512tLoopsWith512ThreadsAtAnyLength) {
  for (int64_t cols : {1, 1000, 4096, 262144}) {
    for (bool aligned : {true, false}) {
      const auto p = gks::detail::plan_rmsnorm(cols, gks::DType::kFloat32, aligned, /*config=*/5);
      EXPECT_EQ(p.kind, gks::detail::RmsNormPlan::Kind::kLooped) << cols;
      EXPECT_EQ(p.threads_per_row, 512) << cols;
    }
  }
}

}  // namespace
