// SPDX-License-Identifier: Apache-2.0
// flash_attention_decode: validation, the plan (tile and split count from shapes alone), the
// split kernel (kernels/attention/decode.cuh) and, with more than one split, the merge of
// the fp32 partials (merge.cuh's merge_partials_kernel) from a stream-ordered temporary.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <iterator>
#include <limits>
#include <optional>

#include "attention/checks.h"
#include "core/launch.h"
#include "core/workspace.h"
#include "gks/attention.h"
#include "gks/device_limits.h"
#include "gks/error.h"
#include "gks/kernels/attention/decode.cuh"
#include "gks/kernels/attention/merge.cuh"

namespace gks {
namespace detail {

namespace ka = kernels::attention;

namespace {

constexpr const char* kOp = "gks.flash_attention_decode";

template <typename T>
struct TypeTag {
  using type = T;
};

// The m-tiles (16 rows each) a CTA holds for a head dim: O takes m-tiles x D / 2 fp32
// registers a thread, kept at or below 128.
int max_m_tiles(int64_t head_dim) { return head_dim <= 64 ? 4 : head_dim <= 128 ? 2 : 1; }

// The fewest m-tiles (1, 2 or 4, up to the head dim's most) that hold `rows` rows.
int m_tiles_for(int64_t rows, int64_t head_dim) {
  const int most = max_m_tiles(head_dim);
  int m_tiles = 1;
  while (m_tiles < most && 16 * m_tiles < rows) m_tiles *= 2;
  return m_tiles;
}

template <int kHeadDim, int kMTiles>
void fill_plan(FlashAttentionDecodePlan& plan) {
  using Tile = ka::DecodeTile<kHeadDim, kMTiles>;
  plan.block_m = Tile::kBlockM;
  plan.block_n = Tile::kBlockN;
  plan.warps = Tile::kWarps;
  plan.stages = Tile::kStages;
  plan.smem_bytes = Tile::kSmemBytes;
}

// f(integral_constant<int, D>, integral_constant<int, m_tiles>) for the runtime pair.
template <class F>
void with_tile(int64_t head_dim, int m_tiles, F&& f) {
  using std::integral_constant;
  switch (head_dim) {
    case 64:
      if (m_tiles == 1) return f(integral_constant<int, 64>{}, integral_constant<int, 1>{});
      if (m_tiles == 2) return f(integral_constant<int, 64>{}, integral_constant<int, 2>{});
      return f(integral_constant<int, 64>{}, integral_constant<int, 4>{});
    case 128:
      if (m_tiles == 1) return f(integral_constant<int, 128>{}, integral_constant<int, 1>{});
      return f(integral_constant<int, 128>{}, integral_constant<int, 2>{});
    default:
      return f(integral_constant<int, 256>{}, integral_constant<int, 1>{});
  }
}

}  // namespace

int decode_num_splits(int64_t batch, int64_t heads_kv, int64_t m_blocks, int64_t capacity,
                      int64_t block_n, int sms) {
  const int64_t ctas = std::max<int64_t>(1, batch * heads_kv * m_blocks);
  const int64_t tiles = ceil_div(std::max<int64_t>(capacity, 0), block_n);
  constexpr int64_t kMinTiles = 2;  // keys a split: at least two tiles
  if (tiles <= kMinTiles || ctas >= sms) return 1;
  const int64_t wanted = ceil_div(2 * int64_t(sms), ctas);
  const int64_t splits =
      std::max<int64_t>(1, std::min({wanted, tiles / kMinTiles, int64_t(kFlashAttentionDecodeMaxSplits)}));
  const int64_t per = ceil_div(tiles, splits);
  return int(ceil_div(tiles, per));
}

FlashAttentionDecodePlan plan_flash_attention_decode(int64_t batch, int64_t heads_q, int64_t heads_kv,
                                                     int64_t seqlen_q, int64_t capacity,
                                                     int64_t head_dim, int64_t num_splits, int sms) {
  GKS_CHECK(std::find(std::begin(kFlashAttentionDecodeHeadDims), std::end(kFlashAttentionDecodeHeadDims),
                      head_dim) != std::end(kFlashAttentionDecodeHeadDims),
            kInvalidArgument)
      << kOp << ": head dim (the last dim of q) must be one of 64, 128, 256, got " << head_dim;
  GKS_CHECK(heads_kv > 0 && heads_q % heads_kv == 0, kInvalidArgument)
      << kOp << ": the query heads (" << heads_q << ") must be a multiple of the key/value heads ("
      << heads_kv << ")";
  const int64_t rows = heads_q / heads_kv * seqlen_q;  // a KV head's query rows
  FlashAttentionDecodePlan plan;
  with_tile(head_dim, m_tiles_for(rows, head_dim), [&](auto d, auto m) {
    fill_plan<decltype(d)::value, decltype(m)::value>(plan);
  });
  plan.m_blocks = int(std::max<int64_t>(1, ceil_div(rows, plan.block_m)));
  plan.splits = num_splits > 0 ? int(num_splits)
                               : decode_num_splits(batch, heads_kv, plan.m_blocks, capacity, plan.block_n, sms);
  plan.workspace_bytes =
      plan.splits > 1 ? int64_t(plan.splits) * batch * heads_q * seqlen_q * (head_dim + 1) * 4 : 0;
  return plan;
}

namespace {

struct Validated {
  float scale;
  bool paged;
  int64_t heads_kv, capacity, page_size, num_pages;
};

// Every check but the alignment (which a call with no work skips). The order is the
// Triton port's (gks.specs.attention.check_decode_inputs), so a call with several faults
// is refused for the same one.
Validated validate(const FlashAttentionDecodeArgs& args) {
  const TensorRef &q = args.q, &k = args.k_cache, &v = args.v_cache, &lens = args.cache_seqlens;
  const TensorRef &o = args.o, &lse = args.lse;
  const bool paged = args.page_table.has_value();
  check_cuda(q, kOp, "q");
  check_same_device(q, "q", k, "k_cache", kOp);
  check_same_device(q, "q", v, "v_cache", kOp);
  check_same_device(q, "q", lens, "cache_seqlens", kOp);
  if (paged) check_same_device(q, "q", *args.page_table, "page_table", kOp);
  check_same_device(q, "q", o, "o", kOp);
  check_same_device(q, "q", lse, "lse", kOp);
  GKS_CHECK(q.dtype == DType::kFloat16 || q.dtype == DType::kBFloat16, kUnsupportedDtype)
      << kOp << ": argument 'q' must be float16 or bfloat16, got " << dtype_name(q.dtype);
  check_same_dtype(q, "q", k, "k_cache", kOp);
  check_same_dtype(q, "q", v, "v_cache", kOp);
  GKS_CHECK(q.ndim == 4, kInvalidArgument)
      << kOp << ": argument 'q' must have 4 dims [batch, heads, seq, head_dim], got " << q.ndim << " dims "
      << q.shape_string();
  const char* layout = paged ? "[num_pages, page_size, kv_heads, head_dim]" : "[batch, kv_heads, seq, head_dim]";
  for (const auto& [t, name] : {std::pair{&q, "q"}, std::pair{&k, "k_cache"}, std::pair{&v, "v_cache"}}) {
    GKS_CHECK(t->ndim == 4, kInvalidArgument)
        << kOp << ": argument '" << name << "' must have 4 dims " << layout << ", got " << t->ndim << " dims "
        << t->shape_string();
    GKS_CHECK(t->strides[3] == 1 || t->shape[3] <= 1, kInvalidArgument)
        << kOp << ": argument '" << name << "' must be contiguous in its last dim (stride 1), got stride "
        << t->strides[3];
    for (int d = 0; d < 4; ++d)
      GKS_CHECK(t->shape[d] >= 0, kInvalidArgument) << kOp << ": negative size in shape " << t->shape_string();
  }
  const int64_t batch = q.shape[0], heads_q = q.shape[1], seqlen_q = q.shape[2], head_dim = q.shape[3];
  GKS_CHECK(std::find(std::begin(kFlashAttentionDecodeHeadDims), std::end(kFlashAttentionDecodeHeadDims),
                      head_dim) != std::end(kFlashAttentionDecodeHeadDims),
            kInvalidArgument)
      << kOp << ": head dim (the last dim of q) must be one of 64, 128, 256, got " << head_dim;
  const int64_t heads_kv = paged ? k.shape[2] : k.shape[1];
  if (paged) {
    GKS_CHECK(k.shape[3] == head_dim, kInvalidArgument)
        << kOp << ": argument 'k_cache' must have shape [num_pages, page_size, Hkv, " << head_dim
        << "] (q's head dim), got " << k.shape_string();
  } else {
    GKS_CHECK(k.shape[3] == head_dim && k.shape[0] == batch, kInvalidArgument)
        << kOp << ": argument 'k_cache' must have shape [" << batch << ", Hkv, S_max, " << head_dim
        << "] (q's batch and head dim), got " << k.shape_string();
  }
  bool same = true;
  for (int d = 0; d < 4; ++d) same = same && v.shape[d] == k.shape[d];
  GKS_CHECK(same, kInvalidArgument)
      << kOp << ": argument 'v_cache' must have the shape of 'k_cache' " << k.shape_string() << ", got "
      << v.shape_string();
  GKS_CHECK(heads_kv > 0 && heads_q % heads_kv == 0, kInvalidArgument)
      << kOp << ": the query heads (" << heads_q << ", dim 1 of q) must be a multiple of the key/value heads ("
      << heads_kv << ", dim " << (paged ? 2 : 1) << " of k_cache)";
  check_dtype(lens, DType::kInt32, kOp, "cache_seqlens");
  GKS_CHECK(lens.ndim == 1 && lens.shape[0] == batch, kInvalidArgument)
      << kOp << ": argument 'cache_seqlens' must have shape [" << batch << "] (q's batch), got "
      << lens.shape_string();
  int64_t capacity = k.shape[2], page_size = 0, num_pages = 0;
  if (paged) {
    const TensorRef& table = *args.page_table;
    check_dtype(table, DType::kInt32, kOp, "page_table");
    GKS_CHECK(table.ndim == 2 && table.shape[0] == batch, kInvalidArgument)
        << kOp << ": argument 'page_table' must have shape [" << batch << ", max_pages] (q's batch), got "
        << table.shape_string();
    page_size = k.shape[1];
    num_pages = k.shape[0];
    capacity = table.shape[1] * page_size;
  }

  const float scale = check_attention_options(
      {args.softmax_scale, args.causal, args.window_left, args.window_right, args.softcap}, head_dim, kOp);
  GKS_CHECK(args.num_splits >= 0 && args.num_splits <= kFlashAttentionDecodeMaxSplits, kInvalidArgument)
      << kOp << ": argument 'num_splits' must be 0 (chosen from the shape) or from 1 to "
      << kFlashAttentionDecodeMaxSplits << ", got " << args.num_splits;

  GKS_CHECK(o.ndim == 4 && o.shape[0] == batch && o.shape[1] == heads_q && o.shape[2] == seqlen_q &&
                o.shape[3] == head_dim,
            kInvalidArgument)
      << kOp << ": argument 'o' must have shape [" << batch << ", " << heads_q << ", " << seqlen_q << ", "
      << head_dim << "] (q's), got " << o.shape_string();
  GKS_CHECK(o.dtype == q.dtype, kUnsupportedDtype)
      << kOp << ": argument 'o' must have the dtype of 'q' (" << dtype_name(q.dtype) << "), got "
      << dtype_name(o.dtype);
  GKS_CHECK(o.strides[3] == 1 || head_dim <= 1, kInvalidArgument)
      << kOp << ": argument 'o' must be contiguous in its last dim (stride 1), got stride " << o.strides[3];
  check_dtype(lse, DType::kFloat32, kOp, "lse");
  GKS_CHECK(lse.ndim == 3 && lse.shape[0] == batch && lse.shape[1] == heads_q && lse.shape[2] == seqlen_q,
            kInvalidArgument)
      << kOp << ": argument 'lse' must have shape [" << batch << ", " << heads_q << ", " << seqlen_q
      << "] (q's first three dims), got " << lse.shape_string();
  check_outputs({{&o, "o"}, {&lse, "lse"}},
                {{&q, "q"}, {&k, "k_cache"}, {&v, "v_cache"}, {&lens, "cache_seqlens"},
                 {paged ? &*args.page_table : nullptr, "page_table"}},
                kOp);
  // 32-bit key and row indices inside the kernels (offsets are 64-bit); the grid's y and z
  // dims hold the KV heads and the batch.
  constexpr int64_t kMaxKeys = std::numeric_limits<int32_t>::max() - 1024;
  GKS_CHECK(capacity <= kMaxKeys && seqlen_q <= kMaxKeys && heads_q * seqlen_q <= kMaxKeys &&
                num_pages <= std::numeric_limits<int32_t>::max(),
            kInvalidArgument)
      << kOp << ": caches of up to " << kMaxKeys << " keys a sequence, and as many query rows a head "
      << "group, are supported, got " << capacity << " keys and Sq = " << seqlen_q;
  GKS_CHECK(heads_kv <= 65535 && batch <= 65535, kInvalidArgument)
      << kOp << ": at most 65535 key/value heads and 65535 sequences are supported, got " << heads_kv
      << " and " << batch;
  return {scale, paged, heads_kv, capacity, page_size, num_pages};
}

template <typename T, int kHeadDim, int kMTiles, bool kPaged>
void launch_split_kernel(const ka::DecodeParams& p, const FlashAttentionDecodePlan& plan, int64_t heads_kv,
                         int64_t batch, int device, cudaStream_t stream) {
  using Tile = ka::DecodeTile<kHeadDim, kMTiles>;
  constexpr auto kernel = ka::flash_attention_decode_kernel<T, Tile, kPaged>;
  prepare_smem_kernel<kernel>(Tile::kSmemBytes, device, /*max_carveout=*/true);
  const dim3 grid(unsigned(plan.m_blocks * plan.splits), unsigned(heads_kv), unsigned(batch));
  kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p);
}

// The partials' merge into o and lse: each row's `splits` states, D / 4 float4 a row.
template <typename T>
void launch_merge(const ka::MergeStateParams& m, cudaStream_t stream) {
  const int64_t vecs = m.d / 4;
  const int per_row = vecs <= 16 ? 16 : 32;
  const int64_t rows_per_block = ka::kMergeThreads / per_row;
  const unsigned blocks = unsigned(ceil_div(m.rows, rows_per_block));
  if (per_row == 16)
    ka::merge_partials_kernel<T, 4, 16><<<blocks, ka::kMergeThreads, 0, stream>>>(m);
  else
    ka::merge_partials_kernel<T, 4, 32><<<blocks, ka::kMergeThreads, 0, stream>>>(m);
}

// s [...] as rows of one element (any strides).
RowLayout score_rows(const TensorRef& s, const char* arg) {
  TensorRef column = s;
  column.shape[s.ndim] = 1;
  column.strides[s.ndim] = 1;
  column.ndim = s.ndim + 1;
  return row_layout(column, kOp, arg);
}

}  // namespace
}  // namespace detail

void flash_attention_decode(const FlashAttentionDecodeArgs& args, cudaStream_t stream) {
  using detail::kOp;
  const detail::Validated checked = detail::validate(args);
  const TensorRef &q = args.q, &k = args.k_cache, &v = args.v_cache, &o = args.o, &lse = args.lse;
  const int64_t batch = q.shape[0], heads_q = q.shape[1], seqlen_q = q.shape[2], head_dim = q.shape[3];
  if (batch == 0 || heads_q == 0 || seqlen_q == 0) return;  // nothing to write
  detail::check_aligned16(q, kOp, "q");
  detail::check_aligned16(o, kOp, "o");
  if (k.numel() > 0) {
    detail::check_aligned16(k, kOp, "k_cache");
    detail::check_aligned16(v, kOp, "v_cache");
  }
  const int device = q.device.index;
  const int sms = validating_only() ? 132 : detail::device_limits(device).sms;
  const detail::FlashAttentionDecodePlan plan = detail::plan_flash_attention_decode(
      batch, heads_q, checked.heads_kv, seqlen_q, checked.capacity, head_dim, args.num_splits, sms);
  if (validating_only()) return;

  kernels::attention::DecodeParams p{};
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.seqlens = static_cast<const int*>(args.cache_seqlens.data);
  p.o = o.data;
  p.lse = static_cast<float*>(lse.data);
  p.q_batch = q.strides[0], p.q_head = q.strides[1], p.q_row = q.strides[2];
  if (checked.paged) {  // [pages, page_size, Hkv, D]: (page, head, row-in-page) strides
    p.k_batch = k.strides[0], p.k_head = k.strides[2], p.k_row = k.strides[1];
    p.v_batch = v.strides[0], p.v_head = v.strides[2], p.v_row = v.strides[1];
    const TensorRef& table = *args.page_table;
    p.page_table = static_cast<const int*>(table.data);
    p.pt_batch = table.strides[0], p.pt_page = table.strides[1];
  } else {
    p.k_batch = k.strides[0], p.k_head = k.strides[1], p.k_row = k.strides[2];
    p.v_batch = v.strides[0], p.v_head = v.strides[1], p.v_row = v.strides[2];
  }
  p.o_batch = o.strides[0], p.o_head = o.strides[1], p.o_row = o.strides[2];
  p.lse_batch = lse.strides[0], p.lse_head = lse.strides[1], p.lse_row = lse.strides[2];
  p.batch = int(batch);
  p.heads_q = int(heads_q);
  p.seqlen_q = int(seqlen_q);
  p.group = int(heads_q / checked.heads_kv);
  p.capacity = int(checked.capacity);
  p.num_pages = int(checked.num_pages);
  p.page_size = int(std::max<int64_t>(checked.page_size, 1));
  p.page_shift = -1;
  for (int s = 0; s < 31; ++s)
    if ((int64_t(1) << s) == p.page_size) p.page_shift = s;
  p.splits = plan.splits;
  p.m_blocks = plan.m_blocks;
  p.scale_log2 = checked.scale * 1.4426950408889634f;
  if (args.softcap > 0.0) {
    p.softcap = static_cast<float>(args.softcap);
    p.softcap_pre = static_cast<float>(double(checked.scale) / args.softcap);
    p.scale_log2 = 1.4426950408889634f;
  }
  // A bound no row can reach is dropped: right >= Sq - 1 leaves every query all keys up to the
  // sequence's end; left >= capacity - 1 all keys from 0. What is left fits 32 bits.
  const int64_t right = args.causal ? 0 : args.window_right;
  p.window_right = right >= 0 && right < seqlen_q - 1 ? int(right) : -1;
  p.window_left = args.window_left >= 0 && args.window_left < checked.capacity - 1 ? int(args.window_left) : -1;

  const detail::DeviceGuard guard(device);
  // The partials, from shapes alone (a graph allocation node while the stream is captured).
  std::optional<detail::StreamBuffer> workspace;
  const int64_t rows = batch * heads_q * seqlen_q;
  if (plan.splits > 1) {
    workspace.emplace(size_t(plan.workspace_bytes), device, stream, kOp, "the split-KV partial states");
    p.o_partial = workspace->get<float>();
    p.lse_partial = p.o_partial + int64_t(plan.splits) * rows * head_dim;
  }
  const int m_tiles = plan.block_m / 16;
  const auto run = [&](auto type) {
    using T = typename decltype(type)::type;
    detail::with_tile(head_dim, m_tiles, [&](auto d, auto m) {
      if (checked.paged)
        detail::launch_split_kernel<T, decltype(d)::value, decltype(m)::value, true>(p, plan, checked.heads_kv,
                                                                                     batch, device, stream);
      else
        detail::launch_split_kernel<T, decltype(d)::value, decltype(m)::value, false>(p, plan, checked.heads_kv,
                                                                                      batch, device, stream);
    });
    detail::check_launch(kOp);
    if (plan.splits == 1) return;
    kernels::attention::MergeStateParams m;
    m.v[0] = p.o_partial;
    m.s[0] = p.lse_partial;
    m.v_rows[0].rows = rows, m.v_rows[0].cols = head_dim, m.v_rows[0].ndims = 1;
    m.v_rows[0].sizes[0] = rows, m.v_rows[0].strides[0] = head_dim;
    m.s_rows[0].rows = rows, m.s_rows[0].cols = 1, m.s_rows[0].ndims = 1;
    m.s_rows[0].sizes[0] = rows, m.s_rows[0].strides[0] = 1;
    m.v_state_stride = rows * head_dim;
    m.s_state_stride = rows;
    m.states = plan.splits;
    m.v_out = o.data;
    m.s_out = static_cast<float*>(lse.data);
    m.v_out_rows = row_layout(o, kOp, "o");
    m.s_out_rows = detail::score_rows(lse, "lse");
    m.rows = rows;
    m.d = head_dim;
    detail::launch_merge<T>(m, stream);
    detail::check_launch(kOp);
  };
  if (q.dtype == DType::kFloat16)
    run(detail::TypeTag<__half>{});
  else
    run(detail::TypeTag<__nv_bfloat16>{});
}

}  // namespace gks
