// SPDX-License-Identifier: Apache-2.0
// Host-side logic of gks::quantize_int8 / gks::dequantize_int8 and gks::quantize_fp8 /
// gks::dequantize_fp8: validation (which throws before anything touches a GPU) and the
// launch plans.
#include <gtest/gtest.h>

#include <string>

#include "gks/gks.h"
#include "quantize/plan.h"

#include "test_util.h"

namespace {

using gks_test::expect_error;
using gks_test::kCpu;
using gks_test::kGpu;

gks::QuantizeInt8Args quantize_args(void* p) {
  gks::QuantizeInt8Args a;
  a.x = gks::TensorRef::make(p, gks::DType::kBFloat16, {2, 3, 64}, kGpu);
  a.q = gks::TensorRef::make(gks_test::fake_address(2), gks::DType::kInt8, {2, 3, 64}, kGpu);
  a.scale = gks::TensorRef::make(gks_test::fake_address(3), gks::DType::kFloat32, {2, 3, 1}, kGpu);
  return a;
}

gks::DequantizeInt8Args dequantize_args(void* p) {
  gks::DequantizeInt8Args a;
  a.q = gks::TensorRef::make(p, gks::DType::kInt8, {5, 64}, kGpu);
  a.scale = gks::TensorRef::make(gks_test::fake_address(2), gks::DType::kFloat32, {5, 1}, kGpu);
  a.out = gks::TensorRef::make(gks_test::fake_address(3), gks::DType::kFloat16, {5, 64}, kGpu);
  return a;
}

using gks::ErrorKind;

// ---- quantize_int8 validation ----

TEST(QuantizeInt8, RejectsCpuInput) {
  alignas(16) char buf[64];
  auto a = quantize_args(buf);
  a.x.device = a.q.device = a.scale.device = kCpu;
  expect_error([&] { gks::quantize_int8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "gks.quantize_int8: argument 'x' must be a CUDA tensor, got a tensor on cpu");
}

TEST(QuantizeInt8, RejectsIntegerInput) {
  alignas(16) char buf[64];
  auto a = quantize_args(buf);
  a.x.dtype = gks::DType::kInt32;
  expect_error([&] { gks::quantize_int8(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'x' must be float32, float16 or bfloat16, got int32");
}

TEST(QuantizeInt8, RejectsOutputsOnOtherDevices) {
  alignas(16) char buf[64];
  auto a = quantize_args(buf);
  a.q.device.index = 1;
  expect_error([&] { gks::quantize_int8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'q' must be on the device of 'x' (cuda:0), got cuda:1");
  a = quantize_args(buf);
  a.scale.device = kCpu;
  expect_error([&] { gks::quantize_int8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'scale' must be on the device of 'x' (cuda:0), got cpu");
}

TEST(QuantizeInt8, RejectsWrongOutputDtypes) {
  alignas(16) char buf[64];
  auto a = quantize_args(buf);
  a.q.dtype = gks::DType::kFloat16;
  expect_error([&] { gks::quantize_int8(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'q' must be int8, got float16");
  a = quantize_args(buf);
  a.scale.dtype = gks::DType::kBFloat16;
  expect_error([&] { gks::quantize_int8(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'scale' must be float32, got bfloat16");
}

TEST(QuantizeInt8, RejectsNonContiguousLastDim) {
  alignas(16) char buf[64];
  auto a = quantize_args(buf);
  a.x = gks::TensorRef::make(buf, gks::DType::kBFloat16, {2, 3, 64}, kGpu, {384, 128, 2});
  expect_error([&] { gks::quantize_int8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'x' must be contiguous in its last dim (stride 1), got stride 2");
  a = quantize_args(buf);
  a.q = gks::TensorRef::make(buf, gks::DType::kInt8, {2, 3, 64}, kGpu, {1, 2, 6});
  expect_error([&] { gks::quantize_int8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'q' must be contiguous in its last dim");
}

TEST(QuantizeInt8, RejectsWrongShapes) {
  alignas(16) char buf[64];
  auto a = quantize_args(buf);
  a.q.shape[2] = 63;
  expect_error([&] { gks::quantize_int8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'q' must have the shape of 'x' [2, 3, 64], got [2, 3, 63]");
  a = quantize_args(buf);
  a.scale = gks::TensorRef::make(buf, gks::DType::kFloat32, {2, 3}, kGpu);
  expect_error([&] { gks::quantize_int8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'scale' must have shape [2, 3, 1] ('x' with its last dim 1), got [2, 3]");
  a = quantize_args(buf);
  a.scale.shape[2] = 64;
  expect_error([&] { gks::quantize_int8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'scale' must have shape [2, 3, 1]");
  a = quantize_args(buf);
  a.scale.shape[0] = 1;
  expect_error([&] { gks::quantize_int8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "got [1, 3, 1]");
  a = quantize_args(buf);
  a.scale.ndim = 0;
  expect_error([&] { gks::quantize_int8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'scale' must have shape [2, 3, 1]");
}

TEST(QuantizeInt8, RejectsScalarInput) {
  alignas(16) char buf[64];
  auto a = quantize_args(buf);
  a.x.ndim = a.q.ndim = 0;
  expect_error([&] { gks::quantize_int8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'x' must have 1 to 8 dims, got 0");
}

TEST(QuantizeInt8, NoRowsReturnsWithoutLaunching) {
  // Valid and empty: returns before touching the device (this machine may have none).
  auto a = quantize_args(nullptr);
  a.x.shape[0] = a.q.shape[0] = a.scale.shape[0] = 0;
  EXPECT_NO_THROW(gks::quantize_int8(a, nullptr));
}

// ---- dequantize_int8 validation ----

TEST(DequantizeInt8, RejectsCpuInput) {
  alignas(16) char buf[64];
  auto a = dequantize_args(buf);
  a.q.device = kCpu;
  expect_error([&] { gks::dequantize_int8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "gks.dequantize_int8: argument 'q' must be a CUDA tensor");
}

TEST(DequantizeInt8, RejectsWrongDtypes) {
  alignas(16) char buf[64];
  auto a = dequantize_args(buf);
  a.q.dtype = gks::DType::kFloat32;
  expect_error([&] { gks::dequantize_int8(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'q' must be int8, got float32");
  a = dequantize_args(buf);
  a.scale.dtype = gks::DType::kFloat16;
  expect_error([&] { gks::dequantize_int8(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'scale' must be float32, got float16");
  a = dequantize_args(buf);
  a.out.dtype = gks::DType::kInt8;
  expect_error([&] { gks::dequantize_int8(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'out' must be float32, float16 or bfloat16, got int8");
}

TEST(DequantizeInt8, RejectsWrongShapes) {
  alignas(16) char buf[64];
  auto a = dequantize_args(buf);
  a.scale.shape[0] = 4;
  expect_error([&] { gks::dequantize_int8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'scale' must have shape [5, 1] ('q' with its last dim 1), got [4, 1]");
  a = dequantize_args(buf);
  a.scale = gks::TensorRef::make(buf, gks::DType::kFloat32, {5}, kGpu);
  expect_error([&] { gks::dequantize_int8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'scale' must have shape [5, 1]");
  a = dequantize_args(buf);
  a.out.shape[1] = 32;
  expect_error([&] { gks::dequantize_int8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'out' must have the shape of 'q' [5, 64], got [5, 32]");
}

TEST(DequantizeInt8, RejectsOtherDeviceAndNonContiguousLastDim) {
  alignas(16) char buf[64];
  auto a = dequantize_args(buf);
  a.out.device.index = 2;
  expect_error([&] { gks::dequantize_int8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'out' must be on the device of 'q' (cuda:0), got cuda:2");
  a = dequantize_args(buf);
  a.out = gks::TensorRef::make(buf, gks::DType::kFloat16, {5, 64}, kGpu, {1, 5});
  expect_error([&] { gks::dequantize_int8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'out' must be contiguous in its last dim (stride 1), got stride 5");
}

TEST(DequantizeInt8, EmptyReturnsWithoutLaunching) {
  auto a = dequantize_args(nullptr);
  a.q.shape[1] = a.out.shape[1] = 0;
  EXPECT_NO_THROW(gks::dequantize_int8(a, nullptr));
  a = dequantize_args(nullptr);
  a.q.shape[0] = a.scale.shape[0] = a.out.shape[0] = 0;
  EXPECT_NO_THROW(gks::dequantize_int8(a, nullptr));
}

// ---- plans ----

using QPlan = gks::detail::RowPlan;

TEST(QuantizeInt8Plan, WarpPerRowForShortRows) {
  const auto p = gks::detail::plan_quantize_int8(1024, gks::DType::kFloat32, true);
  EXPECT_EQ(p.kind, QPlan::Kind::kRegisters);
  EXPECT_EQ(p.vec, 16);
  EXPECT_EQ(p.threads_per_row, 32);
  EXPECT_EQ(p.rows_per_block, 4);
  EXPECT_EQ(p.vecs_per_thread, 2);  // 1024 / 16 = 64 chunks = 32 lanes x 2
  const auto tiny = gks::detail::plan_quantize_int8(0, gks::DType::kFloat16, true);
  EXPECT_EQ(tiny.threads_per_row, 32);
  EXPECT_EQ(tiny.vecs_per_thread, 1);
}

TEST(QuantizeInt8Plan, RegistersCoverTheRowUpTo32K) {
  for (int64_t cols : {1, 31, 1000, 2049, 4096, 8191, 32768}) {
    for (auto dtype : {gks::DType::kFloat32, gks::DType::kFloat16, gks::DType::kBFloat16}) {
      const auto p = gks::detail::plan_quantize_int8(cols, dtype, true);
      ASSERT_EQ(p.kind, QPlan::Kind::kRegisters) << cols;
      EXPECT_GE(int64_t(p.threads_per_row) * p.vecs_per_thread * p.vec, cols) << cols;
      // At most 128 bytes of x per thread (32 registers).
      EXPECT_LE(p.vecs_per_thread * p.vec * gks::dtype_size(dtype), 128) << cols;
      EXPECT_EQ(p.rows_per_block, p.threads_per_row > 32 ? 1 : 4);
      EXPECT_LE(p.threads_per_row, 1024);
    }
  }
  // The bench shapes' rows: fp32 N=32768 is a 1024-thread block, fp16 N=4096 64 threads.
  EXPECT_EQ(gks::detail::plan_quantize_int8(32768, gks::DType::kFloat32, true).threads_per_row, 1024);
  EXPECT_EQ(gks::detail::plan_quantize_int8(4096, gks::DType::kFloat16, true).threads_per_row, 64);
}

TEST(QuantizeInt8Plan, LongOrUnalignedRows) {
  const auto p = gks::detail::plan_quantize_int8(262144, gks::DType::kFloat32, true);
  EXPECT_EQ(p.kind, QPlan::Kind::kLooped);
  EXPECT_EQ(p.threads_per_row, 512);
  const auto u = gks::detail::plan_quantize_int8(1000, gks::DType::kFloat16, false);
  EXPECT_EQ(u.vec, 1);
  EXPECT_EQ(u.kind, QPlan::Kind::kRegisters);
  EXPECT_GE(int64_t(u.threads_per_row) * u.vecs_per_thread, 1000);
  EXPECT_EQ(gks::detail::plan_quantize_int8(8193, gks::DType::kFloat16, false).kind,
            QPlan::Kind::kLooped);
}

TEST(DequantizeInt8Plan, BlocksOf256Threads) {
  for (int64_t cols : {1, 31, 1000, 1024, 4096, 32768, 262144}) {
    for (auto dtype : {gks::DType::kFloat32, gks::DType::kFloat16, gks::DType::kBFloat16}) {
      for (bool aligned : {true, false}) {
        const auto p = gks::detail::plan_dequantize_int8(cols, dtype, aligned);
        // A chunk is one 16-byte store of out when aligned.
        EXPECT_EQ(p.vec, aligned ? 16 / gks::dtype_size(dtype) : 1);
        EXPECT_EQ(p.threads_per_row * p.rows_per_block, 256) << cols;
        EXPECT_GE(p.threads_per_row, 32);
        EXPECT_TRUE(p.vecs_per_thread == 1 || p.vecs_per_thread == 2);
        if (cols / p.vec > 32) EXPECT_EQ(p.vecs_per_thread, 2) << cols;
      }
    }
  }
  const auto p = gks::detail::plan_dequantize_int8(1024, gks::DType::kFloat16, true);  // 128 chunks
  EXPECT_EQ(p.vec, 8);
  EXPECT_EQ(p.threads_per_row, 64);
  EXPECT_EQ(p.vecs_per_thread, 2);
  EXPECT_EQ(p.rows_per_block, 4);
  const auto wide = gks::detail::plan_dequantize_int8(4096, gks::DType::kFloat32, true);  // 1024
  EXPECT_EQ(wide.vecs_per_thread, 2);
  EXPECT_EQ(wide.threads_per_row, 256);
}

TEST(QuantizePlan, EveryPlanHasAKernel) {
  for (int64_t cols = 0; cols <= 70000; cols += cols < 2100 ? 1 : 37) {
    for (auto dtype : {gks::DType::kFloat32, gks::DType::kFloat16, gks::DType::kBFloat16}) {
      for (bool aligned : {true, false}) {
        ASSERT_TRUE(gks::detail::quantize_int8_plan_has_kernel(
            gks::detail::plan_quantize_int8(cols, dtype, aligned), dtype)) << cols;
        ASSERT_TRUE(gks::detail::dequantize_int8_plan_has_kernel(
            gks::detail::plan_dequantize_int8(cols, dtype, aligned), dtype)) << cols;
      }
    }
  }
}

// ---- quantize_fp8 / dequantize_fp8 ----

gks::QuantizeFp8Args fp8_args(void* p, gks::Fp8Granularity g) {
  gks::QuantizeFp8Args a;
  a.x = gks::TensorRef::make(p, gks::DType::kBFloat16, {130, 300}, kGpu);
  a.q = gks::TensorRef::make(gks_test::fake_address(2), gks::DType::kFloat8E4M3, {130, 300}, kGpu);
  const auto scale = [&](std::initializer_list<int64_t> shape) {
    return gks::TensorRef::make(gks_test::fake_address(3), gks::DType::kFloat32, shape, kGpu);
  };
  switch (g) {
    case gks::Fp8Granularity::kTensor: a.scale = scale({1}); break;
    case gks::Fp8Granularity::kToken: a.scale = scale({130, 1}); break;
    case gks::Fp8Granularity::kGroup: a.scale = scale({130, 3}); break;
    case gks::Fp8Granularity::kBlock: a.scale = scale({2, 3}); break;
  }
  a.granularity = g;
  return a;
}

constexpr gks::Fp8Granularity kFp8Granularities[] = {gks::Fp8Granularity::kTensor, gks::Fp8Granularity::kToken,
                                                     gks::Fp8Granularity::kGroup, gks::Fp8Granularity::kBlock};

TEST(QuantizeFp8, DTypeTable) {
  EXPECT_STREQ(gks::dtype_name(gks::DType::kFloat8E4M3), "float8_e4m3fn");
  EXPECT_EQ(gks::dtype_size(gks::DType::kFloat8E4M3), 1);
}

TEST(QuantizeFp8, NoRowsReturnsWithoutLaunching) {
  // Valid and empty: returns before touching the device (this machine may have none). Per
  // tensor is left out: its empty call still zeroes the one scale.
  for (auto g : kFp8Granularities) {
    if (g == gks::Fp8Granularity::kTensor) continue;
    auto a = fp8_args(nullptr, g);
    a.x.shape[0] = a.q.shape[0] = 0;
    a.scale.shape[0] = 0;
    EXPECT_NO_THROW(gks::quantize_fp8(a, nullptr)) << gks::fp8_granularity_name(g);
  }
}

TEST(QuantizeFp8, RejectsCpuAndIntegerInput) {
  alignas(16) char buf[64];
  auto a = fp8_args(buf, gks::Fp8Granularity::kGroup);
  a.x.device = a.q.device = a.scale.device = kCpu;
  expect_error([&] { gks::quantize_fp8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "gks.quantize_fp8: argument 'x' must be a CUDA tensor, got a tensor on cpu");
  a = fp8_args(buf, gks::Fp8Granularity::kGroup);
  a.x.dtype = gks::DType::kInt32;
  expect_error([&] { gks::quantize_fp8(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'x' must be float32, float16 or bfloat16, got int32");
}

TEST(QuantizeFp8, RejectsWrongOutputDtypes) {
  alignas(16) char buf[64];
  auto a = fp8_args(buf, gks::Fp8Granularity::kGroup);
  a.q.dtype = gks::DType::kInt8;
  expect_error([&] { gks::quantize_fp8(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'q' must be float8_e4m3fn, got int8");
  a = fp8_args(buf, gks::Fp8Granularity::kGroup);
  a.scale.dtype = gks::DType::kFloat16;
  expect_error([&] { gks::quantize_fp8(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'scale' must be float32, got float16");
}

TEST(QuantizeFp8, RejectsGroupSizesOtherThan128) {
  alignas(16) char buf[64];
  auto a = fp8_args(buf, gks::Fp8Granularity::kGroup);
  a.group_size = 64;
  expect_error([&] { gks::quantize_fp8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'group_size' must be 128 (1 x 128 groups, 128 x 128 blocks), got 64");
}

TEST(QuantizeFp8, ScaleShapePerGranularity) {
  alignas(16) char buf[64];
  const char* want[] = {"[1]", "[130, 1]", "[130, 3]", "[2, 3]"};
  int i = 0;
  for (auto g : kFp8Granularities) {
    auto a = fp8_args(buf, g);
    a.scale.shape[0] += 1;
    expect_error([&] { gks::quantize_fp8(a, nullptr); }, ErrorKind::kInvalidArgument,
                 std::string("argument 'scale' must have shape ") + want[i] + " for granularity '" +
                     gks::fp8_granularity_name(g) + "'");
    ++i;
  }
}

TEST(QuantizeFp8, BlockNeedsTwoDims) {
  alignas(16) char buf[64];
  auto a = fp8_args(buf, gks::Fp8Granularity::kBlock);
  a.x = gks::TensorRef::make(buf, gks::DType::kBFloat16, {2, 65, 300}, kGpu);
  a.q = gks::TensorRef::make(gks_test::fake_address(2), gks::DType::kFloat8E4M3, {2, 65, 300}, kGpu);
  expect_error([&] { gks::quantize_fp8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'x' must be 2-D [M, K] for granularity 'block', got 3 dims");
}

TEST(QuantizeFp8, RejectsOverlappingOutputs) {
  alignas(16) char buf[64];
  auto a = fp8_args(buf, gks::Fp8Granularity::kToken);
  a.scale.data = a.q.data;
  expect_error([&] { gks::quantize_fp8(a, nullptr); }, ErrorKind::kInvalidArgument, "'scale'");
}

TEST(DequantizeFp8, RejectsWrongDtypesAndShapes) {
  alignas(16) char buf[64];
  gks::DequantizeFp8Args a;
  const auto reset = [&] {
    a.q = gks::TensorRef::make(buf, gks::DType::kFloat8E4M3, {4, 256}, kGpu);
    a.scale = gks::TensorRef::make(gks_test::fake_address(2), gks::DType::kFloat32, {4, 2}, kGpu);
    a.out = gks::TensorRef::make(gks_test::fake_address(3), gks::DType::kBFloat16, {4, 256}, kGpu);
    a.granularity = gks::Fp8Granularity::kGroup;
  };
  reset();
  a.q.dtype = gks::DType::kInt8;
  expect_error([&] { gks::dequantize_fp8(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "gks.dequantize_fp8: argument 'q' must be float8_e4m3fn, got int8");
  reset();
  a.out.dtype = gks::DType::kInt32;
  expect_error([&] { gks::dequantize_fp8(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'out' must be float32, float16 or bfloat16, got int32");
  reset();
  a.granularity = gks::Fp8Granularity::kBlock;
  expect_error([&] { gks::dequantize_fp8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'scale' must have shape [1, 2] for granularity 'block', got [4, 2]");
  reset();
  a.out.shape[1] = 128;
  expect_error([&] { gks::dequantize_fp8(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'out' must have the shape of 'q' [4, 256], got [4, 128]");
}

TEST(QuantizeFp8Plan, GroupsTileInWarps) {
  for (int64_t cols : {1, 7, 128, 129, 4096, 4097, 7168, 32768}) {
    const auto p = gks::detail::plan_quantize_fp8_groups(cols);
    EXPECT_EQ(p.vec, 16);
    EXPECT_EQ(p.threads_per_row * p.rows_per_block, 256) << cols;
    EXPECT_GE(p.threads_per_row, 32) << cols;  // a group's 8 lanes lie in one warp of one row
    EXPECT_TRUE(p.vecs_per_thread == 1 || p.vecs_per_thread == 2);
  }
  const auto p = gks::detail::plan_quantize_fp8_groups(7168);  // 448 chunks
  EXPECT_EQ(p.threads_per_row, 256);
  EXPECT_EQ(p.vecs_per_thread, 2);
}

TEST(QuantizeFp8Plan, EveryPlanHasAKernel) {
  for (int64_t cols = 0; cols <= 70000; cols += cols < 2100 ? 1 : 37) {
    for (auto dtype : {gks::DType::kFloat32, gks::DType::kFloat16, gks::DType::kBFloat16}) {
      ASSERT_TRUE(gks::detail::quantize_fp8_groups_plan_has_kernel(gks::detail::plan_quantize_fp8_groups(cols), dtype))
          << cols;
      for (bool aligned : {true, false}) {
        ASSERT_TRUE(gks::detail::quantize_fp8_token_plan_has_kernel(
            gks::detail::plan_quantize_int8(cols, dtype, aligned), dtype)) << cols;
        ASSERT_TRUE(gks::detail::dequantize_fp8_plan_has_kernel(
            gks::detail::plan_dequantize_int8(cols, dtype, aligned), dtype)) << cols;
      }
    }
  }
}

}  // namespace
