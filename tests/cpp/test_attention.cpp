// SPDX-License-Identifier: Apache-2.0
// Host-side logic of gks::flash_attention_fwd (validation messages and the tile plan), of
// gks::flash_attention_bwd (validation) and of gks::merge_state / merge_states (validation). No GPU is touched (every case is refused, or empty, before a launch).
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <string>
#include <utility>

#include "gks/gks.h"

#include "test_util.h"

namespace {

using gks_test::expect_error;
using gks_test::kCpu;
using gks_test::kGpu;

// Never dereferenced: every case below is refused (or empty) before a launch.
alignas(16) char g_buffer[64];

gks::FlashAttentionFwdArgs valid_args(int64_t head_dim = 64, int64_t heads_q = 8,
                                      int64_t heads_kv = 2, int64_t head_dim_v = -1) {
  if (head_dim_v < 0) head_dim_v = head_dim;
  gks::FlashAttentionFwdArgs a;
  const auto f16 = gks::DType::kFloat16;
  a.q = gks::TensorRef::make(g_buffer, f16, {2, heads_q, 100, head_dim}, kGpu);
  a.k = gks::TensorRef::make(gks_test::fake_address(2), f16, {2, heads_kv, 130, head_dim}, kGpu);
  a.v = gks::TensorRef::make(gks_test::fake_address(3), f16, {2, heads_kv, 130, head_dim_v}, kGpu);
  a.o = gks::TensorRef::make(gks_test::fake_address(4), f16, {2, heads_q, 100, head_dim_v}, kGpu);
  a.lse = gks::TensorRef::make(gks_test::fake_address(5), gks::DType::kFloat32, {2, heads_q, 100}, kGpu);
  return a;
}

void run(const gks::FlashAttentionFwdArgs& a) { gks::flash_attention_fwd(a, nullptr); }

using gks::ErrorKind;

TEST(FlashAttentionFwd, RejectsCpuTensor) {
  auto a = valid_args();
  a.q.device = {gks::DeviceType::kCPU, 0};
  expect_error([&] { run(a); }, ErrorKind::kInvalidArgument,
               "gks.flash_attention_fwd: argument 'q' must be a CUDA tensor, got a tensor on cpu");
}

TEST(FlashAttentionFwd, RejectsOtherDevice) {
  auto a = valid_args();
  a.v.device.index = 1;
  expect_error([&] { run(a); }, ErrorKind::kInvalidArgument,
               "argument 'v' must be on the device of 'q' (cuda:0), got cuda:1");
}

TEST(FlashAttentionFwd, RejectsUnsupportedHeadDims) {
  for (int64_t d : {16, 48, 80, 160, 512}) {
    auto a = valid_args(d);
    expect_error([&] { run(a); }, ErrorKind::kInvalidArgument,
                 "head dim (the last dim of q and k) must be one of 32, 64, 96, 128, 192, 256, got " +
                     std::to_string(d));
  }
}

TEST(FlashAttentionFwd, RejectsHeadsNotAMultiple) {
  auto a = valid_args(64, 8, 3);
  expect_error([&] { run(a); }, ErrorKind::kInvalidArgument,
               "the query heads (8, dim 1 of q) must be a multiple of the key/value heads (3, "
               "dim 1 of k and v)");
}

TEST(FlashAttentionFwd, RejectsDtypes) {
  auto a = valid_args();
  a.k.dtype = gks::DType::kBFloat16;
  expect_error([&] { run(a); }, ErrorKind::kUnsupportedDtype,
               "argument 'k' must have the dtype of 'q' (float16), got bfloat16");
  a = valid_args();
  a.q.dtype = a.k.dtype = a.v.dtype = a.o.dtype = gks::DType::kFloat32;
  expect_error([&] { run(a); }, ErrorKind::kUnsupportedDtype,
               "argument 'q' must be float16 or bfloat16, got float32");
  a = valid_args();
  a.lse.dtype = gks::DType::kFloat16;
  expect_error([&] { run(a); }, ErrorKind::kUnsupportedDtype,
               "argument 'lse' must be float32, got float16");
}

TEST(FlashAttentionFwd, RejectsNonContiguousLastDim) {
  auto a = valid_args();
  a.k.strides[3] = 2;
  expect_error([&] { run(a); }, ErrorKind::kInvalidArgument,
               "argument 'k' must be contiguous in its last dim (stride 1), got stride 2");
}

TEST(FlashAttentionFwd, RejectsWrongShapes) {
  auto a = valid_args();
  a.q.ndim = 3;
  expect_error([&] { run(a); }, ErrorKind::kInvalidArgument,
               "argument 'q' must have 4 dims [batch, heads, seq, head_dim], got 3 dims");
  a = valid_args();
  a.k.shape[3] = 32;
  a.v.shape[3] = 32;
  expect_error([&] { run(a); }, ErrorKind::kInvalidArgument,
               "argument 'k' must have shape [2, Hkv, Sk, 64] (q's batch and head dim)");
  a = valid_args();
  a.v.shape[2] = 129;
  expect_error([&] { run(a); }, ErrorKind::kInvalidArgument,
               "argument 'v' must have shape [2, 2, 130, 64] (k's first three dims and the head dim; "
               "128 is also allowed with head dim 192), got [2, 2, 129, 64]");
  a = valid_args();
  a.o.shape[2] = 99;
  expect_error([&] { run(a); }, ErrorKind::kInvalidArgument,
               "argument 'o' must have shape [2, 8, 100, 64] (q's first three dims and v's head "
               "dim), got [2, 8, 99, 64]");
  a = valid_args();
  a.lse.shape[2] = 101;
  expect_error([&] { run(a); }, ErrorKind::kInvalidArgument,
               "argument 'lse' must have shape [2, 8, 100] (q's first three dims), got [2, 8, 101]");
}

TEST(FlashAttentionFwd, RejectsBadSoftmaxScale) {
  for (float s : {0.f, -0.5f, std::nanf(""), INFINITY}) {
    auto a = valid_args();
    a.softmax_scale = s;
    expect_error([&] { run(a); }, ErrorKind::kInvalidArgument,
                 "argument 'softmax_scale' must be a finite number > 0");
  }
}

TEST(FlashAttentionFwd, RejectsUnalignedRows) {
  auto a = valid_args();
  a.q.strides[2] = 65;  // rows 130 bytes apart
  a.q.strides[1] = 65 * 100;
  a.q.strides[0] = 65 * 100 * 8;
  expect_error([&] { run(a); }, ErrorKind::kInvalidArgument,
               "argument 'q' must be 16-byte aligned");
  a = valid_args();
  a.o.data = static_cast<char*>(gks_test::fake_address(4)) + 2;
  expect_error([&] { run(a); }, ErrorKind::kInvalidArgument,
               "argument 'o' must be 16-byte aligned");
}

TEST(FlashAttentionFwd, RejectsBadConfig) {
  for (int config : {-2, 3, 7}) {
    auto a = valid_args();
    a.config = config;
    expect_error([&] { run(a); }, ErrorKind::kInvalidArgument,
                 "argument 'config' must be -1 (the best kernel here), 0 (mma.sync), 1 (wgmma) or "
                 "2 (wgmma.ws), got " + std::to_string(config));
  }
}

TEST(FlashAttentionFwd, RejectsBadWindow) {
  for (auto [left, right] : {std::pair<int64_t, int64_t>{-2, 0}, {0, -2}, {-5, -5}}) {
    auto a = valid_args();
    a.window_left = left;
    a.window_right = right;
    expect_error([&] { run(a); }, ErrorKind::kInvalidArgument,
                 "argument 'window_size' must be (left, right) with each -1 (unbounded) or >= 0, "
                 "got (" + std::to_string(left) + ", " + std::to_string(right) + ")");
  }
  auto a = valid_args();
  a.causal = true;
  a.window_right = 3;
  expect_error([&] { run(a); }, ErrorKind::kInvalidArgument,
               "argument 'window_size' must have right -1 or 0 with causal=True");
}

TEST(FlashAttentionFwd, RejectsBadSoftcap) {
  for (double cap : {-1.0, double(NAN), double(INFINITY)}) {
    auto a = valid_args();
    a.softcap = cap;
    expect_error([&] { run(a); }, ErrorKind::kInvalidArgument,
                 "argument 'softcap' must be 0 (none) or a finite number > 0");
  }
  {  // scale / softcap, the kernels' float32 factor, past float32's range
    auto a = valid_args();
    a.softmax_scale = 1e10f;
    a.softcap = 1e-29;
    expect_error([&] { run(a); }, ErrorKind::kInvalidArgument,
                 "argument 'softcap' must leave softmax_scale / softcap a float32 normal number");
  }
  // Checked as a double: a cap float32 would flush to 0 (no cap) is refused, not dropped.
  for (double cap : {1e-40, 1e35}) {
    auto a = valid_args();
    a.softcap = cap;
    expect_error([&] { run(a); }, ErrorKind::kInvalidArgument,
                 "argument 'softcap' must be 0 or between 1e-30 and 1e30");
  }
}

TEST(FlashAttentionFwd, HeadDimsOfV) {
  // DeepSeek's 192 / 128 passes validation (an empty call returns before any device query).
  auto a = valid_args(192, 8, 2, 128);
  a.q.shape[2] = a.o.shape[2] = a.lse.shape[2] = 0;
  EXPECT_NO_THROW(run(a));
  // Any other v head dim than q's is refused, naming v; so is an o without v's head dim.
  for (auto [d, dv] : {std::pair<int64_t, int64_t>{192, 64}, {128, 64}, {64, 128}, {256, 128}}) {
    auto b = valid_args(d, 8, 2, dv);
    expect_error([&] { run(b); }, ErrorKind::kInvalidArgument,
                 "argument 'v' must have shape [2, 2, 130, " + std::to_string(d) +
                     "] (k's first three dims and the head dim; 128 is also allowed with head dim "
                     "192), got [2, 2, 130, " + std::to_string(dv) + "]");
  }
  auto c = valid_args(192, 8, 2, 128);
  c.o.shape[3] = 192;
  expect_error([&] { run(c); }, ErrorKind::kInvalidArgument,
               "argument 'o' must have shape [2, 8, 100, 128] (q's first three dims and v's head dim)");
  EXPECT_TRUE(gks::detail::flash_head_dims(192, 128));
  EXPECT_FALSE(gks::detail::flash_head_dims(128, 192));
  EXPECT_TRUE(gks::detail::ws_flash_head_dims(192, 128));
  EXPECT_FALSE(gks::detail::wgmma_flash_head_dims(192, 128));
}

TEST(FlashAttentionFwd, ConfigZeroIsMmaSyncEverywhere) {
  // Decided before any device query, so it holds without a GPU.
  for (int d : gks::kFlashAttentionHeadDims) {
    auto a = valid_args(d);
    a.config = 0;
    EXPECT_STREQ(gks::flash_attention_fwd_path(a), "mma.sync") << d;
  }
  // The head dims the Hopper kernels serve (where the GPU and build have them).
  for (int d : gks::kFlashAttentionHeadDims) {
    EXPECT_EQ(gks::detail::wgmma_flash_head_dims(d, d), d == 64 || d == 128) << d;
    EXPECT_EQ(gks::detail::ws_flash_head_dims(d, d), d != 32) << d;
  }
}

TEST(FlashAttentionFwd, EmptyQueriesLaunchNothing) {
  auto a = valid_args();
  a.q.shape[2] = a.o.shape[2] = a.lse.shape[2] = 0;
  EXPECT_NO_THROW(run(a));  // returns before any CUDA call: fine without a GPU
  a = valid_args();
  a.q.shape[0] = a.k.shape[0] = a.v.shape[0] = a.o.shape[0] = a.lse.shape[0] = 0;
  EXPECT_NO_THROW(run(a));
}

// ---- flash_attention_bwd: the forward's checks on q, k, v and the options, then do, o,
// lse and the three gradients.

gks::FlashAttentionBwdArgs valid_bwd_args(int64_t head_dim = 64, int64_t head_dim_v = 64) {
  const auto f = valid_args(head_dim, 8, 2, head_dim_v);
  gks::FlashAttentionBwdArgs a;
  const auto f16 = gks::DType::kFloat16;
  a.q = f.q, a.k = f.k, a.v = f.v, a.o = f.o, a.lse = f.lse;
  a.dout = gks::TensorRef::make(gks_test::fake_address(6), f16, {2, 8, 100, head_dim_v}, kGpu);
  a.dq = gks::TensorRef::make(gks_test::fake_address(7), f16, {2, 8, 100, head_dim}, kGpu);
  a.dk = gks::TensorRef::make(gks_test::fake_address(8), f16, {2, 2, 130, head_dim}, kGpu);
  a.dv = gks::TensorRef::make(gks_test::fake_address(9), f16, {2, 2, 130, head_dim_v}, kGpu);
  return a;
}

void run_bwd(const gks::FlashAttentionBwdArgs& a) {
  const gks::ValidateOnly validate_only;  // every check, no launch: fine without a GPU
  gks::flash_attention_bwd(a, nullptr);
}

TEST(FlashAttentionBwd, AcceptsValidArguments) {
  EXPECT_NO_THROW(run_bwd(valid_bwd_args()));
  EXPECT_NO_THROW(run_bwd(valid_bwd_args(192, 128)));  // DeepSeek's head dims
  auto a = valid_bwd_args();
  a.causal = true;
  a.window_left = 16;
  a.softcap = 30.0;
  EXPECT_NO_THROW(run_bwd(a));
}

TEST(FlashAttentionBwd, RejectsWhatTheForwardRejects) {
  auto a = valid_bwd_args();
  a.k.dtype = gks::DType::kBFloat16;
  expect_error([&] { run_bwd(a); }, ErrorKind::kUnsupportedDtype,
               "gks.flash_attention_bwd: argument 'k' must have the dtype of 'q' (float16), got bfloat16");
  a = valid_bwd_args(48, 48);
  expect_error([&] { run_bwd(a); }, ErrorKind::kInvalidArgument,
               "head dim (the last dim of q and k) must be one of 32, 64, 96, 128, 192, 256, got 48");
  a = valid_bwd_args();
  a.causal = true;
  a.window_right = 3;
  expect_error([&] { run_bwd(a); }, ErrorKind::kInvalidArgument, "argument 'window_size' must have right -1 or 0");
}

TEST(FlashAttentionBwd, RejectsBadGradientOfO) {
  auto a = valid_bwd_args();
  a.dout.dtype = gks::DType::kBFloat16;
  expect_error([&] { run_bwd(a); }, ErrorKind::kUnsupportedDtype,
               "argument 'do' must have the dtype of 'q' (float16), got bfloat16");
  a = valid_bwd_args();
  a.dout.shape[2] = 99;
  expect_error([&] { run_bwd(a); }, ErrorKind::kInvalidArgument,
               "argument 'do' must have shape [2, 8, 100, 64] (q's batch, heads and sequence, v's head dim), got "
               "[2, 8, 99, 64]");
  a = valid_bwd_args();
  a.dout.strides[3] = 2;
  expect_error([&] { run_bwd(a); }, ErrorKind::kInvalidArgument,
               "argument 'do' must be contiguous in its last dim (stride 1), got stride 2");
  a = valid_bwd_args();
  a.lse.ndim = 4;
  a.lse.shape[3] = 1;
  expect_error([&] { run_bwd(a); }, ErrorKind::kInvalidArgument, "argument 'lse' must have 3 dims [batch, heads, seq]");
}

TEST(FlashAttentionBwd, RejectsBadGradients) {
  auto a = valid_bwd_args();
  a.dk.shape[2] = 129;
  expect_error([&] { run_bwd(a); }, ErrorKind::kInvalidArgument,
               "argument 'dk' must have shape [2, 2, 130, 64] (k's shape), got [2, 2, 129, 64]");
  a = valid_bwd_args();
  a.dv.dtype = gks::DType::kBFloat16;
  expect_error([&] { run_bwd(a); }, ErrorKind::kUnsupportedDtype,
               "argument 'dv' must have the dtype of 'q' (float16), got bfloat16");
  a = valid_bwd_args();
  a.dq.data = a.q.data;  // dq over q
  expect_error([&] { run_bwd(a); }, ErrorKind::kInvalidArgument,
               "argument 'dq' must not share memory with argument 'q'");
}

TEST(FlashAttentionBwd, TakesEachListedConfigAndRefusesOthers) {
  auto a = valid_bwd_args();
  for (int config = -1; config < int(std::size(gks::kFlashAttentionBwdConfigs)); ++config) {
    a.config = config;
    a.deterministic = config == 0;
    EXPECT_NO_THROW(run_bwd(a)) << config;
  }
  a.config = 3;
  expect_error([&] { run_bwd(a); }, ErrorKind::kInvalidArgument,
               "gks.flash_attention_bwd: argument 'config' must be -1 (the best kernel here), 0 (mma.sync), 1 "
               "(wgmma) or 2 (wgmma.ws), got 3");
}

TEST(FlashAttentionBwd, EmptyBatchLaunchesNothing) {
  auto a = valid_bwd_args();
  for (gks::TensorRef* t : {&a.q, &a.k, &a.v, &a.o, &a.lse, &a.dout, &a.dq, &a.dk, &a.dv}) t->shape[0] = 0;
  EXPECT_NO_THROW(gks::flash_attention_bwd(a, nullptr));  // returns before any CUDA call
}

TEST(FlashAttentionFwdPlan, EveryHeadDimHasATile) {
  for (int d : gks::kFlashAttentionHeadDims) {
    for (bool causal : {false, true}) {
      const auto p = gks::detail::plan_flash_attention_fwd(d, causal);
      EXPECT_EQ(p.block_m % (16 * p.warps), 0) << d;  // whole 16-row m-tiles per warp
      EXPECT_EQ(p.block_n % 16, 0) << d;
      EXPECT_GE(p.block_m, 64) << d;
      // Q tile + 2 stages of K and V, within one SM's 227 KiB and small enough for 2 CTAs.
      EXPECT_EQ(p.smem_bytes, 2 * d * (p.block_m + 4 * p.block_n)) << d;
      EXPECT_LE(p.smem_bytes, 113 * 1024) << d;
      // Q's fragments in registers only where the accumulators leave room.
      EXPECT_EQ(p.q_in_registers, d == 32 && !causal) << d << " causal " << causal;
    }
  }
  // D = 128: 4 warps of 32 query rows and 64-key tiles, causal or not.
  for (bool causal : {false, true}) {
    const auto p128 = gks::detail::plan_flash_attention_fwd(128, causal);
    EXPECT_EQ(p128.block_m, 128);
    EXPECT_EQ(p128.block_n, 64);
    EXPECT_EQ(p128.warps, 4);
  }
  // D = 64: 128-key tiles, Q in shared memory, causal or not.
  EXPECT_EQ(gks::detail::plan_flash_attention_fwd(64, false).block_n, 128);
  EXPECT_EQ(gks::detail::plan_flash_attention_fwd(64, true).block_n, 128);
  // DeepSeek's 192 / 128: D = 256's shape; V's stages hold 128 columns.
  for (bool causal : {false, true}) {
    const auto p = gks::detail::plan_flash_attention_fwd(192, causal, 128);
    EXPECT_EQ(p.block_m, 64);
    EXPECT_EQ(p.block_n, 32);
    EXPECT_EQ(p.smem_bytes, 2 * (192 * (p.block_m + 2 * p.block_n) + 128 * 2 * p.block_n));
  }
}

TEST(FlashAttentionFwdPlan, RejectsOtherHeadDims) {
  expect_error([] { gks::detail::plan_flash_attention_fwd(100, false); }, ErrorKind::kInvalidArgument,
               "head dims (100, 100) have no kernel");
  expect_error([] { gks::detail::plan_flash_attention_fwd(128, false, 64); },
               ErrorKind::kInvalidArgument, "head dims (128, 64) have no kernel");
}

// ---- merge_state / merge_states: checked under ValidateOnly (shapes, dtypes, strides only).

gks::MergeStateArgs merge_args() {
  gks::MergeStateArgs a;
  const auto f16 = gks::DType::kFloat16, f32 = gks::DType::kFloat32;
  a.v_a = gks::TensorRef::make(gks_test::fake_address(1), f16, {7, 4, 128}, kGpu);
  a.s_a = gks::TensorRef::make(gks_test::fake_address(2), f32, {7, 4}, kGpu);
  a.v_b = gks::TensorRef::make(gks_test::fake_address(3), f16, {7, 4, 128}, kGpu);
  a.s_b = gks::TensorRef::make(gks_test::fake_address(4), f32, {7, 4}, kGpu);
  a.v = gks::TensorRef::make(gks_test::fake_address(5), f16, {7, 4, 128}, kGpu);
  a.s = gks::TensorRef::make(gks_test::fake_address(6), f32, {7, 4}, kGpu);
  return a;
}

void validate(const gks::MergeStateArgs& a) {
  const gks::ValidateOnly only;
  gks::merge_state(a, nullptr);
}

TEST(MergeState, AcceptsValidAndInPlace) {
  auto a = merge_args();
  validate(a);
  a.v = a.v_a;
  a.s = a.s_a;
  validate(a);  // the documented in-place form
}

TEST(MergeState, RejectsBadArguments) {
  auto a = merge_args();
  a.s_a.dtype = gks::DType::kFloat16;
  expect_error([&] { validate(a); }, ErrorKind::kUnsupportedDtype, "argument 's_a' must be float32");
  a = merge_args();
  a.s_b = gks::TensorRef::make(gks_test::fake_address(4), gks::DType::kFloat32, {7, 5}, kGpu);
  expect_error([&] { validate(a); }, ErrorKind::kInvalidArgument, "argument 's_b' must be [7, 4]");
  a = merge_args();
  a.v_b = gks::TensorRef::make(gks_test::fake_address(3), gks::DType::kFloat16, {7, 4, 64}, kGpu);
  expect_error([&] { validate(a); }, ErrorKind::kInvalidArgument, "argument 'v_b' must have the shape of 'v_a'");
  a = merge_args();
  a.v = a.v_b;  // in place over the other input: refused
  expect_error([&] { validate(a); }, ErrorKind::kInvalidArgument, "'v'");
  a = merge_args();
  a.v_a.strides[2] = 2;
  expect_error([&] { validate(a); }, ErrorKind::kInvalidArgument, "argument 'v_a' must be contiguous in its last dim");
}

TEST(MergeStates, ChecksTheStackedLayout) {
  gks::MergeStatesArgs a;
  const auto f16 = gks::DType::kFloat16, f32 = gks::DType::kFloat32;
  // FlashInfer's [T, K, H, D] read as [T, H, K, D]: strides (K H D, D, H D, 1).
  a.v = gks::TensorRef::make(gks_test::fake_address(1), f16, {5, 4, 3, 64}, kGpu, {3 * 4 * 64, 64, 4 * 64, 1});
  a.s = gks::TensorRef::make(gks_test::fake_address(2), f32, {5, 4, 3}, kGpu, {12, 1, 4});
  a.v_out = gks::TensorRef::make(gks_test::fake_address(3), f16, {5, 4, 64}, kGpu);
  a.s_out = gks::TensorRef::make(gks_test::fake_address(4), f32, {5, 4}, kGpu);
  const auto check = [&] {
    const gks::ValidateOnly only;
    gks::merge_states(a, nullptr);
  };
  check();
  auto bad = a;
  bad.v_out = gks::TensorRef::make(gks_test::fake_address(3), f16, {5, 4, 32}, kGpu);
  std::swap(a, bad);
  expect_error(check, ErrorKind::kInvalidArgument, "argument 'v_out' must be [5, 4, 64]");
  std::swap(a, bad);
  a.v = gks::TensorRef::make(gks_test::fake_address(1), f16, {64}, kGpu);
  expect_error(check, ErrorKind::kInvalidArgument, "argument 'v' must be [..., K, D]");
}

}  // namespace

// ---- flash_attention_decode: validation (messages in the Triton port's words) and the plan ----

namespace {

// q [3, 8, 2, 64], dense caches [3, 2, 100, 64] (or paged [9, 16, 2, 64] with a [3, 7] table).
gks::FlashAttentionDecodeArgs decode_args(bool paged = false, int64_t head_dim = 64) {
  gks::FlashAttentionDecodeArgs a;
  const auto f16 = gks::DType::kFloat16;
  a.q = gks::TensorRef::make(g_buffer, f16, {3, 8, 2, head_dim}, kGpu);
  for (auto [t, slot] : {std::pair{&a.k_cache, 2}, std::pair{&a.v_cache, 3}}) {
    *t = paged ? gks::TensorRef::make(gks_test::fake_address(slot), f16, {9, 16, 2, head_dim}, kGpu)
               : gks::TensorRef::make(gks_test::fake_address(slot), f16, {3, 2, 100, head_dim}, kGpu);
  }
  a.cache_seqlens = gks::TensorRef::make(gks_test::fake_address(4), gks::DType::kInt32, {3}, kGpu);
  a.o = gks::TensorRef::make(gks_test::fake_address(5), f16, {3, 8, 2, head_dim}, kGpu);
  a.lse = gks::TensorRef::make(gks_test::fake_address(6), gks::DType::kFloat32, {3, 8, 2}, kGpu);
  if (paged) a.page_table = gks::TensorRef::make(gks_test::fake_address(7), gks::DType::kInt32, {3, 7}, kGpu);
  return a;
}

void run_decode(const gks::FlashAttentionDecodeArgs& a) { gks::flash_attention_decode(a, nullptr); }

void validate_decode(const gks::FlashAttentionDecodeArgs& a) {
  const gks::ValidateOnly scope;
  gks::flash_attention_decode(a, nullptr);
}

}  // namespace

TEST(FlashAttentionDecode, AcceptsDenseAndPagedCaches) {
  for (bool paged : {false, true})
    for (int64_t d : {64, 128, 256}) EXPECT_NO_THROW(validate_decode(decode_args(paged, d)));
  auto a = decode_args();
  a.num_splits = 256;
  a.window_left = 10;
  a.softcap = 30.0;
  EXPECT_NO_THROW(validate_decode(a));
}

TEST(FlashAttentionDecode, RejectsBadArguments) {
  using Edit = void (*)(gks::FlashAttentionDecodeArgs&);
  struct Case {
    Edit edit;
    const char* message;
    gks::ErrorKind kind = gks::ErrorKind::kInvalidArgument;  // kUnsupportedDtype: a dtype
  };
  constexpr auto kDtype = gks::ErrorKind::kUnsupportedDtype;
  const Case cases[] = {
      {[](auto& a) { a.q.device = gks_test::kCpu; }, "argument 'q' must be a CUDA tensor, got a tensor on cpu"},
      {[](auto& a) { a.cache_seqlens.device.index = 1; },
       "argument 'cache_seqlens' must be on the device of 'q' (cuda:0), got cuda:1"},
      {[](auto& a) { a.q.dtype = a.k_cache.dtype = a.v_cache.dtype = a.o.dtype = gks::DType::kFloat32; },
       "argument 'q' must be float16 or bfloat16, got float32", kDtype},
      {[](auto& a) { a.v_cache.dtype = gks::DType::kBFloat16; },
       "argument 'v_cache' must have the dtype of 'q' (float16), got bfloat16", kDtype},
      {[](auto& a) { a.k_cache = gks::TensorRef::make(a.k_cache.data, a.k_cache.dtype, {3, 100, 64}, kGpu); },
       "argument 'k_cache' must have 4 dims [batch, kv_heads, seq, head_dim], got 3 dims [3, 100, 64]"},
      {[](auto& a) { a.q.shape[3] = a.o.shape[3] = 32; },
       "head dim (the last dim of q) must be one of 64, 128, 256, got 32"},
      {[](auto& a) { a.k_cache.shape[0] = a.v_cache.shape[0] = 4; },
       "argument 'k_cache' must have shape [3, Hkv, S_max, 64] (q's batch and head dim), got [4, 2, 100, 64]"},
      {[](auto& a) { a.v_cache.shape[2] = 99; },
       "argument 'v_cache' must have the shape of 'k_cache' [3, 2, 100, 64], got [3, 2, 99, 64]"},
      {[](auto& a) { a.k_cache.shape[1] = a.v_cache.shape[1] = 3; },
       "the query heads (8, dim 1 of q) must be a multiple of the key/value heads (3, dim 1 of k_cache)"},
      {[](auto& a) { a.cache_seqlens.dtype = gks::DType::kInt64; },
       "argument 'cache_seqlens' must be int32, got int64", kDtype},
      {[](auto& a) { a.cache_seqlens.shape[0] = 4; },
       "argument 'cache_seqlens' must have shape [3] (q's batch), got [4]"},
      {[](auto& a) { a.num_splits = 257; },
       "argument 'num_splits' must be 0 (chosen from the shape) or from 1 to 256, got 257"},
      {[](auto& a) { a.causal = true, a.window_right = 2; },
       "argument 'window_size' must have right -1 or 0 with causal=True"},
      {[](auto& a) { a.o.shape[2] = 3; }, "argument 'o' must have shape [3, 8, 2, 64] (q's), got [3, 8, 3, 64]"},
      {[](auto& a) { a.lse.dtype = gks::DType::kFloat16; }, "argument 'lse' must be float32, got float16", kDtype},
      {[](auto& a) { a.o.data = a.q.data; }, "argument 'o' must not share memory with argument 'q'"},
      {[](auto& a) { a.k_cache.strides[2] = 65, a.v_cache.strides[2] = 65; },
       "argument 'k_cache' must be 16-byte aligned"},
  };
  for (const Case& c : cases) {
    auto a = decode_args();
    c.edit(a);
    expect_error([&] { validate_decode(a); }, c.kind, c.message);
  }
}

TEST(FlashAttentionDecode, RejectsBadPageTables) {
  auto a = decode_args(true);
  a.page_table->dtype = gks::DType::kInt64;
  expect_error([&] { validate_decode(a); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'page_table' must be int32, got int64");
  a = decode_args(true);
  *a.page_table = gks::TensorRef::make(a.page_table->data, gks::DType::kInt32, {21}, kGpu);
  expect_error([&] { validate_decode(a); }, gks::ErrorKind::kInvalidArgument,
               "argument 'page_table' must have shape [3, max_pages] (q's batch), got [21]");
  a = decode_args(true);
  a.k_cache.shape[3] = a.v_cache.shape[3] = 128;
  expect_error([&] { validate_decode(a); }, gks::ErrorKind::kInvalidArgument,
               "argument 'k_cache' must have shape [num_pages, page_size, Hkv, 64] (q's head dim), got "
               "[9, 16, 2, 128]");
  a = decode_args(true);
  a.k_cache.shape[2] = a.v_cache.shape[2] = 3;  // paged: the KV heads are dim 2
  expect_error([&] { validate_decode(a); }, gks::ErrorKind::kInvalidArgument,
               "must be a multiple of the key/value heads (3, dim 2 of k_cache)");
}

TEST(FlashAttentionDecode, EmptyQueriesLaunchNothing) {
  auto a = decode_args();
  a.q.shape[2] = a.o.shape[2] = a.lse.shape[2] = 0;
  EXPECT_NO_THROW(run_decode(a));
}

TEST(FlashAttentionDecodePlan, TilesHoldTheGroupedRows) {
  // (G x Sq rows) -> rows a CTA: the fewest of 16, 32, 64 that hold them, up to the head
  // dim's most (64 at D = 64, 32 at 128, 16 at 256); the rest in more row blocks.
  struct Case {
    int64_t heads_q, heads_kv, seqlen_q, head_dim;
    int block_m, m_blocks;
  };
  for (const Case& c : {Case{32, 8, 1, 128, 16, 1}, Case{32, 8, 16, 128, 32, 2}, Case{8, 1, 4, 64, 32, 1},
                        Case{8, 1, 16, 64, 64, 2}, Case{16, 2, 3, 256, 16, 2}, Case{4, 4, 1, 64, 16, 1}}) {
    const auto plan = gks::detail::plan_flash_attention_decode(1, c.heads_q, c.heads_kv, c.seqlen_q, 4096,
                                                               c.head_dim, 1, 132);
    EXPECT_EQ(plan.block_m, c.block_m) << c.heads_q << "/" << c.heads_kv << " Sq " << c.seqlen_q;
    EXPECT_EQ(plan.m_blocks, c.m_blocks);
    EXPECT_EQ(plan.block_n, 64);
    EXPECT_EQ(plan.splits, 1);
    EXPECT_EQ(plan.workspace_bytes, 0);
    EXPECT_LE(plan.smem_bytes, 227 * 1024);
  }
}

TEST(FlashAttentionDecodePlan, SplitsFromShapesAlone) {
  using gks::detail::decode_num_splits;
  // The values gks.specs.attention.decode_num_splits gives (tests/attention/test_decode.py).
  EXPECT_EQ(decode_num_splits(64, 8, 1, 8192, 64, 132), 1);      // 512 CTAs fill the SMs
  EXPECT_EQ(decode_num_splits(1, 8, 1, 64, 64, 132), 1);         // one tile
  EXPECT_EQ(decode_num_splits(1, 8, 1, 131072, 64, 132), 33);    // 2 x 132 / 8
  EXPECT_EQ(decode_num_splits(1, 1, 1, 10000000, 64, 132), 256);  // capped
  EXPECT_EQ(decode_num_splits(1, 8, 1, 1024, 64, 132), 8);       // two tiles a split
  const auto plan = gks::detail::plan_flash_attention_decode(2, 32, 8, 1, 100000, 128, 0, 132);
  EXPECT_GT(plan.splits, 1);
  EXPECT_EQ(plan.workspace_bytes, int64_t(plan.splits) * 2 * 32 * 1 * 129 * 4);
  EXPECT_EQ(gks::detail::plan_flash_attention_decode(2, 32, 8, 1, 100000, 128, 7, 132).splits, 7);
  expect_error([] { gks::detail::plan_flash_attention_decode(1, 8, 2, 1, 100, 96, 0, 132); },
               gks::ErrorKind::kInvalidArgument, "head dim (the last dim of q) must be one of 64, 128, 256, got 96");
}

// ---- flash_attention_varlen_fwd: validation (messages in the Triton port's words) ----

namespace {

// 3 sequences: q [50, 8, 64], packed k, v [70, 2, 64] (or a paged cache [9, 16, 2, 64] with
// a [3, 5] table), o [50, 8, 64], lse [8, 50].
gks::FlashAttentionVarlenFwdArgs varlen_args(bool paged = false, int64_t head_dim = 64) {
  gks::FlashAttentionVarlenFwdArgs a;
  const auto f16 = gks::DType::kFloat16;
  const auto i32 = gks::DType::kInt32;
  a.q = gks::TensorRef::make(g_buffer, f16, {50, 8, head_dim}, kGpu);
  for (auto [t, slot] : {std::pair{&a.k, 2}, std::pair{&a.v, 3}}) {
    *t = paged ? gks::TensorRef::make(gks_test::fake_address(slot), f16, {9, 16, 2, head_dim}, kGpu)
               : gks::TensorRef::make(gks_test::fake_address(slot), f16, {70, 2, head_dim}, kGpu);
  }
  a.cu_seqlens_q = gks::TensorRef::make(gks_test::fake_address(4), i32, {4}, kGpu);
  a.cu_seqlens_k = gks::TensorRef::make(gks_test::fake_address(5), i32, {4}, kGpu);
  a.max_seqlen_q = 30;
  a.o = gks::TensorRef::make(gks_test::fake_address(6), f16, {50, 8, head_dim}, kGpu);
  a.lse = gks::TensorRef::make(gks_test::fake_address(7), gks::DType::kFloat32, {8, 50}, kGpu);
  if (paged) a.page_table = gks::TensorRef::make(gks_test::fake_address(8), i32, {3, 5}, kGpu);
  return a;
}

void validate_varlen(const gks::FlashAttentionVarlenFwdArgs& a) {
  const gks::ValidateOnly scope;
  gks::flash_attention_varlen_fwd(a, nullptr);
}

}  // namespace

TEST(FlashAttentionVarlenFwd, AcceptsPackedAndPagedKeys) {
  for (bool paged : {false, true})
    for (int64_t d : {32, 64, 96, 128, 192, 256}) EXPECT_NO_THROW(validate_varlen(varlen_args(paged, d)));
  auto a = varlen_args();
  a.seqused_k = gks::TensorRef::make(gks_test::fake_address(9), gks::DType::kInt32, {3}, kGpu);
  a.causal = true;
  a.window_left = 10;
  a.softcap = 30.0;
  a.max_seqlen_q = 0;  // a hint only
  EXPECT_NO_THROW(validate_varlen(a));
}

TEST(FlashAttentionVarlenFwd, RejectsBadArguments) {
  using Edit = void (*)(gks::FlashAttentionVarlenFwdArgs&);
  struct Case {
    Edit edit;
    const char* message;
    gks::ErrorKind kind = gks::ErrorKind::kInvalidArgument;
    bool paged = false;
  };
  constexpr auto kDtype = gks::ErrorKind::kUnsupportedDtype;
  const Case cases[] = {
      {[](auto& a) { a.q.device = gks_test::kCpu; }, "argument 'q' must be a CUDA tensor, got a tensor on cpu"},
      {[](auto& a) { a.cu_seqlens_k.device.index = 1; },
       "argument 'cu_seqlens_k' must be on the device of 'q' (cuda:0), got cuda:1"},
      {[](auto& a) { a.v.dtype = gks::DType::kBFloat16; },
       "argument 'v' must have the dtype of 'q' (float16), got bfloat16", kDtype},
      {[](auto& a) { a.q = gks::TensorRef::make(a.q.data, a.q.dtype, {1, 50, 8, 64}, kGpu); },
       "argument 'q' must have 3 dims [total, heads, head_dim], got 4 dims [1, 50, 8, 64]"},
      {[](auto& a) { a.q.shape[2] = a.k.shape[2] = a.v.shape[2] = a.o.shape[2] = 48; },
       "head dim (the last dim of q and k) must be one of 32, 64, 96, 128, 192, 256, got 48"},
      {[](auto& a) { a.v.shape[0] = 69; },
       "argument 'v' must have shape [70, 2, 64] (k's first two dims and the head dim; 128 is also allowed with "
       "head dim 192), got [69, 2, 64]"},
      {[](auto& a) { a.o.shape[0] = 49; },
       "argument 'o' must have shape [50, 8, 64] (q's first two dims and v's head dim), got [49, 8, 64]"},
      {[](auto& a) { a.lse = gks::TensorRef::make(a.lse.data, a.lse.dtype, {50, 8}, kGpu); },
       "argument 'lse' must have shape [8, 50] (q's heads and rows), got [50, 8]"},
      {[](auto& a) { a.cu_seqlens_q.dtype = gks::DType::kInt64; }, "argument 'cu_seqlens_q' must be int32, got int64",
       kDtype},
      {[](auto& a) { a.cu_seqlens_q.shape[0] = 0; },
       "argument 'cu_seqlens_q' must have shape [B + 1] (B >= 0 sequences), got [0]"},
      {[](auto& a) { a.cu_seqlens_k.shape[0] = 5; }, "argument 'cu_seqlens_k' must have shape [4] (cu_seqlens_q's), got [5]"},
      {[](auto& a) { a.seqused_k = gks::TensorRef::make(gks_test::fake_address(9), gks::DType::kInt32, {4}, kGpu); },
       "argument 'seqused_k' must have shape [3] (one per sequence), got [4]"},
      {[](auto& a) { a.max_seqlen_q = -1; }, "argument 'max_seqlen_q' must be an int >= 0, got -1"},
      {[](auto& a) { a.k.shape[1] = a.v.shape[1] = 3; },
       "the query heads (8, dim 1 of q) must be a multiple of the key/value heads (3, dim 1 of k and v)"},
      {[](auto& a) { a.o.data = a.k.data; }, "argument 'o' must not share memory with argument 'k'"},
      {[](auto& a) { a.config = 2; }, "argument 'config'"},
      {[](auto& a) { a.q.strides[0] = 8 * 64 + 4; }, "argument 'q' must be 16-byte aligned"},
      {[](auto& a) { a.k = gks::TensorRef::make(a.k.data, a.k.dtype, {70, 2, 64}, kGpu); },
       "argument 'k' must have 4 dims [num_pages, page_size, heads, head_dim], got 3 dims [70, 2, 64]",
       gks::ErrorKind::kInvalidArgument, true},
      {[](auto& a) { a.v.shape[1] = 8; },
       "argument 'v' must have shape [9, 16, 2, 64] (k's first three dims and the head dim", gks::ErrorKind::kInvalidArgument,
       true},
      {[](auto& a) { a.page_table->dtype = gks::DType::kInt64; }, "argument 'page_table' must be int32, got int64", kDtype,
       true},
      {[](auto& a) { *a.page_table = gks::TensorRef::make(a.page_table->data, gks::DType::kInt32, {15}, kGpu); },
       "argument 'page_table' must have shape [3, max_pages] (one row per sequence), got [15]",
       gks::ErrorKind::kInvalidArgument, true},
      {[](auto& a) { a.k.shape[2] = a.v.shape[2] = 3; },
       "must be a multiple of the key/value heads (3, dim 2 of k and v)", gks::ErrorKind::kInvalidArgument, true},
  };
  for (const Case& c : cases) {
    auto a = varlen_args(c.paged);
    c.edit(a);
    expect_error([&] { validate_varlen(a); }, c.kind, c.message);
  }
}

TEST(FlashAttentionVarlenFwd, NoSequencesOrRowsLaunchNothing) {
  auto a = varlen_args();
  a.cu_seqlens_q.shape[0] = a.cu_seqlens_k.shape[0] = 1;  // B = 0
  EXPECT_NO_THROW(gks::flash_attention_varlen_fwd(a, nullptr));
  a = varlen_args();
  a.q.shape[0] = a.o.shape[0] = a.lse.shape[1] = 0;
  EXPECT_NO_THROW(gks::flash_attention_varlen_fwd(a, nullptr));
}

// ---- flash_attention_varlen_bwd: the varlen forward's checks, then do and the gradients ----

namespace {

gks::FlashAttentionVarlenBwdArgs varlen_bwd_args(int64_t head_dim = 64) {
  const auto f = varlen_args(false, head_dim);
  gks::FlashAttentionVarlenBwdArgs a;
  const auto f16 = gks::DType::kFloat16;
  a.q = f.q, a.k = f.k, a.v = f.v, a.o = f.o, a.lse = f.lse;
  a.cu_seqlens_q = f.cu_seqlens_q, a.cu_seqlens_k = f.cu_seqlens_k;
  a.max_seqlen_q = 30, a.max_seqlen_k = 40;
  a.dout = gks::TensorRef::make(gks_test::fake_address(10), f16, {50, 8, head_dim}, kGpu);
  a.dq = gks::TensorRef::make(gks_test::fake_address(11), f16, {50, 8, head_dim}, kGpu);
  a.dk = gks::TensorRef::make(gks_test::fake_address(12), f16, {70, 2, head_dim}, kGpu);
  a.dv = gks::TensorRef::make(gks_test::fake_address(13), f16, {70, 2, head_dim}, kGpu);
  return a;
}

void validate_varlen_bwd(const gks::FlashAttentionVarlenBwdArgs& a) {
  const gks::ValidateOnly scope;
  gks::flash_attention_varlen_bwd(a, nullptr);
}

}  // namespace

TEST(FlashAttentionVarlenBwd, AcceptsValidArguments) {
  for (int64_t d : {32, 64, 96, 128, 192, 256}) EXPECT_NO_THROW(validate_varlen_bwd(varlen_bwd_args(d)));
  auto a = varlen_bwd_args();
  a.causal = true;
  a.window_left = 10;
  a.softcap = 30.0;
  a.deterministic = true;
  a.config = 0;
  a.max_seqlen_q = a.max_seqlen_k = 0;  // hints only
  EXPECT_NO_THROW(validate_varlen_bwd(a));
}

TEST(FlashAttentionVarlenBwd, RejectsBadArguments) {
  using Edit = void (*)(gks::FlashAttentionVarlenBwdArgs&);
  struct Case {
    Edit edit;
    const char* message;
    gks::ErrorKind kind = gks::ErrorKind::kInvalidArgument;
  };
  constexpr auto kDtype = gks::ErrorKind::kUnsupportedDtype;
  const Case cases[] = {
      // The forward's checks, in this op's name.
      {[](auto& a) { a.v.dtype = gks::DType::kBFloat16; },
       "gks.flash_attention_varlen_bwd: argument 'v' must have the dtype of 'q' (float16), got bfloat16", kDtype},
      {[](auto& a) { a.lse = gks::TensorRef::make(a.lse.data, a.lse.dtype, {50, 8}, kGpu); },
       "argument 'lse' must have shape [8, 50] (q's heads and rows), got [50, 8]"},
      {[](auto& a) { a.cu_seqlens_k.shape[0] = 5; }, "argument 'cu_seqlens_k' must have shape [4] (cu_seqlens_q's), got [5]"},
      // Its own.
      {[](auto& a) { a.dout.dtype = gks::DType::kBFloat16; },
       "argument 'do' must have the dtype of 'q' (float16), got bfloat16", kDtype},
      {[](auto& a) { a.dout.shape[1] = 2; }, "argument 'do' must have shape [50, 8, 64] (o's shape), got [50, 2, 64]"},
      {[](auto& a) { a.dout.strides[2] = 2; }, "argument 'do' must be contiguous in its last dim (stride 1), got stride 2"},
      {[](auto& a) { a.dk.shape[0] = 69; }, "argument 'dk' must have shape [70, 2, 64] (k's shape), got [69, 2, 64]"},
      {[](auto& a) { a.dq.data = a.dout.data; }, "argument 'dq' must not share memory with argument 'do'"},
      {[](auto& a) { a.max_seqlen_k = -1; }, "argument 'max_seqlen_k' must be an int >= 0, got -1"},
      {[](auto& a) { a.config = 1; }, "gks.flash_attention_varlen_bwd: argument 'config' must be -1"},
      {[](auto& a) { a.dv.strides[0] = 2 * 64 + 4; }, "argument 'dv' must be 16-byte aligned"},
  };
  for (const Case& c : cases) {
    auto a = varlen_bwd_args();
    c.edit(a);
    expect_error([&] { validate_varlen_bwd(a); }, c.kind, c.message);
  }
}

TEST(FlashAttentionVarlenBwd, NoSequencesLaunchNothing) {
  auto a = varlen_bwd_args();
  a.cu_seqlens_q.shape[0] = a.cu_seqlens_k.shape[0] = 1;  // B = 0
  EXPECT_NO_THROW(gks::flash_attention_varlen_bwd(a, nullptr));
}
