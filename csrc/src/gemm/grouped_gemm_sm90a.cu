// SPDX-License-Identifier: Apache-2.0
// The sm_90a half of gks::grouped_gemm and gks::grouped_gemm_fp8: the fp16, bf16 and e4m3
// instantiations of the Hopper kernel with the grouped schedule (kernels/gemm/sm90/
// scheduler.cuh's GroupedScheduler), one a config of kHopperGroupedConfigs (16-bit) or
// kHopperGroupedFp8Configs (e4m3, block scales at every k-block's promotion).
// grouped_gemm.cu validates everything before calling in.
#include <utility>

#include "gemm/hopper_launch.cuh"

namespace gks::detail {
namespace {

template <class Op, const HopperGemmConfig* kTable, size_t... kIndex>
void launch_grouped(const HopperGroupedLaunch& given, cudaStream_t stream, std::index_sequence<kIndex...>) {
  // The heuristic's pick gives way, where the schedule of G groups leaves it no shared
  // memory, to the config that takes the least of it (a forced config is refused instead).
  HopperGroupedLaunch launch = given;
  const int64_t smem[] = {hopper::grouped_smem_bytes<kTable, int(kIndex)>(launch.groups)...};
  if (!launch.config_forced && !hopper::grouped_smem_fits(smem[launch.config]))
    for (int i = 0; i < int(sizeof...(kIndex)); ++i)
      if (smem[i] < smem[launch.config]) launch.config = i;
  const bool launched =
      ((launch.config == int(kIndex) && (hopper::launch_grouped_config<Op, kTable, int(kIndex)>(launch, stream), true)) ||
       ...);
  GKS_CHECK(launched, kInvalidArgument) << (Op::kPromote ? "gks.grouped_gemm_fp8" : "gks.grouped_gemm")
                                        << ": no config " << launch.config;
}

}  // namespace

void launch_hopper_grouped_sm90a(const HopperGroupedLaunch& launch, cudaStream_t stream) {
  namespace hk = hopper::hk;
  using Configs = std::make_index_sequence<kNumHopperGroupedConfigs>;
  if (launch.dtype == DType::kFloat8E4M3)
    launch_grouped<hk::ByteOperands<__nv_fp8_e4m3, true>, kHopperGroupedFp8Configs>(
        launch, stream, std::make_index_sequence<kNumHopperGroupedFp8Configs>{});
  else if (launch.dtype == DType::kBFloat16)
    launch_grouped<hk::HalfOperands<__nv_bfloat16>, kHopperGroupedConfigs>(launch, stream, Configs{});
  else
    launch_grouped<hk::HalfOperands<__half>, kHopperGroupedConfigs>(launch, stream, Configs{});
}

}  // namespace gks::detail
