// SPDX-License-Identifier: Apache-2.0
// Host-side logic of gks::softmax: validation (which must throw before anything touches a
// GPU) and the softmax planner, whose rows the fused softmax_rmsnorm shares (fused: its
// plans). Runs on a machine without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <tuple>

#include "gks/gks.h"
#include "softmax/plan.h"

#include "test_util.h"

namespace {

using gks_test::expect_error;
using gks_test::kCpu;
using gks_test::kGpu;

using gks::DType;
using gks::ErrorKind;
using Plan = gks::detail::RowPlan;

// The softmax planner for softmax's rows or (fused) softmax_rmsnorm's, config an index into
// the op's table.
Plan plan(int64_t cols, DType dtype, bool aligned, int config = -1, bool fused = false,
          bool clusters = false, int64_t smem = 0) {
  const gks::SoftmaxConfig* c =
      config < 0 ? nullptr : fused ? &gks::kSoftmaxRmsNormConfigs[config] : &gks::kSoftmaxConfigs[config];
  return gks::detail::plan_softmax_rows(cols, dtype, aligned, c, fused, clusters, smem);
}

gks::SoftmaxArgs softmax_args(void* p, DType dtype = DType::kFloat16) {
  gks::SoftmaxArgs a;
  a.x = gks::TensorRef::make(p, dtype, {4, 8}, kGpu);
  a.y = gks::TensorRef::make(gks_test::fake_address(2), dtype, {4, 8}, kGpu);
  return a;
}


// ---------------------------------------------------------------- softmax validation

TEST(Softmax, RejectsCpuTensor) {
  char buf[64];
  auto a = softmax_args(buf);
  a.x.device = a.y.device = kCpu;
  expect_error([&] { gks::softmax(a, nullptr); }, ErrorKind::kInvalidArgument,
               "gks.softmax: argument 'x' must be a CUDA tensor, got a tensor on cpu");
}

TEST(Softmax, RejectsIntegerInput) {
  char buf[64];
  auto a = softmax_args(buf);
  a.x.dtype = a.y.dtype = DType::kInt32;
  expect_error([&] { gks::softmax(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'x' must be float32, float16 or bfloat16, got int32");
}

TEST(Softmax, RejectsOutputOfOtherDtype) {
  char buf[64];
  auto a = softmax_args(buf);
  a.y.dtype = DType::kFloat32;
  expect_error([&] { gks::softmax(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'y' must have the dtype of 'x' (float16), got float32");
}

TEST(Softmax, RejectsOutputOfOtherShape) {
  char buf[64];
  auto a = softmax_args(buf);
  a.y.shape[1] = 9;
  expect_error([&] { gks::softmax(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'y' must have the shape of 'x' [4, 8], got [4, 9]");
}

TEST(Softmax, RejectsOutputOnOtherDevice) {
  char buf[64];
  auto a = softmax_args(buf);
  a.y.device.index = 1;
  expect_error([&] { gks::softmax(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'y' must be on the device of 'x' (cuda:0), got cuda:1");
}

TEST(Softmax, RejectsStridedLastDim) {
  char buf[64];
  auto a = softmax_args(buf);
  a.x = gks::TensorRef::make(buf, DType::kFloat16, {4, 8}, kGpu, {1, 4});
  expect_error([&] { gks::softmax(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'x' must be contiguous in its last dim");
  a = softmax_args(buf);
  a.y = gks::TensorRef::make(buf, DType::kFloat16, {4, 8}, kGpu, {16, 2});
  expect_error([&] { gks::softmax(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'y' must be contiguous in its last dim");
}

TEST(Softmax, RejectsScalar) {
  char buf[64];
  auto a = softmax_args(buf);
  a.x.ndim = a.y.ndim = 0;
  expect_error([&] { gks::softmax(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'x' must have 1 to 8 dims, got 0");
}

TEST(Softmax, RejectsTooManyRows) {
  char buf[64];
  auto a = softmax_args(buf);
  const int64_t rows = int64_t(1) << 31;
  a.x = gks::TensorRef::make(buf, DType::kFloat16, {rows, 8}, kGpu);
  a.y = gks::TensorRef::make(buf, DType::kFloat16, {rows, 8}, kGpu);
  expect_error([&] { gks::softmax(a, nullptr); }, ErrorKind::kInvalidArgument,
               "at most 2^31 - 1 rows are supported");
}

TEST(Softmax, RejectsUnknownConfig) {
  char buf[64];
  auto a = softmax_args(buf);
  a.config = 4;
  expect_error([&] { gks::softmax(a, nullptr); }, ErrorKind::kInvalidArgument,
               "gks.softmax: argument 'config' must be -1 (heuristic), 0 (registers), 1 (looped), 2 "
               "(registers-wide) or 3 (looped-smem), got 4");
}

TEST(Softmax, EmptyTensorsReturnWithoutTouchingTheGpu) {
  // No GPU is needed: an empty tensor returns before any CUDA call (a launch here would
  // throw, as no device is present in CI, or launch a zero-size grid on one).
  auto run = [](std::initializer_list<int64_t> shape) {
    gks::SoftmaxArgs a;
    a.x = gks::TensorRef::make(nullptr, DType::kFloat32, shape, kGpu);
    a.y = gks::TensorRef::make(nullptr, DType::kFloat32, shape, kGpu);
    EXPECT_NO_THROW(gks::softmax(a, nullptr)) << a.x.shape_string();
  };
  run({0, 64});
  run({3, 0});
  run({0});
  run({2, 0, 5});
}

// ---------------------------------------------------------------- fused validation

TEST(SoftmaxPlan, WarpPerRowForShortRows) {
  const auto p = plan(512, DType::kFloat32, true);
  EXPECT_EQ(p.kind, Plan::Kind::kRegisters);
  EXPECT_EQ(p.vec, 4);
  EXPECT_EQ(p.threads_per_row, 32);
  EXPECT_EQ(p.vecs_per_thread, 4);  // 512 / 4 = 128 accesses = 32 lanes x 4
  EXPECT_EQ(p.rows_per_block, 4);
  const auto q = plan(31, DType::kBFloat16, true);
  EXPECT_EQ(q.threads_per_row, 32);
  EXPECT_EQ(q.vecs_per_thread, 1);
  // The fused op holds 4 accesses a thread of aligned 16-bit rows (registers-wide): 1024
  // bf16 = 128 accesses = 32 lanes x 4; 2 (its base) for registers.
  const auto f = plan(1024, DType::kBFloat16, true, -1, /*fused=*/true);
  EXPECT_EQ(f.threads_per_row, 32);
  EXPECT_EQ(f.vecs_per_thread, 4);
  EXPECT_EQ(f.rows_per_block, 4);
  const auto g = plan(1024, DType::kBFloat16, true, 0, /*fused=*/true);
  EXPECT_EQ(g.threads_per_row, 64);
  EXPECT_EQ(g.vecs_per_thread, 2);
  EXPECT_EQ(g.rows_per_block, 1);
}

TEST(SoftmaxPlan, BenchShapesReadTheRowOnce) {
  // N = 1024, 4096 and 32768 in every dtype, both ops, stay in registers: one read of x,
  // one write of y, with 4 accesses a thread (fused: 16 values, so 4 of fp32; 16-bit ones
  // take registers-wide, 4 accesses) up to 1024-thread blocks. The one exception: the fused
  // op loops over 16-bit rows of 32768 (measured faster, see plan_softmax).
  for (bool fused : {false, true}) {
    for (int64_t cols : {1024, 4096, 32768}) {
      for (auto dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
        const auto p = plan(cols, dtype, true, -1, fused);
        if (fused && cols == 32768 && dtype != DType::kFloat32) {
          EXPECT_EQ(p.kind, Plan::Kind::kLooped);
          continue;
        }
        EXPECT_EQ(p.kind, Plan::Kind::kRegisters) << cols;
        EXPECT_EQ(p.vec * gks::dtype_size(dtype), 16) << cols;
        if (cols < 32768) EXPECT_EQ(p.vecs_per_thread, 4) << cols;
      }
    }
  }
  const auto p = plan(32768, DType::kFloat32, true);
  EXPECT_EQ(p.threads_per_row, 1024);
  EXPECT_EQ(p.vecs_per_thread, 8);
  const auto q = plan(32768, DType::kBFloat16, true);
  EXPECT_EQ(q.threads_per_row, 1024);
  EXPECT_EQ(q.vecs_per_thread, 4);
  const auto r = plan(4096, DType::kFloat32, true);
  EXPECT_EQ(r.threads_per_row, 256);
  const auto f = plan(32768, DType::kBFloat16, true, 0, /*fused=*/true);
  EXPECT_EQ(f.threads_per_row, 1024);
  EXPECT_EQ(f.vecs_per_thread, 4);
}

TEST(SoftmaxPlan, RegisterPlansCoverTheRowWithinTheRegisterBudget) {
  for (bool fused : {false, true}) {
    for (auto dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      for (bool aligned : {true, false}) {
        for (int64_t cols = 1; cols <= 70000; cols += cols < 300 ? 1 : 97) {
          const auto p = plan(cols, dtype, aligned, -1, fused);
          if (p.kind == Plan::Kind::kLooped) {
            EXPECT_EQ(p.threads_per_row % 32, 0);
            continue;
          }
          const int64_t covered = int64_t(p.threads_per_row) * p.vecs_per_thread * p.vec;
          ASSERT_GE(covered, cols) << cols;
          EXPECT_LE(p.vec * p.vecs_per_thread, aligned ? 32 : 8) << cols;
          EXPECT_LE(p.threads_per_row, aligned || dtype == DType::kFloat32 ? 1024 : 512) << cols;
          // More than the base accesses a thread only in 1024-thread blocks (the fused op's
          // base for whole aligned 16-bit rows is registers-wide's 4).
          const bool wide = fused && dtype != DType::kFloat32 && cols % p.vec == 0;
          const int base = !fused || wide ? 4 : 16 / p.vec;
          if (aligned && p.vecs_per_thread > base) EXPECT_EQ(p.threads_per_row, 1024);
          // Fused fp32 rows that are not a multiple of 4 hold at most 4 accesses a thread.
          if (fused && aligned && dtype == DType::kFloat32 && cols % 4 != 0)
            EXPECT_LE(p.vecs_per_thread, 4) << cols;
          EXPECT_EQ(p.threads_per_row & (p.threads_per_row - 1), 0);
          EXPECT_EQ(p.vecs_per_thread & (p.vecs_per_thread - 1), 0);
          EXPECT_EQ(p.rows_per_block, p.threads_per_row == 32 ? 4 : 1);
          // The smallest such plan: half the threads (or half the accesses) would not do.
          if (p.threads_per_row > 64) EXPECT_LT(covered / 2, cols) << cols;
        }
      }
    }
  }
}

TEST(SoftmaxPlan, LongOrUnalignedRowsLoop) {
  for (int64_t cols : {32769, 65536, 262144, 1 << 22}) {
    for (auto dtype : {DType::kFloat32, DType::kBFloat16}) {
      for (bool fused : {false, true}) {
        const auto p = plan(cols, dtype, true, -1, fused);
        EXPECT_EQ(p.kind, Plan::Kind::kLooped) << cols;
      }
    }
  }
  const auto q = plan(4096, DType::kFloat16, false);
  EXPECT_EQ(q.vec, 1);
  EXPECT_EQ(q.kind, Plan::Kind::kRegisters);
  EXPECT_EQ(plan(4097, DType::kFloat16, false).kind, Plan::Kind::kLooped);
  const auto r = plan(8192, DType::kFloat32, false);
  EXPECT_EQ(r.vec, 1);
  EXPECT_EQ(r.kind, Plan::Kind::kRegisters);
  EXPECT_EQ(plan(8193, DType::kFloat32, false).kind, Plan::Kind::kLooped);
}

TEST(SoftmaxPlan, ConfigOneForcesTheLoopedKernel) {
  for (int64_t cols : {1, 1000, 4096}) {
    EXPECT_EQ(plan(cols, DType::kFloat16, true, 1).kind,
              Plan::Kind::kLooped);
  }
}

TEST(SoftmaxPlan, StagedTakesTheLongestFusedRowsWhereSharedMemoryHoldsThem) {
  using gks::detail::staged_smem_bytes;
  constexpr int64_t kH100 = 227 << 10, kA100 = 163 << 10, kSm86 = 99 << 10;
  for (auto dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    const bool fp32 = dtype == DType::kFloat32;
    for (int64_t cols : {16392, 20000, 32768}) {
      const auto p = plan(cols, dtype, true, -1, /*fused=*/true, true, kH100);
      ASSERT_EQ(p.kind, Plan::Kind::kStaged) << cols;
      EXPECT_EQ(p.threads_per_row, 1024);
      EXPECT_EQ(p.vecs_per_thread * p.vec, 32);  // the whole row of 32768 in one block
      // The row's slots and the weight's first 64 KiB: fp32 128 + 64 KiB (half the weight),
      // 16-bit two rows' 2 x 64 KiB + 64 KiB (all of it).
      EXPECT_EQ(p.weight_slots, 4);
      EXPECT_EQ(p.row_buffers, fp32 ? 1 : 2);
      EXPECT_EQ(staged_smem_bytes(p), 192 << 10);
      const auto forced = plan(cols, dtype, true, 4, true, true, kH100);
      EXPECT_EQ(forced.weight_slots, p.weight_slots);
      EXPECT_EQ(forced.row_buffers, p.row_buffers);
    }
    // Less shared memory: one row buffer; the row without the weight where both do not fit
    // (fp32 on an A100, 16-bit below 128 KiB); fp32 rows not at all below their 128 KiB.
    const auto a = plan(32768, dtype, true, 4, true, true, kA100);
    EXPECT_EQ(a.kind, Plan::Kind::kStaged);
    EXPECT_EQ(a.weight_slots, fp32 ? 0 : 4);
    EXPECT_EQ(a.row_buffers, 1);
    EXPECT_EQ(staged_smem_bytes(a), 128 << 10);
    const auto c = plan(32768, dtype, true, 4, true, true, kSm86);
    EXPECT_EQ(c.kind == Plan::Kind::kStaged, !fp32);
    if (!fp32) {
      EXPECT_EQ(c.weight_slots, 0);
      EXPECT_EQ(c.row_buffers, 1);
      EXPECT_EQ(staged_smem_bytes(c), 64 << 10);
    }
    // Not staged: unfused, unaligned, ragged or too long rows, no shared memory given; the
    // heuristic's plan instead, also for config 4. (The heuristic leaves rows of 16384 and
    // less to the registers kernel; config 4 stages them too.)
    for (const auto& q : {plan(32768, dtype, true, 4, false, true, kH100),
                          plan(32768, dtype, false, 4, true, true, kH100),
                          plan(32766, dtype, true, -1, true, true, kH100),
                          plan(32776, dtype, true, 4, true, true, kH100),
                          plan(16384, dtype, true, -1, true, true, kH100),
                          plan(32768, dtype, true, -1, true, true, 0)})
      EXPECT_NE(q.kind, Plan::Kind::kStaged);
    EXPECT_EQ(plan(1000, dtype, true, 4, true, true, kH100).kind, Plan::Kind::kStaged);
    const auto d = plan(32776, dtype, true, 4, true, true, kH100);
    const auto e = plan(32776, dtype, true, -1, true, true, kH100);
    EXPECT_EQ(d.kind, e.kind);
    EXPECT_EQ(d.threads_per_row, e.threads_per_row);
  }
}

TEST(SoftmaxPlan, ConfigThreeSplitsLongFusedRowsOverACluster) {
  // Fused rows of 32768: 256-thread CTAs of 16 values, 8 to a cluster, in every dtype.
  for (auto dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    const auto p = plan(32768, dtype, true, 3, /*fused=*/true, /*clusters=*/true);
    EXPECT_EQ(p.kind, Plan::Kind::kRegisters);
    EXPECT_EQ(p.threads_per_row, 256);
    EXPECT_EQ(p.vecs_per_thread * p.vec, 16);
    EXPECT_EQ(p.cluster, 8);
  }
  // The fewest CTAs that hold the row: bf16 8192 = 1024 accesses = 2 CTAs of 256 x 2.
  EXPECT_EQ(plan(8192, DType::kBFloat16, true, 3, true, true).cluster, 2);
  EXPECT_EQ(plan(8200, DType::kBFloat16, true, 3, true, true).cluster, 4);
  // No cluster where one CTA holds the row, past 8 CTAs, without cluster support, for
  // unaligned or ragged rows, or for softmax: config 0's plan instead.
  for (const auto& p : {plan(4096, DType::kBFloat16, true, 3, true, true),
                        plan(32776, DType::kBFloat16, true, 3, true, true),
                        plan(32768, DType::kBFloat16, true, 3, true, false),
                        plan(32768, DType::kBFloat16, false, 3, true, true),
                        plan(32766, DType::kBFloat16, true, 3, true, true),
                        plan(32768, DType::kBFloat16, true, 3, false, true)})
    EXPECT_EQ(p.cluster, 1);
  const auto a = plan(4096, DType::kBFloat16, true, 3, true, true);
  const auto b = plan(4096, DType::kBFloat16, true, 0, true, true);
  EXPECT_EQ(a.threads_per_row, b.threads_per_row);
  EXPECT_EQ(a.vecs_per_thread, b.vecs_per_thread);
}

TEST(SoftmaxPlan, ConfigTwoHoldsTwiceTheAccessesWhereTheyFit) {
  // Fused 16-bit rows of 4096: 512 accesses, 128 threads x 4 (the heuristic: 256 x 2).
  const auto f = plan(4096, DType::kBFloat16, true, 2, /*fused=*/true);
  EXPECT_EQ(f.threads_per_row, 128);
  EXPECT_EQ(f.vecs_per_thread, 4);
  // fp32 rows of 4096: 1024 accesses, 128 x 8 (the heuristic: 256 x 4), both ops.
  for (bool fused : {false, true}) {
    const auto p = plan(4096, DType::kFloat32, true, 2, fused);
    EXPECT_EQ(p.threads_per_row, 128);
    EXPECT_EQ(p.vecs_per_thread, 8);
  }
  // Unfused 16-bit rows already hold the most a thread may: unchanged.
  const auto u = plan(4096, DType::kFloat16, true, 2);
  const auto h = plan(4096, DType::kFloat16, true, -1);
  EXPECT_EQ(u.threads_per_row, h.threads_per_row);
  EXPECT_EQ(u.vecs_per_thread, h.vecs_per_thread);
  // Every row the heuristic holds in registers, config 2 holds too, covering it.
  for (bool fused : {false, true}) {
    for (auto dtype : {DType::kFloat32, DType::kFloat16}) {
      for (int64_t cols = 1; cols <= 40000; cols += cols < 300 ? 1 : 97) {
        const auto p = plan(cols, dtype, true, 2, fused);
        if (plan(cols, dtype, true, -1, fused).kind == Plan::Kind::kRegisters)
          ASSERT_EQ(p.kind, Plan::Kind::kRegisters) << cols;
        if (p.kind == Plan::Kind::kRegisters)
          EXPECT_GE(int64_t(p.threads_per_row) * p.vecs_per_thread * p.vec, cols) << cols;
      }
    }
  }
}

TEST(SoftmaxPlan, EveryPlanHasAKernel) {
  for (int64_t cols = 1; cols <= 70000; cols += cols < 2100 ? 1 : 37) {
    for (auto dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      for (bool aligned : {true, false}) {
        for (int config = -1; config < int(std::size(gks::kSoftmaxConfigs)); ++config) {
          const auto p = gks::detail::plan_softmax(cols, dtype, aligned, config, 227 << 10);
          ASSERT_TRUE(gks::detail::softmax_plan_has_kernel(p, dtype, cols)) << cols << " " << config;
        }
      }
    }
  }
}

int looped_smem_config() {
  for (int i = 0; i < int(std::size(gks::kSoftmaxConfigs)); ++i)
    if (gks::kSoftmaxConfigs[i].stage_row) return i;
  return -1;
}

TEST(SoftmaxPlan, LoopedSmemKeepsTheRowInSharedMemoryWhereItFits) {
  const int config = looped_smem_config();
  ASSERT_GE(config, 0);
  constexpr int64_t kSmem = 227 << 10;
  // bf16 rows of 50304 (98 KiB) and fp32 ones of 50304 (196 KiB) fit; 16-bit rows of 151936
  // (297 KiB) do not, and keep the plain looped walk.
  for (auto [dtype, cols, fits] : {std::tuple{DType::kBFloat16, int64_t(50304), true},
                                   std::tuple{DType::kFloat32, int64_t(50304), true},
                                   std::tuple{DType::kFloat16, int64_t(151936), false},
                                   std::tuple{DType::kFloat16, int64_t(64), true}}) {
    const auto p = gks::detail::plan_softmax(cols, dtype, true, config, kSmem);
    EXPECT_EQ(p.kind, Plan::Kind::kLooped) << cols;
    EXPECT_EQ(p.row_smem_bytes, fits ? cols * gks::dtype_size(dtype) : 0) << cols;
  }
  // Not 16-byte aligned, a ragged row, or no shared memory known: no staging.
  EXPECT_EQ(gks::detail::plan_softmax(50304, DType::kBFloat16, false, config, kSmem).row_smem_bytes, 0);
  EXPECT_EQ(gks::detail::plan_softmax(50301, DType::kBFloat16, true, config, kSmem).row_smem_bytes, 0);
  EXPECT_EQ(gks::detail::plan_softmax(50304, DType::kBFloat16, true, config, 0).row_smem_bytes, 0);
  // The heuristic stages the rows it walks in a loop (too long for registers) where they
  // fit, as looped-smem; the forced looped config never does.
  const auto heuristic = gks::detail::plan_softmax(50304, DType::kBFloat16, true, -1, kSmem);
  EXPECT_EQ(heuristic.kind, Plan::Kind::kLooped);
  EXPECT_EQ(heuristic.row_smem_bytes, 50304 * 2);
  EXPECT_EQ(gks::detail::plan_softmax(151936, DType::kBFloat16, true, -1, kSmem).row_smem_bytes, 0);
  EXPECT_EQ(gks::detail::plan_softmax(4096, DType::kBFloat16, true, -1, kSmem).kind, Plan::Kind::kRegisters);
  EXPECT_EQ(gks::detail::plan_softmax(50304, DType::kBFloat16, true, 1, kSmem).row_smem_bytes, 0);
}

}  // namespace
