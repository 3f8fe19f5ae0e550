// SPDX-License-Identifier: Apache-2.0
// The sm_90a half of gks::gemm and of gks::int8_gemm's Hopper path: the launch entry point,
// which hands each operand type to the source that instantiates the Hopper kernel
// (kernels/gemm/sm90/, with the fused epilogue, whose terms are run-time options, or for
// fp16 / bf16 calls without a term none at all) for it, and the fp16 instantiations with
// the fused epilogue themselves. The parts compile apart, in parallel (gemm_bf16_sm90a.cu,
// gemm_int8_sm90a.cu, gemm_fp8_sm90a.cu, gemm_fp16_plain_sm90a.cu, gemm_bf16_plain_sm90a.cu). CMake compiles *_sm90a.cu
// sources for sm_90a only and adds them to the library only when 90a is among
// GKS_CUDA_ARCHS; gks::gemm (gemm.cu), gks::int8_gemm (int8_gemm.cu) and gks::gemm_fp8
// (gemm_fp8.cu) validate everything before calling in here.
#include <utility>

#include "gemm/hopper_launch.cuh"

namespace gks::detail {

void launch_hopper_gemm_sm90a(const HopperGemmLaunch& launch, cudaStream_t stream) {
  namespace hk = hopper::hk;
  if (launch.dtype == DType::kFloat8E4M3 || launch.dtype == DType::kFloat8E5M2)
    launch_hopper_fp8_sm90a(launch, stream);
  else if (launch.dtype == DType::kInt8)
    launch_hopper_int8_sm90a(launch, stream);
  else if (!kernels::gemm::has_terms(launch.epi))  // a plain product: no epilogue code
    (launch.dtype == DType::kBFloat16 ? launch_hopper_bf16_plain_sm90a : launch_hopper_fp16_plain_sm90a)(launch,
                                                                                                     stream);
  else if (launch.dtype == DType::kBFloat16)
    launch_hopper_bf16_sm90a(launch, stream);
  else
    hopper::launch_table<hk::HalfOperands<__half>, hk::Fused, kHopperGemmConfigs>(
        launch, stream, "gks.gemm", std::make_index_sequence<kNumHopperGemmConfigs>{});
}

}  // namespace gks::detail
