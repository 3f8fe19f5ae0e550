// SPDX-License-Identifier: Apache-2.0
// The fp16 instantiations of the Hopper kernel for gks::gemm calls that give no epilogue
// term (see gemm_sm90a.cu): Epilogue<NoScales> has no epilogue code, where the fused
// epilogue's term reads would cost a plain product's tiles time. Compiled apart so that
// they build in parallel with the other parts.
#include <utility>

#include "gemm/hopper_launch.cuh"

namespace gks::detail {

void launch_hopper_fp16_plain_sm90a(const HopperGemmLaunch& launch, cudaStream_t stream) {
  hopper::launch_table<hopper::hk::HalfOperands<__half>, hopper::hk::NoScales, kHopperGemmConfigs>(
      launch, stream, "gks.gemm", std::make_index_sequence<kNumHopperGemmConfigs>{});
}

}  // namespace gks::detail
