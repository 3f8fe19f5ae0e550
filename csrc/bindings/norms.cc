// SPDX-License-Identifier: Apache-2.0
// The norms family's entry points: rmsnorm and its backward (rmsnorm_bwd),
// fused_add_rmsnorm, layernorm, the fused softmax(rmsnorm), and rmsnorm /
// fused_add_rmsnorm with a quantized output.
#include <cstddef>
#include <string>

#include "common.h"

namespace {

void rmsnorm(tvm::ffi::TensorView x, tvm::ffi::TensorView weight, tvm::ffi::TensorView y,
             double eps, int64_t config) {
  using namespace gks::ffi;
  translate_errors([&] {
    const gks::RmsNormArgs args{to_ref(x), to_ref(weight), to_ref(y),
                                float32_arg(eps, "eps", "gks.rmsnorm"), config_arg(config, "gks.rmsnorm")};
    gks::rmsnorm(args, stream_for(args.x));
  });
}

void rmsnorm_bwd(tvm::ffi::TensorView dy, tvm::ffi::TensorView x, tvm::ffi::TensorView weight,
                 tvm::ffi::TensorView dx, tvm::ffi::TensorView dweight, double eps, int64_t config) {
  using namespace gks::ffi;
  constexpr const char* kOp = "gks.rmsnorm_bwd";
  translate_errors([&] {
    const gks::RmsNormBwdArgs args{to_ref(dy), to_ref(x), to_ref(weight), to_ref(dx), to_ref(dweight),
                                   float32_arg(eps, "eps", kOp), config_arg(config, kOp)};
    gks::rmsnorm_bwd(args, stream_for(args.x));
  });
}

void fused_add_rmsnorm(tvm::ffi::TensorView x, tvm::ffi::TensorView residual, tvm::ffi::TensorView weight,
                       tvm::ffi::TensorView y, tvm::ffi::TensorView residual_out, double eps, int64_t config) {
  using namespace gks::ffi;
  constexpr const char* kOp = "gks.fused_add_rmsnorm";
  translate_errors([&] {
    const gks::FusedAddRmsNormArgs args{to_ref(x), to_ref(residual), to_ref(weight), to_ref(y),
                                        to_ref(residual_out), float32_arg(eps, "eps", kOp),
                                        config_arg(config, kOp)};
    gks::fused_add_rmsnorm(args, stream_for(args.x));
  });
}

// bias: read only with has_bias (the caller passes any tensor, e.g. the weight, without one).
void layernorm(tvm::ffi::TensorView x, tvm::ffi::TensorView weight, tvm::ffi::TensorView bias, bool has_bias,
               tvm::ffi::TensorView y, double eps, int64_t config) {
  using namespace gks::ffi;
  constexpr const char* kOp = "gks.layernorm";
  translate_errors([&] {
    const gks::LayerNormArgs args{to_ref(x), to_ref(weight), to_ref(bias), to_ref(y), has_bias,
                                  float32_arg(eps, "eps", kOp), config_arg(config, kOp)};
    gks::layernorm(args, stream_for(args.x));
  });
}

void softmax_rmsnorm(tvm::ffi::TensorView x, tvm::ffi::TensorView weight,
                     tvm::ffi::TensorView y, double eps, int64_t config) {
  using namespace gks::ffi;
  translate_errors([&] {
    const gks::SoftmaxRmsNormArgs args{to_ref(x), to_ref(weight), to_ref(y),
                                       float32_arg(eps, "eps", "gks.softmax_rmsnorm"),
                                       config_arg(config, "gks.softmax_rmsnorm")};
    gks::softmax_rmsnorm(args, stream_for(args.x));
  });
}

const char* path_name(gks::RmsNormConfig::Path path) {
  return path == gks::RmsNormConfig::Path::kLooped ? "looped" : "registers";
}

// The config tables, as JSON (gks.specs reads them).
template <size_t kCount>
tvm::ffi::String rmsnorm_config_table(const gks::RmsNormConfig (&configs)[kCount]) {
  gks::ffi::ConfigTable table;
  for (const auto& c : configs) {
    table.row().str("name", c.name).str("path", path_name(c.path)).num("vecs", c.vecs);
    table.num("max_threads", c.max_threads).num("looped_threads", c.looped_threads);
  }
  return table.json();
}
tvm::ffi::String rmsnorm_configs() { return rmsnorm_config_table(gks::kRmsNormConfigs); }
tvm::ffi::String rmsnorm_bwd_configs() { return rmsnorm_config_table(gks::kRmsNormBwdConfigs); }
// fused_add_rmsnorm and layernorm run rmsnorm's kernel shapes.
tvm::ffi::String fused_add_rmsnorm_configs() { return rmsnorm_configs(); }
tvm::ffi::String layernorm_configs() { return rmsnorm_configs(); }
tvm::ffi::String softmax_rmsnorm_configs() {
  return gks::ffi::softmax_config_table(gks::kSoftmaxRmsNormConfigs);
}

gks::Fp8Granularity quant_granularity(const std::string& name, const char* op) {
  if (name == "token") return gks::Fp8Granularity::kToken;
  if (name == "group") return gks::Fp8Granularity::kGroup;
  GKS_CHECK(false, kInvalidArgument) << op << ": argument 'granularity' must be 'token' or 'group', got '" << name
                                     << "'";
  return gks::Fp8Granularity::kToken;
}

// The quantized-output ops: q's dtype (int8 or float8_e4m3fn) picks the format.
void rmsnorm_quant(tvm::ffi::TensorView x, tvm::ffi::TensorView weight, tvm::ffi::TensorView q,
                   tvm::ffi::TensorView scale, double eps, tvm::ffi::String granularity, bool scale_ue8m0) {
  using namespace gks::ffi;
  constexpr const char* kOp = "gks.rmsnorm_quant";
  translate_errors([&] {
    gks::RmsNormQuantArgs args;
    args.x = to_ref(x);
    args.weight = to_ref(weight);
    args.q = to_ref(q);
    args.scale = to_ref(scale);
    args.eps = float32_arg(eps, "eps", kOp);
    args.granularity = quant_granularity(std::string(granularity), kOp);
    args.scale_ue8m0 = scale_ue8m0;
    gks::rmsnorm_quant(args, stream_for(args.x));
  });
}

void fused_add_rmsnorm_quant(tvm::ffi::TensorView x, tvm::ffi::TensorView residual, tvm::ffi::TensorView weight,
                             tvm::ffi::TensorView q, tvm::ffi::TensorView scale, tvm::ffi::TensorView residual_out,
                             double eps, tvm::ffi::String granularity, bool scale_ue8m0) {
  using namespace gks::ffi;
  constexpr const char* kOp = "gks.fused_add_rmsnorm_quant";
  translate_errors([&] {
    gks::RmsNormQuantArgs args;
    args.x = to_ref(x);
    args.residual = to_ref(residual);
    args.residual_out = to_ref(residual_out);
    args.weight = to_ref(weight);
    args.q = to_ref(q);
    args.scale = to_ref(scale);
    args.eps = float32_arg(eps, "eps", kOp);
    args.granularity = quant_granularity(std::string(granularity), kOp);
    args.scale_ue8m0 = scale_ue8m0;
    gks::fused_add_rmsnorm_quant(args, stream_for(args.x));
  });
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(rmsnorm_quant, rmsnorm_quant);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(fused_add_rmsnorm_quant, fused_add_rmsnorm_quant);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(rmsnorm, rmsnorm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(rmsnorm_bwd, rmsnorm_bwd);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(rmsnorm_bwd_configs, rmsnorm_bwd_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(fused_add_rmsnorm, fused_add_rmsnorm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(layernorm, layernorm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(softmax_rmsnorm, softmax_rmsnorm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(rmsnorm_configs, rmsnorm_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(fused_add_rmsnorm_configs, fused_add_rmsnorm_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(layernorm_configs, layernorm_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(softmax_rmsnorm_configs, softmax_rmsnorm_configs);
