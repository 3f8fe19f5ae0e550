// SPDX-License-Identifier: Apache-2.0
// The sm_90a half of gks::flash_attention_bwd: the wgmma kernels (kernels/attention/bwd_sm90.cuh,
// plain and warp-specialized) with their fp32 dQ accumulator and the kernel that converts it.
// Compiled for sm_90a only.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <optional>

#include "attention/launch.h"
#include "core/launch.h"
#include "core/workspace.h"
#include "gks/error.h"
#include "gks/kernels/attention/bwd_sm90.cuh"

namespace gks::detail {

namespace ka = kernels::attention;
namespace {

// The warp-specialized dK/dV kernel; false (nothing launched) where TMA cannot address a
// tensor.
template <typename T, int kHeadDim, ka::Mask kMask>
bool launch_ws(const ka::BwdParams& p, const AttentionBwdTensors& t, const AttentionBwdGrid& g, int device,
               cudaStream_t stream) {
  using Cfg = ka::bwd_ws::Tile<kHeadDim>;
  CUtensorMap map_q, map_k, map_v, map_do;
  if (!attention_tensor_map(&map_q, t.q, Cfg::kBM) || !attention_tensor_map(&map_k, t.k, Cfg::kBN) ||
      !attention_tensor_map(&map_v, t.v, Cfg::kBN) || !attention_tensor_map(&map_do, t.dout, Cfg::kBM))
    return false;
  constexpr auto kernel = ka::bwd_ws::flash_attention_bwd_ws_kernel<T, Cfg, kMask>;
  prepare_smem_kernel<kernel>(Cfg::kSmemBytes, device, /*max_carveout=*/true);
  kernel<<<dim3(unsigned(ceil_div(g.seqlen_k, Cfg::kBN)), unsigned(g.heads_kv), unsigned(g.batch)), Cfg::kThreads,
           Cfg::kSmemBytes, stream>>>(map_q, map_k, map_v, map_do, p);
  return true;
}

template <typename T, int kHeadDim, ka::Mask kMask>
void launch(ka::BwdParams p, bool ws, bool deterministic, const AttentionBwdTensors& t, const AttentionBwdGrid& g,
            int device, cudaStream_t stream) {
  using Tile = ka::FlashBwdWgmmaTile<kHeadDim>;
  constexpr const char* kOp = "gks.flash_attention_bwd";
  const int64_t m_blocks = ceil_div(g.seqlen_q, Tile::kBM);
  // dQ in fp32, every query block's rows whole (Tile::kBM * D floats), zeroed: the kernel adds.
  const size_t accum_bytes = size_t(std::max<int64_t>(1, g.batch * g.heads_q * m_blocks)) * Tile::kBM * kHeadDim * 4;
  const StreamBuffer accum(accum_bytes, device, stream, kOp, "dq_accum (fp32 dQ)");
  GKS_CHECK(cudaMemsetAsync(accum.get<void>(), 0, accum_bytes, stream) == cudaSuccess, kCudaError)
      << kOp << ": cannot zero dq_accum";
  p.dq_accum = accum.get<float>();
  // Deterministic: how many key blocks have added into each query block's dQ.
  std::optional<StreamBuffer> turns;
  if (ws && deterministic) {
    const size_t turns_bytes = size_t(std::max<int64_t>(1, g.batch * g.heads_q * m_blocks)) * 4;
    turns.emplace(turns_bytes, device, stream, kOp, "dq_turns (the order of dQ's adds)");
    GKS_CHECK(cudaMemsetAsync(turns->get<void>(), 0, turns_bytes, stream) == cudaSuccess, kCudaError)
        << kOp << ": cannot zero dq_turns";
    p.dq_turns = turns->get<int>();
  }
  const bool launched = g.seqlen_k > 0 && ws && launch_ws<T, kHeadDim, kMask>(p, t, g, device, stream);
  // The caller chose ws for determinism only where the tensor maps encode.
  GKS_CHECK(launched || !deterministic || g.seqlen_k == 0, kCudaError)
      << kOp << ": the deterministic kernel's tensor maps could not be made";
  if (g.seqlen_k > 0 && !launched) {
    constexpr auto kernel = ka::flash_attention_bwd_wgmma_kernel<T, Tile, kMask>;
    prepare_smem_kernel<kernel>(Tile::kSmemBytes, device, /*max_carveout=*/true);
    kernel<<<dim3(unsigned(ceil_div(g.seqlen_k, Tile::kBN)), unsigned(g.heads_kv), unsigned(g.batch)), Tile::kThreads,
             Tile::kSmemBytes, stream>>>(p);
  }
  if (g.seqlen_q > 0)
    ka::flash_attention_bwd_dq_convert_kernel<T, Tile>
        <<<dim3(unsigned(m_blocks), unsigned(g.heads_q), unsigned(g.batch)), Tile::kThreads, 0, stream>>>(p);
}

template <typename T>
void launch_mask(bool ws, bool deterministic, int64_t head_dim, ka::Mask mask, const ka::BwdParams& p,
                 const AttentionBwdTensors& t, const AttentionBwdGrid& g, int device, cudaStream_t stream) {
  with_mask(mask, [&](auto m) {
    constexpr ka::Mask kMask = decltype(m)::value;
    if (head_dim == 64) return launch<T, 64, kMask>(p, ws, deterministic, t, g, device, stream);
    launch<T, 128, kMask>(p, ws, deterministic, t, g, device, stream);
  });
}

}  // namespace

int flash_attention_bwd_wgmma_block_m(int64_t head_dim) {
  return head_dim == 64 ? ka::FlashBwdWgmmaTile<64>::kBM : ka::FlashBwdWgmmaTile<128>::kBM;
}

void launch_flash_attention_bwd_wgmma(bool bf16, bool ws, bool deterministic, int64_t head_dim, ka::Mask mask,
                                      const ka::BwdParams& p, const AttentionBwdTensors& t, const AttentionBwdGrid& g,
                                      int device, cudaStream_t stream) {
  if (bf16)
    launch_mask<__nv_bfloat16>(ws, deterministic, head_dim, mask, p, t, g, device, stream);
  else
    launch_mask<__half>(ws, deterministic, head_dim, mask, p, t, g, device, stream);
}

}  // namespace gks::detail
