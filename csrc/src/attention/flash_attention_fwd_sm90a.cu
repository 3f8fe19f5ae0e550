// SPDX-License-Identifier: Apache-2.0
// The sm_90a half of gks::flash_attention_fwd: the launch of the wgmma kernel
// (kernels/attention/fwd_sm90.cuh). CMake compiles *_sm90a.cu sources for sm_90a
// only and adds them to the library only when 90a is among GKS_CUDA_ARCHS.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention/launch.h"
#include "gks/kernels/attention/fwd_sm90.cuh"
#include "core/launch.h"

namespace gks::detail {

namespace ka = kernels::attention;
namespace {

// The tile per head dim, two CTAs an SM for both: while one CTA's warpgroups work through
// the softmax, the other's keep the Tensor Cores busy; one CTA an SM is slower with either
// key-tile size (docs/perf/attention.md). The launch bound caps a thread at 128 registers
// (ptxas spills two, 8 bytes of stack, at D = 128 non-causal).
template <int kHeadDim>
using TileFor = ka::sm90::Tile<kHeadDim, kHeadDim == 64 ? 128 : 64, 2>;

template <typename T, int kHeadDim, bool kCausal>
void launch(const ka::FwdParams& p, int64_t batch, int64_t heads_q, int device,
            cudaStream_t stream) {
  using Tile = TileFor<kHeadDim>;
  constexpr auto kernel = ka::flash_attention_fwd_wgmma_kernel<T, Tile, kCausal>;
  prepare_smem_kernel<kernel>(Tile::kSmemBytes, device, /*max_carveout=*/true);
  const dim3 grid(static_cast<unsigned>(ceil_div(p.seqlen_q, ka::sm90::kBlockM)),
                  static_cast<unsigned>(heads_q), static_cast<unsigned>(batch));
  kernel<<<grid, ka::sm90::kThreads, Tile::kSmemBytes, stream>>>(p);
}

template <typename T, bool kCausal>
void launch_head_dim(int64_t head_dim, const ka::FwdParams& p, int64_t batch,
                     int64_t heads_q, int device, cudaStream_t stream) {
  if (head_dim == 64) return launch<T, 64, kCausal>(p, batch, heads_q, device, stream);
  launch<T, 128, kCausal>(p, batch, heads_q, device, stream);
}

template <typename T>
void launch_mask(int64_t head_dim, bool causal, const ka::FwdParams& p,
                 int64_t batch, int64_t heads_q, int device, cudaStream_t stream) {
  if (causal) return launch_head_dim<T, true>(head_dim, p, batch, heads_q, device, stream);
  launch_head_dim<T, false>(head_dim, p, batch, heads_q, device, stream);
}

}  // namespace

void launch_flash_attention_fwd_wgmma(bool bf16, int64_t head_dim, bool causal,
                                      const ka::FwdParams& p, int64_t batch,
                                      int64_t heads_q, int device, cudaStream_t stream) {
  if (bf16) return launch_mask<__nv_bfloat16>(head_dim, causal, p, batch, heads_q, device, stream);
  launch_mask<__half>(head_dim, causal, p, batch, heads_q, device, stream);
}

}  // namespace gks::detail
