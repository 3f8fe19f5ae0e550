// SPDX-License-Identifier: Apache-2.0
// Shared by the binding files: DLPack views -> gks::TensorRef, the caller's stream, and
// gks::Error -> the tvm-ffi error kind Python maps to ValueError / TypeError / RuntimeError.
#pragma once

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <climits>
#include <cmath>
#include <initializer_list>
#include <string>

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
  if (t.code == kDLInt && t.bits == 64) return gks::DType::kInt64;
  if (t.code == kDLFloat8_e4m3fn && t.bits == 8) return gks::DType::kFloat8E4M3;
  if (t.code == kDLFloat8_e5m2 && t.bits == 8) return gks::DType::kFloat8E5M2;
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

// Python's ints and floats arrive as int64 and double, the C++ API takes int and float: each
// is narrowed only once it is known to survive, else refused naming the argument (a config
// of 2^32 would wrap to config 0; an eps of 1e-50 would become 0). NaN, negatives and the
// rest go on to the op's own checks.
inline int config_arg(int64_t config, const char* op) {
  GKS_CHECK(config >= INT_MIN && config <= INT_MAX, kInvalidArgument)
      << op << ": argument 'config' must be -1 (the heuristic) or an index into the op's "
      << "config table, got " << config;
  return static_cast<int>(config);
}

inline float float32_arg(double value, const char* arg, const char* op) {
  const float narrowed = static_cast<float>(value);
  const bool underflows = value != 0 && narrowed == 0;
  const bool overflows = std::isfinite(value) && std::isinf(narrowed);
  GKS_CHECK(!underflows && !overflows, kInvalidArgument)
      << op << ": argument '" << arg << "' must be 0 or of a magnitude float32 holds "
      << "(1.4e-45 to 3.4e+38), got " << value;
  return narrowed;
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

// A config table as JSON, the form Python reads it in (gks.specs: an op's configs come from
// here, never from a copy): a list of records, one per config in index order, whose fields
// are the C++ struct's. Names and enum spellings are plain identifiers, so no escaping.
//   ConfigTable t; for (c : table) t.row().str("name", c.name).num("stages", c.stages); t.json()
class ConfigTable {
 public:
  ConfigTable& row() {
    text_ += rows_++ ? "},{" : "{";
    first_ = true;
    return *this;
  }
  ConfigTable& str(const char* key, const char* value) {
    return raw(key, std::string("\"") + value + "\"");
  }
  ConfigTable& num(const char* key, long long value) { return raw(key, std::to_string(value)); }
  ConfigTable& flag(const char* key, bool value) { return raw(key, value ? "true" : "false"); }
  ConfigTable& nums(const char* key, std::initializer_list<long long> values) {
    std::string list = "[";
    for (long long v : values) list += (list.size() > 1 ? "," : "") + std::to_string(v);
    return raw(key, list + "]");
  }
  tvm::ffi::String json() const { return tvm::ffi::String("[" + text_ + (rows_ ? "}]" : "]")); }

 private:
  ConfigTable& raw(const char* key, const std::string& value) {
    text_ += std::string(first_ ? "" : ",") + "\"" + key + "\":" + value;
    first_ = false;
    return *this;
  }
  std::string text_;
  int rows_ = 0;
  bool first_ = true;
};

// softmax's and softmax_rmsnorm's tables (one struct, SoftmaxConfig).
template <class Configs>
tvm::ffi::String softmax_config_table(const Configs& configs) {
  ConfigTable table;
  for (const gks::SoftmaxConfig& c : configs) {
    using Path = gks::SoftmaxConfig::Path;
    const char* path = c.path == Path::kRegisters ? "registers"
                       : c.path == Path::kLooped  ? "looped"
                       : c.path == Path::kCluster ? "cluster"
                                                  : "staged";
    table.row().str("name", c.name).str("path", path).flag("wide", c.wide);
  }
  return table.json();
}

// The caller's current stream for the device of `t` (nullptr for non-CUDA tensors, which
// the C++ API rejects before any launch).
inline cudaStream_t stream_for(const gks::TensorRef& t) {
  return t.device.type == gks::DeviceType::kCUDA ? current_stream(t) : nullptr;
}

}  // namespace gks::ffi
