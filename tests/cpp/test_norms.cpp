// SPDX-License-Identifier: Apache-2.0
// Host-side logic of the norms family (gks::rmsnorm, gks::rmsnorm_bwd, gks::fused_add_rmsnorm,
// gks::softmax_rmsnorm): validation,
// which must throw before anything touches a GPU, and the launch plans.
#include <gtest/gtest.h>

#include <functional>
#include <iterator>
#include <utility>
#include <vector>
#include <string>

#include "gks/gks.h"
#include "norms/plan.h"

#include "test_util.h"

namespace {

using gks_test::expect_error;
using gks_test::kCpu;
using gks_test::kGpu;
using gks::DType;
using gks::ErrorKind;

gks::RmsNormArgs valid_args(void* p) {
  gks::RmsNormArgs a;
  a.x = gks::TensorRef::make(p, gks::DType::kFloat16, {4, 8}, kGpu);
  a.weight = gks::TensorRef::make(gks_test::fake_address(2), gks::DType::kFloat16, {8}, kGpu);
  a.y = gks::TensorRef::make(gks_test::fake_address(3), gks::DType::kFloat16, {4, 8}, kGpu);
  return a;
}

gks::SoftmaxRmsNormArgs fused_args(void* p) {
  gks::SoftmaxRmsNormArgs a;
  a.x = gks::TensorRef::make(p, DType::kBFloat16, {4, 8}, kGpu);
  a.weight = gks::TensorRef::make(gks_test::fake_address(2), DType::kBFloat16, {8}, kGpu);
  a.y = gks::TensorRef::make(gks_test::fake_address(3), DType::kBFloat16, {4, 8}, kGpu);
  return a;
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
  a.config = int(std::size(gks::kRmsNormConfigs));
  expect_error([&] { gks::rmsnorm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'config' must be -1 (heuristic) or an index below " +
                   std::to_string(std::size(gks::kRmsNormConfigs)));
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
  EXPECT_EQ(p.kind, gks::detail::RowPlan::Kind::kRegisters);
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
        ASSERT_EQ(p.kind, gks::detail::RowPlan::Kind::kRegisters) << cols;
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
  using Kind = gks::detail::RowPlan::Kind;
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
            gks::detail::RowPlan::Kind::kLooped);
}

TEST(RmsNormPlan, LongOrUnalignedRowsLoop) {
  const auto p = gks::detail::plan_rmsnorm(524288, gks::DType::kFloat32, true);
  EXPECT_EQ(p.kind, gks::detail::RowPlan::Kind::kLooped);
  EXPECT_EQ(p.threads_per_row, 1024);
  const auto q = gks::detail::plan_rmsnorm(16385, gks::DType::kFloat32, false);
  EXPECT_EQ(q.vec, 1);
  EXPECT_EQ(q.kind, gks::detail::RowPlan::Kind::kLooped);
  const auto h = gks::detail::plan_rmsnorm(4097, gks::DType::kFloat16, false);
  EXPECT_EQ(h.vec, 1);
  EXPECT_EQ(h.cluster, 1);
  EXPECT_GE(int64_t(h.threads_per_row) * h.vecs_per_thread, 4097);
  EXPECT_EQ(gks::detail::plan_rmsnorm(32768, gks::DType::kFloat16, true, /*config=*/1).kind,
            gks::detail::RowPlan::Kind::kLooped);
}

TEST(RmsNormPlan, LoopedRowsInFlightFitHalfTheL2) {
  gks::detail::DeviceLimits h200{132, 60 << 20, 2048};
  for (int64_t cols : {2048, 4096, 16384}) {
    const auto p = gks::detail::plan_rmsnorm(cols, gks::DType::kFloat32, true, /*config=*/1, h200);
    ASSERT_EQ(p.kind, gks::detail::RowPlan::Kind::kLooped);
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
      EXPECT_EQ(p.kind, gks::detail::RowPlan::Kind::kLooped) << cols;
      EXPECT_EQ(p.threads_per_row, 512) << cols;
    }
  }
}

TEST(SoftmaxRmsNorm, RejectsWeightOfWrongShape) {
  char buf[64];
  auto a = fused_args(buf);
  a.weight.shape[0] = 7;
  expect_error([&] { gks::softmax_rmsnorm(a, nullptr); }, ErrorKind::kInvalidArgument,
               "gks.softmax_rmsnorm: argument 'weight' must have shape [8] (the last dim of x), got [7]");
  a = fused_args(buf);
  a.weight = gks::TensorRef::make(buf, DType::kBFloat16, {1, 8}, kGpu);
  expect_error([&] { gks::softmax_rmsnorm(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'weight' must have shape [8] (the last dim of x), got [1, 8]");
}

TEST(SoftmaxRmsNorm, RejectsStridedWeight) {
  char buf[64];
  auto a = fused_args(buf);
  a.weight.strides[0] = 2;
  expect_error([&] { gks::softmax_rmsnorm(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'weight' must be contiguous, got stride 2");
}

TEST(SoftmaxRmsNorm, RejectsWeightOfOtherDtypeOrDevice) {
  char buf[64];
  auto a = fused_args(buf);
  a.weight.dtype = DType::kFloat32;
  expect_error([&] { gks::softmax_rmsnorm(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'weight' must have the dtype of 'x' (bfloat16), got float32");
  a = fused_args(buf);
  a.weight.device = kCpu;
  expect_error([&] { gks::softmax_rmsnorm(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'weight' must be on the device of 'x' (cuda:0), got cpu");
}

TEST(SoftmaxRmsNorm, RejectsBadEps) {
  char buf[64];
  auto a = fused_args(buf);
  a.eps = -1e-6f;
  expect_error([&] { gks::softmax_rmsnorm(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'eps' must be >= 0");
  a.eps = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { gks::softmax_rmsnorm(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'eps' must be >= 0");
}

TEST(SoftmaxRmsNorm, RejectsBadXAndY) {
  char buf[64];
  auto a = fused_args(buf);
  a.x.device = kCpu;
  expect_error([&] { gks::softmax_rmsnorm(a, nullptr); }, ErrorKind::kInvalidArgument,
               "gks.softmax_rmsnorm: argument 'x' must be a CUDA tensor");
  a = fused_args(buf);
  a.y.shape[0] = 5;
  expect_error([&] { gks::softmax_rmsnorm(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'y' must have the shape of 'x'");
}

TEST(SoftmaxRmsNorm, EmptyTensorsReturnWithoutTouchingTheGpu) {
  gks::SoftmaxRmsNormArgs a;
  a.x = gks::TensorRef::make(nullptr, DType::kFloat16, {0, 16}, kGpu);
  a.weight = gks::TensorRef::make(nullptr, DType::kFloat16, {16}, kGpu);
  a.y = gks::TensorRef::make(nullptr, DType::kFloat16, {0, 16}, kGpu);
  EXPECT_NO_THROW(gks::softmax_rmsnorm(a, nullptr));
  a.x = gks::TensorRef::make(nullptr, DType::kFloat16, {5, 0}, kGpu);
  a.weight = gks::TensorRef::make(nullptr, DType::kFloat16, {0}, kGpu);
  a.y = gks::TensorRef::make(nullptr, DType::kFloat16, {5, 0}, kGpu);
  EXPECT_NO_THROW(gks::softmax_rmsnorm(a, nullptr));
}

// x, residual, weight, y and residual_out, each at a fake address of its own; a 0-row
// shape, so that a call that passes validation returns before it would launch.
gks::FusedAddRmsNormArgs add_args(int64_t rows = 0) {
  gks::FusedAddRmsNormArgs a;
  const auto t = [&](int slot, std::initializer_list<int64_t> shape) {
    return gks::TensorRef::make(gks_test::fake_address(slot), DType::kBFloat16, shape, kGpu);
  };
  a.x = t(1, {rows, 8});
  a.residual = t(2, {rows, 8});
  a.weight = t(3, {8});
  a.y = t(4, {rows, 8});
  a.residual_out = t(5, {rows, 8});
  return a;
}

TEST(FusedAddRmsNorm, TakesBothInPlaceFormsAndSeparateOutputs) {
  auto a = add_args();
  EXPECT_NO_THROW(gks::fused_add_rmsnorm(a, nullptr));
  a.y = a.x;
  EXPECT_NO_THROW(gks::fused_add_rmsnorm(a, nullptr));
  a.residual_out = a.residual;
  EXPECT_NO_THROW(gks::fused_add_rmsnorm(a, nullptr));
}

TEST(FusedAddRmsNorm, RefusesEveryOtherSharing) {
  const std::pair<const char*, std::function<void(gks::FusedAddRmsNormArgs&)>> cases[] = {
      {"argument 'y' must not share memory with argument 'residual'", [](auto& a) { a.y = a.residual; }},
      {"argument 'residual_out' must not share memory with argument 'x'",
       [](auto& a) { a.residual_out = a.x; }},
      {"argument 'residual_out' must not share memory with argument 'y'",
       [](auto& a) { a.residual_out = a.y; }},
      {"argument 'residual_out' must not share memory with argument 'weight'",
       [](auto& a) { a.residual_out.data = a.weight.data; }},
  };
  for (const auto& [message, edit] : cases) {
    auto a = add_args(4);
    edit(a);
    expect_error([&] { gks::fused_add_rmsnorm(a, nullptr); }, ErrorKind::kInvalidArgument, message);
  }
}

TEST(FusedAddRmsNorm, RefusesAResidualUnlikeX) {
  auto a = add_args(4);
  a.residual.dtype = DType::kFloat16;
  expect_error([&] { gks::fused_add_rmsnorm(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'residual' must have the dtype of 'x' (bfloat16), got float16");
  a = add_args(4);
  a.residual_out.shape[1] = 7;
  expect_error([&] { gks::fused_add_rmsnorm(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'residual_out' must have the shape of 'x'");
  a = add_args(4);
  a.residual.strides[1] = 2;
  expect_error([&] { gks::fused_add_rmsnorm(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'residual' must be contiguous in its last dim");
  a = add_args(4);
  a.config = int(std::size(gks::kRmsNormConfigs));
  expect_error([&] { gks::fused_add_rmsnorm(a, nullptr); }, ErrorKind::kInvalidArgument,
               "an index below " + std::to_string(std::size(gks::kRmsNormConfigs)) + " into kRmsNormConfigs");
}

TEST(LayerNorm, ChecksTheBiasOnlyWhenThereIsOne) {
  gks::LayerNormArgs a;
  a.x = gks::TensorRef::make(gks_test::fake_address(1), DType::kFloat16, {0, 8}, kGpu);
  a.weight = gks::TensorRef::make(gks_test::fake_address(2), DType::kFloat16, {8}, kGpu);
  a.y = gks::TensorRef::make(gks_test::fake_address(3), DType::kFloat16, {0, 8}, kGpu);
  a.bias = gks::TensorRef::make(gks_test::fake_address(4), DType::kFloat32, {7}, kGpu);
  EXPECT_NO_THROW(gks::layernorm(a, nullptr));  // no bias: its tensor is not read
  a.has_bias = true;
  expect_error([&] { gks::layernorm(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "gks.layernorm: argument 'bias' must have the dtype of 'x' (float16), got float32");
  a.bias.dtype = DType::kFloat16;
  expect_error([&] { gks::layernorm(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'bias' must have shape [8] (the last dim of x), got [7]");
  a.bias = gks::TensorRef::make(gks_test::fake_address(4), DType::kFloat16, {8}, kGpu);
  EXPECT_NO_THROW(gks::layernorm(a, nullptr));
  a.y = a.x;  // in place
  EXPECT_NO_THROW(gks::layernorm(a, nullptr));
}

// ---------------------------------------------------------------- plans

TEST(SoftmaxRmsNorm, RejectsUnknownConfig) {
  char buf[64];
  auto f = fused_args(buf);
  f.config = -2;
  expect_error([&] { gks::softmax_rmsnorm(f, nullptr); }, ErrorKind::kInvalidArgument,
               "gks.softmax_rmsnorm: argument 'config' must be -1");
  f.config = 5;
  expect_error([&] { gks::softmax_rmsnorm(f, nullptr); }, ErrorKind::kInvalidArgument,
               "2 (registers-wide), 3 (cluster) or 4 (staged), got 5");
}

TEST(NormsPlan, EveryPlanHasAKernel) {
  // Every plan the planners make, over lengths across every shape, is one the library
  // compiled a kernel for (the launcher reports an internal error otherwise). A plan of a
  // shape it has no kernel for is told apart:
  gks::detail::RowPlan none;
  none.vec = 8;
  none.threads_per_row = 1024;  // one 16-byte access a thread: not a shape rmsnorm compiles
  EXPECT_FALSE(gks::detail::rmsnorm_plan_has_kernel(none, DType::kBFloat16));
  none.vecs_per_thread = 2;
  EXPECT_TRUE(gks::detail::rmsnorm_plan_has_kernel(none, DType::kBFloat16));
  for (int64_t cols = 1; cols <= 70000; cols += cols < 2100 ? 1 : 37) {
    for (auto dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      for (bool aligned : {true, false}) {
        for (int config = -1; config < int(std::size(gks::kRmsNormConfigs)); ++config) {
          const auto p = gks::detail::plan_rmsnorm(cols, dtype, aligned, config);
          ASSERT_TRUE(gks::detail::rmsnorm_plan_has_kernel(p, dtype)) << cols << " " << config;
        }
        for (int config = -1; config < int(std::size(gks::kSoftmaxRmsNormConfigs)); ++config) {
          for (bool clusters : {false, true}) {
            const auto p = gks::detail::plan_softmax_rmsnorm(cols, dtype, aligned, config, clusters,
                                                             227 << 10);
            ASSERT_TRUE(gks::detail::softmax_rmsnorm_plan_has_kernel(p, dtype, cols))
                << cols << " " << config;
          }
        }
      }
    }
  }
}

// ---- rmsnorm_bwd ----

// dy, x, weight, dx and dweight, each at a fake address of its own.
gks::RmsNormBwdArgs bwd_args(int64_t rows = 4) {
  gks::RmsNormBwdArgs a;
  const auto t = [&](int slot, std::initializer_list<int64_t> shape) {
    return gks::TensorRef::make(gks_test::fake_address(slot), DType::kBFloat16, shape, kGpu);
  };
  a.dy = t(1, {rows, 8});
  a.x = t(2, {rows, 8});
  a.weight = t(3, {8});
  a.dx = t(4, {rows, 8});
  a.dweight = t(5, {8});
  return a;
}

TEST(RmsNormBwd, TakesSeparateOutputsAndDxInPlaceOfX) {
  const gks::ValidateOnly validate_only;  // every check, no launch: fine without a GPU
  auto a = bwd_args();
  EXPECT_NO_THROW(gks::rmsnorm_bwd(a, nullptr));
  a.dx = a.x;
  EXPECT_NO_THROW(gks::rmsnorm_bwd(a, nullptr));
  a.config = 2;
  EXPECT_NO_THROW(gks::rmsnorm_bwd(a, nullptr));
}

TEST(RmsNormBwd, NamesEachBadArgument) {
  const gks::ValidateOnly validate_only;
  const std::pair<const char*, std::function<void(gks::RmsNormBwdArgs&)>> cases[] = {
      {"gks.rmsnorm_bwd: argument 'dy' must have the dtype of 'x' (bfloat16), got float16",
       [](auto& a) { a.dy.dtype = DType::kFloat16; }},
      {"argument 'dy' must have the shape of 'x'", [](auto& a) { a.dy.shape[1] = 7; }},
      {"argument 'dy' must be contiguous in its last dim", [](auto& a) { a.dy.strides[1] = 2; }},
      {"argument 'dx' must have the shape of 'x'", [](auto& a) { a.dx.shape[0] = 3; }},
      {"argument 'dx' must have the dtype of 'x'", [](auto& a) { a.dx.dtype = DType::kFloat32; }},
      {"argument 'weight' must have shape [8] (the last dim of x), got [7]", [](auto& a) { a.weight.shape[0] = 7; }},
      {"argument 'dweight' must have shape [8] (the last dim of x), got [7]",
       [](auto& a) { a.dweight.shape[0] = 7; }},
      {"argument 'dweight' must have the dtype of 'x'", [](auto& a) { a.dweight.dtype = DType::kFloat32; }},
      {"argument 'dweight' must hold each of its elements once", [](auto& a) { a.dweight.strides[0] = 0; }},
      {"argument 'dx' must not share memory with argument 'dy'", [](auto& a) { a.dx = a.dy; }},
      {"argument 'dx' must not share memory with argument 'weight'", [](auto& a) { a.dx.data = a.weight.data; }},
      {"argument 'dweight' must not share memory with argument 'dx'", [](auto& a) { a.dweight.data = a.dx.data; }},
      {"argument 'dweight' must not share memory with argument 'weight'", [](auto& a) { a.dweight = a.weight; }},
      {"argument 'eps' must be >= 0", [](auto& a) { a.eps = -1.f; }},
      {"argument 'config' must be -1 (heuristic), 0 (registers-2x16B), 1 (registers-4x16B) or 2 (looped), got 3",
       [](auto& a) { a.config = 3; }},
  };
  for (const auto& [message, edit] : cases) {
    auto a = bwd_args();
    edit(a);
    const ErrorKind kind = std::string(message).find("dtype") != std::string::npos ? ErrorKind::kUnsupportedDtype
                                                                                   : ErrorKind::kInvalidArgument;
    expect_error([&] { gks::rmsnorm_bwd(a, nullptr); }, kind, message);
  }
}

TEST(RmsNormBwd, RowsOfNothingReturnWithoutTouchingTheGpu) {
  gks::RmsNormBwdArgs a = bwd_args(5);
  for (gks::TensorRef* t : {&a.dy, &a.x, &a.dx}) t->shape[1] = 0;
  a.weight.shape[0] = a.dweight.shape[0] = 0;
  EXPECT_NO_THROW(gks::rmsnorm_bwd(a, nullptr));
}

TEST(RmsNormBwdPlan, WarpsThenBlocksThenLoopedOnAPersistentGrid) {
  gks::detail::DeviceLimits limits;
  limits.sms = 100;
  using gks::detail::RowPlan;
  // bf16, 16-byte accesses of 8: 256 columns are 32 accesses (a lane each), 512 two.
  auto p = gks::detail::plan_rmsnorm_bwd(256, DType::kBFloat16, true, -1, limits);
  EXPECT_EQ(p.kind, RowPlan::Kind::kRegisters);
  EXPECT_EQ(p.threads_per_row, 32);
  EXPECT_EQ(p.rows_per_block, 4);
  EXPECT_EQ(p.vecs_per_thread, 1);
  EXPECT_EQ(p.max_blocks, 100 * (1024 / 128));
  p = gks::detail::plan_rmsnorm_bwd(512, DType::kBFloat16, true, -1, limits);
  EXPECT_EQ(p.vecs_per_thread, 2);
  EXPECT_EQ(p.threads_per_row, 32);
  // 4096 columns: 512 accesses, 256 threads of 2, 4 blocks an SM.
  p = gks::detail::plan_rmsnorm_bwd(4096, DType::kBFloat16, true, -1, limits);
  EXPECT_EQ(p.kind, RowPlan::Kind::kRegisters);
  EXPECT_EQ(p.threads_per_row, 256);
  EXPECT_EQ(p.vecs_per_thread, 2);
  EXPECT_EQ(p.rows_per_block, 1);
  EXPECT_EQ(p.max_blocks, 400);
  // registers-4x16B: 128 threads of 4 (512 threads an SM for 4 accesses a thread).
  p = gks::detail::plan_rmsnorm_bwd(4096, DType::kBFloat16, true, 1, limits);
  EXPECT_EQ(p.threads_per_row, 128);
  EXPECT_EQ(p.vecs_per_thread, 4);
  EXPECT_EQ(p.max_blocks, 400);
  // Up to 2048 accesses in registers (16384 bf16 columns); then looped, 512 threads.
  p = gks::detail::plan_rmsnorm_bwd(16384, DType::kBFloat16, true, -1, limits);
  EXPECT_EQ(p.kind, RowPlan::Kind::kRegisters);
  EXPECT_EQ(p.threads_per_row, 1024);
  EXPECT_EQ(p.max_blocks, 100);
  p = gks::detail::plan_rmsnorm_bwd(16392, DType::kBFloat16, true, -1, limits);
  EXPECT_EQ(p.kind, RowPlan::Kind::kLooped);
  EXPECT_EQ(p.threads_per_row, 512);
  EXPECT_EQ(p.max_blocks, 200);
  p = gks::detail::plan_rmsnorm_bwd(4097, DType::kFloat32, false, -1, limits);  // one element an access
  EXPECT_EQ(p.kind, RowPlan::Kind::kLooped);
  EXPECT_EQ(p.vec, 1);
  p = gks::detail::plan_rmsnorm_bwd(64, DType::kFloat32, true, 2, limits);  // looped forced
  EXPECT_EQ(p.kind, RowPlan::Kind::kLooped);
}

TEST(RmsNormBwdPlan, EveryPlanHasAKernel) {
  gks::detail::RowPlan none;
  none.vec = 8;
  none.threads_per_row = 1024;
  none.vecs_per_thread = 4;  // 1024 threads of 4 accesses: not a shape rmsnorm_bwd compiles
  EXPECT_FALSE(gks::detail::rmsnorm_bwd_plan_has_kernel(none, DType::kBFloat16));
  none.vecs_per_thread = 2;
  EXPECT_TRUE(gks::detail::rmsnorm_bwd_plan_has_kernel(none, DType::kBFloat16));
  for (int64_t cols = 1; cols <= 70000; cols += cols < 2100 ? 1 : 37) {
    for (auto dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      for (bool aligned : {true, false}) {
        for (int config = -1; config < int(std::size(gks::kRmsNormBwdConfigs)); ++config) {
          const auto p = gks::detail::plan_rmsnorm_bwd(cols, dtype, aligned, config);
          ASSERT_TRUE(gks::detail::rmsnorm_bwd_plan_has_kernel(p, dtype)) << cols << " " << config;
          ASSERT_GT(p.max_blocks, 0) << cols << " " << config;
        }
      }
    }
  }
}

// ---- rmsnorm_quant / fused_add_rmsnorm_quant ----

gks::RmsNormQuantArgs norm_quant_args(void* p, bool group) {
  gks::RmsNormQuantArgs a;
  a.x = gks::TensorRef::make(p, DType::kBFloat16, {4, 256}, kGpu);
  a.weight = gks::TensorRef::make(gks_test::fake_address(2), DType::kBFloat16, {256}, kGpu);
  a.q = gks::TensorRef::make(gks_test::fake_address(3), DType::kFloat8E4M3, {4, 256}, kGpu);
  a.scale = gks::TensorRef::make(gks_test::fake_address(4), DType::kFloat32, {4, group ? 2 : 1}, kGpu);
  a.granularity = group ? gks::Fp8Granularity::kGroup : gks::Fp8Granularity::kToken;
  return a;
}

TEST(RmsNormQuant, RejectsBadOptions) {
  alignas(16) char buf[64];
  auto a = norm_quant_args(buf, true);
  a.q.dtype = DType::kFloat16;
  expect_error([&] { gks::rmsnorm_quant(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "gks.rmsnorm_quant: argument 'q' must be int8 or float8_e4m3fn, got float16");
  a = norm_quant_args(buf, true);
  a.q.dtype = DType::kInt8;
  expect_error([&] { gks::rmsnorm_quant(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'granularity' must be 'token' for int8 output, got 'group'");
  a = norm_quant_args(buf, true);
  a.granularity = gks::Fp8Granularity::kBlock;
  expect_error([&] { gks::rmsnorm_quant(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'granularity' must be 'token' or 'group', got 'block'");
  a = norm_quant_args(buf, true);
  a.x = gks::TensorRef::make(buf, DType::kBFloat16, {4, 200}, kGpu);
  a.q = gks::TensorRef::make(gks_test::fake_address(3), DType::kFloat8E4M3, {4, 200}, kGpu);
  a.weight = gks::TensorRef::make(gks_test::fake_address(2), DType::kBFloat16, {200}, kGpu);
  expect_error([&] { gks::rmsnorm_quant(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'x' must have a last dim that is a multiple of 128 for granularity 'group', got [4, 200]");
  a = norm_quant_args(buf, true);
  a.scale.shape[1] = 1;
  expect_error([&] { gks::rmsnorm_quant(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'scale' must have shape [4, 2] for granularity 'group', got [4, 1]");
  a = norm_quant_args(buf, false);
  a.weight.shape[0] = 128;
  expect_error([&] { gks::rmsnorm_quant(a, nullptr); }, ErrorKind::kInvalidArgument, "argument 'weight'");
  a = norm_quant_args(buf, false);
  a.eps = -1.f;
  expect_error([&] { gks::rmsnorm_quant(a, nullptr); }, ErrorKind::kInvalidArgument, "argument 'eps'");
}

TEST(RmsNormQuant, FusedAddChecksTheResidual) {
  alignas(16) char buf[64];
  auto a = norm_quant_args(buf, false);
  a.residual = gks::TensorRef::make(gks_test::fake_address(5), DType::kBFloat16, {4, 256}, kGpu);
  a.residual_out = gks::TensorRef::make(gks_test::fake_address(6), DType::kBFloat16, {4, 256}, kGpu);
  auto b = a;
  b.residual.dtype = DType::kFloat32;
  expect_error([&] { gks::fused_add_rmsnorm_quant(b, nullptr); }, ErrorKind::kUnsupportedDtype,
               "gks.fused_add_rmsnorm_quant: argument 'residual' must have the dtype of 'x'");
  b = a;
  b.residual_out.shape[0] = 3;
  expect_error([&] { gks::fused_add_rmsnorm_quant(b, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'residual_out' must have the shape of 'x'");
  b = a;
  b.q.data = b.residual_out.data;
  expect_error([&] { gks::fused_add_rmsnorm_quant(b, nullptr); }, ErrorKind::kInvalidArgument, "'q'");
  // Valid and empty: returns before touching the device (this machine may have none).
  b = a;
  b.x.shape[0] = b.q.shape[0] = b.scale.shape[0] = b.residual.shape[0] = b.residual_out.shape[0] = 0;
  EXPECT_NO_THROW(gks::fused_add_rmsnorm_quant(b, nullptr));
}

TEST(RmsNormQuant, RefusesRowsPastTheRegisters) {
  alignas(16) char buf[64];
  auto a = norm_quant_args(buf, false);
  a.x = gks::TensorRef::make(buf, DType::kBFloat16, {4, 65544}, kGpu);
  a.weight = gks::TensorRef::make(gks_test::fake_address(2), DType::kBFloat16, {65544}, kGpu);
  a.q = gks::TensorRef::make(gks_test::fake_address(3), DType::kFloat8E4M3, {4, 65544}, kGpu);
  expect_error([&] { gks::rmsnorm_quant(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'x' has rows of 65544 elements; the CUDA kernel holds a row in registers, at most 65536");
}

TEST(RmsNormQuantPlan, EveryPlanHasAKernel) {
  std::vector<int64_t> lengths;
  for (int64_t cols = 1; cols <= 70000; cols += cols < 2100 ? 1 : 37) lengths.push_back(cols);
  for (int64_t cols = 128; cols <= 70000; cols += 128) lengths.push_back(cols);  // whole groups
  for (int64_t cols : lengths) {
    for (auto dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      for (bool aligned : {true, false}) {
        for (bool group : {false, true}) {
          if (group && cols % 128 != 0) continue;
          gks::detail::RowPlan plan;
          if (!gks::detail::plan_rmsnorm_quant(cols, dtype, aligned, group, plan)) {
            EXPECT_GT(cols, 1024 * 8 * plan.vec) << cols;
            continue;
          }
          ASSERT_TRUE(gks::detail::rmsnorm_quant_plan_has_kernel(plan, dtype, group))
              << cols << " " << aligned << " " << group;
        }
      }
    }
  }
}

}  // namespace
