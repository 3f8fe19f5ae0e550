// SPDX-License-Identifier: Apache-2.0
// The quantize family's entry points: int8 and fp8 quantize and dequantize.
#include <string>

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

gks::Fp8Granularity granularity_arg(const std::string& name, const char* op) {
  if (name == "tensor") return gks::Fp8Granularity::kTensor;
  if (name == "token") return gks::Fp8Granularity::kToken;
  if (name == "group") return gks::Fp8Granularity::kGroup;
  if (name == "block") return gks::Fp8Granularity::kBlock;
  GKS_CHECK(false, kInvalidArgument) << op << ": argument 'granularity' must be 'tensor', 'token', 'group' or 'block', "
                                     << "got '" << name << "'";
  return gks::Fp8Granularity::kToken;
}

int group_size_arg(int64_t group_size, const char* op) {
  GKS_CHECK(group_size == 128, kInvalidArgument)
      << op << ": argument 'group_size' must be 128 (1 x 128 groups, 128 x 128 blocks), got " << group_size;
  return 128;
}

void quantize_fp8(tvm::ffi::TensorView x, tvm::ffi::TensorView q, tvm::ffi::TensorView scale,
                  tvm::ffi::String granularity, int64_t group_size, bool scale_ue8m0) {
  using namespace gks::ffi;
  constexpr const char* kOp = "gks.quantize_fp8";
  translate_errors([&] {
    gks::QuantizeFp8Args args{to_ref(x), to_ref(q), to_ref(scale)};
    args.granularity = granularity_arg(std::string(granularity), kOp);
    args.group_size = group_size_arg(group_size, kOp);
    args.scale_ue8m0 = scale_ue8m0;
    gks::quantize_fp8(args, stream_for(args.x));
  });
}

void dequantize_fp8(tvm::ffi::TensorView q, tvm::ffi::TensorView scale, tvm::ffi::TensorView out,
                    tvm::ffi::String granularity, int64_t group_size) {
  using namespace gks::ffi;
  constexpr const char* kOp = "gks.dequantize_fp8";
  translate_errors([&] {
    gks::DequantizeFp8Args args{to_ref(q), to_ref(scale), to_ref(out)};
    args.granularity = granularity_arg(std::string(granularity), kOp);
    args.group_size = group_size_arg(group_size, kOp);
    gks::dequantize_fp8(args, stream_for(args.q));
  });
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(quantize_fp8, quantize_fp8);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(dequantize_fp8, dequantize_fp8);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(quantize_int8, quantize_int8);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(dequantize_int8, dequantize_int8);
