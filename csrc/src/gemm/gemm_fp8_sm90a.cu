// SPDX-License-Identifier: Apache-2.0
// The sm_90a half of gks::gemm_fp8: the fp8 instantiations of the Hopper kernel, whose
// mainloop promotes each 128-wide k-block into the fp32 total (ByteOperands<T, true>).
// Per-tensor and per-row scales are the fused epilogue's row and column scales (stride 0
// for one scale); block scales are applied as each k-block is promoted (the epilogue then
// has no scales). Either way the epilogue adds the bias and the gated unit where asked.
#include <utility>

#include "gemm/hopper_launch.cuh"

namespace gks::detail {
namespace {

template <typename T>
void launch_fp8(const HopperGemmLaunch& launch, cudaStream_t stream) {
  using hopper::launch_table;
  namespace hk = hopper::hk;
  using Configs = std::make_index_sequence<kNumHopperFp8Configs>;
  launch_table<hk::ByteOperands<T, true>, hk::Fused, kHopperFp8Configs>(launch, stream, "gks.gemm_fp8",
                                                                        Configs{});
}

}  // namespace

void launch_hopper_fp8_sm90a(const HopperGemmLaunch& launch, cudaStream_t stream) {
  if (launch.dtype == DType::kFloat8E4M3)
    launch_fp8<__nv_fp8_e4m3>(launch, stream);
  else
    launch_fp8<__nv_fp8_e5m2>(launch, stream);
}

}  // namespace gks::detail
