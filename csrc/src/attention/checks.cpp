// SPDX-License-Identifier: Apache-2.0
#include "attention/checks.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <iterator>
#include <limits>
#include <string>

#include "core/launch.h"
#include "gks/attention.h"
#include "gks/error.h"

namespace gks::detail {

float check_attention_options(const AttentionOptions& o, int64_t head_dim, const char* op) {
  float scale = 1.f / std::sqrt(float(head_dim));
  if (o.softmax_scale.has_value()) {
    scale = *o.softmax_scale;
    GKS_CHECK(std::isfinite(scale) && scale > 0.f, kInvalidArgument)
        << op << ": argument 'softmax_scale' must be a finite number > 0, got " << scale;
  }
  GKS_CHECK(o.window_left >= -1 && o.window_right >= -1, kInvalidArgument)
      << op << ": argument 'window_size' must be (left, right) with each -1 (unbounded) or >= 0, "
      << "got (" << o.window_left << ", " << o.window_right << ")";
  GKS_CHECK(!o.causal || o.window_right <= 0, kInvalidArgument)
      << op << ": argument 'window_size' must have right -1 or 0 with causal=True (causal is "
      << "right = 0), got (" << o.window_left << ", " << o.window_right << ")";
  GKS_CHECK(std::isfinite(o.softcap) && o.softcap >= 0.0, kInvalidArgument)
      << op << ": argument 'softcap' must be 0 (none) or a finite number > 0, got " << o.softcap;
  GKS_CHECK(o.softcap == 0.0 || (o.softcap >= 1e-30 && o.softcap <= 1e30), kInvalidArgument)
      << op << ": argument 'softcap' must be 0 or between 1e-30 and 1e30 (the kernels take "
      << "float32 factors of it), got " << o.softcap;
  // The kernels multiply raw scores by scale / softcap in float32.
  const double cap_factor = o.softcap > 0.0 ? double(scale) / o.softcap : 1.0;
  GKS_CHECK(cap_factor >= double(FLT_MIN) && cap_factor <= double(FLT_MAX), kInvalidArgument)
      << op << ": argument 'softcap' must leave softmax_scale / softcap a float32 normal number "
      << "(1.2e-38 to 3.4e+38), got " << cap_factor;
  return scale;
}

void check_aligned16(const TensorRef& t, const char* op, const char* arg) {
  const int64_t elems = 16 / dtype_size(t.dtype);
  bool ok = aligned16(t.data);
  for (int d = 0; d < t.ndim - 1; ++d) ok = ok && (t.strides[d] % elems == 0 || t.shape[d] <= 1);
  if (ok) return;
  std::string strides;
  for (int d = 0; d < t.ndim; ++d) strides += (d ? ", " : "") + std::to_string(t.strides[d]);
  GKS_CHECK(false, kInvalidArgument)
      << op << ": argument '" << arg << "' must be 16-byte aligned (data pointer at a multiple of 16 "
      << "bytes and every stride but the last a multiple of " << elems << " elements), got strides ["
      << strides << "]; pass a contiguous copy";
}

void check_devices_and_dtypes(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& o,
                              const TensorRef& lse, const char* op) {
  check_cuda(q, op, "q");
  check_same_device(q, "q", k, "k", op);
  check_same_device(q, "q", v, "v", op);
  check_same_device(q, "q", o, "o", op);
  check_same_device(q, "q", lse, "lse", op);
  GKS_CHECK(q.dtype == DType::kFloat16 || q.dtype == DType::kBFloat16, kUnsupportedDtype)
      << op << ": argument 'q' must be float16 or bfloat16, got " << dtype_name(q.dtype);
  check_same_dtype(q, "q", k, "k", op);
  check_same_dtype(q, "q", v, "v", op);
  check_same_dtype(q, "q", o, "o", op);
  check_dtype(lse, DType::kFloat32, op, "lse");
}

void check_attention_tensor(const TensorRef& t, const char* op, const char* arg) {
  GKS_CHECK(t.ndim == 4, kInvalidArgument)
      << op << ": argument '" << arg << "' must have 4 dims [batch, heads, seq, head_dim], got "
      << t.ndim << " dims " << t.shape_string();
  GKS_CHECK(t.strides[3] == 1 || t.shape[3] <= 1, kInvalidArgument)
      << op << ": argument '" << arg << "' must be contiguous in its last dim (stride 1), got "
      << "stride " << t.strides[3];
}

void check_head_dim(int64_t head_dim, const char* op) {
  GKS_CHECK(std::find(std::begin(kFlashAttentionHeadDims), std::end(kFlashAttentionHeadDims), head_dim) !=
                std::end(kFlashAttentionHeadDims),
            kInvalidArgument)
      << op << ": head dim (the last dim of q and k) must be one of 32, 64, 96, 128, 192, 256, "
      << "got " << head_dim;
}

void check_gqa(int64_t heads_q, int64_t heads_kv, const char* op, int kv_dim) {
  GKS_CHECK(heads_kv > 0 ? heads_q % heads_kv == 0 : heads_q == 0, kInvalidArgument)
      << op << ": the query heads (" << heads_q << ", dim 1 of q) must be a multiple of the "
      << "key/value heads (" << heads_kv << ", dim " << kv_dim << " of k and v)";
}

void check_dense_qkv(const TensorRef& q, const TensorRef& k, const TensorRef& v, const char* op) {
  check_attention_tensor(q, op, "q");
  check_attention_tensor(k, op, "k");
  check_attention_tensor(v, op, "v");
  for (const TensorRef* t : {&q, &k, &v})
    for (int d = 0; d < 4; ++d)
      GKS_CHECK(t->shape[d] >= 0, kInvalidArgument) << op << ": negative size in shape " << t->shape_string();
  const int64_t batch = q.shape[0], head_dim = q.shape[3];
  const int64_t heads_kv = k.shape[1], seqlen_k = k.shape[2], head_dim_v = v.shape[3];
  check_head_dim(head_dim, op);
  GKS_CHECK(k.shape[0] == batch && k.shape[3] == head_dim, kInvalidArgument)
      << op << ": argument 'k' must have shape [" << batch << ", Hkv, Sk, " << head_dim
      << "] (q's batch and head dim), got " << k.shape_string();
  GKS_CHECK(v.shape[0] == k.shape[0] && v.shape[1] == heads_kv && v.shape[2] == seqlen_k &&
                flash_head_dims(head_dim, head_dim_v),
            kInvalidArgument)
      << op << ": argument 'v' must have shape [" << k.shape[0] << ", " << heads_kv << ", " << seqlen_k << ", "
      << head_dim << "] (k's first three dims and the head dim; 128 is also allowed with head dim 192), got "
      << v.shape_string();
  check_gqa(q.shape[1], heads_kv, op);
}

void check_dense_limits(int64_t seqlen_q, int64_t seqlen_k, int64_t heads_q, int64_t batch, const char* op) {
  constexpr int64_t kMaxSeq = std::numeric_limits<int32_t>::max() - 1024;
  GKS_CHECK(seqlen_q <= kMaxSeq && seqlen_k <= kMaxSeq, kInvalidArgument)
      << op << ": sequence lengths up to " << kMaxSeq << " are supported, got Sq = " << seqlen_q
      << ", Sk = " << seqlen_k;
  GKS_CHECK(heads_q <= 65535 && batch <= 65535, kInvalidArgument)
      << op << ": at most 65535 query heads and 65535 batches are supported, got " << heads_q << " and " << batch;
}

}  // namespace gks::detail
