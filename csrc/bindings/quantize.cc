// SPDX-License-Identifier: Apache-2.0
// The quantize family's entry points: int8 quantize and dequantize.
#include "common.h"

namespace {

void quantize_int8(tvm::ffi::TensorView x, tvm::ffi::TensorView q, tvm::ffi::TensorView scale) {
  using namespace gks::ffi;
  translate_errors([&] {
    const gks::QuantizeInt8Args args{to_ref(x), to_ref(q), to_ref(scale)};
    gks::quantize_int8(args, stream_for(args.x));
  });
}

void dequantize_int8(tvm::ffi::TensorView q, tvm::ffi::TensorView scale,
                     tvm::ffi::TensorView out) {
  using namespace gks::ffi;
  translate_errors([&] {
    const gks::DequantizeInt8Args args{to_ref(q), to_ref(scale), to_ref(out)};
    gks::dequantize_int8(args, stream_for(args.q));
  });
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(quantize_int8, quantize_int8);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(dequantize_int8, dequantize_int8);
