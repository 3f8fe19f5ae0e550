// SPDX-License-Identifier: Apache-2.0
// The launchers of the Hopper FlashAttention kernels, defined in flash_attention_{fwd,bwd}_sm90a.cu
// (compiled for sm_90a alone) and called from flash_attention_{fwd,bwd}.cu only under
// GKS_WITH_SM90A, after every argument is validated; and the kernel parameters the forward
// and the backward set alike.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "gks/kernels/attention/common.cuh"
#include "gks/tensor.h"

namespace gks::kernels::attention {
struct BwdParams;  // bwd_sm80.cuh
}  // namespace gks::kernels::attention

namespace gks {
struct FlashAttentionVarlenFwdArgs;  // gks/attention.h
}  // namespace gks

namespace gks::detail {

// f(std::integral_constant<Mask, M>{}) for the runtime mask: the one place a mask becomes
// a kernel's template argument.
template <class F>
decltype(auto) with_mask(kernels::attention::Mask mask, F&& f) {
  using M = kernels::attention::Mask;
  switch (mask) {
    case M::kNone: return f(std::integral_constant<M, M::kNone>{});
    case M::kRight: return f(std::integral_constant<M, M::kRight>{});
    default: return f(std::integral_constant<M, M::kLocal>{});
  }
}

// The kernels' mask and window bounds (p.window_left / right) for the arguments, clamped
// to where they stop mattering (flash_attention_fwd.cu; the backward's too).
kernels::attention::Mask window_params(bool causal, int64_t window_left, int64_t window_right, int64_t seqlen_q,
                                       int64_t seqlen_k, kernels::attention::FwdParams& p);

// The softmax scale and softcap as the kernels read them (p.scale_log2, softcap, softcap_pre).
void scale_params(float scale, double softcap, kernels::attention::FwdParams& p);

// The parameters of a dense call (q [B, Hq, Sq, D], k, v, o, lse as flash_attention_fwd
// takes them, validated): data, strides, lengths and the GQA group; the options are
// scale_params' and window_params'.
kernels::attention::FwdParams dense_params(const TensorRef& q, const TensorRef& k, const TensorRef& v,
                                           const TensorRef& o, const TensorRef& lse);

// Every check of a varlen call but the alignment, in op's words (flash_attention_varlen_fwd's;
// its backward's on the same arguments); returns the softmax scale.
float validate_varlen(const FlashAttentionVarlenFwdArgs& args, const char* op);

// The parameters of a varlen call (validated): batch strides 0, cu_seqlens and the totals
// (each CTA moves the base pointers to its sequence: sequence_params), the GQA group, the
// options; `mask`: the kernels' mask (window_params over the longest a sequence can be).
kernels::attention::FwdParams varlen_params(const FlashAttentionVarlenFwdArgs& args, float scale,
                                            kernels::attention::Mask& mask);

// The tensors the warp-specialized kernel's tensor maps are made over.
struct AttentionTensors {
  const TensorRef& q;
  const TensorRef& k;
  const TensorRef& v;
  const TensorRef& o;
};

// Whether TMA can address every one of `tensors` ([B, H, S, D] views: attention_tensor_map
// encodes for each), as the warp-specialized kernels, forward and backward, need.
bool attention_tma_addressable(std::initializer_list<const TensorRef*> tensors);

// The warp-specialized kernel (config "wgmma.ws"): head dims ws_flash_head_dims serves, Sq
// and Sk > 0. Launches nothing and returns false where TMA cannot address a tensor's layout.
bool launch_flash_attention_fwd_ws(bool bf16, int64_t head_dim, int64_t head_dim_v,
                                   kernels::attention::Mask mask,
                                   const kernels::attention::FwdParams& p,
                                   const AttentionTensors& t, int device, cudaStream_t stream);

// The grid of the mma.sync and wgmma kernels: (ceil(rows / block_m), Hq, B); rows is Sq, or
// varlen's max_seqlen_q (capped at total_q).
struct AttentionGrid {
  int64_t rows, heads_q, batch;
};

// head_dim: one wgmma_flash_head_dims serves (64 or 128, v's the same). varlen: p's
// cu_seqlens are set (the kVarlen kernel, query blocks strided over the grid's x).
void launch_flash_attention_fwd_wgmma(bool bf16, bool varlen, int64_t head_dim, kernels::attention::Mask mask,
                                      const kernels::attention::FwdParams& p, const AttentionGrid& g,
                                      int device, cudaStream_t stream);

// The backward's sizes: the wgmma kernel's grid (ceil(Sk / 128), Hkv, B), its dQ conversion's
// (query blocks, Hq, B), and its fp32 dQ accumulator's.
struct AttentionBwdGrid {
  int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k;
};

// The tensors the warp-specialized backward's tensor maps are made over.
struct AttentionBwdTensors {
  const TensorRef& q;
  const TensorRef& k;
  const TensorRef& v;
  const TensorRef& dout;
};

// The query rows a step of the wgmma backwards at this head dim (64 or 128): the warp-
// specialized kernel wants delta and lse2 padded to a multiple of it (BwdParams::stats_rows).
int flash_attention_bwd_wgmma_block_m(int64_t head_dim);

// The wgmma backwards (config "wgmma", or with `ws` "wgmma.ws"): head dims 64 and 128 (v's
// the same); delta (and for ws lse2, both padded) already in p. Allocates and zeroes the
// fp32 dQ accumulator (a stream-ordered temporary), launches the dK/dV kernel, which adds
// into it, and the kernel that writes dQ from it. The warp-specialized kernel gives way to
// the other where TMA cannot address a tensor. `deterministic` (ws only): dQ added in a
// fixed order (a zeroed counter per query block, another temporary).
void launch_flash_attention_bwd_wgmma(bool bf16, bool ws, bool deterministic, int64_t head_dim,
                                      kernels::attention::Mask mask,
                                      const kernels::attention::BwdParams& p, const AttentionBwdTensors& t,
                                      const AttentionBwdGrid& g, int device, cudaStream_t stream);

// A 4-D tensor map over t [B, H, S, D] (dims innermost first: D, S, H, B) in boxes of
// [box_rows, 64] elements, 128-byte swizzled. False where TMA refuses the layout.
bool attention_tensor_map(CUtensorMap* map, const TensorRef& t, int box_rows);

}  // namespace gks::detail
