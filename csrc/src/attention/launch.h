// SPDX-License-Identifier: Apache-2.0
// The launcher of the wgmma FlashAttention kernel, defined in flash_attention_fwd_sm90a.cu
// (compiled for sm_90a alone) and called from flash_attention_fwd.cu only under
// GKS_WITH_SM90A, after every argument is validated.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gks::kernels::attention {
struct FwdParams;
}

namespace gks::detail {

// head_dim: one of wgmma_flash_head_dim's (64, 128).
void launch_flash_attention_fwd_wgmma(bool bf16, int64_t head_dim, bool causal,
                                      const kernels::attention::FwdParams& p, int64_t batch,
                                      int64_t heads_q, int device, cudaStream_t stream);

}  // namespace gks::detail
