// SPDX-License-Identifier: Apache-2.0
// The loss family's entry points: cross_entropy_fwd, cross_entropy_bwd, and their config
// table (cross_entropy_configs).
#include "common.h"

namespace {

void cross_entropy_fwd(tvm::ffi::TensorView logits, tvm::ffi::TensorView target, tvm::ffi::TensorView loss,
                       tvm::ffi::TensorView lse, int64_t ignore_index, int64_t config) {
  using namespace gks::ffi;
  translate_errors([&] {
    const gks::CrossEntropyFwdArgs args{to_ref(logits), to_ref(target), to_ref(loss), to_ref(lse), ignore_index,
                                        config_arg(config, "gks.cross_entropy")};
    gks::cross_entropy_fwd(args, stream_for(args.logits));
  });
}

void cross_entropy_bwd(tvm::ffi::TensorView logits, tvm::ffi::TensorView target, tvm::ffi::TensorView lse,
                       tvm::ffi::TensorView dloss, tvm::ffi::TensorView dlogits, int64_t ignore_index,
                       int64_t config) {
  using namespace gks::ffi;
  translate_errors([&] {
    const gks::CrossEntropyBwdArgs args{to_ref(logits), to_ref(target),  to_ref(lse),
                                        to_ref(dloss),  to_ref(dlogits), ignore_index,
                                        config_arg(config, "gks.cross_entropy_backward")};
    gks::cross_entropy_bwd(args, stream_for(args.logits));
  });
}

// The config table, as JSON.
tvm::ffi::String cross_entropy_configs() {
  gks::ffi::ConfigTable table;
  for (const gks::CrossEntropyConfig& c : gks::kCrossEntropyConfigs)
    table.row().str("name", c.name).num("threads_per_row", c.threads_per_row);
  return table.json();
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(cross_entropy_fwd, cross_entropy_fwd);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(cross_entropy_bwd, cross_entropy_bwd);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(cross_entropy_configs, cross_entropy_configs);
