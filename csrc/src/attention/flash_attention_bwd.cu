// SPDX-License-Identifier: Apache-2.0
// gks::flash_attention_bwd: validation, the choice of kernel, and the launches of the
// mma.sync backward kernels (kernels/attention/bwd_sm80.cuh): delta, dK/dV (one or two
// passes), dQ; or delta and the wgmma kernels (flash_attention_bwd_sm90a.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <tuple>

#include "attention/checks.h"
#include "attention/launch.h"
#include "core/config.h"
#include "core/launch.h"
#include "core/workspace.h"
#include "gks/device_limits.h"
#include "gks/attention.h"
#include "gks/error.h"
#include "gks/kernels/attention/bwd_sm80.cuh"

namespace gks {
namespace detail {
namespace {

namespace ka = kernels::attention;

constexpr const char* kBwdOp = "gks.flash_attention_bwd";

// shape [batch, heads, seq, dim] or, for lse, [batch, heads, seq], as a string.
std::string dims_string(std::initializer_list<int64_t> dims) {
  std::string out = "[";
  bool first = true;
  for (int64_t d : dims) {
    out += (first ? "" : ", ") + std::to_string(d);
    first = false;
  }
  return out + "]";
}

void check_shape(const TensorRef& t, std::initializer_list<int64_t> want, const char* arg, const char* what,
                 const char* op = kBwdOp) {
  bool same = t.ndim == int(want.size());
  int d = 0;
  for (int64_t w : want) same = same && t.shape[d++] == w;
  GKS_CHECK(same, kInvalidArgument) << op << ": argument '" << arg << "' must have shape " << dims_string(want)
                                    << " (" << what << "), got " << t.shape_string();
}

// Every check but the 16-byte alignment (a call with no work skips it); returns the softmax
// scale. Messages as the other backends' (the spec's bad-input table).
float validate(const FlashAttentionBwdArgs& args) {
  const TensorRef &q = args.q, &k = args.k, &v = args.v, &o = args.o, &lse = args.lse, &dout = args.dout;
  check_devices_and_dtypes(q, k, v, o, lse, kBwdOp);
  check_same_device(q, "q", dout, "do", kBwdOp);
  check_same_dtype(q, "q", dout, "do", kBwdOp);
  check_dense_qkv(q, k, v, kBwdOp);
  check_attention_tensor(o, kBwdOp, "o");
  check_attention_tensor(dout, kBwdOp, "do");
  GKS_CHECK(lse.ndim == 3, kInvalidArgument)
      << kBwdOp << ": argument 'lse' must have 3 dims [batch, heads, seq], got " << lse.ndim << " dims "
      << lse.shape_string();
  const int64_t batch = q.shape[0], heads_q = q.shape[1], seqlen_q = q.shape[2], head_dim = q.shape[3];
  const int64_t heads_kv = k.shape[1], seqlen_k = k.shape[2], head_dim_v = v.shape[3];
  const char* out_what = "q's batch, heads and sequence, v's head dim";
  check_shape(dout, {batch, heads_q, seqlen_q, head_dim_v}, "do", out_what);
  check_shape(o, {batch, heads_q, seqlen_q, head_dim_v}, "o", out_what);
  check_shape(lse, {batch, heads_q, seqlen_q}, "lse", "q's batch, heads and sequence");
  // The gradients: the shapes of q, k and v, q's dtype and device, last dim contiguous.
  for (const auto& [t, name] : {std::pair{&args.dq, "dq"}, std::pair{&args.dk, "dk"}, std::pair{&args.dv, "dv"}}) {
    check_same_device(q, "q", *t, name, kBwdOp);
    check_same_dtype(q, "q", *t, name, kBwdOp);
    check_attention_tensor(*t, kBwdOp, name);
  }
  check_shape(args.dq, {batch, heads_q, seqlen_q, head_dim}, "dq", "q's shape");
  check_shape(args.dk, {batch, heads_kv, seqlen_k, head_dim}, "dk", "k's shape");
  check_shape(args.dv, {batch, heads_kv, seqlen_k, head_dim_v}, "dv", "v's shape");
  check_outputs({{&args.dq, "dq"}, {&args.dk, "dk"}, {&args.dv, "dv"}},
                {{&dout, "do"}, {&q, "q"}, {&k, "k"}, {&v, "v"}, {&o, "o"}, {&lse, "lse"}}, kBwdOp);
  const float scale = check_attention_options(
      {args.softmax_scale, args.causal, args.window_left, args.window_right, args.softcap}, head_dim, kBwdOp);
  check_dense_limits(seqlen_q, seqlen_k, heads_q, batch, kBwdOp);
  check_listed_config(args.config, kFlashAttentionBwdConfigs, kBwdOp, "the best kernel here");
  return scale;
}

constexpr const char* kVarlenBwdOp = "gks.flash_attention_varlen_bwd";

// A varlen backward's forward arguments: the checks of q, k, v, o, lse, the cu_seqlens and
// the options are the forward's.
FlashAttentionVarlenFwdArgs forward_args(const FlashAttentionVarlenBwdArgs& a) {
  FlashAttentionVarlenFwdArgs f;
  f.q = a.q, f.k = a.k, f.v = a.v, f.o = a.o, f.lse = a.lse;
  f.cu_seqlens_q = a.cu_seqlens_q, f.cu_seqlens_k = a.cu_seqlens_k;
  f.max_seqlen_q = a.max_seqlen_q;
  f.causal = a.causal, f.softmax_scale = a.softmax_scale;
  f.window_left = a.window_left, f.window_right = a.window_right, f.softcap = a.softcap;
  return f;
}

// The forward's checks, then do, dq, dk and dv (q's device and dtype, packed shapes, last
// dim contiguous, the gradients apart from every input) and max_seqlen_k; returns the
// softmax scale.
float validate_varlen_bwd(const FlashAttentionVarlenBwdArgs& args) {
  constexpr const char* op = kVarlenBwdOp;
  const float scale = validate_varlen(forward_args(args), op);
  const TensorRef &q = args.q, &k = args.k, &v = args.v;
  const int64_t total_q = q.shape[0], heads_q = q.shape[1], head_dim = q.shape[2];
  const int64_t total_k = k.shape[0], heads_kv = k.shape[1], head_dim_v = v.shape[2];
  for (const auto& [t, name, want, what] :
       {std::tuple{&args.dout, "do", std::array{total_q, heads_q, head_dim_v}, "o's shape"},
        std::tuple{&args.dq, "dq", std::array{total_q, heads_q, head_dim}, "q's shape"},
        std::tuple{&args.dk, "dk", std::array{total_k, heads_kv, head_dim}, "k's shape"},
        std::tuple{&args.dv, "dv", std::array{total_k, heads_kv, head_dim_v}, "v's shape"}}) {
    check_same_device(q, "q", *t, name, op);
    check_same_dtype(q, "q", *t, name, op);
    check_shape(*t, {want[0], want[1], want[2]}, name, what, op);
    GKS_CHECK(t->strides[2] == 1 || t->shape[2] <= 1, kInvalidArgument)
        << op << ": argument '" << name << "' must be contiguous in its last dim (stride 1), got stride "
        << t->strides[2];
  }
  check_outputs({{&args.dq, "dq"}, {&args.dk, "dk"}, {&args.dv, "dv"}},
                {{&args.dout, "do"}, {&q, "q"}, {&k, "k"}, {&v, "v"}, {&args.o, "o"}, {&args.lse, "lse"},
                 {&args.cu_seqlens_q, "cu_seqlens_q"}, {&args.cu_seqlens_k, "cu_seqlens_k"}},
                op);
  GKS_CHECK(args.max_seqlen_k >= 0, kInvalidArgument)
      << op << ": argument 'max_seqlen_k' must be an int >= 0, got " << args.max_seqlen_k;
  check_listed_config(args.config, kFlashAttentionVarlenBwdConfigs, op, "the mma.sync kernel");
  return scale;
}

// The 16-byte alignment of a backward call's tensors (the dense or the varlen Args), checked
// only for tensors with elements (one without may have no storage).
template <class Args>
void check_bwd_aligned(const Args& a, const char* op) {
  for (const auto& [t, name] : {std::pair{&a.q, "q"}, std::pair{&a.o, "o"}, std::pair{&a.dout, "do"},
                                std::pair{&a.dq, "dq"}, std::pair{&a.k, "k"}, std::pair{&a.v, "v"},
                                std::pair{&a.dk, "dk"}, std::pair{&a.dv, "dv"}})
    if (t->numel() > 0) check_aligned16(*t, op, name);
}

using BwdKernel = FlashAttentionBwdConfig::Kernel;

// The kernel a call runs: the forced config or the first that can run in the order
// wgmma.ws, wgmma, mma.sync. The Hopper kernels need an sm_90a build, a compute-capability
// 9.0 GPU and head dims 64 or 128; the warp-specialized one also Sq, Sk > 0 and tensors
// TMA can address (`check_layouts`; its launch gives way to wgmma where the maps cannot be
// made). Deterministic: wgmma.ws with dQ added in a fixed order of key blocks, where a
// block waits only on blocks launched before it (with a mask), or where all of a head's
// key blocks fit on the GPU at once (without: any may wait on any other); else mma.sync; a
// forced wgmma gives way to mma.sync.
BwdKernel kernel_for(const FlashAttentionBwdArgs& args, bool check_layouts) {
#if defined(GKS_WITH_SM90A)
  const BwdKernel wanted = args.config < 0 ? BwdKernel::kWgmmaWs : kFlashAttentionBwdConfigs[args.config].kernel;
  if (wanted == BwdKernel::kMmaSync || !device_is_sm90(args.q.device.index) ||
      !wgmma_flash_head_dims(args.q.shape[3], args.v.shape[3]))
    return BwdKernel::kMmaSync;
  const int64_t seqlen_q = args.q.shape[2], seqlen_k = args.k.shape[2];
  ka::FwdParams scratch{};
  const bool masked = window_params(args.causal, args.window_left, args.window_right, seqlen_q, seqlen_k, scratch) !=
                      ka::Mask::kNone;
  const bool ordered = masked || ceil_div(seqlen_k, 128) <= device_limits(args.q.device.index).sms;
  const bool ws = wanted == BwdKernel::kWgmmaWs && seqlen_q > 0 && seqlen_k > 0 && (!args.deterministic || ordered) &&
                  (!check_layouts || attention_tma_addressable({&args.q, &args.k, &args.v, &args.dout}));
  if (ws) return BwdKernel::kWgmmaWs;
  return args.deterministic ? BwdKernel::kMmaSync : BwdKernel::kWgmma;
#else
  (void)args;
  (void)check_layouts;
  return BwdKernel::kMmaSync;
#endif
}

template <auto kKernel>
void launch_kernel(dim3 grid, int threads, int smem, const ka::BwdParams& p, int device, cudaStream_t stream) {
  if (smem > 0) prepare_smem_kernel<kKernel>(smem, device, /*max_carveout=*/false);
  kKernel<<<grid, threads, size_t(smem), stream>>>(p);
}

// The mma.sync kernels' grids: (rows / block rows, heads, batch). Dense: rows_q = Sq (the
// delta kernel's p.stats_rows), rows_k = Sk; varlen: max_seqlen_q and max_seqlen_k (capped
// at the totals), batch the sequences.
struct BwdGrid {
  int64_t rows_q, rows_k, heads_q, heads_kv, batch;
};

// delta = rowsum(dO * o) into p.delta (BwdDeltaTile's rows a block); `rows`: p.stats_rows,
// or varlen's grid rows.
template <typename T, bool kVarlen = false>
void launch_delta(const ka::BwdParams& p, int64_t head_dim_v, int64_t rows, int64_t batch, int64_t heads_q,
                  int device, cudaStream_t stream) {
  const auto go = [&](auto dv) {
    const dim3 grid(unsigned(ceil_div(rows, ka::BwdDeltaTile<decltype(dv)::value>::kRows)), unsigned(heads_q),
                    unsigned(batch));
    launch_kernel<ka::flash_attention_bwd_delta_kernel<T, decltype(dv)::value, kVarlen>>(grid, 256, 0, p, device,
                                                                                        stream);
  };
  using std::integral_constant;
  switch (head_dim_v) {
    case 32: return go(integral_constant<int, 32>{});
    case 64: return go(integral_constant<int, 64>{});
    case 96: return go(integral_constant<int, 96>{});
    case 128: return go(integral_constant<int, 128>{});
    case 192: return go(integral_constant<int, 192>{});
    default: return go(integral_constant<int, 256>{});
  }
}

// The kernels of one dtype, head dims and mask, in stream order.
template <typename T, int kD, int kDv, ka::Mask kMask, bool kVarlen>
void launch_all(const ka::BwdParams& p, const BwdGrid& g, int device, cudaStream_t stream) {
  using Tile = ka::FlashBwdTile<kD, kDv>;
  const unsigned hq = unsigned(g.heads_q), hkv = unsigned(g.heads_kv), b = unsigned(g.batch);
  if (g.rows_q > 0) launch_delta<T, kVarlen>(p, kDv, g.rows_q, g.batch, g.heads_q, device, stream);
  if (g.rows_k > 0) {
    const dim3 grid(unsigned(ceil_div(g.rows_k, Tile::kRows)), hkv, b);
    const auto dkdv = [&](auto which) {
      launch_kernel<ka::flash_attention_bwd_dkdv_kernel<T, Tile, kMask, decltype(which)::value, kVarlen>>(
          grid, Tile::kThreads, Tile::kSmemBytes, p, device, stream);
    };
    using std::integral_constant;
    if constexpr (Tile::kSplitPasses) {
      dkdv(integral_constant<ka::DkDv, ka::DkDv::kOnlyDv>{});
      dkdv(integral_constant<ka::DkDv, ka::DkDv::kOnlyDk>{});
    } else {
      dkdv(integral_constant<ka::DkDv, ka::DkDv::kBoth>{});
    }
  }
  if (g.rows_q > 0)
    launch_kernel<ka::flash_attention_bwd_dq_kernel<T, Tile, kMask, kVarlen>>(
        dim3(unsigned(ceil_div(g.rows_q, Tile::kRows)), hq, b), Tile::kThreads, Tile::kSmemBytes, p, device, stream);
}

template <typename T, bool kVarlen = false>
void launch_for_type(ka::Mask mask, int64_t head_dim, int64_t head_dim_v, const ka::BwdParams& p, const BwdGrid& g,
                     int device, cudaStream_t stream) {
  with_mask(mask, [&](auto m) {
    constexpr ka::Mask kMask = decltype(m)::value;
    const auto go = [&](auto d, auto dv) {
      launch_all<T, decltype(d)::value, decltype(dv)::value, kMask, kVarlen>(p, g, device, stream);
    };
    using std::integral_constant;
    switch (head_dim) {
      case 32: return go(integral_constant<int, 32>{}, integral_constant<int, 32>{});
      case 64: return go(integral_constant<int, 64>{}, integral_constant<int, 64>{});
      case 96: return go(integral_constant<int, 96>{}, integral_constant<int, 96>{});
      case 128: return go(integral_constant<int, 128>{}, integral_constant<int, 128>{});
      case 192:
        if (head_dim_v == 128) return go(integral_constant<int, 192>{}, integral_constant<int, 128>{});
        return go(integral_constant<int, 192>{}, integral_constant<int, 192>{});
      default: return go(integral_constant<int, 256>{}, integral_constant<int, 256>{});
    }
  });
}

}  // namespace
}  // namespace detail

const char* flash_attention_bwd_path(const FlashAttentionBwdArgs& args) {
  detail::validate(args);
  const auto kernel = detail::kernel_for(args, /*check_layouts=*/true);
  for (const auto& c : kFlashAttentionBwdConfigs)
    if (c.kernel == kernel) return c.name;
  return "mma.sync";
}

void flash_attention_bwd(const FlashAttentionBwdArgs& args, cudaStream_t stream) {
  using detail::kBwdOp;
  const float scale = detail::validate(args);
  const TensorRef &q = args.q, &k = args.k, &v = args.v, &o = args.o, &lse = args.lse, &dout = args.dout;
  const int64_t batch = q.shape[0], heads_q = q.shape[1], seqlen_q = q.shape[2], head_dim = q.shape[3];
  const int64_t heads_kv = k.shape[1], seqlen_k = k.shape[2], head_dim_v = v.shape[3];
  if (batch == 0 || heads_q == 0 || (seqlen_q == 0 && seqlen_k == 0)) return;  // nothing to write
  detail::check_bwd_aligned(args, kBwdOp);
  if (validating_only()) return;

  kernels::attention::BwdParams p{};
  kernels::attention::FwdParams& f = p.f;
  f = detail::dense_params(q, k, v, o, lse);
  detail::scale_params(scale, args.softcap, f);
  const kernels::attention::Mask mask =
      detail::window_params(args.causal, args.window_left, args.window_right, seqlen_q, seqlen_k, f);
  p.dout = dout.data;
  p.do_batch = dout.strides[0], p.do_head = dout.strides[1], p.do_row = dout.strides[2];
  p.dq = args.dq.data;
  p.dq_batch = args.dq.strides[0], p.dq_head = args.dq.strides[1], p.dq_row = args.dq.strides[2];
  p.dk = args.dk.data;
  p.dk_batch = args.dk.strides[0], p.dk_head = args.dk.strides[1], p.dk_row = args.dk.strides[2];
  p.dv = args.dv.data;
  p.dv_batch = args.dv.strides[0], p.dv_head = args.dv.strides[1], p.dv_row = args.dv.strides[2];
  p.softmax_scale = scale;

  const detail::DeviceGuard guard(q.device.index);
  // The launch itself gives way where the tensor maps cannot be made (no second encoding).
  const auto kernel = detail::kernel_for(args, /*check_layouts=*/false);
  // delta = rowsum(dO * o), [B, Hq, stats_rows] fp32, lives until the dK/dV and dQ kernels
  // are done; the warp-specialized kernel also wants lse in log2 units, both padded to
  // whole query blocks (its bulk copies).
  const bool ws = kernel == FlashAttentionBwdConfig::Kernel::kWgmmaWs;
  p.stats_rows = int(seqlen_q);
#if defined(GKS_WITH_SM90A)
  if (ws) {
    const int64_t block_m = detail::flash_attention_bwd_wgmma_block_m(head_dim);
    p.stats_rows = int(detail::ceil_div(seqlen_q, block_m) * block_m);
  }
#endif
  const size_t stats_bytes = size_t(std::max<int64_t>(1, batch * heads_q * p.stats_rows)) * 4;
  const detail::StreamBuffer delta(stats_bytes, q.device.index, stream, kBwdOp, "delta (rowsum(dO * o))");
  std::optional<detail::StreamBuffer> lse2;
  if (ws) lse2.emplace(stats_bytes, q.device.index, stream, kBwdOp, "lse2 (lse in log2 units)");
  p.delta = delta.get<float>();
  p.lse2 = ws ? lse2->get<float>() : nullptr;
#if defined(GKS_WITH_SM90A)
  if (kernel != FlashAttentionBwdConfig::Kernel::kMmaSync) {
    if (seqlen_q > 0) {
      const auto launch_delta = q.dtype == DType::kFloat16
                                    ? &detail::launch_delta<__half>
                                    : &detail::launch_delta<__nv_bfloat16>;
      launch_delta(p, head_dim_v, p.stats_rows, batch, heads_q, q.device.index, stream);
    }
    detail::launch_flash_attention_bwd_wgmma(q.dtype == DType::kBFloat16, ws, args.deterministic, head_dim, mask, p,
                                             {q, k, v, dout}, {batch, heads_q, heads_kv, seqlen_q, seqlen_k},
                                             q.device.index, stream);
    detail::check_launch(kBwdOp);
    return;
  }
#endif
  const detail::BwdGrid grid{seqlen_q, seqlen_k, heads_q, heads_kv, batch};
  if (q.dtype == DType::kFloat16)
    detail::launch_for_type<__half>(mask, head_dim, head_dim_v, p, grid, q.device.index, stream);
  else
    detail::launch_for_type<__nv_bfloat16>(mask, head_dim, head_dim_v, p, grid, q.device.index, stream);
  detail::check_launch(kBwdOp);
}

void flash_attention_varlen_bwd(const FlashAttentionVarlenBwdArgs& args, cudaStream_t stream) {
  using detail::kVarlenBwdOp;
  const float scale = detail::validate_varlen_bwd(args);
  const TensorRef &q = args.q, &k = args.k, &v = args.v, &dout = args.dout;
  const int64_t total_q = q.shape[0], heads_q = q.shape[1], head_dim = q.shape[2];
  const int64_t total_k = k.shape[0], heads_kv = k.shape[1], head_dim_v = v.shape[2];
  const int64_t batch = args.cu_seqlens_q.shape[0] - 1;
  if (batch == 0 || heads_q == 0 || (total_q == 0 && total_k == 0)) return;  // nothing to write
  detail::check_bwd_aligned(args, kVarlenBwdOp);
  if (validating_only()) return;

  kernels::attention::BwdParams p{};
  kernels::attention::Mask mask;
  p.f = detail::varlen_params(detail::forward_args(args), scale, mask);
  // Batch strides 0, as the forward's: each CTA moves the bases to its sequence.
  p.dout = dout.data;
  p.do_head = dout.strides[1], p.do_row = dout.strides[0];
  p.dq = args.dq.data;
  p.dq_head = args.dq.strides[1], p.dq_row = args.dq.strides[0];
  p.dk = args.dk.data;
  p.dk_head = args.dk.strides[1], p.dk_row = args.dk.strides[0];
  p.dv = args.dv.data;
  p.dv_head = args.dv.strides[1], p.dv_row = args.dv.strides[0];
  p.softmax_scale = scale;
  p.stats_rows = total_q;  // delta [Hq, total_q]

  const detail::DeviceGuard guard(q.device.index);
  const detail::StreamBuffer delta(size_t(std::max<int64_t>(1, heads_q * total_q)) * 4, q.device.index, stream,
                                   kVarlenBwdOp, "delta (rowsum(dO * o))");
  p.delta = delta.get<float>();
  // Past the totals no sequence has a block; every kernel runs (a sequence with keys and no
  // rows still gets dk = dv = 0).
  const auto rows = [](int64_t hint, int64_t total) { return std::min(std::max<int64_t>(hint, 1), std::max<int64_t>(total, 1)); };
  const detail::BwdGrid grid{rows(args.max_seqlen_q, total_q), rows(args.max_seqlen_k, total_k), heads_q, heads_kv,
                             batch};
  if (q.dtype == DType::kFloat16)
    detail::launch_for_type<__half, true>(mask, head_dim, head_dim_v, p, grid, q.device.index, stream);
  else
    detail::launch_for_type<__nv_bfloat16, true>(mask, head_dim, head_dim_v, p, grid, q.device.index, stream);
  detail::check_launch(kVarlenBwdOp);
}

}  // namespace gks
