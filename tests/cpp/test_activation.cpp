// SPDX-License-Identifier: Apache-2.0
// Host-side logic of the activation family (gks::act_and_mul): validation, which must throw
// before anything touches a GPU.
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

}  // namespace
