// SPDX-License-Identifier: Apache-2.0
// The sm_90a half of gks::grouped_gemm: the fp16 and bf16 instantiations of the Hopper
// kernel with the grouped schedule (kernels/gemm/sm90/scheduler.cuh's GroupedScheduler), one
// a config of kHopperGroupedConfigs. grouped_gemm.cu validates everything before calling in.
#include <utility>

#include "gemm/hopper_launch.cuh"

namespace gks::detail {
namespace {

template <class Op, size_t... kIndex>
void launch_grouped(const HopperGroupedLaunch& given, cudaStream_t stream, std::index_sequence<kIndex...>) {
  // The heuristic's pick gives way, where the schedule of G groups leaves it no shared
  // memory, to the config that takes the least of it (a forced config is refused instead).
  HopperGroupedLaunch launch = given;
  const int64_t smem[] = {hopper::grouped_smem_bytes<int(kIndex)>(launch.groups)...};
  if (!launch.config_forced && !hopper::grouped_smem_fits(smem[launch.config]))
    for (int i = 0; i < int(sizeof...(kIndex)); ++i)
      if (smem[i] < smem[launch.config]) launch.config = i;
  const bool launched =
      ((launch.config == int(kIndex) && (hopper::launch_grouped_config<Op, int(kIndex)>(launch, stream), true)) ||
       ...);
  GKS_CHECK(launched, kInvalidArgument) << "gks.grouped_gemm: no config " << launch.config;
}

}  // namespace

void launch_hopper_grouped_sm90a(const HopperGroupedLaunch& launch, cudaStream_t stream) {
  namespace hk = hopper::hk;
  using Configs = std::make_index_sequence<kNumHopperGroupedConfigs>;
  if (launch.dtype == DType::kBFloat16)
    launch_grouped<hk::HalfOperands<__nv_bfloat16>>(launch, stream, Configs{});
  else
    launch_grouped<hk::HalfOperands<__half>>(launch, stream, Configs{});
}

}  // namespace gks::detail
