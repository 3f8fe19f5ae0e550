// SPDX-License-Identifier: Apache-2.0
#include "gks/gemm.h"

#include <climits>
#include <tuple>
#include <type_traits>

#include "gemm/launch.h"
#include "gks/kernels/gemm/sgemm.cuh"
#include "core/launch.h"

namespace gks {
namespace detail {
namespace {

// The compiled configs, largest tile first. Template arguments: warps (m, n), lanes along m
// in a warp, thread tile (m, n), block K, pipeline stages, min blocks per SM, A copies by
// rows. One 8-warp 128x256 block per SM runs fastest on large outputs, two 4-warp 128x128
// blocks per SM a little behind; 64x64 and 32x32 are for small and skinny outputs, at a
// fraction of that rate (docs/perf/gemm.md has the tile rates).
struct Sgemm128x256 : kernels::gemm::SgemmTile<2, 4, 8, 8, 16, 16, 3, 1, true> {
  static constexpr const char* kName = "128x256x16_t8x16_s3";
};
struct Sgemm128x128 : kernels::gemm::SgemmTile<2, 2, 8, 8, 16, 16, 3, 2, true> {
  static constexpr const char* kName = "128x128x16_t8x16_s3";
};
struct Sgemm64x64 : kernels::gemm::SgemmTile<1, 2, 8, 8, 8, 8, 3> {
  static constexpr const char* kName = "64x64x8_t8x8_s3";
};
struct Sgemm32x32 : kernels::gemm::SgemmTile<1, 2, 8, 4, 4, 16, 3> {
  static constexpr const char* kName = "32x32x16_t4x4_s3";
};
using SgemmConfigs = std::tuple<Sgemm128x256, Sgemm128x128, Sgemm64x64, Sgemm32x32>;

template <class Cfg>
void launch_config(kernels::gemm::SgemmParams p, bool vec_b, int device, cudaStream_t stream) {
  if (vec_b)
    launch_gemm_tiles<Cfg, kernels::gemm::sgemm_kernel<Cfg, true>>(p, device, stream);
  else
    launch_gemm_tiles<Cfg, kernels::gemm::sgemm_kernel<Cfg, false>>(p, device, stream);
}

}  // namespace

const std::vector<GemmConfigInfo>& sgemm_configs() {
  static const std::vector<GemmConfigInfo> configs = gemm_config_infos<SgemmConfigs>();
  return configs;
}

int sgemm_heuristic(int64_t m, int64_t n, int64_t /*k*/, int num_sms) {
  // Relative inner-loop speeds on large outputs (docs/perf/gemm.md); blocks per SM from
  // registers.
  static const std::vector<GemmConfigTraits> traits = {{1, 1.0}, {2, 0.97}, {8, 0.46}, {8, 0.36}};
  return pick_gemm_config(sgemm_configs(), traits, m, n, num_sms);
}

}  // namespace detail

void sgemm(const SgemmArgs& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.sgemm";
  auto check_f32 = [&](const TensorRef& t, const char* name) {
    check_cuda(t, kOp, name);
    check_dtype(t, DType::kFloat32, kOp, name);
  };
  // The device first: a host b or c is named as on another device than a.
  check_f32(args.a, "a");
  check_same_device(args.a, "a", args.b, "b", kOp);
  check_same_device(args.a, "a", args.c, "c", kOp);
  check_f32(args.b, "b");
  check_f32(args.c, "c");
  const auto& configs = detail::sgemm_configs();
  const detail::GemmOperands ops = detail::gemm_operands(args.a, "a", args.b, "b", args.c,
                                                         args.config, int(configs.size()), kOp);
  check_outputs({{&args.c, "c"}}, {{&args.a, "a"}, {&args.b, "b"}}, kOp);
  const detail::GemmMatrix &a = ops.a, &b = ops.b, &c = ops.c;
  const int64_t m = ops.m, n = ops.n, k = ops.k;
  if (validating_only() || m == 0 || n == 0) return;

  const int device = args.a.device.index;
  const detail::DeviceGuard guard(device);
  if (k == 0) {
    detail::zero_gemm_output(c, 4, stream, kOp);
    return;
  }
  const int config = args.config >= 0
                         ? args.config
                         : detail::sgemm_heuristic(m, n, k, detail::device_sm_count(device));
  const GemmConfigInfo& info = configs[config];
  GKS_CHECK(detail::gemm_tile_count(info, m, n) <= INT_MAX, kInvalidArgument)
      << kOp << ": the output " << m << " x " << n << " needs more than 2^31 - 1 tiles";

  kernels::gemm::SgemmParams p{};
  p.a = static_cast<const float*>(a.data);
  p.b = static_cast<const float*>(b.data);
  p.c = static_cast<float*>(c.data);
  p.s.m = int(m);
  p.s.n = int(n);
  p.s.k = int(k);
  p.s.lda = a.ld;
  p.s.ldb = b.ld;
  p.s.ldc = c.ld;
  p.c_vec4 = detail::gemm_rows_aligned16(c, 4);
  const bool vec_b = detail::gemm_rows_aligned16(b, 4);
  detail::with_gemm_config<detail::SgemmConfigs>(config, [&](auto cfg) {
    detail::launch_config<decltype(cfg)>(p, vec_b, device, stream);
  });
  detail::check_launch(kOp);
}

}  // namespace gks
