// SPDX-License-Identifier: Apache-2.0
// The sm_90a half of gks::flash_attention_fwd: the launches of the wgmma kernels
// (kernels/attention/fwd_sm90.cuh) and the warp-specialized kernel's tensor maps. CMake
// compiles *_sm90a.cu sources for sm_90a only and adds them to the library only when 90a
// is among GKS_CUDA_ARCHS.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <type_traits>

#include "attention/launch.h"
#include "gks/kernels/attention/fwd_sm90.cuh"
#include "core/launch.h"
#include "core/tensor_map.h"

namespace gks::detail {

namespace ka = kernels::attention;
namespace {

// The tile per head dim, two CTAs an SM for both: while one CTA's warpgroups work through
// the softmax, the other's keep the Tensor Cores busy; one CTA an SM is slower with either
// key-tile size (docs/perf/attention.md). The launch bound caps a thread at 128 registers
// (ptxas spills two, 8 bytes of stack, at D = 128 non-causal).
template <int kHeadDim>
using TileFor = ka::sm90::Tile<kHeadDim, kHeadDim == 64 ? 128 : 64, 2>;

template <typename T, int kHeadDim, ka::Mask kMask, bool kVarlen>
void launch(const ka::FwdParams& p, const AttentionGrid& g, int device, cudaStream_t stream) {
  using Tile = TileFor<kHeadDim>;
  constexpr auto kernel = ka::flash_attention_fwd_wgmma_kernel<T, Tile, kMask, kVarlen>;
  prepare_smem_kernel<kernel>(Tile::kSmemBytes, device, /*max_carveout=*/true);
  const dim3 grid(static_cast<unsigned>(std::max<int64_t>(1, ceil_div(g.rows, ka::sm90::kBlockM))),
                  static_cast<unsigned>(g.heads_q), static_cast<unsigned>(g.batch));
  kernel<<<grid, ka::sm90::kThreads, Tile::kSmemBytes, stream>>>(p);
}

template <typename T, bool kVarlen>
void launch_mask(int64_t head_dim, ka::Mask mask, const ka::FwdParams& p, const AttentionGrid& g, int device,
                 cudaStream_t stream) {
  with_mask(mask, [&](auto m) {
    constexpr ka::Mask kMask = decltype(m)::value;
    if (head_dim == 64) return launch<T, 64, kMask, kVarlen>(p, g, device, stream);
    launch<T, 128, kMask, kVarlen>(p, g, device, stream);
  });
}

// ---- the warp-specialized kernel ----

// The tile per head dims: 128 query rows (two consumer warpgroups) and as many ring stages
// of K/V tiles as shared memory holds beside Q and the O buffer: 128 keys a tile up to
// D = 128; 64 keys at D = 192 (192 / 128: three stages) and D = 256 (O staged in Q's buffer).
template <int kHeadDim, int kHeadDimV>
using WsTileFor = std::conditional_t<
    kHeadDim == 64, ka::ws::Tile<64, 128, 4>,
    std::conditional_t<
        kHeadDim == 256, ka::ws::Tile<256, 64, 2, /*kOAliasQ=*/true>,
        std::conditional_t<kHeadDim == 192,
                           ka::ws::Tile<192, 64, kHeadDimV == 128 ? 3 : 2, false, kHeadDimV>,
                           ka::ws::Tile<kHeadDim, 128, 2>>>>;

template <typename T, int kHeadDim, ka::Mask kMask, int kHeadDimV = kHeadDim>
bool launch_ws(const ka::FwdParams& p, const AttentionTensors& t, int device,
               cudaStream_t stream) {
  using Tile = WsTileFor<kHeadDim, kHeadDimV>;
  CUtensorMap map_q, map_k, map_v, map_o;
  if (!attention_tensor_map(&map_q, t.q, 64) || !attention_tensor_map(&map_k, t.k, Tile::kBN) ||
      !attention_tensor_map(&map_v, t.v, Tile::kBN) || !attention_tensor_map(&map_o, t.o, 64))
    return false;
  const int64_t m_blocks = ceil_div(p.seqlen_q, ka::ws::kBlockM);
  const int64_t tiles = m_blocks * t.q.shape[1] * t.q.shape[0];
  if (tiles > INT_MAX - 4096) return false;  // the tile loop adds the grid to an index
  constexpr auto kernel = ka::ws::flash_attention_fwd_ws_kernel<T, Tile, kMask>;
  prepare_smem_kernel<kernel>(Tile::kSmemBytes, device, /*max_carveout=*/true);
  const ka::ws::Schedule sched{int(tiles), int(m_blocks), int(t.q.shape[1])};
  const int grid = int(std::min<int64_t>(tiles, device_limits(device).sms));
  kernel<<<grid, ka::ws::kThreads, Tile::kSmemBytes, stream>>>(map_q, map_k, map_v, map_o, p,
                                                               sched);
  return true;
}

template <typename T, ka::Mask kMask>
bool ws_head_dim(int64_t head_dim, int64_t head_dim_v, const ka::FwdParams& p,
                 const AttentionTensors& t, int device, cudaStream_t stream) {
  switch (head_dim) {
    case 64: return launch_ws<T, 64, kMask>(p, t, device, stream);
    case 96: return launch_ws<T, 96, kMask>(p, t, device, stream);
    case 128: return launch_ws<T, 128, kMask>(p, t, device, stream);
    case 192:
      if (head_dim_v == 128) return launch_ws<T, 192, kMask, 128>(p, t, device, stream);
      return launch_ws<T, 192, kMask>(p, t, device, stream);
    default: return launch_ws<T, 256, kMask>(p, t, device, stream);
  }
}

template <typename T>
bool ws_mask(int64_t head_dim, int64_t head_dim_v, ka::Mask mask, const ka::FwdParams& p,
             const AttentionTensors& t, int device, cudaStream_t stream) {
  return with_mask(mask, [&](auto m) {
    return ws_head_dim<T, decltype(m)::value>(head_dim, head_dim_v, p, t, device, stream);
  });
}

}  // namespace

// A dim of size 1 is never stepped over: its stride is given a value TMA accepts whatever the
// view says.
bool attention_tensor_map(CUtensorMap* map, const TensorRef& t, int box_rows) {
  const uint64_t dims[4] = {uint64_t(t.shape[3]), uint64_t(t.shape[2]), uint64_t(t.shape[1]),
                            uint64_t(t.shape[0])};
  uint64_t strides[3];
  for (int d = 0; d < 3; ++d) {
    const int dim = 2 - d;  // S, H, B
    strides[d] = t.shape[dim] <= 1 ? 16 : uint64_t(t.strides[dim]) * 2;
  }
  const uint32_t box[4] = {64, uint32_t(box_rows), 1, 1};
  return encode_tensor_map(map, t.dtype, 4, t.data, dims, strides, box) == CUDA_SUCCESS;
}

bool attention_tma_addressable(std::initializer_list<const TensorRef*> tensors) {
  CUtensorMap map;
  // A box's rows do not change what TMA accepts of a layout.
  for (const TensorRef* t : tensors)
    if (!attention_tensor_map(&map, *t, 64)) return false;
  return true;
}

bool launch_flash_attention_fwd_ws(bool bf16, int64_t head_dim, int64_t head_dim_v,
                                   ka::Mask mask, const ka::FwdParams& p,
                                   const AttentionTensors& t, int device, cudaStream_t stream) {
  if (bf16) return ws_mask<__nv_bfloat16>(head_dim, head_dim_v, mask, p, t, device, stream);
  return ws_mask<__half>(head_dim, head_dim_v, mask, p, t, device, stream);
}

void launch_flash_attention_fwd_wgmma(bool bf16, bool varlen, int64_t head_dim, ka::Mask mask,
                                      const ka::FwdParams& p, const AttentionGrid& g, int device,
                                      cudaStream_t stream) {
  const auto with_type = [&](auto type) {
    using T = decltype(type);
    if (varlen)
      launch_mask<T, true>(head_dim, mask, p, g, device, stream);
    else
      launch_mask<T, false>(head_dim, mask, p, g, device, stream);
  };
  if (bf16)
    with_type(__nv_bfloat16{});
  else
    with_type(__half{});
}

}  // namespace gks::detail
