// SPDX-License-Identifier: Apache-2.0
// The GEMM family's entry points: sgemm, wmma_gemm, int8_gemm, gemm, gemm_fp8, grouped_gemm,
// grouped_gemm_fp8
// (each with its config names and heuristic), the allocating forms and the path queries.
#include <tvm/ffi/optional.h>
#include <tvm/ffi/string.h>

#include <string>

#include "common.h"

namespace {

using OptionalTensor = tvm::ffi::Optional<tvm::ffi::TensorView>;

// The fused epilogue of gemm and gemm_fp8 (gks::GemmEpilogue): the tensors given, and
// `gated` by name ("" for none).
gks::GemmEpilogue epilogue_arg(const OptionalTensor& bias, const OptionalTensor& row_scale,
                               const OptionalTensor& col_scale, const std::string& gated, const char* op) {
  using gks::ffi::to_ref;
  gks::GemmEpilogue e;
  if (bias.has_value()) e.bias = to_ref(bias.value());
  if (row_scale.has_value()) e.row_scale = to_ref(row_scale.value());
  if (col_scale.has_value()) e.col_scale = to_ref(col_scale.value());
  if (gated == "silu") {
    e.gated = gks::Activation::kSilu;
  } else if (gated == "gelu") {
    e.gated = gks::Activation::kGelu;
  } else if (gated == "gelu_tanh") {
    e.gated = gks::Activation::kGeluTanh;
  } else {
    GKS_CHECK(gated.empty(), kInvalidArgument)
        << op << ": argument 'gated' must be None, 'silu', 'gelu' or 'gelu_tanh', got '" << gated << "'";
  }
  return e;
}

// A tile config's fields, the ones every GEMM table has.
void tile_fields(gks::ffi::ConfigTable& table, const gks::GemmConfigInfo& c) {
  table.row().str("name", c.name).nums("block", {c.block_m, c.block_n, c.block_k});
  table.num("threads", c.threads).num("stages", c.stages);
}

// c = a @ b (fp32 FFMA). config: an index into sgemm_configs(), or -1 for the heuristic.
void sgemm(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView c,
           int64_t config) {
  using namespace gks::ffi;
  translate_errors([&] {
    gks::SgemmArgs args{to_ref(a), to_ref(b), to_ref(c)};
    args.config = config_arg(config, "gks.sgemm");
    gks::sgemm(args, stream_for(args.a));
  });
}

// c = a @ b on Tensor Cores through wmma (fp16/bf16 in, fp32 accumulate, c fp32 or a's dtype).
void wmma_gemm(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView c,
               int64_t config) {
  using namespace gks::ffi;
  translate_errors([&] {
    gks::WmmaGemmArgs args{to_ref(a), to_ref(b), to_ref(c)};
    args.config = config_arg(config, "gks.wmma_gemm");
    gks::wmma_gemm(args, stream_for(args.a));
  });
}

gks::Int8GemmArgs int8_gemm_args(const tvm::ffi::TensorView& a_q, const tvm::ffi::TensorView& b_q,
                                 const tvm::ffi::TensorView& a_scale,
                                 const tvm::ffi::TensorView& b_scale,
                                 const tvm::ffi::TensorView& c, int64_t config) {
  using gks::ffi::to_ref;
  gks::Int8GemmArgs args{to_ref(a_q), to_ref(b_q), to_ref(a_scale), to_ref(b_scale), to_ref(c)};
  args.config = gks::ffi::config_arg(config, "gks.int8_gemm");
  return args;
}

// c = float(a_q @ b_q) * a_scale * b_scale (int8 Tensor Cores, int32 accumulate).
void int8_gemm(tvm::ffi::TensorView a_q, tvm::ffi::TensorView b_q, tvm::ffi::TensorView a_scale,
               tvm::ffi::TensorView b_scale, tvm::ffi::TensorView c, int64_t config) {
  gks::ffi::translate_errors([&] {
    const gks::Int8GemmArgs args = int8_gemm_args(a_q, b_q, a_scale, b_scale, c, config);
    gks::int8_gemm(args, gks::ffi::stream_for(args.a));
  });
}

// int8_gemm into a new [M, N] tensor of c_dtype from the caller's framework (see
// new_tensor). The torch op's eager path.
tvm::ffi::Tensor int8_gemm_alloc(tvm::ffi::TensorView a_q, tvm::ffi::TensorView b_q,
                                 tvm::ffi::TensorView a_scale, tvm::ffi::TensorView b_scale,
                                 DLDataType c_dtype, int64_t config) {
  tvm::ffi::Tensor c;
  gks::ffi::translate_errors([&] {
    gks::detail::check_matrix_rank(gks::ffi::to_ref(a_q), "gks.int8_gemm", "a_q");
    gks::detail::check_matrix_rank(gks::ffi::to_ref(b_q), "gks.int8_gemm", "b_q");
    c = gks::ffi::new_tensor({a_q.size(0), b_q.size(1)}, c_dtype, a_q.device(), "gks.int8_gemm");
  });
  int8_gemm(a_q, b_q, a_scale, b_scale, c, config);
  return c;
}

// The path int8_gemm(..., config) would take: "hopper", "hopper+transpose", "mma" or
// "mma+transpose" (after the same validation).
tvm::ffi::String int8_gemm_path(tvm::ffi::TensorView a_q, tvm::ffi::TensorView b_q,
                                tvm::ffi::TensorView a_scale, tvm::ffi::TensorView b_scale,
                                tvm::ffi::TensorView c, int64_t config) {
  const char* name = "";
  gks::ffi::translate_errors([&] {
    name = gks::detail::int8_gemm_path_name(
        gks::detail::int8_gemm_path(int8_gemm_args(a_q, b_q, a_scale, b_scale, c, config)));
  });
  return tvm::ffi::String(name);
}

// c = float(a @ b) scaled (fp8 wgmma, fp32 accumulate): scaling "tensor", "row" or "block"
// (gks::Fp8Scaling).
void gemm_fp8_epilogue(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView a_scale,
                       tvm::ffi::TensorView b_scale, tvm::ffi::TensorView c, tvm::ffi::String scaling,
                       int64_t config, OptionalTensor bias, tvm::ffi::String gated) {
  using namespace gks::ffi;
  translate_errors([&] {
    gks::GemmFp8Args args{to_ref(a), to_ref(b), to_ref(a_scale), to_ref(b_scale), to_ref(c)};
    const std::string mode(scaling);
    GKS_CHECK(mode == "tensor" || mode == "row" || mode == "block", kInvalidArgument)
        << "gks.gemm_fp8: argument 'scaling' must be 'tensor', 'row' or 'block', got '" << mode << "'";
    args.scaling = mode == "tensor" ? gks::Fp8Scaling::kTensor
                   : mode == "row"  ? gks::Fp8Scaling::kRow
                                    : gks::Fp8Scaling::kBlock;
    args.config = config_arg(config, "gks.gemm_fp8");
    args.epilogue = epilogue_arg(bias, OptionalTensor(), OptionalTensor(), std::string(gated), "gks.gemm_fp8");
    gks::gemm_fp8(args, stream_for(args.a));
  });
}

// gemm_fp8 without an epilogue: its own entry point, so that a plain call (and gks.jax's
// custom call, which then needs no adapter for absent tensors) stays direct.
void gemm_fp8(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView a_scale,
              tvm::ffi::TensorView b_scale, tvm::ffi::TensorView c, tvm::ffi::String scaling, int64_t config) {
  gemm_fp8_epilogue(a, b, a_scale, b_scale, c, scaling, config, OptionalTensor(), tvm::ffi::String(""));
}

// The MoE expert GEMMs in one launch: exactly one of group_offsets (contiguous layout) and
// group_counts (masked layout) is given (gks::GroupedGemmArgs).
void grouped_gemm(tvm::ffi::TensorView a, tvm::ffi::TensorView b,
                  tvm::ffi::Optional<tvm::ffi::TensorView> group_offsets,
                  tvm::ffi::Optional<tvm::ffi::TensorView> group_counts, tvm::ffi::TensorView c,
                  int64_t config) {
  using namespace gks::ffi;
  translate_errors([&] {
    gks::GroupedGemmArgs args;
    args.config = config_arg(config, "gks.grouped_gemm");
    args.a = to_ref(a);
    args.b = to_ref(b);
    if (group_offsets.has_value()) args.group_offsets = to_ref(group_offsets.value());
    if (group_counts.has_value()) args.group_counts = to_ref(group_counts.value());
    args.c = to_ref(c);
    gks::grouped_gemm(args, stream_for(args.a));
  });
}

// The same with e4m3 a and b and their block scales (gks::GroupedGemmFp8Args).
void grouped_gemm_fp8(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView a_scale,
                      tvm::ffi::TensorView b_scale, tvm::ffi::Optional<tvm::ffi::TensorView> group_offsets,
                      tvm::ffi::Optional<tvm::ffi::TensorView> group_counts, tvm::ffi::TensorView c,
                      int64_t config) {
  using namespace gks::ffi;
  translate_errors([&] {
    gks::GroupedGemmFp8Args args;
    args.config = config_arg(config, "gks.grouped_gemm_fp8");
    args.a = to_ref(a);
    args.b = to_ref(b);
    args.a_scale = to_ref(a_scale);
    args.b_scale = to_ref(b_scale);
    if (group_offsets.has_value()) args.group_offsets = to_ref(group_offsets.value());
    if (group_counts.has_value()) args.group_counts = to_ref(group_counts.value());
    args.c = to_ref(c);
    gks::grouped_gemm_fp8(args, stream_for(args.a));
  });
}

gks::GemmArgs gemm_args(const tvm::ffi::TensorView& a, const tvm::ffi::TensorView& b,
                        const tvm::ffi::TensorView& c, int64_t config) {
  using gks::ffi::to_ref;
  gks::GemmArgs args{to_ref(a), to_ref(b), to_ref(c)};
  args.config = gks::ffi::config_arg(config, "gks.gemm");
  return args;
}

// c = a @ b (fp16/bf16 in, fp32 accumulate, c fp32 or a's dtype): the Hopper kernel on
// sm_90a, else the WMMA kernel.
void gemm(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView c, int64_t config) {
  gks::ffi::translate_errors([&] {
    const gks::GemmArgs args = gemm_args(a, b, c, config);
    gks::gemm(args, gks::ffi::stream_for(args.a));
  });
}

// gemm through the fused epilogue (bias, row_scale, col_scale, gated: "" for none).
void gemm_epilogue(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView c, int64_t config,
                   OptionalTensor bias, OptionalTensor row_scale, OptionalTensor col_scale,
                   tvm::ffi::String gated) {
  gks::ffi::translate_errors([&] {
    gks::GemmArgs args = gemm_args(a, b, c, config);
    args.epilogue = epilogue_arg(bias, row_scale, col_scale, std::string(gated), "gks.gemm");
    gks::gemm(args, gks::ffi::stream_for(args.a));
  });
}

// gemm into a new [M, N] (gated: [M, N / 2]) tensor of c_dtype (a's dtype or float32) from
// the caller's framework (see new_tensor). The torch op's eager path.
tvm::ffi::Tensor gemm_alloc(tvm::ffi::TensorView a, tvm::ffi::TensorView b, DLDataType c_dtype, int64_t config,
                            OptionalTensor bias, OptionalTensor row_scale, OptionalTensor col_scale,
                            tvm::ffi::String gated) {
  tvm::ffi::Tensor c;
  gks::ffi::translate_errors([&] {
    const gks::GemmEpilogue epilogue = epilogue_arg(bias, row_scale, col_scale, std::string(gated), "gks.gemm");
    gks::detail::check_matrix_rank(gks::ffi::to_ref(a), "gks.gemm", "a");
    gks::detail::check_matrix_rank(gks::ffi::to_ref(b), "gks.gemm", "b");
    // An odd N with gated is refused by gks::gemm, naming 'gated', before c is looked at.
    const int64_t n = b.size(1);
    c = gks::ffi::new_tensor({a.size(0), epilogue.gated ? n / 2 : n}, c_dtype, a.device(), "gks.gemm");
    gks::GemmArgs args = gemm_args(a, b, c, config);
    args.epilogue = epilogue;
    gks::gemm(args, gks::ffi::stream_for(args.a));
  });
  return c;
}

// "hopper" or "wmma": the kernel gemm(a, b, c) would run (after the same validation).
tvm::ffi::String gemm_path(tvm::ffi::TensorView a, tvm::ffi::TensorView b,
                           tvm::ffi::TensorView c) {
  const char* name = "";
  gks::ffi::translate_errors([&] {
    name = gks::detail::gemm_path_name(gks::detail::gemm_path(gemm_args(a, b, c, -1)));
  });
  return tvm::ffi::String(name);
}

// The compiled tile configs, in index order, as JSON (gks.specs reads them), and the config
// each heuristic picks for an M x N x K problem on a GPU with num_sms SMs.
tvm::ffi::String sgemm_configs() {
  gks::ffi::ConfigTable table;
  for (const auto& c : gks::detail::sgemm_configs()) tile_fields(table, c);
  return table.json();
}
tvm::ffi::String wmma_gemm_configs() {
  gks::ffi::ConfigTable table;
  for (const auto& c : gks::detail::wmma_gemm_configs()) tile_fields(table, c);
  return table.json();
}
// The mma.sync kernel's tiles, then the Hopper kernel's ("kernel": which one a config is of).
tvm::ffi::String int8_gemm_configs() {
  using gks::detail::Int8GemmKernel;
  gks::ffi::ConfigTable table;
  const auto& configs = gks::detail::int8_gemm_configs();
  for (int i = 0; i < static_cast<int>(configs.size()); ++i) {
    const auto ref = gks::detail::int8_gemm_config_ref(i);
    const bool hopper = ref.kernel == Int8GemmKernel::kHopper;
    tile_fields(table, configs[i]);
    table.str("kernel", hopper ? "hopper" : "mma");
    table.num("cluster", hopper ? gks::detail::kHopperInt8Configs[ref.index].cluster_m : 1);
  }
  return table.json();
}
// The Hopper kernel's fp8 configs (every scaling).
tvm::ffi::String gemm_fp8_configs() {
  gks::ffi::ConfigTable table;
  const auto& configs = gks::detail::gemm_fp8_configs();
  for (int i = 0; i < static_cast<int>(configs.size()); ++i) {
    tile_fields(table, configs[i]);
    table.num("cluster", gks::detail::kHopperFp8Configs[i].cluster_m);
    table.flag("ping_pong", gks::detail::kHopperFp8Configs[i].ping_pong);
  }
  return table.json();
}
// The grouped kernel's configs (single CTAs).
tvm::ffi::String grouped_gemm_configs() {
  gks::ffi::ConfigTable table;
  const auto& configs = gks::detail::grouped_gemm_configs();
  for (int i = 0; i < static_cast<int>(configs.size()); ++i) {
    tile_fields(table, configs[i]);
    table.flag("ping_pong", gks::detail::kHopperGroupedConfigs[i].ping_pong);
  }
  return table.json();
}
tvm::ffi::String grouped_gemm_fp8_configs() {
  gks::ffi::ConfigTable table;
  const auto& configs = gks::detail::grouped_gemm_fp8_configs();
  for (int i = 0; i < static_cast<int>(configs.size()); ++i) {
    tile_fields(table, configs[i]);
    table.flag("ping_pong", gks::detail::kHopperGroupedFp8Configs[i].ping_pong);
  }
  return table.json();
}
tvm::ffi::String gemm_configs() {
  gks::ffi::ConfigTable table;
  for (const auto& c : gks::detail::hopper_gemm_configs()) {
    table.row().str("name", c.name).nums("block", {c.block_m, c.block_n, c.block_k});
    table.num("stages", c.stages).num("cluster", c.cluster_m).num("cluster_n", c.cluster_n);
    table.flag("ping_pong", c.ping_pong).flag("stream_k", c.stream_k);
  }
  return table.json();
}

int64_t sgemm_heuristic(int64_t m, int64_t n, int64_t k, int64_t num_sms) {
  return gks::detail::sgemm_heuristic(m, n, k, static_cast<int>(num_sms));
}
int64_t wmma_gemm_heuristic(int64_t m, int64_t n, int64_t k, int64_t num_sms) {
  return gks::detail::wmma_gemm_heuristic(m, n, k, static_cast<int>(num_sms));
}
int64_t int8_gemm_heuristic(int64_t m, int64_t n, int64_t k, int64_t num_sms) {
  return gks::detail::int8_gemm_heuristic(m, n, k, static_cast<int>(num_sms));
}
int64_t gemm_heuristic(int64_t m, int64_t n, int64_t k, int64_t num_sms) {
  return gks::detail::hopper_gemm_heuristic(m, n, k, static_cast<int>(num_sms));
}
// rows: the rows of a group (the contiguous layout's mean, the masked layout's M_max).
int64_t grouped_gemm_heuristic(int64_t rows, int64_t n, int64_t k, int64_t groups, int64_t num_sms) {
  return gks::detail::grouped_gemm_heuristic(rows, n, k, groups, static_cast<int>(num_sms));
}
int64_t grouped_gemm_fp8_heuristic(int64_t rows, int64_t n, int64_t k, int64_t groups, int64_t num_sms) {
  return gks::detail::grouped_gemm_fp8_heuristic(rows, n, k, groups, static_cast<int>(num_sms));
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(sgemm, sgemm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(wmma_gemm, wmma_gemm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(int8_gemm, int8_gemm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(int8_gemm_alloc, int8_gemm_alloc);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(int8_gemm_path, int8_gemm_path);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm, gemm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm_epilogue, gemm_epilogue);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm_fp8, gemm_fp8);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm_fp8_epilogue, gemm_fp8_epilogue);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm_fp8_configs, gemm_fp8_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(grouped_gemm, grouped_gemm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(grouped_gemm_configs, grouped_gemm_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(grouped_gemm_heuristic, grouped_gemm_heuristic);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(grouped_gemm_fp8, grouped_gemm_fp8);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(grouped_gemm_fp8_configs, grouped_gemm_fp8_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(grouped_gemm_fp8_heuristic, grouped_gemm_fp8_heuristic);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm_alloc, gemm_alloc);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm_path, gemm_path);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(sgemm_configs, sgemm_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(wmma_gemm_configs, wmma_gemm_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(int8_gemm_configs, int8_gemm_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm_configs, gemm_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(sgemm_heuristic, sgemm_heuristic);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(wmma_gemm_heuristic, wmma_gemm_heuristic);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(int8_gemm_heuristic, int8_gemm_heuristic);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm_heuristic, gemm_heuristic);
