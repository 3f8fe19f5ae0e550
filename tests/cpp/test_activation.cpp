// SPDX-License-Identifier: Apache-2.0
// Host-side logic of the activation family (gks::act_and_mul, gks::act_and_mul_quant):
// validation, which must throw before anything touches a GPU.
#include <gtest/gtest.h>

#include "gks/gks.h"

#include "test_util.h"

namespace {

using gks::DType;
using gks::ErrorKind;
using gks_test::expect_error;
using gks_test::kGpu;

gks::ActAndMulArgs args(int64_t rows, int64_t n, int64_t d) {
  gks::ActAndMulArgs a;
  a.x = gks::TensorRef::make(gks_test::fake_address(1), DType::kBFloat16, {rows, n}, kGpu);
  a.y = gks::TensorRef::make(gks_test::fake_address(2), DType::kBFloat16, {rows, d}, kGpu);
  return a;
}

TEST(ActAndMul, TakesHalfTheLastDim) {
  EXPECT_NO_THROW(gks::act_and_mul(args(0, 16, 8), nullptr));
  auto a = args(0, 16, 8);
  a.activation = gks::Activation::kGeluTanh;
  EXPECT_NO_THROW(gks::act_and_mul(a, nullptr));
}

TEST(ActAndMul, RefusesAnOddLastDimAndAWrongOutput) {
  expect_error([] { gks::act_and_mul(args(4, 15, 7), nullptr); }, ErrorKind::kInvalidArgument,
               "gks.act_and_mul: argument 'x' must have an even last dim (gate, then up), got [4, 15]");
  expect_error([] { gks::act_and_mul(args(4, 16, 16), nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'y' must have the shape of 'x' with its last dim halved, got [4, 16] for x [4, 16]");
  auto a = args(4, 16, 8);
  a.y.dtype = DType::kFloat32;
  expect_error([&] { gks::act_and_mul(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'y' must have the dtype of 'x' (bfloat16), got float32");
}

TEST(ActAndMul, RefusesAnOutputInsideX) {
  auto a = args(4, 16, 8);
  a.y.data = a.x.data;
  expect_error([&] { gks::act_and_mul(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'y' must not share memory with argument 'x'");
}

gks::ActAndMulQuantArgs quant_args(int64_t rows, int64_t d) {
  gks::ActAndMulQuantArgs a;
  a.x = gks::TensorRef::make(gks_test::fake_address(1), DType::kBFloat16, {rows, 2 * d}, kGpu);
  a.q = gks::TensorRef::make(gks_test::fake_address(2), DType::kFloat8E4M3, {rows, d}, kGpu);
  a.scale = gks::TensorRef::make(gks_test::fake_address(3), DType::kFloat32, {rows, d / 128}, kGpu);
  return a;
}

TEST(ActAndMulQuant, TakesWholeGroups) {
  EXPECT_NO_THROW(gks::act_and_mul_quant(quant_args(0, 256), nullptr));
  expect_error([] { gks::act_and_mul_quant(quant_args(4, 100), nullptr); }, ErrorKind::kInvalidArgument,
               "gks.act_and_mul_quant: argument 'x' must have a last dim of 2d with d a multiple of 128 (1 x 128 "
               "groups), got [4, 200]");
}

TEST(ActAndMulQuant, RefusesWrongOutputs) {
  auto a = quant_args(4, 256);
  a.q.dtype = DType::kInt8;
  expect_error([&] { gks::act_and_mul_quant(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'q' must be float8_e4m3fn, got int8");
  a = quant_args(4, 256);
  a.q.shape[1] = 512;
  expect_error([&] { gks::act_and_mul_quant(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'q' must have shape [4, 256] ('x' with its last dim halved), got [4, 512]");
  a = quant_args(4, 256);
  a.scale.shape[1] = 1;
  expect_error([&] { gks::act_and_mul_quant(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'scale' must have shape [4, 2] for granularity 'group', got [4, 1]");
  a = quant_args(4, 256);
  a.scale.dtype = DType::kFloat16;
  expect_error([&] { gks::act_and_mul_quant(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'scale' must be float32, got float16");
  a = quant_args(4, 256);
  a.q.data = a.x.data;
  expect_error([&] { gks::act_and_mul_quant(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'q' must not share memory with argument 'x'");
}

}  // namespace
