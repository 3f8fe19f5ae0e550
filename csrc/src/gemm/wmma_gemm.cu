// SPDX-License-Identifier: Apache-2.0
#include "gks/gemm.h"

#include <climits>
#include <tuple>
#include <type_traits>

#include "gemm/launch.h"
#include "gks/kernels/gemm/wmma.cuh"
#include "core/launch.h"

namespace gks {
namespace detail {
namespace {

// The compiled configs. Template arguments: warps (m, n), 16x16 fragments per warp (m, n),
// block K, pipeline stages. 64 x 64 warp tiles keep shared-memory reads (ldmatrix) under
// the Tensor Cores' appetite. One 8-warp 128x256 block per SM runs fastest on large
// outputs, two 4-warp 128x128 blocks per SM next; 64x64 is for small and skinny outputs
// (docs/perf/gemm.md has the tile rates).
struct Wmma128x256x32 : kernels::gemm::WmmaTile<2, 4, 4, 4, 32, 4> {
  static constexpr const char* kName = "128x256x32_w64x64_s4";
};
struct Wmma128x128x32 : kernels::gemm::WmmaTile<2, 2, 4, 4, 32, 4> {
  static constexpr const char* kName = "128x128x32_w64x64_s4";
};
struct Wmma128x128x64 : kernels::gemm::WmmaTile<2, 2, 4, 4, 64, 3> {
  static constexpr const char* kName = "128x128x64_w64x64_s3";
};
struct Wmma64x64x32 : kernels::gemm::WmmaTile<2, 2, 2, 2, 32, 4> {
  static constexpr const char* kName = "64x64x32_w32x32_s4";
};
using WmmaConfigs = std::tuple<Wmma128x256x32, Wmma128x128x32, Wmma128x128x64, Wmma64x64x32>;
constexpr int kWmma64x64 = 3;

template <typename T, class Cfg>
void launch_config(kernels::gemm::WmmaGemmParams p, bool aligned, int device, cudaStream_t stream) {
  if (aligned)
    launch_gemm_tiles<Cfg, kernels::gemm::wmma_gemm_kernel<T, Cfg, true>>(p, device, stream);
  else
    launch_gemm_tiles<Cfg, kernels::gemm::wmma_gemm_kernel<T, Cfg, false>>(p, device, stream);
}

}  // namespace

const std::vector<GemmConfigInfo>& wmma_gemm_configs() {
  static const std::vector<GemmConfigInfo> configs = gemm_config_infos<WmmaConfigs>();
  return configs;
}

int wmma_gemm_heuristic(int64_t m, int64_t n, int64_t /*k*/, int num_sms) {
  // Outputs of a few rows are bound by reading b, and the most CTAs read it fastest, not the
  // densest tile (docs/perf/gemm.md).
  static_assert(std::is_same_v<std::tuple_element_t<kWmma64x64, WmmaConfigs>, Wmma64x64x32>);
  if (m <= 64) return kWmma64x64;
  // Relative speeds at 4096^3 (docs/perf/gemm.md); blocks per SM from registers and shared
  // memory.
  static const std::vector<GemmConfigTraits> traits = {{1, 1.0}, {2, 0.88}, {2, 0.87}, {4, 0.42}};
  return pick_gemm_config(wmma_gemm_configs(), traits, m, n, num_sms);
}

}  // namespace detail

void wmma_gemm(const WmmaGemmArgs& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.wmma_gemm";
  const auto& configs = detail::wmma_gemm_configs();
  const detail::GemmOperands ops =
      detail::half_gemm_operands(args.a, args.b, args.c, args.config, int(configs.size()), kOp);
  const detail::GemmMatrix &a = ops.a, &b = ops.b, &c = ops.c;
  const int64_t m = ops.m, n = ops.n, k = ops.k;
  if (validating_only() || m == 0 || n == 0) return;

  const int device = args.a.device.index;
  const detail::DeviceGuard guard(device);
  const int64_t c_elem = dtype_size(args.c.dtype);
  if (k == 0) {
    detail::zero_gemm_output(c, c_elem, stream, kOp);
    return;
  }
  const int config = args.config >= 0
                         ? args.config
                         : detail::wmma_gemm_heuristic(m, n, k, detail::device_sm_count(device));
  GKS_CHECK(detail::gemm_tile_count(configs[config], m, n) <= INT_MAX, kInvalidArgument)
      << kOp << ": the output " << m << " x " << n << " needs more than 2^31 - 1 tiles";

  kernels::gemm::WmmaGemmParams p{};
  p.a = a.data;
  p.b = b.data;
  p.c = c.data;
  p.s.m = int(m);
  p.s.n = int(n);
  p.s.k = int(k);
  p.s.lda = a.ld;
  p.s.ldb = b.ld;
  p.s.ldc = c.ld;
  p.c_is_f32 = args.c.dtype == DType::kFloat32;
  p.c_vec = detail::gemm_rows_aligned16(c, c_elem);
  const bool aligned = detail::gemm_rows_aligned16(a, 2) && detail::gemm_rows_aligned16(b, 2);
  detail::with_gemm_config<detail::WmmaConfigs>(config, [&](auto cfg) {
    if (args.a.dtype == DType::kFloat16)
      detail::launch_config<__half, decltype(cfg)>(p, aligned, device, stream);
    else
      detail::launch_config<__nv_bfloat16, decltype(cfg)>(p, aligned, device, stream);
  });
  detail::check_launch(kOp);
}

}  // namespace gks
