// SPDX-License-Identifier: Apache-2.0
#include <tvm/ffi/optional.h>

#include "common.h"

namespace {

void flash_attention_fwd(tvm::ffi::TensorView q, tvm::ffi::TensorView k, tvm::ffi::TensorView v,
                         tvm::ffi::TensorView o, tvm::ffi::TensorView lse, bool causal,
                         tvm::ffi::Optional<double> softmax_scale) {
  using namespace gks::ffi;
  translate_errors([&] {
    gks::FlashAttentionFwdArgs args{to_ref(q), to_ref(k), to_ref(v), to_ref(o), to_ref(lse),
                                    causal, std::nullopt};
    if (softmax_scale.has_value()) args.softmax_scale = static_cast<float>(softmax_scale.value());
    gks::flash_attention_fwd(args, stream_for(args.q));
  });
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(flash_attention_fwd, flash_attention_fwd);
