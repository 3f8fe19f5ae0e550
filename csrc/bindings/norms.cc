// SPDX-License-Identifier: Apache-2.0
// The norms family's entry points: rmsnorm and the fused softmax(rmsnorm).
#include "common.h"

namespace {

void rmsnorm(tvm::ffi::TensorView x, tvm::ffi::TensorView weight, tvm::ffi::TensorView y,
             double eps, int64_t config) {
  using namespace gks::ffi;
  translate_errors([&] {
    const gks::RmsNormArgs args{to_ref(x), to_ref(weight), to_ref(y), static_cast<float>(eps),
                                static_cast<int>(config)};
    gks::rmsnorm(args, stream_for(args.x));
  });
}


void softmax_rmsnorm(tvm::ffi::TensorView x, tvm::ffi::TensorView weight,
                     tvm::ffi::TensorView y, double eps, int64_t config) {
  using namespace gks::ffi;
  translate_errors([&] {
    const gks::SoftmaxRmsNormArgs args{to_ref(x), to_ref(weight), to_ref(y),
                                       static_cast<float>(eps), static_cast<int>(config)};
    gks::softmax_rmsnorm(args, stream_for(args.x));
  });
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(rmsnorm, rmsnorm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(softmax_rmsnorm, softmax_rmsnorm);
