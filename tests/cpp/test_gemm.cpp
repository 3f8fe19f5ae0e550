// SPDX-License-Identifier: Apache-2.0
// Host-side logic of the GEMMs: argument validation (every error names its argument), the
// config lists and the shape heuristic. Nothing here touches a GPU: validation throws
// before any launch, and the heuristic takes the SM count as an argument.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "gks/gks.h"

#include "test_util.h"

namespace {

using gks_test::expect_error;
using gks_test::kCpu;
using gks_test::kGpu;

constexpr int kH200Sms = 132;

gks::TensorRef mat(void* p, gks::DType dt, int64_t rows, int64_t cols,
                   std::initializer_list<int64_t> strides = {}) {
  return gks::TensorRef::make(p, dt, {rows, cols}, kGpu, strides);
}

gks::SgemmArgs sgemm_args(void* p, int64_t m, int64_t n, int64_t k) {
  gks::SgemmArgs a;
  a.a = mat(p, gks::DType::kFloat32, m, k);
  a.b = mat(gks_test::fake_address(2), gks::DType::kFloat32, k, n);
  a.c = mat(gks_test::fake_address(3), gks::DType::kFloat32, m, n);
  return a;
}

gks::WmmaGemmArgs wmma_args(void* p, int64_t m, int64_t n, int64_t k) {
  gks::WmmaGemmArgs a;
  a.a = mat(p, gks::DType::kFloat16, m, k);
  a.b = mat(gks_test::fake_address(2), gks::DType::kFloat16, k, n);
  a.c = mat(gks_test::fake_address(3), gks::DType::kFloat32, m, n);
  return a;
}

gks::Int8GemmArgs int8_args(void* p, int64_t m, int64_t n, int64_t k) {
  gks::Int8GemmArgs a;
  a.a = mat(p, gks::DType::kInt8, m, k);
  a.b = mat(gks_test::fake_address(2), gks::DType::kInt8, k, n);
  a.a_scale = mat(gks_test::fake_address(4), gks::DType::kFloat32, m, 1);
  a.b_scale = mat(gks_test::fake_address(5), gks::DType::kFloat32, 1, n);
  a.c = mat(gks_test::fake_address(3), gks::DType::kFloat16, m, n);
  return a;
}

gks::GemmFp8Args fp8_args(void* p, int64_t m, int64_t n, int64_t k, gks::Fp8Scaling scaling) {
  gks::GemmFp8Args a;
  a.a = mat(p, gks::DType::kFloat8E4M3, m, k);
  a.b = mat(gks_test::fake_address(2), gks::DType::kFloat8E4M3, k, n);
  a.scaling = scaling;
  if (scaling == gks::Fp8Scaling::kTensor) {
    a.a_scale = gks::TensorRef::make(gks_test::fake_address(4), gks::DType::kFloat32, {1}, kGpu);
    a.b_scale = gks::TensorRef::make(gks_test::fake_address(5), gks::DType::kFloat32, {1}, kGpu);
  } else if (scaling == gks::Fp8Scaling::kRow) {
    a.a_scale = mat(gks_test::fake_address(4), gks::DType::kFloat32, m, 1);
    a.b_scale = mat(gks_test::fake_address(5), gks::DType::kFloat32, 1, n);
  } else {
    a.a_scale = mat(gks_test::fake_address(4), gks::DType::kFloat32, m, (k + 127) / 128);
    a.b_scale = mat(gks_test::fake_address(5), gks::DType::kFloat32, (k + 127) / 128, (n + 127) / 128);
  }
  a.c = mat(gks_test::fake_address(3), gks::DType::kBFloat16, m, n);
  return a;
}

// ---- gemm_matrix: the operand rules every GEMM shares ----

TEST(GemmMatrix, AcceptsPaddedLeadingDimension) {
  char buf[16];
  const auto m = gks::detail::gemm_matrix(mat(buf, gks::DType::kFloat32, 3, 5, {8, 1}), "op",
                                          "a", -1, -1);
  EXPECT_EQ(m.rows, 3);
  EXPECT_EQ(m.cols, 5);
  EXPECT_EQ(m.ld, 8);
}

TEST(GemmMatrix, SingleRowIgnoresItsRowStride) {
  char buf[16];
  const auto m = gks::detail::gemm_matrix(mat(buf, gks::DType::kFloat32, 1, 5, {1, 1}), "op",
                                          "a", -1, -1);
  EXPECT_EQ(m.ld, 5);
}

TEST(GemmMatrix, RejectsTransposedView) {
  char buf[16];
  expect_error(
      [&] {
        gks::detail::gemm_matrix(mat(buf, gks::DType::kFloat32, 4, 6, {1, 4}), "gks.op", "b",
                                 -1, -1);
      },
      gks::ErrorKind::kInvalidArgument, "transposed views are not accepted");
}

TEST(GemmMatrix, RejectsOverlappingRows) {
  char buf[16];
  expect_error(
      [&] {
        gks::detail::gemm_matrix(mat(buf, gks::DType::kFloat32, 4, 6, {3, 1}), "gks.op", "a",
                                 -1, -1);
      },
      gks::ErrorKind::kInvalidArgument, "argument 'a' must have a leading dimension");
}

TEST(GemmMatrix, RejectsWrongRank) {
  char buf[16];
  expect_error(
      [&] {
        gks::detail::gemm_matrix(gks::TensorRef::make(buf, gks::DType::kFloat32, {2, 3, 4}, kGpu),
                                 "gks.op", "a", -1, -1);
      },
      gks::ErrorKind::kInvalidArgument, "argument 'a' must be a 2-D matrix");
}

TEST(GemmMatrix, Alignment) {
  alignas(16) char buf[64];
  EXPECT_TRUE(gks::detail::gemm_rows_aligned16({buf, 2, 3, 4}, 4));
  EXPECT_FALSE(gks::detail::gemm_rows_aligned16({buf, 2, 3, 3}, 4));   // 12-byte rows
  EXPECT_FALSE(gks::detail::gemm_rows_aligned16({buf + 4, 2, 3, 4}, 4));  // base
  EXPECT_TRUE(gks::detail::gemm_rows_aligned16({buf, 2, 3, 16}, 1));
}

// ---- validation: each op names the bad argument ----

TEST(Sgemm, RejectsShapeMismatch) {
  char buf[64];
  auto a = sgemm_args(buf, 4, 5, 6);
  a.b = mat(buf, gks::DType::kFloat32, 7, 5);
  expect_error([&] { gks::sgemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'b' must have shape [K, N] with K = 6");
}

TEST(Sgemm, RejectsWrongOutputShape) {
  char buf[64];
  auto a = sgemm_args(buf, 4, 5, 6);
  a.c = mat(buf, gks::DType::kFloat32, 4, 6);
  expect_error([&] { gks::sgemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'c' must have shape [4, 5]");
}

TEST(Sgemm, RejectsHalfInput) {
  char buf[64];
  auto a = sgemm_args(buf, 4, 5, 6);
  a.b.dtype = gks::DType::kFloat16;
  expect_error([&] { gks::sgemm(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'b' must be float32, got float16");
}

TEST(Sgemm, RejectsCpuTensor) {
  char buf[64];
  auto a = sgemm_args(buf, 4, 5, 6);
  a.a.device = kCpu;
  expect_error([&] { gks::sgemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'a' must be a CUDA tensor");
}

TEST(Sgemm, RejectsBadConfig) {
  char buf[64];
  auto a = sgemm_args(buf, 4, 5, 6);
  a.config = int(gks::detail::sgemm_configs().size());
  expect_error([&] { gks::sgemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'config' must be -1 (heuristic) or a config index");
  a.config = -2;
  expect_error([&] { gks::sgemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'config'");
}

TEST(Sgemm, RejectsHugeDims) {
  char buf[64];
  auto a = sgemm_args(buf, int64_t(1) << 31, 5, 6);
  a.a.strides[0] = 6;
  expect_error([&] { gks::sgemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "must each be below 2^31");
}

TEST(WmmaGemm, RejectsFloat32Input) {
  char buf[64];
  auto a = wmma_args(buf, 4, 5, 6);
  a.a.dtype = gks::DType::kFloat32;
  expect_error([&] { gks::wmma_gemm(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'a' must be float16 or bfloat16");
}

TEST(WmmaGemm, RejectsMixedInputDtypes) {
  char buf[64];
  auto a = wmma_args(buf, 4, 5, 6);
  a.b.dtype = gks::DType::kBFloat16;
  expect_error([&] { gks::wmma_gemm(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'b' must have the dtype of 'a'");
}

TEST(WmmaGemm, RejectsOtherOutputDtype) {
  char buf[64];
  auto a = wmma_args(buf, 4, 5, 6);
  a.c.dtype = gks::DType::kBFloat16;
  expect_error([&] { gks::wmma_gemm(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'c' must be float32 or the dtype of 'a'");
}

TEST(WmmaGemm, RejectsTransposedB) {
  char buf[64];
  auto a = wmma_args(buf, 4, 5, 6);
  a.b = mat(buf, gks::DType::kFloat16, 6, 5, {1, 6});
  expect_error([&] { gks::wmma_gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'b' must be row-major");
}

TEST(Int8Gemm, RejectsFloatInput) {
  char buf[64];
  auto a = int8_args(buf, 4, 5, 6);
  a.b.dtype = gks::DType::kFloat16;
  expect_error([&] { gks::int8_gemm(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'b_q' must be int8");
}

TEST(Int8Gemm, RejectsScaleShape) {
  char buf[64];
  auto a = int8_args(buf, 4, 5, 6);
  a.a_scale = mat(buf, gks::DType::kFloat32, 1, 4);
  expect_error([&] { gks::int8_gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'a_scale' must have shape [M, 1] or [M] with M = 4");
  a = int8_args(buf, 4, 5, 6);
  a.b_scale = mat(buf, gks::DType::kFloat32, 5, 1);
  expect_error([&] { gks::int8_gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'b_scale' must have shape [1, N] or [N] with N = 5");
}

TEST(Int8Gemm, RejectsScaleDtype) {
  char buf[64];
  auto a = int8_args(buf, 4, 5, 6);
  a.b_scale.dtype = gks::DType::kFloat16;
  expect_error([&] { gks::int8_gemm(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'b_scale' must be float32");
}

TEST(Int8Gemm, RejectsInt32Output) {
  char buf[64];
  auto a = int8_args(buf, 4, 5, 6);
  a.c.dtype = gks::DType::kInt32;
  expect_error([&] { gks::int8_gemm(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'c' must be float16, bfloat16 or float32");
}

TEST(Int8Gemm, KMajorViewOfQuantizedBNeedsAStrideOfAtLeastK) {
  // b_q = q.T for q [N, K] is accepted (stride(0) == 1); its stride(1) is q's leading
  // dimension and must cover K = 6.
  char buf[64];
  auto a = int8_args(buf, 4, 5, 6);
  a.b = mat(buf, gks::DType::kInt8, 6, 5, {1, 5});
  expect_error([&] { gks::int8_gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'b_q' is a K-major view (stride(0) == 1), so its stride(1) must be at "
               "least its 6 rows (K), got 5");
}

TEST(Int8Gemm, RejectsBThatIsNeitherRowMajorNorKMajor) {
  char buf[64];
  auto a = int8_args(buf, 4, 5, 6);
  a.b = mat(buf, gks::DType::kInt8, 6, 5, {10, 2});
  expect_error([&] { gks::int8_gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'b_q' must be row-major");
}

// ---- config lists and the heuristic ----

void expect_well_formed(const std::vector<gks::GemmConfigInfo>& configs) {
  ASSERT_GE(configs.size(), 3u);
  std::set<std::string> names;
  for (const auto& c : configs) {
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate config name " << c.name;
    EXPECT_GT(c.block_m, 0);
    EXPECT_GT(c.block_n, 0);
    EXPECT_GT(c.block_k, 0);
    EXPECT_EQ(c.threads % 32, 0);
    EXPECT_GE(c.stages, 2);
  }
}

TEST(GemmFp8, RejectsMixedFp8Types) {
  char buf[64];
  auto a = fp8_args(buf, 4, 5, 32, gks::Fp8Scaling::kTensor);
  a.b.dtype = gks::DType::kFloat8E5M2;
  expect_error([&] { gks::gemm_fp8(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'b' must have the dtype of 'a' (float8_e4m3fn), got float8_e5m2");
  a = fp8_args(buf, 4, 5, 32, gks::Fp8Scaling::kTensor);
  a.a.dtype = gks::DType::kInt8;
  expect_error([&] { gks::gemm_fp8(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'a' must be float8_e4m3fn or float8_e5m2, got int8");
}

TEST(GemmFp8, RejectsKNotAMultipleOf16) {
  char buf[64];
  auto a = fp8_args(buf, 4, 5, 24, gks::Fp8Scaling::kRow);
  expect_error([&] { gks::gemm_fp8(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "K (the columns of argument 'a') must be a multiple of 16, got 24");
}

TEST(GemmFp8, RejectsScalesThatDoNotMatchTheScaling) {
  char buf[64];
  auto a = fp8_args(buf, 4, 5, 32, gks::Fp8Scaling::kTensor);
  a.a_scale = mat(buf, gks::DType::kFloat32, 4, 1);
  expect_error([&] { gks::gemm_fp8(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'a_scale' must have one element (shape [] or [1]) for scaling 'tensor', got [4, 1]");
  a = fp8_args(buf, 4, 5, 32, gks::Fp8Scaling::kRow);
  a.b_scale = mat(buf, gks::DType::kFloat32, 5, 1);
  expect_error([&] { gks::gemm_fp8(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'b_scale' must have shape [1, N] or [N] with N = 5");
  a = fp8_args(buf, 4, 300, 272, gks::Fp8Scaling::kBlock);
  a.b_scale = mat(buf, gks::DType::kFloat32, 3, 2);
  expect_error([&] { gks::gemm_fp8(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'b_scale' must have shape [ceil(K / 128), ceil(N / 128)] = [3, 3] for scaling "
               "'block', got [3, 2]");
  a = fp8_args(buf, 4, 300, 272, gks::Fp8Scaling::kBlock);
  a.a_scale.dtype = gks::DType::kFloat16;
  expect_error([&] { gks::gemm_fp8(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'a_scale' must be float32");
}

TEST(GemmFp8, AcceptsKMajorBAndRefusesOtherLayouts) {
  char buf[64];
  auto a = fp8_args(buf, 4, 5, 32, gks::Fp8Scaling::kRow);
  a.b = mat(buf, gks::DType::kFloat8E4M3, 32, 5, {1, 16});
  expect_error([&] { gks::gemm_fp8(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'b' is a K-major view (stride(0) == 1), so its stride(1) must be at least its 32 rows");
  a.b = mat(buf, gks::DType::kFloat8E4M3, 32, 5, {10, 2});
  expect_error([&] { gks::gemm_fp8(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'b' must be row-major");
}

TEST(GemmFp8, ConfigsPromoteEvery128OfK) {
  const auto& configs = gks::detail::gemm_fp8_configs();
  ASSERT_EQ(int(configs.size()), gks::detail::kNumHopperFp8Configs);
  expect_well_formed(configs);
  for (const auto& c : gks::detail::kHopperFp8Configs) {
    // The promotion holds a k-block's accumulators beside the total: at most 128 columns.
    EXPECT_LE(c.block_n, 128) << c.name;
    EXPECT_EQ(c.block_k, 128) << c.name;  // one 128-wide scale group a k-block
  }
  EXPECT_LT(gks::detail::hopper_fp8_gemm_heuristic(8192, 8192, 8192, kH200Sms),
            gks::detail::kNumHopperFp8Configs);
}

TEST(GemmConfigs, WellFormed) {
  expect_well_formed(gks::detail::sgemm_configs());
  expect_well_formed(gks::detail::wmma_gemm_configs());
  expect_well_formed(gks::detail::int8_gemm_configs());
}

int area(const gks::GemmConfigInfo& c) { return c.block_m * c.block_n; }

TEST(GemmHeuristic, LargeSquareGetsALargeTile) {
  const auto& sg = gks::detail::sgemm_configs();
  const auto& wm = gks::detail::wmma_gemm_configs();
  const auto& i8 = gks::detail::int8_gemm_configs();
  for (int64_t s : {4096, 8192}) {
    EXPECT_GE(area(sg[gks::detail::sgemm_heuristic(s, s, s, kH200Sms)]), 128 * 128);
    EXPECT_GE(area(wm[gks::detail::wmma_gemm_heuristic(s, s, s, kH200Sms)]), 128 * 128);
    EXPECT_GE(area(i8[gks::detail::int8_gemm_heuristic(s, s, s, kH200Sms)]), 128 * 128);
  }
}

TEST(GemmHeuristic, SkinnyMGetsShortTiles) {
  const auto& sg = gks::detail::sgemm_configs();
  const auto& wm = gks::detail::wmma_gemm_configs();
  const auto& i8 = gks::detail::int8_gemm_configs();
  for (int64_t m : {1, 16}) {
    EXPECT_LE(sg[gks::detail::sgemm_heuristic(m, 4096, 4096, kH200Sms)].block_m, 32);
    EXPECT_LE(wm[gks::detail::wmma_gemm_heuristic(m, 4096, 4096, kH200Sms)].block_m, 64);
    EXPECT_LE(i8[gks::detail::int8_gemm_heuristic(m, 4096, 4096, kH200Sms)].block_m, 64);
  }
}

TEST(GemmHeuristic, AlwaysAValidIndexAndDeterministic) {
  for (int64_t m : {1, 7, 128, 1000, 5000})
    for (int64_t n : {1, 33, 4096})
      for (int sms : {1, 80, 132}) {
        const int s = gks::detail::sgemm_heuristic(m, n, 64, sms);
        const int w = gks::detail::wmma_gemm_heuristic(m, n, 64, sms);
        const int q = gks::detail::int8_gemm_heuristic(m, n, 64, sms);
        EXPECT_GE(s, 0);
        EXPECT_LT(s, int(gks::detail::sgemm_configs().size()));
        EXPECT_GE(w, 0);
        EXPECT_LT(w, int(gks::detail::wmma_gemm_configs().size()));
        EXPECT_GE(q, 0);
        EXPECT_LT(q, int(gks::detail::int8_gemm_configs().size()));
        EXPECT_EQ(s, gks::detail::sgemm_heuristic(m, n, 64, sms));
      }
}

TEST(GemmHeuristic, PrefersFullWaves) {
  // One wave of tiles on a 132-SM GPU should beat a 25%-full wave of larger tiles.
  const std::vector<gks::GemmConfigInfo> configs = {{"big", 128, 128, 8, 256, 2},
                                                    {"small", 32, 32, 8, 64, 2}};
  const std::vector<gks::detail::GemmConfigTraits> traits = {{2, 1.0}, {8, 0.6}};
  EXPECT_EQ(gks::detail::pick_gemm_config(configs, traits, 128, 4096, 132), 1);
  EXPECT_EQ(gks::detail::pick_gemm_config(configs, traits, 4096, 4096, 132), 0);
  // Equal scores: the earlier config wins.
  const std::vector<gks::detail::GemmConfigTraits> same = {{2, 1.0}, {2, 1.0}};
  const std::vector<gks::GemmConfigInfo> twins = {{"a", 64, 64, 8, 64, 2},
                                                  {"b", 64, 64, 8, 64, 2}};
  EXPECT_EQ(gks::detail::pick_gemm_config(twins, same, 1000, 1000, 132), 0);
}

// ---- the Hopper kernel (gks::gemm, and int8_gemm's Hopper path): which operands TMA can
// describe, the Hopper-or-WMMA decision, the config list and heuristic, validation.

using gks::detail::GemmMatrix;
using gks::detail::GemmPath;

gks::GemmArgs args_for(void* p, int64_t m, int64_t n, int64_t k,
                       gks::DType dt = gks::DType::kBFloat16) {
  gks::GemmArgs a;
  a.a = mat(p, dt, m, k);
  a.b = mat(gks_test::fake_address(2), dt, k, n);
  a.c = mat(gks_test::fake_address(3), dt, m, n);
  return a;
}

alignas(16) char g_buf[256];

// ---- which operands TMA can describe ----

TEST(HopperGemmTma, AlignedRowsAreDescribable) {
  EXPECT_TRUE(gks::detail::tma_can_describe(GemmMatrix{g_buf, 4, 8, 8}, 2));     // 16-byte rows
  EXPECT_TRUE(gks::detail::tma_can_describe(GemmMatrix{g_buf, 4, 5, 64}, 2));    // padded ld
  EXPECT_TRUE(gks::detail::tma_can_describe(GemmMatrix{g_buf + 16, 4, 8, 8}, 2));
}

TEST(HopperGemmTma, LeadingDimensionMustBeAMultipleOf16Bytes) {
  EXPECT_FALSE(gks::detail::tma_can_describe(GemmMatrix{g_buf, 4, 7, 7}, 2));    // 14 bytes
  EXPECT_FALSE(gks::detail::tma_can_describe(GemmMatrix{g_buf, 4, 8, 12}, 2));   // 24 bytes
  EXPECT_FALSE(gks::detail::tma_can_describe(GemmMatrix{g_buf, 4, 1, 1}, 2));    // K = 1
}

TEST(HopperGemmTma, BasePointerMustBe16ByteAligned) {
  EXPECT_FALSE(gks::detail::tma_can_describe(GemmMatrix{g_buf + 2, 4, 8, 8}, 2));
  EXPECT_FALSE(gks::detail::tma_can_describe(GemmMatrix{g_buf + 8, 1, 8, 8}, 2));
}

TEST(HopperGemmTma, SingleRowIgnoresItsLeadingDimension) {
  // One row never steps to the next: any column count works (the launcher pads the stride).
  EXPECT_TRUE(gks::detail::tma_can_describe(GemmMatrix{g_buf, 1, 7, 7}, 2));
  EXPECT_TRUE(gks::detail::tma_can_describe(GemmMatrix{g_buf, 1, 1, 1}, 2));
}

TEST(HopperGemmTma, StrideBelow2To40Bytes) {
  const int64_t huge = (int64_t(1) << 40) / 2;  // elements: 2^40 bytes
  EXPECT_FALSE(gks::detail::tma_can_describe(GemmMatrix{g_buf, 2, 8, huge}, 2));
  EXPECT_TRUE(gks::detail::tma_can_describe(GemmMatrix{g_buf, 2, 8, huge - 8}, 2));
}

// ---- Hopper or WMMA ----

TEST(HopperGemmPath, HopperOnlyOnSm90WithSm90aCode) {
  const GemmMatrix a{g_buf, 64, 64, 64}, b{g_buf, 64, 64, 64};
  EXPECT_EQ(gks::detail::choose_gemm_path(true, true, a, b), GemmPath::kHopper);
  EXPECT_EQ(gks::detail::choose_gemm_path(false, true, a, b), GemmPath::kWmma);
  EXPECT_EQ(gks::detail::choose_gemm_path(true, false, a, b), GemmPath::kWmma);
}

TEST(HopperGemmPath, OperandsTmaCannotLoadFallBackToWmma) {
  const GemmMatrix good{g_buf, 64, 64, 64};
  const GemmMatrix odd_ld{g_buf, 64, 64, 65};
  const GemmMatrix shifted{g_buf + 2, 64, 64, 64};
  EXPECT_EQ(gks::detail::choose_gemm_path(true, true, odd_ld, good), GemmPath::kWmma);
  EXPECT_EQ(gks::detail::choose_gemm_path(true, true, good, odd_ld), GemmPath::kWmma);
  EXPECT_EQ(gks::detail::choose_gemm_path(true, true, shifted, good), GemmPath::kWmma);
  EXPECT_EQ(gks::detail::choose_gemm_path(true, true, good, shifted), GemmPath::kWmma);
}

TEST(HopperGemmPath, Names) {
  EXPECT_STREQ(gks::detail::gemm_path_name(GemmPath::kHopper), "hopper");
  EXPECT_STREQ(gks::detail::gemm_path_name(GemmPath::kWmma), "wmma");
}

TEST(HopperGemmPath, BuildFlagMatchesTheMacro) {
#if defined(GKS_WITH_SM90A)
  EXPECT_TRUE(gks::detail::hopper_gemm_compiled());
#else
  EXPECT_FALSE(gks::detail::hopper_gemm_compiled());
#endif
}

// ---- configs and the heuristic ----

TEST(HopperGemmConfigs, WellFormedAndUnique) {
  const auto& configs = gks::detail::hopper_gemm_configs();
  ASSERT_EQ(int(configs.size()), gks::detail::kNumHopperGemmConfigs);
  std::set<std::string> names;
  for (const auto& c : configs) {
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate config name " << c.name;
    EXPECT_EQ(c.block_k, 64) << c.name;
    // Ping-pong tiles are one warpgroup's: 64 or 128 rows; cooperative ones two's.
    EXPECT_TRUE(c.ping_pong ? (c.block_m == 64 || c.block_m == 128)
                            : (c.block_m == 128 || c.block_m == 256)) << c.name;
    EXPECT_TRUE(c.block_n == 64 || c.block_n == 128 || c.block_n == 256) << c.name;
    EXPECT_TRUE(c.cluster_m == 1 || c.cluster_m == 2) << c.name;
    EXPECT_TRUE(c.cluster_n == 1 || c.cluster_n == 2 || c.cluster_n == 4) << c.name;
    EXPECT_TRUE(c.cluster_m == 1 || c.cluster_n == 1) << c.name;  // along M or along N
    // Stream-K runs single CTAs (its workspace slots are a CTA's).
    if (c.stream_k) EXPECT_EQ(c.cluster_m * c.cluster_n, 1) << c.name;
    EXPECT_GE(c.stages, 2) << c.name;
    // The stage ring (A + B tiles) must fit in 227 KiB with room for the epilogue buffer.
    EXPECT_LE(c.stages * (c.block_m + c.block_n) * c.block_k * 2, 200 * 1024) << c.name;
    // The name spells the config.
    const std::string expected = std::to_string(c.block_m) + "x" + std::to_string(c.block_n) +
                                 "x" + std::to_string(c.block_k) + "_s" +
                                 std::to_string(c.stages) +
                                 (c.cluster_n > 1 ? "_cn" + std::to_string(c.cluster_n)
                                                  : "_c" + std::to_string(c.cluster_m)) +
                                 (c.ping_pong ? "_pp" : "") + (c.stream_k ? "_sk" : "");
    EXPECT_EQ(expected, c.name);
  }
}

TEST(HopperGemmHeuristic, ValidSingleCtaConfigAndDeterministic) {
  const auto& configs = gks::detail::hopper_gemm_configs();
  for (int64_t m : {1, 64, 128, 1000, 4096, 8192})
    for (int64_t n : {1, 64, 4096, 14336})
      for (int sms : {1, 78, 132}) {
        const int c = gks::detail::hopper_gemm_heuristic(m, n, 4096, sms);
        ASSERT_GE(c, 0);
        ASSERT_LT(c, int(configs.size()));
        EXPECT_EQ(configs[c].cluster_m, 1);
        // Clusters along N only for one row of tiles.
        EXPECT_TRUE(configs[c].cluster_n == 1 || m <= configs[c].block_m) << m << "x" << n;
        EXPECT_FALSE(configs[c].ping_pong);
        EXPECT_FALSE(configs[c].stream_k);
        EXPECT_EQ(c, gks::detail::hopper_gemm_heuristic(m, n, 4096, sms));
      }
}

TEST(HopperGemmHeuristic, LargeSquareGetsTheWideTile) {
  const auto& configs = gks::detail::hopper_gemm_configs();
  for (int64_t s : {4096, 8192}) {
    const auto& c = configs[gks::detail::hopper_gemm_heuristic(s, s, s, kH200Sms)];
    EXPECT_EQ(c.block_m * c.block_n, 128 * 256) << c.name;
  }
}

TEST(HopperGemmHeuristic, SkinnyMGetsMoreTiles) {
  const auto& configs = gks::detail::hopper_gemm_configs();
  const auto& c = configs[gks::detail::hopper_gemm_heuristic(128, 4096, 4096, kH200Sms)];
  EXPECT_LT(c.block_m * c.block_n, 128 * 256) << c.name;
}

TEST(HopperGemmHeuristic, OneWideRowOfTilesSharesAThroughAClusterAlongN) {
  const auto& configs = gks::detail::hopper_gemm_configs();
  const auto& wide = configs[gks::detail::hopper_gemm_heuristic(128, 14336, 4096, kH200Sms)];
  EXPECT_EQ(wide.cluster_n, 4) << wide.name;
  // Two rows of tiles, or too few tiles to fill the GPU without split-K: single CTAs.
  EXPECT_EQ(configs[gks::detail::hopper_gemm_heuristic(256, 14336, 4096, kH200Sms)].cluster_n, 1);
  EXPECT_EQ(configs[gks::detail::hopper_gemm_heuristic(128, 4096, 4096, kH200Sms)].cluster_n, 1);
}

TEST(HopperGemmSplitK, OnlyWhenTheTilesFillAtMostHalfTheGpu) {
  EXPECT_EQ(gks::detail::hopper_k_splits(67, 64, 132), 1);   // more than half: no split
  EXPECT_EQ(gks::detail::hopper_k_splits(66, 64, 132), 2);   // exactly half: two splits
  EXPECT_EQ(gks::detail::hopper_k_splits(32, 64, 132), 4);   // 128 units
  EXPECT_EQ(gks::detail::hopper_k_splits(1, 1000, 132), 8);  // at most 8
  EXPECT_EQ(gks::detail::hopper_k_splits(1, 12, 132), 3);    // at least 4 k-blocks a split
  EXPECT_EQ(gks::detail::hopper_k_splits(1, 3, 132), 1);
  EXPECT_EQ(gks::detail::hopper_k_splits(16, 64, 66), 4);    // slots: clusters of 2 on 132 SMs
}

TEST(HopperGemmStreamK, WholeWavesButTheLastAreDataParallel) {
  using gks::detail::hopper_stream_k_plan;
  // 128 x 14336 in 128 x 128 tiles: 112 tiles, all stream-K over every SM.
  auto plan = hopper_stream_k_plan(112, 64, 132);
  EXPECT_EQ(plan.dp_tiles, 0);
  EXPECT_EQ(plan.sk_tiles, 112);
  EXPECT_EQ(plan.ctas, 132);
  // 1792 tiles = 13.6 waves: 12 waves data-parallel, the last 1.6 stream-K.
  plan = hopper_stream_k_plan(1792, 64, 132);
  EXPECT_EQ(plan.dp_tiles, 12 * 132);
  EXPECT_EQ(plan.sk_tiles, 1792 - 12 * 132);
  EXPECT_EQ(plan.ctas, 132);
  // Exactly two waves: one data-parallel, one stream-K (whose ranges are whole tiles).
  plan = hopper_stream_k_plan(264, 10, 132);
  EXPECT_EQ(plan.dp_tiles, 132);
  EXPECT_EQ(plan.sk_tiles, 132);
  // Few k-blocks: no CTA gets under 4 of them, and there is always one.
  plan = hopper_stream_k_plan(30, 16, 132);
  EXPECT_EQ(plan.dp_tiles, 0);
  EXPECT_EQ(plan.ctas, 30 * 16 / 4);
  plan = hopper_stream_k_plan(1, 1, 132);
  EXPECT_EQ(plan.sk_tiles, 1);
  EXPECT_EQ(plan.ctas, 1);
}

// ---- gks::int8_gemm's Hopper path ----

// A Hopper-capable machine, a_q [M, 64] TMA can load, b_q row-major [64, 64].
// The mma.sync configs that lead int8_gemm_configs().
int int8_mma_configs() {
  int n = 0;
  while (gks::detail::int8_gemm_config_ref(n).kernel == gks::detail::Int8GemmKernel::kMma) ++n;
  return n;
}

TEST(Int8GemmConfigs, EachNamesItsKernelAndItsIndexThere) {
  using gks::detail::Int8GemmKernel;
  EXPECT_EQ(gks::detail::int8_gemm_config_ref(-1).kernel, Int8GemmKernel::kHeuristic);
  const auto& all = gks::detail::int8_gemm_configs();
  ASSERT_EQ(int8_mma_configs(), 4);
  for (int i = 0; i < int(all.size()); ++i) {
    const auto ref = gks::detail::int8_gemm_config_ref(i);
    const bool hopper = std::string(all[i].name).rfind("hopper_", 0) == 0;
    EXPECT_EQ(ref.kernel, hopper ? Int8GemmKernel::kHopper : Int8GemmKernel::kMma) << all[i].name;
    if (hopper) EXPECT_STREQ(gks::detail::kHopperInt8Configs[ref.index].name, all[i].name);
    else EXPECT_EQ(ref.index, i);
  }
}

gks::detail::Int8PathFacts int8_facts(int64_t m) {
  gks::detail::Int8PathFacts f;
  f.device_is_sm90 = true;
  f.built_with_sm90a = true;
  f.a = GemmMatrix{g_buf, m, 64, 64};
  f.b_storage = GemmMatrix{g_buf, 64, 64, 64};
  f.n = 64;
  return f;
}

TEST(Int8HopperPath, KMajorBIsReadInPlaceOnHopper) {
  using gks::detail::Int8GemmPath;
  auto f = int8_facts(16);
  f.b_k_major = true;
  EXPECT_EQ(gks::detail::choose_int8_gemm_path(f), Int8GemmPath::kHopper);
  // Off sm_90, without sm_90a code, or with a forced mma.sync config: transposed for mma.sync.
  for (auto change : {+[](gks::detail::Int8PathFacts& x) { x.device_is_sm90 = false; },
                      +[](gks::detail::Int8PathFacts& x) { x.built_with_sm90a = false; },
                      +[](gks::detail::Int8PathFacts& x) { x.config = 0; }}) {
    auto g = f;
    change(g);
    EXPECT_EQ(gks::detail::choose_int8_gemm_path(g), Int8GemmPath::kMmaTransposed);
  }
  // A K-major b_q whose rows TMA cannot load (leading dimension 40 bytes).
  f.b_storage = GemmMatrix{g_buf, 64, 40, 40};
  EXPECT_EQ(gks::detail::choose_int8_gemm_path(f), Int8GemmPath::kMmaTransposed);
}

TEST(Int8HopperPath, RowMajorBIsTransposedOnlyForLargeMOrAForcedHopperConfig) {
  using gks::detail::Int8GemmPath;
  const int64_t big = gks::detail::kInt8HopperMinRows;
  EXPECT_EQ(gks::detail::choose_int8_gemm_path(int8_facts(big)), Int8GemmPath::kHopperTransposed);
  EXPECT_EQ(gks::detail::choose_int8_gemm_path(int8_facts(big - 1)), Int8GemmPath::kMma);
  auto forced = int8_facts(16);
  forced.config = int8_mma_configs();  // the first Hopper config
  EXPECT_EQ(gks::detail::choose_int8_gemm_path(forced), Int8GemmPath::kHopperTransposed);
  forced.config = int8_mma_configs() - 1;
  EXPECT_EQ(gks::detail::choose_int8_gemm_path(forced), Int8GemmPath::kMma);
}

TEST(Int8HopperPath, ATmaCannotLoadOrTooLargeMeansMma) {
  using gks::detail::Int8GemmPath;
  // int8 rows: the leading dimension must be a multiple of 16 elements, the base aligned.
  auto f = int8_facts(1024);
  f.a = GemmMatrix{g_buf, 1024, 40, 48};
  EXPECT_EQ(gks::detail::choose_int8_gemm_path(f), Int8GemmPath::kHopperTransposed);
  f.a = GemmMatrix{g_buf, 1024, 40, 40};
  EXPECT_EQ(gks::detail::choose_int8_gemm_path(f), Int8GemmPath::kMma);
  f.a = GemmMatrix{g_buf + 1, 1024, 64, 64};
  EXPECT_EQ(gks::detail::choose_int8_gemm_path(f), Int8GemmPath::kMma);
  f = int8_facts(1024);
  f.n = gks::detail::kMaxTmaDim + 1;  // TMA coordinates are int32
  EXPECT_EQ(gks::detail::choose_int8_gemm_path(f), Int8GemmPath::kMma);
  f.config = int8_mma_configs();  // a forced Hopper config gives way too
  EXPECT_EQ(gks::detail::choose_int8_gemm_path(f), Int8GemmPath::kMma);
}

TEST(Int8HopperPath, Names) {
  using gks::detail::Int8GemmPath;
  EXPECT_STREQ(gks::detail::int8_gemm_path_name(Int8GemmPath::kHopper), "hopper");
  EXPECT_STREQ(gks::detail::int8_gemm_path_name(Int8GemmPath::kHopperTransposed), "hopper+transpose");
  EXPECT_STREQ(gks::detail::int8_gemm_path_name(Int8GemmPath::kMma), "mma");
  EXPECT_STREQ(gks::detail::int8_gemm_path_name(Int8GemmPath::kMmaTransposed), "mma+transpose");
}

TEST(Int8HopperConfigs, FollowTheMmaConfigsAndSpellTheirShape) {
  const auto& all = gks::detail::int8_gemm_configs();
  ASSERT_EQ(int(all.size()), int8_mma_configs() + gks::detail::kNumHopperInt8Configs);
  std::set<std::string> names;
  for (const auto& c : all) EXPECT_TRUE(names.insert(c.name).second) << "duplicate " << c.name;
  for (int i = 0; i < gks::detail::kNumHopperInt8Configs; ++i) {
    const auto& h = gks::detail::kHopperInt8Configs[i];
    const auto& c = all[int8_mma_configs() + i];
    EXPECT_STREQ(c.name, h.name);
    EXPECT_EQ(h.block_k, 128) << h.name;  // 128 bytes of K, like the 16-bit tiles' 64
    const std::string expected = "hopper_" + std::to_string(h.block_m) + "x" +
                                 std::to_string(h.block_n) + "x128_s" + std::to_string(h.stages) +
                                 "_c" + std::to_string(h.cluster_m);
    EXPECT_EQ(expected, h.name);
  }
  // The mma.sync heuristic never picks a Hopper config; the Hopper one a single-CTA config.
  for (int64_t m : {1, 128, 4096, 8192})
    for (int64_t n : {8, 4096, 14336}) {
      EXPECT_LT(gks::detail::int8_gemm_heuristic(m, n, 4096, kH200Sms), int8_mma_configs());
      const int h = gks::detail::hopper_int8_gemm_heuristic(m, n, 4096, kH200Sms);
      ASSERT_GE(h, 0);
      ASSERT_LT(h, gks::detail::kNumHopperInt8Configs);
      EXPECT_EQ(gks::detail::kHopperInt8Configs[h].cluster_m, 1);
    }
}

// ---- validation: every error names its argument, before any CUDA call ----

TEST(HopperGemmValidation, RejectsCpuTensorFirst) {
  auto a = args_for(g_buf, 4, 8, 8);
  a.a.device = kCpu;
  a.a.dtype = gks::DType::kInt32;  // the device is reported before the dtype
  expect_error([&] { gks::gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "gks.gemm: argument 'a' must be a CUDA tensor, got a tensor on cpu");
}

TEST(HopperGemmValidation, RejectsFloat32Input) {
  auto a = args_for(g_buf, 4, 8, 8, gks::DType::kFloat32);
  expect_error([&] { gks::gemm(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'a' must be float16 or bfloat16, got float32");
}

TEST(HopperGemmValidation, RejectsBOnAnotherDevice) {
  auto a = args_for(g_buf, 4, 8, 8);
  a.b.device = kCpu;
  expect_error([&] { gks::gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'b' must be on the device of 'a'");
}

TEST(HopperGemmValidation, RejectsMixedInputDtypes) {
  auto a = args_for(g_buf, 4, 8, 8);
  a.b.dtype = gks::DType::kFloat16;
  expect_error([&] { gks::gemm(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'b' must have the dtype of 'a' (bfloat16), got float16");
}

TEST(HopperGemmValidation, RejectsOtherOutputDtype) {
  auto a = args_for(g_buf, 4, 8, 8, gks::DType::kFloat16);
  a.c.dtype = gks::DType::kBFloat16;
  expect_error([&] { gks::gemm(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'c' must be float32 or the dtype of 'a' (float16), got bfloat16");
}

TEST(HopperGemmValidation, RejectsInnerDimensionMismatch) {
  auto a = args_for(g_buf, 4, 8, 8);
  a.b = mat(g_buf, gks::DType::kBFloat16, 9, 8);
  expect_error([&] { gks::gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'b' must have shape [K, N] with K = 8");
}

TEST(HopperGemmValidation, RejectsWrongOutputShape) {
  auto a = args_for(g_buf, 4, 8, 16);
  a.c = mat(g_buf, gks::DType::kBFloat16, 4, 9);
  expect_error([&] { gks::gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'c' must have shape [4, 8]");
}

TEST(HopperGemmValidation, RejectsTransposedB) {
  auto a = args_for(g_buf, 4, 8, 16);
  a.b = mat(g_buf, gks::DType::kBFloat16, 16, 8, {1, 16});
  expect_error([&] { gks::gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'b' must be row-major");
}

TEST(HopperGemmValidation, RejectsBadConfig) {
  for (int config : {-2, gks::detail::kNumHopperGemmConfigs}) {
    auto a = args_for(g_buf, 4, 8, 8);
    a.config = config;
    expect_error([&] { gks::gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
                 "gks.gemm: argument 'config' must be -1 (heuristic) or a config index");
  }
}

TEST(HopperGemmValidation, RejectsHugeDims) {
  auto a = args_for(g_buf, int64_t(1) << 31, 8, 8);
  expect_error([&] { gks::gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "M, N and K must each be below 2^31");
}

TEST(HopperGemmValidation, GemmPathValidatesToo) {
  auto a = args_for(g_buf, 4, 8, 8);
  a.c.device = kCpu;
  expect_error([&] { gks::detail::gemm_path(a); }, gks::ErrorKind::kInvalidArgument,
               "argument 'c' must be on the device of 'a'");
}

// ---- grouped_gemm: validation (checked under ValidateOnly: shapes, dtypes, strides) ----

gks::TensorRef ref3(void* p, gks::DType dt, int64_t d0, int64_t d1, int64_t d2) {
  return gks::TensorRef::make(p, dt, {d0, d1, d2}, kGpu);
}

// Contiguous: a [T, K], b [G, K, N], group_offsets [G + 1], c [T, N]; masked: a [G, M, K],
// group_counts [G], c [G, M, N].
gks::GroupedGemmArgs grouped_args(bool masked, int64_t g, int64_t rows, int64_t n, int64_t k) {
  gks::GroupedGemmArgs a;
  const auto dt = gks::DType::kBFloat16;
  a.b = ref3(gks_test::fake_address(2), dt, g, k, n);
  if (masked) {
    a.a = ref3(gks_test::fake_address(1), dt, g, rows, k);
    a.c = ref3(gks_test::fake_address(3), dt, g, rows, n);
    a.group_counts = gks::TensorRef::make(gks_test::fake_address(4), gks::DType::kInt32, {g}, kGpu);
  } else {
    a.a = mat(gks_test::fake_address(1), dt, rows, k);
    a.c = mat(gks_test::fake_address(3), dt, rows, n);
    a.group_offsets = gks::TensorRef::make(gks_test::fake_address(4), gks::DType::kInt32, {g + 1}, kGpu);
  }
  return a;
}

TEST(GroupedGemm, AcceptsBothLayoutsAndOddShapes) {
  const gks::ValidateOnly only;
  for (bool masked : {false, true}) {
    EXPECT_NO_THROW(gks::grouped_gemm(grouped_args(masked, 8, 100, 1000, 520), nullptr));
    EXPECT_NO_THROW(gks::grouped_gemm(grouped_args(masked, 3, 21, 17, 33), nullptr));  // TMA-unfriendly: packed
    EXPECT_NO_THROW(gks::grouped_gemm(grouped_args(masked, 1, 1, 1, 1), nullptr));
  }
}

TEST(GroupedGemm, RefusesBadArgumentsNamingThem) {
  const gks::ValidateOnly only;
  auto a = grouped_args(false, 3, 6, 5, 8);
  a.group_counts = gks::TensorRef::make(gks_test::fake_address(5), gks::DType::kInt32, {3}, kGpu);
  expect_error([&] { gks::grouped_gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "exactly one of the arguments 'group_offsets' (the contiguous layout) and 'group_counts' "
               "(the masked layout) must be given, got both");
  a.group_counts.reset();
  a.group_offsets.reset();
  expect_error([&] { gks::grouped_gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument, "got neither");
  a = grouped_args(false, 3, 6, 5, 8);
  a.a = ref3(gks_test::fake_address(1), gks::DType::kBFloat16, 3, 2, 8);
  expect_error([&] { gks::grouped_gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'a' must be 2-D [T, K] (the contiguous layout: group_offsets given), got 3 dims");
  a = grouped_args(false, 3, 6, 5, 8);
  a.b = ref3(gks_test::fake_address(2), gks::DType::kBFloat16, 3, 9, 5);
  expect_error([&] { gks::grouped_gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'b' must have shape [G, K, N] with K = 8");
  a = grouped_args(true, 3, 6, 5, 8);
  a.b = ref3(gks_test::fake_address(2), gks::DType::kBFloat16, 2, 8, 5);
  expect_error([&] { gks::grouped_gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'b' must have shape [G, K, N] with G = 3");
  a = grouped_args(false, 3, 6, 5, 8);
  a.group_offsets = gks::TensorRef::make(gks_test::fake_address(4), gks::DType::kInt32, {3}, kGpu);
  expect_error([&] { gks::grouped_gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'group_offsets' must have shape [G + 1] = [4] (G = 3, dim 0 of 'b'), got [3]");
  a = grouped_args(true, 3, 6, 5, 8);
  a.group_counts->dtype = gks::DType::kFloat32;
  expect_error([&] { gks::grouped_gemm(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'group_counts' must be int32, got float32");
  a = grouped_args(true, 3, 6, 5, 8);
  a.c = ref3(gks_test::fake_address(3), gks::DType::kBFloat16, 3, 6, 4);
  expect_error([&] { gks::grouped_gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'c' must have shape [G, M_max, N]");
  a = grouped_args(false, 3, 6, 5, 8);
  a.a.dtype = gks::DType::kFloat32;
  expect_error([&] { gks::grouped_gemm(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'a' must be float16 or bfloat16, got float32");
  a = grouped_args(false, 3, 6, 5, 8);
  a.b = gks::TensorRef::make(gks_test::fake_address(2), gks::DType::kBFloat16, {3, 8, 5}, kGpu, {40, 1, 8});
  expect_error([&] { gks::grouped_gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'b' must be row-major with a contiguous last dim (stride(-1) == 1), got strides (40, 1, 8)");
  a = grouped_args(false, 3, 6, 5, 8);
  a.config = gks::detail::kNumHopperGroupedConfigs;
  expect_error([&] { gks::grouped_gemm(a, nullptr); }, gks::ErrorKind::kInvalidArgument, "config");
}

TEST(GroupedGemm, ConfigsAndHeuristic) {
  const auto& configs = gks::detail::grouped_gemm_configs();
  ASSERT_EQ(int(configs.size()), gks::detail::kNumHopperGroupedConfigs);
  expect_well_formed(configs);
  for (const auto& c : gks::detail::kHopperGroupedConfigs) {
    EXPECT_EQ(c.cluster_m, 1) << c.name;  // the grouped schedule runs single CTAs
    EXPECT_EQ(c.cluster_n, 1) << c.name;
    EXPECT_FALSE(c.stream_k) << c.name;
  }
  // Decode's masked groups of 64 rows take 64-row tiles; large groups 128-row ones.
  EXPECT_EQ(configs[gks::detail::grouped_gemm_heuristic(64, 7168, 2048, 32, kH200Sms)].block_m, 64);
  EXPECT_EQ(configs[gks::detail::grouped_gemm_heuristic(512, 4096, 7168, 32, kH200Sms)].block_m, 128);
  for (int64_t rows : {1, 17, 64, 65, 128, 4096})
    for (int64_t groups : {1, 8, 256}) {
      const int pick = gks::detail::grouped_gemm_heuristic(rows, 2048, 7168, groups, kH200Sms);
      EXPECT_GE(pick, 0);
      EXPECT_LT(pick, gks::detail::kNumHopperGroupedConfigs);
    }
}

// ---- grouped_gemm_fp8: the same validation with e4m3 operands and block scales ----

// grouped_args' call in e4m3 with a K-major b (the [G, N, K] weights' view), fp32 scales
// of the block shapes, c bf16.
gks::GroupedGemmFp8Args grouped_fp8_args(bool masked, int64_t g, int64_t rows, int64_t n, int64_t k) {
  const auto base = grouped_args(masked, g, rows, n, k);
  gks::GroupedGemmFp8Args a;
  a.a = base.a;
  a.a.dtype = gks::DType::kFloat8E4M3;
  a.b = gks::TensorRef::make(gks_test::fake_address(2), gks::DType::kFloat8E4M3, {g, k, n}, kGpu,
                             {n * k, 1, k});
  a.c = base.c;
  a.group_offsets = base.group_offsets;
  a.group_counts = base.group_counts;
  const int64_t kg = (k + 127) / 128, nb = (n + 127) / 128;
  a.a_scale = masked ? ref3(gks_test::fake_address(5), gks::DType::kFloat32, g, rows, kg)
                     : mat(gks_test::fake_address(5), gks::DType::kFloat32, rows, kg);
  a.b_scale = ref3(gks_test::fake_address(6), gks::DType::kFloat32, g, kg, nb);
  return a;
}

TEST(GroupedGemmFp8, AcceptsBothLayoutsBothBLayoutsAndOddShapes) {
  const gks::ValidateOnly only;
  for (bool masked : {false, true}) {
    EXPECT_NO_THROW(gks::grouped_gemm_fp8(grouped_fp8_args(masked, 8, 100, 1000, 528), nullptr));
    EXPECT_NO_THROW(gks::grouped_gemm_fp8(grouped_fp8_args(masked, 3, 21, 17, 48), nullptr));
    auto row_major = grouped_fp8_args(masked, 3, 21, 17, 144);
    row_major.b = ref3(gks_test::fake_address(2), gks::DType::kFloat8E4M3, 3, 144, 17);
    EXPECT_NO_THROW(gks::grouped_gemm_fp8(row_major, nullptr));
    auto fp32_out = grouped_fp8_args(masked, 1, 1, 1, 16);
    fp32_out.c.dtype = gks::DType::kFloat32;
    EXPECT_NO_THROW(gks::grouped_gemm_fp8(fp32_out, nullptr));
  }
}

TEST(GroupedGemmFp8, RefusesBadArgumentsNamingThem) {
  const gks::ValidateOnly only;
  const char* op = "gks.grouped_gemm_fp8: ";
  auto a = grouped_fp8_args(false, 3, 6, 5, 256);
  a.a.dtype = gks::DType::kBFloat16;
  expect_error([&] { gks::grouped_gemm_fp8(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               std::string(op) + "argument 'a' must be float8_e4m3fn, got bfloat16");
  a = grouped_fp8_args(false, 3, 6, 5, 40);
  expect_error([&] { gks::grouped_gemm_fp8(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "K (the last dim of argument 'a') must be a multiple of 16, got 40");
  a = grouped_fp8_args(false, 3, 6, 10, 256);
  a.b = gks::TensorRef::make(gks_test::fake_address(2), gks::DType::kFloat8E4M3, {3, 256, 5}, kGpu,
                             {256 * 10, 10, 2});
  expect_error([&] { gks::grouped_gemm_fp8(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'b' must be row-major (stride(2) == 1) or K-major (stride(1) == 1: the view "
               "w.transpose(1, 2) of a [G, N, K] w), got strides (2560, 10, 2)");
  a = grouped_fp8_args(false, 3, 6, 5, 256);
  a.a_scale = mat(gks_test::fake_address(5), gks::DType::kFloat32, 6, 1);
  expect_error([&] { gks::grouped_gemm_fp8(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'a_scale' must have shape [T, ceil(K / 128)] = [6, 2], got [6, 1]");
  a = grouped_fp8_args(true, 3, 4, 5, 256);
  a.a_scale = mat(gks_test::fake_address(5), gks::DType::kFloat32, 12, 2);
  expect_error([&] { gks::grouped_gemm_fp8(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'a_scale' must have shape [G, M_max, ceil(K / 128)] = [3, 4, 2], got [12, 2]");
  a = grouped_fp8_args(false, 3, 6, 5, 256);
  a.b_scale = mat(gks_test::fake_address(6), gks::DType::kFloat32, 2, 1);
  expect_error([&] { gks::grouped_gemm_fp8(a, nullptr); }, gks::ErrorKind::kInvalidArgument,
               "argument 'b_scale' must have shape [G, ceil(K / 128), ceil(N / 128)] = [3, 2, 1], got [2, 1]");
  a = grouped_fp8_args(false, 3, 6, 5, 256);
  a.a_scale.dtype = gks::DType::kFloat16;
  expect_error([&] { gks::grouped_gemm_fp8(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'a_scale' must be float32, got float16");
  a = grouped_fp8_args(false, 3, 6, 5, 256);
  a.c.dtype = gks::DType::kInt8;
  expect_error([&] { gks::grouped_gemm_fp8(a, nullptr); }, gks::ErrorKind::kUnsupportedDtype,
               "argument 'c' must be bfloat16, float16 or float32, got int8");
  a = grouped_fp8_args(false, 3, 6, 5, 256);
  a.config = gks::detail::kNumHopperGroupedFp8Configs;
  expect_error([&] { gks::grouped_gemm_fp8(a, nullptr); }, gks::ErrorKind::kInvalidArgument, "config");
}

TEST(GroupedGemmFp8, ConfigsAndHeuristic) {
  const auto& configs = gks::detail::grouped_gemm_fp8_configs();
  ASSERT_EQ(int(configs.size()), gks::detail::kNumHopperGroupedFp8Configs);
  expect_well_formed(configs);
  for (const auto& c : gks::detail::kHopperGroupedFp8Configs) {
    EXPECT_EQ(c.cluster_m, 1) << c.name;
    EXPECT_EQ(c.block_k, 128) << c.name;   // one 128-wide scale group a k-block
    EXPECT_LE(c.block_n, 128) << c.name;   // one b block scale a tile's k-block
    EXPECT_EQ(c.ping_pong ? c.block_m : c.block_m / 2, 64) << c.name;  // 64 rows a warpgroup
  }
  EXPECT_EQ(configs[gks::detail::grouped_gemm_fp8_heuristic(64, 7168, 2048, 32, kH200Sms)].block_m, 64);
  EXPECT_EQ(configs[gks::detail::grouped_gemm_fp8_heuristic(512, 4096, 7168, 32, kH200Sms)].block_m, 128);
}

}  // namespace
