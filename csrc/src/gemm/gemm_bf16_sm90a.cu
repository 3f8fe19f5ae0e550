// SPDX-License-Identifier: Apache-2.0
// The bf16 instantiations of the Hopper kernel for gks::gemm (see gemm_sm90a.cu), compiled
// apart from the other operand types so that they build in parallel.
#include <utility>

#include "gemm/hopper_launch.cuh"

namespace gks::detail {

void launch_hopper_bf16_sm90a(const HopperGemmLaunch& launch, cudaStream_t stream) {
  hopper::launch_table<hopper::hk::HalfOperands<__nv_bfloat16>, hopper::hk::Fused, kHopperGemmConfigs>(
      launch, stream, "gks.gemm", std::make_index_sequence<kNumHopperGemmConfigs>{});
}

}  // namespace gks::detail
