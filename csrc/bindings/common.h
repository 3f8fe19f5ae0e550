// SPDX-License-Identifier: Apache-2.0
// Shared by the binding files: DLPack views -> gks::TensorRef, the caller's stream, and
// gks::Error -> the tvm-ffi error kind Python maps to ValueError / TypeError / RuntimeError.
#pragma once

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#include <initializer_list>

#include "gks/gks.h"

namespace gks::ffi {


using tvm::ffi::TensorView;

inline gks::DType to_gks_dtype(DLDataType t) {
  if (t.lanes != 1) return gks::DType::kUnsupported;
  if (t.code == kDLFloat && t.bits == 32) return gks::DType::kFloat32;
  if (t.code == kDLFloat && t.bits == 16) return gks::DType::kFloat16;
  if (t.code == kDLBfloat && t.bits == 16) return gks::DType::kBFloat16;
  if (t.code == kDLInt && t.bits == 8) return gks::DType::kInt8;
  if (t.code == kDLInt && t.bits == 32) return gks::DType::kInt32;
  return gks::DType::kUnsupported;
}

inline gks::TensorRef to_ref(const TensorView& t) {
  gks::TensorRef r;
  GKS_CHECK(t.ndim() <= gks::kMaxDims, kInvalidArgument)
      << "gks: tensors of at most " << gks::kMaxDims << " dims are supported, got " << t.ndim();
  r.data = static_cast<char*>(t.data_ptr()) + t.byte_offset();
  r.dtype = to_gks_dtype(t.dtype());
  const DLDevice dev = t.device();
  r.device.type = dev.device_type == kDLCUDA  ? gks::DeviceType::kCUDA
                  : dev.device_type == kDLCPU ? gks::DeviceType::kCPU
                                              : gks::DeviceType::kOther;
  r.device.index = dev.device_id;
  r.ndim = t.ndim();
  for (int d = 0; d < r.ndim; ++d) {
    r.shape[d] = t.size(d);
    r.strides[d] = t.stride(d);
  }
  return r;
}

inline cudaStream_t current_stream(const gks::TensorRef& t) {
  return static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, t.device.index));
}

// Runs `body`, turning gks::Error into the tvm-ffi error kind Python maps to the matching
// built-in exception.
template <typename F>
void translate_errors(F&& body) {
  try {
    body();
  } catch (const gks::Error& e) {
    switch (e.kind()) {
      case gks::ErrorKind::kInvalidArgument: TVM_FFI_THROW(ValueError) << e.what();
      case gks::ErrorKind::kUnsupportedDtype: TVM_FFI_THROW(TypeError) << e.what();
      default: TVM_FFI_THROW(RuntimeError) << e.what();
    }
  }
}

// A new contiguous tensor from the caller's framework (tvm-ffi's environment allocator,
// which a call with PyTorch tensors sets to PyTorch's caching allocator on the current
// stream). Allocating here rather than in Python saves the framework's Python-level
// allocation call, host time that bounds small kernels on a slow host. Throws gks::Error
// when the caller's framework lends no allocator.
inline tvm::ffi::Tensor new_tensor(std::initializer_list<int64_t> shape, DLDataType dtype,
                                   DLDevice device, const char* op) {
  GKS_CHECK(TVMFFIEnvGetDLPackManagedTensorAllocator() != nullptr, kInvalidArgument)
      << op << ": the caller's framework lends no allocator to tvm-ffi (PyTorch does); "
      << "allocate the output and call the _out entry point instead";
  return tvm::ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, tvm::ffi::ShapeView(shape), dtype,
                                        device);
}

// The caller's current stream for the device of `t` (nullptr for non-CUDA tensors, which
// the C++ API rejects before any launch).
inline cudaStream_t stream_for(const gks::TensorRef& t) {
  return t.device.type == gks::DeviceType::kCUDA ? current_stream(t) : nullptr;
}

}  // namespace gks::ffi
