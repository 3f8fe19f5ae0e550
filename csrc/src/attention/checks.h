// SPDX-License-Identifier: Apache-2.0
// The checks the attention ops share (flash_attention_fwd, its varlen form,
// flash_attention_decode, flash_attention_bwd): their options (softmax scale, sliding
// window, softcap), the 16-byte alignment the kernels' copies need, q, k, v, o and lse's
// devices and dtypes, their dims, head dims and heads.
#pragma once

#include <cstdint>
#include <optional>

#include "gks/tensor.h"

namespace gks::detail {

struct AttentionOptions {
  std::optional<float> softmax_scale;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  double softcap = 0.0;
};

// Throws naming the option (op's words) unless every option is valid; returns the softmax
// scale (1 / sqrt(head_dim) when unset).
float check_attention_options(const AttentionOptions& o, int64_t head_dim, const char* op);

// cp.async and the output stores move 16-byte chunks: the base and every stride but the
// last must be at 16 bytes.
void check_aligned16(const TensorRef& t, const char* op, const char* arg);

// q fp16/bf16 on a CUDA device; k, v and o on its device in its dtype; lse float32 there.
void check_devices_and_dtypes(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& o,
                              const TensorRef& lse, const char* op);

// A [batch, heads, seq, head_dim] tensor, contiguous in its last dim.
void check_attention_tensor(const TensorRef& t, const char* op, const char* arg);

// q and k's head dim is one the kernels are built for (kFlashAttentionHeadDims).
void check_head_dim(int64_t head_dim, const char* op);

// Hq a multiple of Hkv; kv_dim: the dim of k and v that holds their heads.
void check_gqa(int64_t heads_q, int64_t heads_kv, const char* op, int kv_dim = 1);

// A dense call's q [B, Hq, Sq, D], k [B, Hkv, Sk, D] and v [B, Hkv, Sk, Dv]: each a
// check_attention_tensor with sizes >= 0, a head dim with a kernel, k and v matching q (Dv
// = D, or 128 with 192), Hq a multiple of Hkv (flash_attention_fwd's and _bwd's).
void check_dense_qkv(const TensorRef& q, const TensorRef& k, const TensorRef& v, const char* op);

// Row indices are 32-bit inside the dense kernels (offsets 64-bit) and their grids' y and z
// dims hold heads and batch.
void check_dense_limits(int64_t seqlen_q, int64_t seqlen_k, int64_t heads_q, int64_t batch, const char* op);

}  // namespace gks::detail
