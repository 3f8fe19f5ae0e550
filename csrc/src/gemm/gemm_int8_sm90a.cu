// SPDX-License-Identifier: Apache-2.0
// The int8 instantiations of the Hopper kernel for gks::int8_gemm (see gemm_sm90a.cu),
// compiled apart from the other operand types so that they build in parallel. Its scales
// are the fused epilogue's row and column scales.
#include <utility>

#include "gemm/hopper_launch.cuh"

namespace gks::detail {

void launch_hopper_int8_sm90a(const HopperGemmLaunch& launch, cudaStream_t stream) {
  hopper::launch_table<hopper::hk::Int8Operands, hopper::hk::Fused, kHopperInt8Configs>(
      launch, stream, "gks.int8_gemm", std::make_index_sequence<kNumHopperInt8Configs>{});
}

}  // namespace gks::detail
