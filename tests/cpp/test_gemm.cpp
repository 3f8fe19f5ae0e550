// SPDX-License-Identifier: Apache-2.0
// Host-side logic of the GEMMs: argument validation (every error names its argument), the
// config lists and the shape heuristic. Nothing here touches a GPU: validation throws
// before any launch, and the heuristic takes the SM count as an argument.
#include <gtest/gtest.h>

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
  a.b = mat(p, gks::DType::kFloat32, k, n);
  a.c = mat(p, gks::DType::kFloat32, m, n);
  return a;
}

gks::WmmaGemmArgs wmma_args(void* p, int64_t m, int64_t n, int64_t k) {
  gks::WmmaGemmArgs a;
  a.a = mat(p, gks::DType::kFloat16, m, k);
  a.b = mat(p, gks::DType::kFloat16, k, n);
  a.c = mat(p, gks::DType::kFloat32, m, n);
  return a;
}

gks::Int8GemmArgs int8_args(void* p, int64_t m, int64_t n, int64_t k) {
  gks::Int8GemmArgs a;
  a.a = mat(p, gks::DType::kInt8, m, k);
  a.b = mat(p, gks::DType::kInt8, k, n);
  a.a_scale = mat(p, gks::DType::kFloat32, m, 1);
  a.b_scale = mat(p, gks::DType::kFloat32, 1, n);
  a.c = mat(p, gks::DType::kFloat16, m, n);
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

}  // namespace
