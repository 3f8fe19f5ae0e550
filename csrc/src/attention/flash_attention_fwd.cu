// SPDX-License-Identifier: Apache-2.0
#include "gks/attention.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <iterator>
#include <limits>
#include <utility>

#include "attention/launch.h"
#include "attention/checks.h"
#include "core/config.h"
#include "gks/device_limits.h"
#include "gks/kernels/attention/fwd_sm80.cuh"
#include "core/launch.h"

namespace gks {
namespace detail {

namespace ka = kernels::attention;

namespace {
template <typename Tile>
FlashAttentionFwdPlan plan_tile() {
  FlashAttentionFwdPlan plan;
  plan.block_m = Tile::kBlockM;
  plan.block_n = Tile::kBlockN;
  plan.warps = Tile::kWarps;
  plan.q_in_registers = Tile::kQInRegisters;
  plan.smem_bytes = Tile::kSmemBytes;
  return plan;
}

template <int kHeadDim, int kHeadDimV = kHeadDim>
FlashAttentionFwdPlan plan_for(bool causal) {
  if (!causal) return plan_tile<typename ka::FlashFwdConfig<kHeadDim, false, kHeadDimV>::Tile>();
  return plan_tile<typename ka::FlashFwdConfig<kHeadDim, true, kHeadDimV>::Tile>();
}
}  // namespace

FlashAttentionFwdPlan plan_flash_attention_fwd(int64_t head_dim, bool causal, int64_t head_dim_v) {
  if (head_dim_v < 0) head_dim_v = head_dim;
  GKS_CHECK(flash_head_dims(head_dim, head_dim_v), kInvalidArgument)
      << "gks.flash_attention_fwd: head dims (" << head_dim << ", " << head_dim_v
      << ") have no kernel: q and k's must be one of 32, 64, 96, 128, 192, 256, and v's the same "
         "(or 128 with 192)";
  switch (head_dim) {
    case 32: return plan_for<32>(causal);
    case 64: return plan_for<64>(causal);
    case 96: return plan_for<96>(causal);
    case 128: return plan_for<128>(causal);
    case 192: return head_dim_v == 128 ? plan_for<192, 128>(causal) : plan_for<192>(causal);
    default: return plan_for<256>(causal);
  }
}

namespace {

using FlashAttentionFwdParams = ka::FwdParams;

template <typename T, int kHeadDim, ka::Mask kMask, bool kVarlen, int kHeadDimV = kHeadDim>
void launch(const FlashAttentionFwdParams& p, const AttentionGrid& g, int device, cudaStream_t stream) {
  using Tile = typename ka::FlashFwdConfig<kHeadDim, kMask != ka::Mask::kNone, kHeadDimV>::Tile;
  constexpr auto kernel = ka::flash_attention_fwd_kernel<T, Tile, kMask, kVarlen>;
  // Above 48 KiB of dynamic shared memory a kernel must opt in (a host-side attribute, so
  // this is also allowed while a stream is being captured); the default carveout.
  prepare_smem_kernel<kernel>(Tile::kSmemBytes, device, /*max_carveout=*/false);
  const dim3 grid(static_cast<unsigned>(std::max<int64_t>(1, ceil_div(g.rows, Tile::kBlockM))),
                  static_cast<unsigned>(g.heads_q), static_cast<unsigned>(g.batch));
  kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p);
}

// The mma.sync kernel for the dtype, mask and head dims (head_dim_v: v's, head_dim's but
// for DeepSeek's (192, 128)).
template <bool kVarlen>
void launch_mma_sync(DType dtype, ka::Mask mask, int64_t head_dim, int64_t head_dim_v,
                     const FlashAttentionFwdParams& p, const AttentionGrid& g, int device, cudaStream_t stream) {
  const auto with_type = [&](auto type) {
    using T = decltype(type);
    with_mask(mask, [&](auto m) {
      constexpr ka::Mask kMask = decltype(m)::value;
      switch (head_dim) {
        case 32: return launch<T, 32, kMask, kVarlen>(p, g, device, stream);
        case 64: return launch<T, 64, kMask, kVarlen>(p, g, device, stream);
        case 96: return launch<T, 96, kMask, kVarlen>(p, g, device, stream);
        case 128: return launch<T, 128, kMask, kVarlen>(p, g, device, stream);
        case 192:
          if (head_dim_v == 128) return launch<T, 192, kMask, kVarlen, 128>(p, g, device, stream);
          return launch<T, 192, kMask, kVarlen>(p, g, device, stream);
        default: return launch<T, 256, kMask, kVarlen>(p, g, device, stream);
      }
    });
  };
  if (dtype == DType::kFloat16)
    with_type(__half{});
  else
    with_type(__nv_bfloat16{});
}

constexpr const char* kOp = "gks.flash_attention_fwd";

// Every check but the 16-byte alignment (which a launch with no work skips); returns the
// softmax scale.
float validate(const FlashAttentionFwdArgs& args) {
  const TensorRef &q = args.q, &k = args.k, &v = args.v, &o = args.o, &lse = args.lse;
  check_devices_and_dtypes(q, k, v, o, lse, kOp);
  check_dense_qkv(q, k, v, kOp);
  detail::check_attention_tensor(o, kOp, "o");
  const int64_t batch = q.shape[0], heads_q = q.shape[1], seqlen_q = q.shape[2];
  const int64_t head_dim = q.shape[3], seqlen_k = k.shape[2], head_dim_v = v.shape[3];
  GKS_CHECK(o.shape[0] == batch && o.shape[1] == heads_q && o.shape[2] == seqlen_q &&
                o.shape[3] == head_dim_v,
            kInvalidArgument)
      << kOp << ": argument 'o' must have shape [" << batch << ", " << heads_q << ", " << seqlen_q
      << ", " << head_dim_v << "] (q's first three dims and v's head dim), got " << o.shape_string();
  GKS_CHECK(lse.ndim == 3 && lse.shape[0] == batch && lse.shape[1] == heads_q &&
                lse.shape[2] == seqlen_q,
            kInvalidArgument)
      << kOp << ": argument 'lse' must have shape [" << batch << ", " << heads_q << ", "
      << seqlen_q << "] (q's first three dims), got " << lse.shape_string();
  check_outputs({{&o, "o"}, {&lse, "lse"}}, {{&q, "q"}, {&k, "k"}, {&v, "v"}}, kOp);
  const float scale = check_attention_options(
      {args.softmax_scale, args.causal, args.window_left, args.window_right, args.softcap}, head_dim, kOp);
  check_dense_limits(seqlen_q, seqlen_k, heads_q, batch, kOp);
  check_listed_config(args.config, kFlashAttentionFwdConfigs, kOp, "the best kernel here");
  return scale;
}

using Kernel = FlashAttentionFwdConfig::Kernel;

// The kernel a call runs: the forced config, or the first that can run in the order
// wgmma.ws, wgmma, mma.sync. The Hopper kernels need an sm_90a build, a compute-capability
// 9.0 GPU and a head dim they serve; the warp-specialized one also Sq, Sk > 0 and tensors
// TMA can address, which only its tensor maps tell (`check_layouts`; the launch itself
// gives way when they cannot be made).
Kernel kernel_for(const FlashAttentionFwdArgs& args, bool check_layouts) {
#if defined(GKS_WITH_SM90A)
  const Kernel wanted = args.config < 0 ? Kernel::kWgmmaWs : kFlashAttentionFwdConfigs[args.config].kernel;
  const int64_t head_dim = args.q.shape[3], head_dim_v = args.v.shape[3];
  if (wanted == Kernel::kMmaSync || !device_is_sm90(args.q.device.index)) return Kernel::kMmaSync;
  if (wanted == Kernel::kWgmmaWs && ws_flash_head_dims(head_dim, head_dim_v) && args.q.shape[2] > 0 &&
      args.k.shape[2] > 0 &&
      (!check_layouts || attention_tma_addressable({&args.q, &args.k, &args.v, &args.o})))
    return Kernel::kWgmmaWs;
  return wgmma_flash_head_dims(head_dim, head_dim_v) ? Kernel::kWgmma : Kernel::kMmaSync;
#else
  (void)check_layouts;
  (void)args;
  return Kernel::kMmaSync;
#endif
}

// The 16-byte alignment the kernels' copies need (checked only for a call with work: a
// tensor with no keys may have no storage at all); true unless only validating.
bool aligned_to_launch(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& o,
                       const char* op) {
  check_aligned16(q, op, "q");
  check_aligned16(o, op, "o");
  if (k.numel() > 0) {
    check_aligned16(k, op, "k");
    check_aligned16(v, op, "v");
  }
  return !validating_only();
}

// The kernels' parameters with the tensors' data; strides and shapes left to the caller.
ka::FwdParams data_params(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& o,
                          const TensorRef& lse) {
  ka::FwdParams p{};
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.o = o.data;
  p.lse = static_cast<float*>(lse.data);
  return p;
}

constexpr const char* kVarlenOp = "gks.flash_attention_varlen_fwd";

void check_cu_seqlens(const TensorRef& cu, const TensorRef& q, const char* arg, const char* op) {
  check_same_device(q, "q", cu, arg, op);
  check_dtype(cu, DType::kInt32, op, arg);
  GKS_CHECK(cu.ndim == 1 && cu.shape[0] >= 1, kInvalidArgument)
      << op << ": argument '" << arg << "' must have shape [B + 1] (B >= 0 sequences), got " << cu.shape_string();
}

}  // namespace

float validate_varlen(const FlashAttentionVarlenFwdArgs& args, const char* op) {
  const TensorRef &q = args.q, &k = args.k, &v = args.v, &o = args.o, &lse = args.lse;
  check_devices_and_dtypes(q, k, v, o, lse, op);
  // Packed keys [total_k, Hkv, D], or a paged cache [num_pages, page_size, Hkv, D].
  const bool paged = args.page_table.has_value();
  const int key_dims = paged ? 4 : 3;
  for (const auto& [t, name] : {std::pair{&q, "q"}, std::pair{&k, "k"}, std::pair{&v, "v"}, std::pair{&o, "o"}}) {
    const bool keys = t == &k || t == &v;
    const int want = keys ? key_dims : 3;
    GKS_CHECK(t->ndim == want, kInvalidArgument)
        << op << ": argument '" << name << "' must have " << want << " dims "
        << (keys && paged ? "[num_pages, page_size, heads, head_dim]" : "[total, heads, head_dim]") << ", got "
        << t->ndim << " dims " << t->shape_string();
    GKS_CHECK(t->strides[want - 1] == 1 || t->shape[want - 1] <= 1, kInvalidArgument)
        << op << ": argument '" << name << "' must be contiguous in its last dim (stride 1), got stride "
        << t->strides[want - 1];
  }
  const int64_t total_q = q.shape[0], heads_q = q.shape[1], head_dim = q.shape[2];
  const int64_t total_k = k.shape[0], heads_kv = k.shape[key_dims - 2], head_dim_v = v.shape[key_dims - 1];
  check_head_dim(head_dim, op);
  if (paged) {
    GKS_CHECK(k.shape[3] == head_dim, kInvalidArgument)
        << op << ": argument 'k' must have shape [num_pages, page_size, Hkv, " << head_dim
        << "] (q's head dim), got " << k.shape_string();
    GKS_CHECK(v.shape[0] == k.shape[0] && v.shape[1] == k.shape[1] && v.shape[2] == heads_kv &&
                  flash_head_dims(head_dim, head_dim_v),
              kInvalidArgument)
        << op << ": argument 'v' must have shape [" << k.shape[0] << ", " << k.shape[1] << ", " << heads_kv << ", "
        << head_dim << "] (k's first three dims and the head dim; 128 is also allowed with head dim 192), got "
        << v.shape_string();
  } else {
    GKS_CHECK(k.shape[2] == head_dim, kInvalidArgument)
        << op << ": argument 'k' must have shape [total_k, Hkv, " << head_dim << "] (q's head dim), got "
        << k.shape_string();
    GKS_CHECK(v.shape[0] == total_k && v.shape[1] == heads_kv && flash_head_dims(head_dim, head_dim_v),
              kInvalidArgument)
        << op << ": argument 'v' must have shape [" << total_k << ", " << heads_kv << ", " << head_dim
        << "] (k's first two dims and the head dim; 128 is also allowed with head dim 192), got "
        << v.shape_string();
  }
  GKS_CHECK(o.shape[0] == total_q && o.shape[1] == heads_q && o.shape[2] == head_dim_v, kInvalidArgument)
      << op << ": argument 'o' must have shape [" << total_q << ", " << heads_q << ", " << head_dim_v
      << "] (q's first two dims and v's head dim), got " << o.shape_string();
  GKS_CHECK(lse.ndim == 2 && lse.shape[0] == heads_q && lse.shape[1] == total_q, kInvalidArgument)
      << op << ": argument 'lse' must have shape [" << heads_q << ", " << total_q
      << "] (q's heads and rows), got " << lse.shape_string();
  check_cu_seqlens(args.cu_seqlens_q, q, "cu_seqlens_q", op);
  check_cu_seqlens(args.cu_seqlens_k, q, "cu_seqlens_k", op);
  const int64_t batch = args.cu_seqlens_q.shape[0] - 1;
  GKS_CHECK(args.cu_seqlens_k.shape[0] == batch + 1, kInvalidArgument)
      << op << ": argument 'cu_seqlens_k' must have shape [" << batch + 1 << "] (cu_seqlens_q's), got "
      << args.cu_seqlens_k.shape_string();
  if (args.seqused_k.has_value()) {
    const TensorRef& used = *args.seqused_k;
    check_same_device(q, "q", used, "seqused_k", op);
    check_dtype(used, DType::kInt32, op, "seqused_k");
    GKS_CHECK(used.ndim == 1 && used.shape[0] == batch, kInvalidArgument)
        << op << ": argument 'seqused_k' must have shape [" << batch << "] (one per sequence), got "
        << used.shape_string();
  }
  constexpr int64_t kMaxRows = std::numeric_limits<int32_t>::max() - 1024;
  if (paged) {
    const TensorRef& table = *args.page_table;
    check_same_device(q, "q", table, "page_table", op);
    check_dtype(table, DType::kInt32, op, "page_table");
    GKS_CHECK(table.ndim == 2 && table.shape[0] == batch, kInvalidArgument)
        << op << ": argument 'page_table' must have shape [" << batch << ", max_pages] (one row per sequence), got "
        << table.shape_string();
    GKS_CHECK(table.shape[1] * k.shape[1] <= kMaxRows && k.shape[0] <= kMaxRows, kInvalidArgument)
        << op << ": a paged cache of up to " << kMaxRows << " keys a sequence and pages is supported, got "
        << table.shape[1] << " pages of " << k.shape[1] << " keys and " << k.shape[0] << " pages";
  }
  GKS_CHECK(args.max_seqlen_q >= 0, kInvalidArgument)
      << op << ": argument 'max_seqlen_q' must be an int >= 0, got " << args.max_seqlen_q;
  check_outputs({{&o, "o"}, {&lse, "lse"}},
                {{&q, "q"}, {&k, "k"}, {&v, "v"}, {&args.cu_seqlens_q, "cu_seqlens_q"},
                 {&args.cu_seqlens_k, "cu_seqlens_k"},
                 {args.seqused_k ? &*args.seqused_k : nullptr, "seqused_k"},
                 {paged ? &*args.page_table : nullptr, "page_table"}},
                op);
  check_gqa(heads_q, heads_kv, op, key_dims - 2);
  const float scale = check_attention_options(
      {args.softmax_scale, args.causal, args.window_left, args.window_right, args.softcap}, head_dim, op);
  GKS_CHECK(total_q <= kMaxRows && (paged || total_k <= kMaxRows), kInvalidArgument)
      << op << ": packed rows up to " << kMaxRows << " are supported, got total_q = " << total_q
      << ", total_k = " << total_k;
  GKS_CHECK(heads_q <= 65535 && batch <= 65535, kInvalidArgument)
      << op << ": at most 65535 query heads and 65535 sequences are supported, got " << heads_q << " and "
      << batch;
  check_listed_config(args.config, kFlashAttentionVarlenFwdConfigs, op, "the mma.sync kernel");
  return scale;
}

// The kernels' mask and window bounds for the arguments: a bound no row can reach is
// dropped (causal with Sq = 1 sees every key), and the others are clamped to where they
// stop mattering, so that the kernels' 32-bit window fields hold them.
// seqlen_q / seqlen_k: the rows and keys of the longest sequence there may be (varlen: the
// packed totals).
ka::Mask window_params(bool causal, int64_t window_left, int64_t window_right, int64_t seqlen_q,
                       int64_t seqlen_k, ka::FwdParams& p) {
  const int64_t right = causal ? 0 : window_right;
  // Row i sees keys up to i + Sk - Sq + right: all of them for every row once right >= Sq - 1;
  // keys from i + Sk - Sq - left: from 0 for every row once left >= Sk - 1.
  const bool right_bound = right >= 0 && right < seqlen_q - 1;
  const bool left_bound = window_left >= 0 && window_left < seqlen_k - 1;
  p.window_right = static_cast<int>(right_bound ? right : seqlen_q);
  p.window_left = static_cast<int>(left_bound ? window_left : seqlen_k);
  if (left_bound) return ka::Mask::kLocal;
  return right_bound ? ka::Mask::kRight : ka::Mask::kNone;
}

// The softmax scale and softcap as the kernels read them.
void scale_params(float scale, double softcap, ka::FwdParams& p) {
  p.scale_log2 = scale * 1.4426950408889634f;
  if (softcap > 0.0) {  // the cap's tanh takes the scale; the softmax then scales by 1
    p.softcap = static_cast<float>(softcap);
    p.softcap_pre = static_cast<float>(double(scale) / softcap);
    p.scale_log2 = 1.4426950408889634f;
  }
}

ka::FwdParams dense_params(const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef& o,
                           const TensorRef& lse) {
  ka::FwdParams p = data_params(q, k, v, o, lse);
  p.q_batch = q.strides[0], p.q_head = q.strides[1], p.q_row = q.strides[2];
  p.k_batch = k.strides[0], p.k_head = k.strides[1], p.k_row = k.strides[2];
  p.v_batch = v.strides[0], p.v_head = v.strides[1], p.v_row = v.strides[2];
  p.o_batch = o.strides[0], p.o_head = o.strides[1], p.o_row = o.strides[2];
  p.lse_batch = lse.strides[0], p.lse_head = lse.strides[1], p.lse_row = lse.strides[2];
  p.seqlen_q = static_cast<int>(q.shape[2]);
  p.seqlen_k = static_cast<int>(k.shape[2]);
  p.group = static_cast<int>(q.shape[1] / k.shape[1]);
  return p;
}

ka::FwdParams varlen_params(const FlashAttentionVarlenFwdArgs& args, float scale, ka::Mask& mask) {
  const TensorRef &q = args.q, &k = args.k, &v = args.v, &o = args.o, &lse = args.lse;
  const int64_t total_q = q.shape[0], heads_q = q.shape[1];
  const bool paged = args.page_table.has_value();
  const int64_t total_k = k.shape[0], heads_kv = k.shape[paged ? 2 : 1];
  // Batch strides 0: each CTA moves the base pointers to its sequence (sequence_params).
  ka::FwdParams p = data_params(q, k, v, o, lse);
  p.q_head = q.strides[1], p.q_row = q.strides[0];
  if (paged) {
    const TensorRef& table = *args.page_table;
    p.k_page = k.strides[0], p.k_row = k.strides[1], p.k_head = k.strides[2];
    p.v_page = v.strides[0], p.v_row = v.strides[1], p.v_head = v.strides[2];
    p.page_table = static_cast<const int*>(table.data);
    p.page_table_stride = table.strides[0];
    p.page_size = static_cast<int>(k.shape[1]);
    p.num_pages = static_cast<int>(k.shape[0]);
    p.pages_per_seq = static_cast<int>(table.shape[1]);
  } else {
    p.k_head = k.strides[1], p.k_row = k.strides[0];
    p.v_head = v.strides[1], p.v_row = v.strides[0];
  }
  p.o_head = o.strides[1], p.o_row = o.strides[0];
  p.lse_head = lse.strides[0], p.lse_row = lse.strides[1];
  p.cu_seqlens_q = static_cast<const int*>(args.cu_seqlens_q.data);
  p.cu_seqlens_k = static_cast<const int*>(args.cu_seqlens_k.data);
  p.seqused_k = args.seqused_k.has_value() ? static_cast<const int*>(args.seqused_k->data) : nullptr;
  p.total_q = total_q;
  p.total_k = total_k;
  p.group = static_cast<int>(heads_q / heads_kv);
  scale_params(scale, args.softcap, p);
  // No sequence is longer than the packed totals (or a paged sequence than its pages): the
  // masks and clamps hold for every one.
  const int64_t longest_k = paged ? args.page_table->shape[1] * k.shape[1] : total_k;
  mask = window_params(args.causal, args.window_left, args.window_right, total_q, longest_k, p);
  return p;
}

}  // namespace detail

const char* flash_attention_fwd_path(const FlashAttentionFwdArgs& args) {
  detail::validate(args);
  for (const auto& c : kFlashAttentionFwdConfigs)
    if (c.kernel == detail::kernel_for(args, /*check_layouts=*/true)) return c.name;
  return "mma.sync";
}

void flash_attention_fwd(const FlashAttentionFwdArgs& args, cudaStream_t stream) {
  using detail::kOp;
  const float scale = detail::validate(args);
  const TensorRef &q = args.q, &k = args.k, &v = args.v, &o = args.o, &lse = args.lse;
  const int64_t batch = q.shape[0], heads_q = q.shape[1], seqlen_q = q.shape[2];
  const int64_t head_dim = q.shape[3], head_dim_v = v.shape[3];
  const int64_t seqlen_k = k.shape[2];
  if (batch == 0 || heads_q == 0 || seqlen_q == 0) return;  // nothing to write
  // Sk = 0 still launches: every row sees no key, so the kernel writes o = 0, lse = -inf.
  if (!detail::aligned_to_launch(q, k, v, o, kOp)) return;

  kernels::attention::FwdParams p = detail::dense_params(q, k, v, o, lse);
  detail::scale_params(scale, args.softcap, p);
  const kernels::attention::Mask mask =
      detail::window_params(args.causal, args.window_left, args.window_right, seqlen_q, seqlen_k, p);

  const detail::DeviceGuard guard(q.device.index);
#if defined(GKS_WITH_SM90A)
  const detail::Kernel kernel = detail::kernel_for(args, /*check_layouts=*/false);
  const bool bf16 = q.dtype == DType::kBFloat16;
  if (kernel == detail::Kernel::kWgmmaWs &&
      detail::launch_flash_attention_fwd_ws(bf16, head_dim, head_dim_v, mask, p, {q, k, v, o},
                                            q.device.index, stream)) {
    detail::check_launch(kOp);
    return;
  }
  if (kernel != detail::Kernel::kMmaSync && detail::wgmma_flash_head_dims(head_dim, head_dim_v)) {
    detail::launch_flash_attention_fwd_wgmma(bf16, /*varlen=*/false, head_dim, mask, p, {seqlen_q, heads_q, batch},
                                             q.device.index, stream);
    detail::check_launch(kOp);
    return;
  }
#endif
  detail::launch_mma_sync<false>(q.dtype, mask, head_dim, head_dim_v, p, {seqlen_q, heads_q, batch},
                                 q.device.index, stream);
  detail::check_launch(kOp);
}

void flash_attention_varlen_fwd(const FlashAttentionVarlenFwdArgs& args, cudaStream_t stream) {
  constexpr const char* kOp = detail::kVarlenOp;
  const float scale = detail::validate_varlen(args, kOp);
  const TensorRef &q = args.q, &k = args.k, &v = args.v, &o = args.o;
  const int64_t total_q = q.shape[0], heads_q = q.shape[1], head_dim = q.shape[2], head_dim_v = v.shape[v.ndim - 1];
  const int64_t batch = args.cu_seqlens_q.shape[0] - 1;
  if (batch == 0 || heads_q == 0 || total_q == 0) return;  // nothing to write
  if (!detail::aligned_to_launch(q, k, v, o, kOp)) return;

  kernels::attention::Mask mask;
  const kernels::attention::FwdParams p = detail::varlen_params(args, scale, mask);
  // Past total_q rows no sequence has a block.
  const detail::AttentionGrid grid{std::min(std::max<int64_t>(args.max_seqlen_q, 1), total_q), heads_q, batch};
  const detail::DeviceGuard guard(q.device.index);
#if defined(GKS_WITH_SM90A)
  // wgmma by default where it runs (the dense op measures it 1.4-1.6x mma.sync on Hopper).
  const bool wgmma = args.config < 0 || kFlashAttentionVarlenFwdConfigs[args.config].kernel == detail::Kernel::kWgmma;
  if (wgmma && detail::device_is_sm90(q.device.index) && detail::wgmma_flash_head_dims(head_dim, head_dim_v)) {
    detail::launch_flash_attention_fwd_wgmma(q.dtype == DType::kBFloat16, /*varlen=*/true, head_dim, mask, p, grid,
                                             q.device.index, stream);
    detail::check_launch(kOp);
    return;
  }
#endif
  detail::launch_mma_sync<true>(q.dtype, mask, head_dim, head_dim_v, p, grid, q.device.index, stream);
  detail::check_launch(kOp);
}

}  // namespace gks
