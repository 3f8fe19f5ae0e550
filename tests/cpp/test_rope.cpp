// SPDX-License-Identifier: Apache-2.0
// Host-side logic of the rope family (gks::apply_rope): validation, which must throw before
// anything touches a GPU, and the in-place form on the q and k views of a fused qkv tensor.
#include <gtest/gtest.h>

#include "gks/gks.h"

#include "test_util.h"

namespace {

using gks::DType;
using gks::ErrorKind;
using gks::TensorRef;
using gks_test::expect_error;
using gks_test::kGpu;

// q [tokens, 4, 64], k [tokens, 2, 64] (fp16), a [32, rotary_dim] cache, int64 positions.
gks::ApplyRopeArgs args(int64_t tokens, int64_t rotary_dim = 64) {
  gks::ApplyRopeArgs a;
  a.q = TensorRef::make(gks_test::fake_address(1), DType::kFloat16, {tokens, 4, 64}, kGpu);
  a.k = TensorRef::make(gks_test::fake_address(2), DType::kFloat16, {tokens, 2, 64}, kGpu);
  a.cos_sin_cache = TensorRef::make(gks_test::fake_address(3), DType::kFloat32, {32, rotary_dim}, kGpu);
  a.positions = TensorRef::make(gks_test::fake_address(4), DType::kInt64, {tokens}, kGpu);
  a.q_out = TensorRef::make(gks_test::fake_address(5), DType::kFloat16, {tokens, 4, 64}, kGpu);
  a.k_out = TensorRef::make(gks_test::fake_address(6), DType::kFloat16, {tokens, 2, 64}, kGpu);
  return a;
}

TEST(ApplyRope, TakesOutOfPlaceInPlaceAndPartialRotaryDims) {
  EXPECT_NO_THROW(gks::apply_rope(args(0), nullptr));
  EXPECT_NO_THROW(gks::apply_rope(args(0, 32), nullptr));
  auto a = args(0);
  a.q_out = a.q, a.k_out = a.k, a.is_neox = false;
  EXPECT_NO_THROW(gks::apply_rope(a, nullptr));
}

TEST(ApplyRope, TakesTheQAndKViewsOfAFusedQkv) {
  // qkv [8, (4 + 2 + 2) * 64]: q its first 256 columns, k the next 128, in place.
  auto a = args(8);
  char* qkv = static_cast<char*>(gks_test::fake_address(1));
  a.q = TensorRef::make(qkv, DType::kFloat16, {8, 4, 64}, kGpu, {512, 64, 1});
  a.k = TensorRef::make(qkv + 256 * 2, DType::kFloat16, {8, 2, 64}, kGpu, {512, 64, 1});
  a.q_out = a.q, a.k_out = a.k;
  gks::ValidateOnly validating;
  EXPECT_NO_THROW(gks::apply_rope(a, nullptr));
  a.k = TensorRef::make(qkv + 192 * 2, DType::kFloat16, {8, 2, 64}, kGpu, {512, 64, 1});  // meets q's last head
  a.k_out = a.k;
  expect_error([&] { gks::apply_rope(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'q_out' must not share memory with argument 'k'");
}

TEST(ApplyRope, RefusesBadRotaryDimsCachesAndPositions) {
  expect_error([] { gks::apply_rope(args(4, 63), nullptr); }, ErrorKind::kInvalidArgument,
               "gks.apply_rope: argument 'cos_sin_cache' must have an even rotary_dim (its last dim) from 2 to "
               "head_dim (64), got 63");
  expect_error([] { gks::apply_rope(args(4, 66), nullptr); }, ErrorKind::kInvalidArgument, "got 66");
  auto a = args(4);
  a.cos_sin_cache.dtype = DType::kFloat16;
  expect_error([&] { gks::apply_rope(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'cos_sin_cache' must be float32, got float16");
  a = args(4);
  a.positions.dtype = DType::kFloat32;
  expect_error([&] { gks::apply_rope(a, nullptr); }, ErrorKind::kUnsupportedDtype,
               "argument 'positions' must be int32 or int64, got float32");
  a = args(4);
  a.positions = TensorRef::make(gks_test::fake_address(4), DType::kInt32, {5}, kGpu);
  expect_error([&] { gks::apply_rope(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'positions' must have q's token dims (q's shape but its last two), got [5] for q [4, 4, 64]");
  a = args(4);
  a.positions = TensorRef::make(gks_test::fake_address(4), DType::kInt64, {4}, kGpu, {2});
  expect_error([&] { gks::apply_rope(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'positions' must be contiguous");
}

TEST(ApplyRope, RefusesMismatchedKAndOutputs) {
  auto a = args(4);
  a.k = TensorRef::make(gks_test::fake_address(2), DType::kFloat16, {4, 2, 32}, kGpu);
  expect_error([&] { gks::apply_rope(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'k' must have q's token dims and head_dim (any number of heads), got [4, 2, 32] for q "
               "[4, 4, 64]");
  a = args(4);
  a.q_out = TensorRef::make(gks_test::fake_address(5), DType::kFloat16, {4, 2, 64}, kGpu);
  expect_error([&] { gks::apply_rope(a, nullptr); }, ErrorKind::kInvalidArgument, "argument 'q_out'");
  a = args(4);
  a.k_out = a.q_out;
  expect_error([&] { gks::apply_rope(a, nullptr); }, ErrorKind::kInvalidArgument, "argument 'k_out'");
  a = args(4);
  a.q = TensorRef::make(gks_test::fake_address(1), DType::kFloat16, {4, 64}, kGpu);
  expect_error([&] { gks::apply_rope(a, nullptr); }, ErrorKind::kInvalidArgument,
               "argument 'q' must be [..., heads, head_dim] with at least one token dim, got [4, 64]");
}

}  // namespace
