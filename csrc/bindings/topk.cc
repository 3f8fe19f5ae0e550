// SPDX-License-Identifier: Apache-2.0
// The topk family's entry points: top_k and its config table (top_k_configs).
#include "common.h"

namespace {

void top_k(tvm::ffi::TensorView x, tvm::ffi::TensorView values, tvm::ffi::TensorView indices, int64_t k,
           bool sorted, int64_t config) {
  using namespace gks::ffi;
  translate_errors([&] {
    const int config32 = config_arg(config, "gks.top_k");
    const gks::TopKArgs args{to_ref(x), to_ref(values), to_ref(indices), k, sorted, config32};
    gks::top_k(args, stream_for(args.x));
  });
}

tvm::ffi::String top_k_configs() {
  gks::ffi::ConfigTable table;
  for (const gks::TopKConfig& c : gks::kTopKConfigs)
    table.row().str("name", c.name).num("threads", c.threads).num("cluster", c.cluster);
  return table.json();
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(top_k, top_k);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(top_k_configs, top_k_configs);
