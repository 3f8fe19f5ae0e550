// SPDX-License-Identifier: Apache-2.0
// The activation family's entry points: act_and_mul and act_and_mul_quant.
#include <string>

#include "common.h"

namespace {

gks::Activation activation_arg(const std::string& name, const char* op) {
  if (name == "silu") return gks::Activation::kSilu;
  if (name == "gelu") return gks::Activation::kGelu;
  if (name == "gelu_tanh") return gks::Activation::kGeluTanh;
  GKS_CHECK(false, kInvalidArgument) << op << ": argument 'activation' must be 'silu', 'gelu' or 'gelu_tanh', got '"
                                     << name << "'";
  return gks::Activation::kSilu;
}

void act_and_mul(tvm::ffi::TensorView x, tvm::ffi::TensorView y, tvm::ffi::String activation) {
  using namespace gks::ffi;
  constexpr const char* kOp = "gks.act_and_mul";
  translate_errors([&] {
    const gks::ActAndMulArgs args{to_ref(x), to_ref(y), activation_arg(std::string(activation), kOp)};
    gks::act_and_mul(args, stream_for(args.x));
  });
}

void act_and_mul_quant(tvm::ffi::TensorView x, tvm::ffi::TensorView q, tvm::ffi::TensorView scale,
                       tvm::ffi::String activation, bool scale_ue8m0) {
  using namespace gks::ffi;
  constexpr const char* kOp = "gks.act_and_mul_quant";
  translate_errors([&] {
    gks::ActAndMulQuantArgs args{to_ref(x), to_ref(q), to_ref(scale), activation_arg(std::string(activation), kOp)};
    args.scale_ue8m0 = scale_ue8m0;
    gks::act_and_mul_quant(args, stream_for(args.x));
  });
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(act_and_mul_quant, act_and_mul_quant);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(act_and_mul, act_and_mul);
