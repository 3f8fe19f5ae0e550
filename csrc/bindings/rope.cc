// SPDX-License-Identifier: Apache-2.0
// The rope family's entry points: apply_rope.
#include "common.h"

namespace {

void apply_rope(tvm::ffi::TensorView q, tvm::ffi::TensorView k, tvm::ffi::TensorView cos_sin_cache,
                tvm::ffi::TensorView positions, tvm::ffi::TensorView q_out, tvm::ffi::TensorView k_out,
                bool is_neox) {
  using namespace gks::ffi;
  translate_errors([&] {
    const gks::ApplyRopeArgs args{to_ref(q),     to_ref(k),     to_ref(cos_sin_cache), to_ref(positions),
                                  to_ref(q_out), to_ref(k_out), is_neox};
    gks::apply_rope(args, stream_for(args.q));
  });
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(apply_rope, apply_rope);
