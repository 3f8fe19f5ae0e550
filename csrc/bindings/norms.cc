// SPDX-License-Identifier: Apache-2.0
// The norms family's entry points: rmsnorm, fused_add_rmsnorm, layernorm and the fused
// softmax(rmsnorm).
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
tvm::ffi::String rmsnorm_configs() {
  gks::ffi::ConfigTable table;
  for (const auto& c : gks::kRmsNormConfigs) {
    table.row().str("name", c.name).str("path", path_name(c.path)).num("vecs", c.vecs);
    table.num("max_threads", c.max_threads).num("looped_threads", c.looped_threads);
  }
  return table.json();
}
// fused_add_rmsnorm and layernorm run rmsnorm's kernel shapes.
tvm::ffi::String fused_add_rmsnorm_configs() { return rmsnorm_configs(); }
tvm::ffi::String layernorm_configs() { return rmsnorm_configs(); }
tvm::ffi::String softmax_rmsnorm_configs() {
  return gks::ffi::softmax_config_table(gks::kSoftmaxRmsNormConfigs);
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(rmsnorm, rmsnorm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(fused_add_rmsnorm, fused_add_rmsnorm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(layernorm, layernorm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(softmax_rmsnorm, softmax_rmsnorm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(rmsnorm_configs, rmsnorm_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(fused_add_rmsnorm_configs, fused_add_rmsnorm_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(layernorm_configs, layernorm_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(softmax_rmsnorm_configs, softmax_rmsnorm_configs);
