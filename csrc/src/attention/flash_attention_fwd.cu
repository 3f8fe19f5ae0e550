// SPDX-License-Identifier: Apache-2.0
#include "gks/attention.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <iterator>
#include <limits>

#include "attention/launch.h"
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

template <typename T, int kHeadDim, ka::Mask kMask, int kHeadDimV = kHeadDim>
void launch(const FlashAttentionFwdParams& p, int64_t batch, int64_t heads_q, int device,
            cudaStream_t stream) {
  using Tile = typename ka::FlashFwdConfig<kHeadDim, kMask != ka::Mask::kNone, kHeadDimV>::Tile;
  constexpr auto kernel = ka::flash_attention_fwd_kernel<T, Tile, kMask>;
  // Above 48 KiB of dynamic shared memory a kernel must opt in (a host-side attribute, so
  // this is also allowed while a stream is being captured); the default carveout.
  prepare_smem_kernel<kernel>(Tile::kSmemBytes, device, /*max_carveout=*/false);
  const dim3 grid(static_cast<unsigned>(ceil_div(p.seqlen_q, Tile::kBlockM)),
                  static_cast<unsigned>(heads_q), static_cast<unsigned>(batch));
  kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p);
}

// head_dim_v: v's head dim, head_dim's but for DeepSeek's (192, 128).
template <typename T, ka::Mask kMask>
void dispatch_head_dim(int64_t head_dim, int64_t head_dim_v, const FlashAttentionFwdParams& p,
                       int64_t batch, int64_t heads_q, int device, cudaStream_t stream) {
  switch (head_dim) {
    case 32: return launch<T, 32, kMask>(p, batch, heads_q, device, stream);
    case 64: return launch<T, 64, kMask>(p, batch, heads_q, device, stream);
    case 96: return launch<T, 96, kMask>(p, batch, heads_q, device, stream);
    case 128: return launch<T, 128, kMask>(p, batch, heads_q, device, stream);
    case 192:
      if (head_dim_v == 128) return launch<T, 192, kMask, 128>(p, batch, heads_q, device, stream);
      return launch<T, 192, kMask>(p, batch, heads_q, device, stream);
    default: return launch<T, 256, kMask>(p, batch, heads_q, device, stream);
  }
}

template <typename T>
void dispatch_mask(ka::Mask mask, int64_t head_dim, int64_t head_dim_v,
                   const FlashAttentionFwdParams& p, int64_t batch, int64_t heads_q, int device,
                   cudaStream_t stream) {
  with_mask(mask, [&](auto m) {
    dispatch_head_dim<T, decltype(m)::value>(head_dim, head_dim_v, p, batch, heads_q, device,
                                             stream);
  });
}

void check_attention_tensor(const TensorRef& t, const char* op, const char* arg) {
  GKS_CHECK(t.ndim == 4, kInvalidArgument)
      << op << ": argument '" << arg << "' must have 4 dims [batch, heads, seq, head_dim], got "
      << t.ndim << " dims " << t.shape_string();
  GKS_CHECK(t.strides[3] == 1 || t.shape[3] <= 1, kInvalidArgument)
      << op << ": argument '" << arg << "' must be contiguous in its last dim (stride 1), got "
      << "stride " << t.strides[3];
}

// cp.async and the output stores move 16-byte chunks: the base and every row must start on
// a 16-byte boundary.
void check_aligned16(const TensorRef& t, const char* op, const char* arg) {
  const int64_t elems = 16 / dtype_size(t.dtype);
  bool ok = aligned16(t.data);
  for (int d = 0; d < 3; ++d) ok = ok && (t.strides[d] % elems == 0 || t.shape[d] <= 1);
  GKS_CHECK(ok, kInvalidArgument)
      << op << ": argument '" << arg << "' must be 16-byte aligned (data pointer at a multiple "
      << "of 16 bytes and batch, head and sequence strides multiples of " << elems
      << " elements), got strides [" << t.strides[0] << ", " << t.strides[1] << ", "
      << t.strides[2] << ", " << t.strides[3] << "]; pass a contiguous copy";
}

constexpr const char* kOp = "gks.flash_attention_fwd";

// Every check but the 16-byte alignment (which a launch with no work skips); returns the
// softmax scale.
float validate(const FlashAttentionFwdArgs& args) {
  const TensorRef &q = args.q, &k = args.k, &v = args.v, &o = args.o, &lse = args.lse;
  check_cuda(q, kOp, "q");
  check_same_device(q, "q", k, "k", kOp);
  check_same_device(q, "q", v, "v", kOp);
  check_same_device(q, "q", o, "o", kOp);
  check_same_device(q, "q", lse, "lse", kOp);
  GKS_CHECK(q.dtype == DType::kFloat16 || q.dtype == DType::kBFloat16, kUnsupportedDtype)
      << kOp << ": argument 'q' must be float16 or bfloat16, got " << dtype_name(q.dtype);
  check_same_dtype(q, "q", k, "k", kOp);
  check_same_dtype(q, "q", v, "v", kOp);
  check_same_dtype(q, "q", o, "o", kOp);
  GKS_CHECK(lse.dtype == DType::kFloat32, kUnsupportedDtype)
      << kOp << ": argument 'lse' must be float32, got " << dtype_name(lse.dtype);
  detail::check_attention_tensor(q, kOp, "q");
  detail::check_attention_tensor(k, kOp, "k");
  detail::check_attention_tensor(v, kOp, "v");
  detail::check_attention_tensor(o, kOp, "o");
  for (const TensorRef* t : {&q, &k, &v})
    for (int d = 0; d < 4; ++d)
      GKS_CHECK(t->shape[d] >= 0, kInvalidArgument)
          << kOp << ": negative size in shape " << t->shape_string();

  const int64_t batch = q.shape[0], heads_q = q.shape[1], seqlen_q = q.shape[2];
  const int64_t head_dim = q.shape[3];
  const int64_t heads_kv = k.shape[1], seqlen_k = k.shape[2], head_dim_v = v.shape[3];
  GKS_CHECK(std::find(std::begin(kFlashAttentionHeadDims), std::end(kFlashAttentionHeadDims),
                      head_dim) != std::end(kFlashAttentionHeadDims),
            kInvalidArgument)
      << kOp << ": head dim (the last dim of q and k) must be one of 32, 64, 96, 128, 192, 256, "
      << "got " << head_dim;
  GKS_CHECK(k.shape[0] == batch && k.shape[3] == head_dim, kInvalidArgument)
      << kOp << ": argument 'k' must have shape [" << batch << ", Hkv, Sk, " << head_dim
      << "] (q's batch and head dim), got " << k.shape_string();
  GKS_CHECK(v.shape[0] == k.shape[0] && v.shape[1] == heads_kv && v.shape[2] == seqlen_k &&
                detail::flash_head_dims(head_dim, head_dim_v),
            kInvalidArgument)
      << kOp << ": argument 'v' must have shape [" << k.shape[0] << ", " << heads_kv << ", "
      << seqlen_k << ", " << head_dim << "] (k's first three dims and the head dim; 128 is also "
      << "allowed with head dim 192), got " << v.shape_string();
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
  GKS_CHECK(heads_kv > 0 ? heads_q % heads_kv == 0 : heads_q == 0, kInvalidArgument)
      << kOp << ": the query heads (" << heads_q << ", dim 1 of q) must be a multiple of the "
      << "key/value heads (" << heads_kv << ", dim 1 of k and v)";
  float scale = 1.f / std::sqrt(float(head_dim));
  if (args.softmax_scale.has_value()) {
    scale = *args.softmax_scale;
    GKS_CHECK(std::isfinite(scale) && scale > 0.f, kInvalidArgument)
        << kOp << ": argument 'softmax_scale' must be a finite number > 0, got " << scale;
  }
  GKS_CHECK(args.window_left >= -1 && args.window_right >= -1, kInvalidArgument)
      << kOp << ": argument 'window_size' must be (left, right) with each -1 (unbounded) or >= 0, "
      << "got (" << args.window_left << ", " << args.window_right << ")";
  GKS_CHECK(!args.causal || args.window_right <= 0, kInvalidArgument)
      << kOp << ": argument 'window_size' must have right -1 or 0 with causal=True (causal is "
      << "right = 0), got (" << args.window_left << ", " << args.window_right << ")";
  GKS_CHECK(std::isfinite(args.softcap) && args.softcap >= 0.0, kInvalidArgument)
      << kOp << ": argument 'softcap' must be 0 (none) or a finite number > 0, got " << args.softcap;
  GKS_CHECK(args.softcap == 0.0 || (args.softcap >= 1e-30 && args.softcap <= 1e30), kInvalidArgument)
      << kOp << ": argument 'softcap' must be 0 or between 1e-30 and 1e30 (the kernels take "
      << "float32 factors of it), got " << args.softcap;
  // The kernels multiply raw scores by scale / softcap in float32.
  const double cap_factor = args.softcap > 0.0 ? double(scale) / args.softcap : 1.0;
  GKS_CHECK(cap_factor >= double(FLT_MIN) && cap_factor <= double(FLT_MAX), kInvalidArgument)
      << kOp << ": argument 'softcap' must leave softmax_scale / softcap a float32 normal number "
      << "(1.2e-38 to 3.4e+38), got " << cap_factor;
  // Row indices are 32-bit inside the kernel (offsets are 64-bit); the grid's y and z dims
  // hold heads and batch.
  constexpr int64_t kMaxSeq = std::numeric_limits<int32_t>::max() - 1024;
  GKS_CHECK(seqlen_q <= kMaxSeq && seqlen_k <= kMaxSeq, kInvalidArgument)
      << kOp << ": sequence lengths up to " << kMaxSeq << " are supported, got Sq = " << seqlen_q
      << ", Sk = " << seqlen_k;
  GKS_CHECK(heads_q <= 65535 && batch <= 65535, kInvalidArgument)
      << kOp << ": at most 65535 query heads and 65535 batches are supported, got "
      << heads_q << " and " << batch;
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
      (!check_layouts || flash_attention_fwd_ws_layouts({args.q, args.k, args.v, args.o})))
    return Kernel::kWgmmaWs;
  return wgmma_flash_head_dims(head_dim, head_dim_v) ? Kernel::kWgmma : Kernel::kMmaSync;
#else
  (void)check_layouts;
  (void)args;
  return Kernel::kMmaSync;
#endif
}

// The kernels' mask and window bounds for the arguments: a bound no row can reach is
// dropped (causal with Sq = 1 sees every key), and the others are clamped to where they
// stop mattering, so that the kernels' 32-bit window fields hold them.
ka::Mask window_params(const FlashAttentionFwdArgs& args, ka::FwdParams& p) {
  const int64_t seqlen_q = args.q.shape[2], seqlen_k = args.k.shape[2];
  const int64_t right = args.causal ? 0 : args.window_right;
  // Row i sees keys up to i + Sk - Sq + right: all of them for every row once right >= Sq - 1;
  // keys from i + Sk - Sq - left: from 0 for every row once left >= Sk - 1.
  const bool right_bound = right >= 0 && right < seqlen_q - 1;
  const bool left_bound = args.window_left >= 0 && args.window_left < seqlen_k - 1;
  p.window_right = static_cast<int>(right_bound ? right : seqlen_q);
  p.window_left = static_cast<int>(left_bound ? args.window_left : seqlen_k);
  if (left_bound) return ka::Mask::kLocal;
  return right_bound ? ka::Mask::kRight : ka::Mask::kNone;
}

}  // namespace
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
  const int64_t heads_kv = k.shape[1], seqlen_k = k.shape[2];
  if (batch == 0 || heads_q == 0 || seqlen_q == 0) return;  // nothing to write
  // Sk = 0 still launches: every row sees no key, so the kernel writes o = 0, lse = -inf.
  detail::check_aligned16(q, kOp, "q");
  detail::check_aligned16(o, kOp, "o");
  if (seqlen_k > 0) {
    detail::check_aligned16(k, kOp, "k");
    detail::check_aligned16(v, kOp, "v");
  }
  if (validating_only()) return;

  kernels::attention::FwdParams p{};
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.o = o.data;
  p.lse = static_cast<float*>(lse.data);
  p.q_batch = q.strides[0], p.q_head = q.strides[1], p.q_row = q.strides[2];
  p.k_batch = k.strides[0], p.k_head = k.strides[1], p.k_row = k.strides[2];
  p.v_batch = v.strides[0], p.v_head = v.strides[1], p.v_row = v.strides[2];
  p.o_batch = o.strides[0], p.o_head = o.strides[1], p.o_row = o.strides[2];
  p.lse_batch = lse.strides[0], p.lse_head = lse.strides[1], p.lse_row = lse.strides[2];
  p.seqlen_q = static_cast<int>(seqlen_q);
  p.seqlen_k = static_cast<int>(seqlen_k);
  p.group = static_cast<int>(heads_q / heads_kv);
  p.scale_log2 = scale * 1.4426950408889634f;
  if (args.softcap > 0.0) {  // the cap's tanh takes the scale; the softmax then scales by 1
    p.softcap = static_cast<float>(args.softcap);
    p.softcap_pre = static_cast<float>(double(scale) / args.softcap);
    p.scale_log2 = 1.4426950408889634f;
  }
  const kernels::attention::Mask mask = detail::window_params(args, p);

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
    detail::launch_flash_attention_fwd_wgmma(bf16, head_dim, mask, p, batch, heads_q,
                                             q.device.index, stream);
    detail::check_launch(kOp);
    return;
  }
#endif
  if (q.dtype == DType::kFloat16)
    detail::dispatch_mask<__half>(mask, head_dim, head_dim_v, p, batch, heads_q, q.device.index,
                                  stream);
  else
    detail::dispatch_mask<__nv_bfloat16>(mask, head_dim, head_dim_v, p, batch, heads_q,
                                         q.device.index, stream);
  detail::check_launch(kOp);
}

}  // namespace gks
