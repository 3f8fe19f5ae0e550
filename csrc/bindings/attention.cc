// SPDX-License-Identifier: Apache-2.0
// The attention family's entry points: flash_attention_fwd (and its path query),
// flash_attention_bwd (and its path query), flash_attention_varlen_fwd and _bwd, flash_attention_decode,
// merge_state(s).
#include <tvm/ffi/optional.h>

#include "common.h"

namespace {

gks::FlashAttentionFwdArgs attention_args(tvm::ffi::TensorView q, tvm::ffi::TensorView k,
                                          tvm::ffi::TensorView v, tvm::ffi::TensorView o,
                                          tvm::ffi::TensorView lse, bool causal,
                                          tvm::ffi::Optional<double> softmax_scale,
                                          int64_t window_left, int64_t window_right,
                                          double softcap, int64_t config) {
  using namespace gks::ffi;
  gks::FlashAttentionFwdArgs args{to_ref(q), to_ref(k), to_ref(v), to_ref(o), to_ref(lse),
                                  causal, std::nullopt};
  if (softmax_scale.has_value())
    args.softmax_scale = float32_arg(softmax_scale.value(), "softmax_scale", "gks.flash_attention_fwd");
  args.window_left = window_left;
  args.window_right = window_right;
  args.softcap = softcap;  // checked in gks::flash_attention_fwd, as a double
  args.config = config_arg(config, "gks.flash_attention_fwd");
  return args;
}

void flash_attention_fwd(tvm::ffi::TensorView q, tvm::ffi::TensorView k, tvm::ffi::TensorView v,
                         tvm::ffi::TensorView o, tvm::ffi::TensorView lse, bool causal,
                         tvm::ffi::Optional<double> softmax_scale, int64_t window_left,
                         int64_t window_right, double softcap, int64_t config) {
  gks::ffi::translate_errors([&] {
    const auto args = attention_args(q, k, v, o, lse, causal, softmax_scale, window_left,
                                     window_right, softcap, config);
    gks::flash_attention_fwd(args, gks::ffi::stream_for(args.q));
  });
}

// "wgmma.ws", "wgmma" or "mma.sync": the kernel flash_attention_fwd(...) would run.
tvm::ffi::String flash_attention_fwd_path(tvm::ffi::TensorView q, tvm::ffi::TensorView k,
                                          tvm::ffi::TensorView v, tvm::ffi::TensorView o,
                                          tvm::ffi::TensorView lse, bool causal,
                                          tvm::ffi::Optional<double> softmax_scale,
                                          int64_t window_left, int64_t window_right,
                                          double softcap, int64_t config) {
  const char* name = "";
  gks::ffi::translate_errors([&] {
    name = gks::flash_attention_fwd_path(attention_args(q, k, v, o, lse, causal, softmax_scale,
                                                        window_left, window_right, softcap, config));
  });
  return tvm::ffi::String(name);
}

// The config table, as JSON (gks.specs reads it).
tvm::ffi::String flash_attention_fwd_configs() {
  gks::ffi::ConfigTable table;
  for (const auto& c : gks::kFlashAttentionFwdConfigs) {
    table.row().str("name", c.name).str("kernel", c.name);
  }
  return table.json();
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(flash_attention_fwd, flash_attention_fwd);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(flash_attention_fwd_configs, flash_attention_fwd_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(flash_attention_fwd_path, flash_attention_fwd_path);

namespace {

gks::FlashAttentionBwdArgs bwd_args(tvm::ffi::TensorView dout, tvm::ffi::TensorView q, tvm::ffi::TensorView k,
                                    tvm::ffi::TensorView v, tvm::ffi::TensorView o, tvm::ffi::TensorView lse,
                                    tvm::ffi::TensorView dq, tvm::ffi::TensorView dk, tvm::ffi::TensorView dv,
                                    bool causal, tvm::ffi::Optional<double> softmax_scale, int64_t window_left,
                                    int64_t window_right, double softcap, bool deterministic, int64_t config) {
  using namespace gks::ffi;
  constexpr const char* kOp = "gks.flash_attention_bwd";
  gks::FlashAttentionBwdArgs args{to_ref(dout), to_ref(q),  to_ref(k),  to_ref(v), to_ref(o),
                                  to_ref(lse),  to_ref(dq), to_ref(dk), to_ref(dv), causal, std::nullopt};
  if (softmax_scale.has_value()) args.softmax_scale = float32_arg(softmax_scale.value(), "softmax_scale", kOp);
  args.window_left = window_left;
  args.window_right = window_right;
  args.softcap = softcap;  // checked in gks::flash_attention_bwd, as a double
  args.deterministic = deterministic;
  args.config = config_arg(config, kOp);
  return args;
}

// (dq, dk, dv) = flash_attention_bwd(do, q, k, v, o, lse, ...) into dq, dk and dv.
void flash_attention_bwd(tvm::ffi::TensorView dout, tvm::ffi::TensorView q, tvm::ffi::TensorView k,
                         tvm::ffi::TensorView v, tvm::ffi::TensorView o, tvm::ffi::TensorView lse,
                         tvm::ffi::TensorView dq, tvm::ffi::TensorView dk, tvm::ffi::TensorView dv, bool causal,
                         tvm::ffi::Optional<double> softmax_scale, int64_t window_left, int64_t window_right,
                         double softcap, bool deterministic, int64_t config) {
  gks::ffi::translate_errors([&] {
    const auto args = bwd_args(dout, q, k, v, o, lse, dq, dk, dv, causal, softmax_scale, window_left, window_right,
                               softcap, deterministic, config);
    gks::flash_attention_bwd(args, gks::ffi::stream_for(args.q));
  });
}

// "wgmma" or "mma.sync": the kernel flash_attention_bwd(...) would run.
tvm::ffi::String flash_attention_bwd_path(tvm::ffi::TensorView dout, tvm::ffi::TensorView q, tvm::ffi::TensorView k,
                                          tvm::ffi::TensorView v, tvm::ffi::TensorView o, tvm::ffi::TensorView lse,
                                          tvm::ffi::TensorView dq, tvm::ffi::TensorView dk, tvm::ffi::TensorView dv,
                                          bool causal, tvm::ffi::Optional<double> softmax_scale, int64_t window_left,
                                          int64_t window_right, double softcap, bool deterministic, int64_t config) {
  const char* name = "";
  gks::ffi::translate_errors([&] {
    name = gks::flash_attention_bwd_path(bwd_args(dout, q, k, v, o, lse, dq, dk, dv, causal, softmax_scale,
                                                  window_left, window_right, softcap, deterministic, config));
  });
  return tvm::ffi::String(name);
}

tvm::ffi::String flash_attention_bwd_configs() {
  gks::ffi::ConfigTable table;
  for (const auto& c : gks::kFlashAttentionBwdConfigs) table.row().str("name", c.name).str("kernel", c.name);
  return table.json();
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(flash_attention_bwd, flash_attention_bwd);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(flash_attention_bwd_configs, flash_attention_bwd_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(flash_attention_bwd_path, flash_attention_bwd_path);

namespace {

// (o, lse) of packed sequences into o [total_q, Hq, Dv] and lse [Hq, total_q]; page_table
// None: packed keys, else a paged cache.
void flash_attention_varlen_fwd(tvm::ffi::TensorView q, tvm::ffi::TensorView k, tvm::ffi::TensorView v,
                                tvm::ffi::TensorView cu_seqlens_q, tvm::ffi::TensorView cu_seqlens_k,
                                tvm::ffi::Optional<tvm::ffi::TensorView> seqused_k,
                                tvm::ffi::Optional<tvm::ffi::TensorView> page_table, int64_t max_seqlen_q,
                                tvm::ffi::TensorView o, tvm::ffi::TensorView lse, bool causal,
                                tvm::ffi::Optional<double> softmax_scale, int64_t window_left,
                                int64_t window_right, double softcap, int64_t config) {
  using namespace gks::ffi;
  translate_errors([&] {
    constexpr const char* kOp = "gks.flash_attention_varlen_fwd";
    gks::FlashAttentionVarlenFwdArgs args;
    args.q = to_ref(q);
    args.k = to_ref(k);
    args.v = to_ref(v);
    args.cu_seqlens_q = to_ref(cu_seqlens_q);
    args.cu_seqlens_k = to_ref(cu_seqlens_k);
    if (seqused_k.has_value()) args.seqused_k = to_ref(seqused_k.value());
    if (page_table.has_value()) args.page_table = to_ref(page_table.value());
    args.max_seqlen_q = max_seqlen_q;
    args.o = to_ref(o);
    args.lse = to_ref(lse);
    args.causal = causal;
    if (softmax_scale.has_value()) args.softmax_scale = float32_arg(softmax_scale.value(), "softmax_scale", kOp);
    args.window_left = window_left;
    args.window_right = window_right;
    args.softcap = softcap;
    args.config = config_arg(config, kOp);
    gks::flash_attention_varlen_fwd(args, stream_for(args.q));
  });
}

tvm::ffi::String flash_attention_varlen_fwd_configs() {
  gks::ffi::ConfigTable table;
  for (const auto& c : gks::kFlashAttentionVarlenFwdConfigs) table.row().str("name", c.name).str("kernel", c.name);
  return table.json();
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(flash_attention_varlen_fwd, flash_attention_varlen_fwd);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(flash_attention_varlen_fwd_configs, flash_attention_varlen_fwd_configs);

namespace {

// (dq, dk, dv) = flash_attention_varlen_bwd(do, q, k, v, cu_seqlens_q, cu_seqlens_k, ...)
// into dq [total_q, Hq, D], dk [total_k, Hkv, D] and dv [total_k, Hkv, Dv].
void flash_attention_varlen_bwd(tvm::ffi::TensorView dout, tvm::ffi::TensorView q, tvm::ffi::TensorView k,
                                tvm::ffi::TensorView v, tvm::ffi::TensorView cu_seqlens_q,
                                tvm::ffi::TensorView cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
                                tvm::ffi::TensorView o, tvm::ffi::TensorView lse, tvm::ffi::TensorView dq,
                                tvm::ffi::TensorView dk, tvm::ffi::TensorView dv, bool causal,
                                tvm::ffi::Optional<double> softmax_scale, int64_t window_left, int64_t window_right,
                                double softcap, bool deterministic, int64_t config) {
  using namespace gks::ffi;
  translate_errors([&] {
    constexpr const char* kOp = "gks.flash_attention_varlen_bwd";
    gks::FlashAttentionVarlenBwdArgs args;
    args.dout = to_ref(dout);
    args.q = to_ref(q);
    args.k = to_ref(k);
    args.v = to_ref(v);
    args.cu_seqlens_q = to_ref(cu_seqlens_q);
    args.cu_seqlens_k = to_ref(cu_seqlens_k);
    args.max_seqlen_q = max_seqlen_q;
    args.max_seqlen_k = max_seqlen_k;
    args.o = to_ref(o);
    args.lse = to_ref(lse);
    args.dq = to_ref(dq);
    args.dk = to_ref(dk);
    args.dv = to_ref(dv);
    args.causal = causal;
    if (softmax_scale.has_value()) args.softmax_scale = float32_arg(softmax_scale.value(), "softmax_scale", kOp);
    args.window_left = window_left;
    args.window_right = window_right;
    args.softcap = softcap;
    args.deterministic = deterministic;
    args.config = config_arg(config, kOp);
    gks::flash_attention_varlen_bwd(args, stream_for(args.q));
  });
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(flash_attention_varlen_bwd, flash_attention_varlen_bwd);

namespace {

void merge_state(tvm::ffi::TensorView v_a, tvm::ffi::TensorView s_a, tvm::ffi::TensorView v_b,
                 tvm::ffi::TensorView s_b, tvm::ffi::TensorView v, tvm::ffi::TensorView s) {
  using namespace gks::ffi;
  translate_errors([&] {
    const gks::MergeStateArgs args{to_ref(v_a), to_ref(s_a), to_ref(v_b), to_ref(s_b), to_ref(v), to_ref(s)};
    gks::merge_state(args, stream_for(args.v_a));
  });
}

void merge_states(tvm::ffi::TensorView v, tvm::ffi::TensorView s, tvm::ffi::TensorView v_out,
                  tvm::ffi::TensorView s_out) {
  using namespace gks::ffi;
  translate_errors([&] {
    const gks::MergeStatesArgs args{to_ref(v), to_ref(s), to_ref(v_out), to_ref(s_out)};
    gks::merge_states(args, stream_for(args.v));
  });
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(merge_state, merge_state);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(merge_states, merge_states);

namespace {

// (o, lse) = flash_attention_decode(...) into o and lse; page_table None: a dense cache.
void flash_attention_decode(tvm::ffi::TensorView q, tvm::ffi::TensorView k_cache, tvm::ffi::TensorView v_cache,
                            tvm::ffi::TensorView cache_seqlens, tvm::ffi::TensorView o, tvm::ffi::TensorView lse,
                            tvm::ffi::Optional<tvm::ffi::TensorView> page_table, bool causal,
                            tvm::ffi::Optional<double> softmax_scale, int64_t window_left, int64_t window_right,
                            double softcap, int64_t num_splits) {
  using namespace gks::ffi;
  translate_errors([&] {
    constexpr const char* kOp = "gks.flash_attention_decode";
    gks::FlashAttentionDecodeArgs args;
    args.q = to_ref(q);
    args.k_cache = to_ref(k_cache);
    args.v_cache = to_ref(v_cache);
    args.cache_seqlens = to_ref(cache_seqlens);
    args.o = to_ref(o);
    args.lse = to_ref(lse);
    if (page_table.has_value()) args.page_table = to_ref(page_table.value());
    args.causal = causal;
    if (softmax_scale.has_value()) args.softmax_scale = float32_arg(softmax_scale.value(), "softmax_scale", kOp);
    args.window_left = window_left;
    args.window_right = window_right;
    args.softcap = softcap;
    args.num_splits = num_splits;  // checked in gks::flash_attention_decode, as an int64
    gks::flash_attention_decode(args, stream_for(args.q));
  });
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(flash_attention_decode, flash_attention_decode);
