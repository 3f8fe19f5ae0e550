// SPDX-License-Identifier: Apache-2.0
// The softmax family's entry points.
#include "common.h"

namespace {

void softmax(tvm::ffi::TensorView x, tvm::ffi::TensorView y, int64_t config) {
  using namespace gks::ffi;
  translate_errors([&] {
    const gks::SoftmaxArgs args{to_ref(x), to_ref(y), config_arg(config, "gks.softmax")};
    gks::softmax(args, stream_for(args.x));
  });
}

// The config table, as JSON (gks.specs reads it).
tvm::ffi::String softmax_configs() { return gks::ffi::softmax_config_table(gks::kSoftmaxConfigs); }

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(softmax, softmax);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(softmax_configs, softmax_configs);
