// SPDX-License-Identifier: Apache-2.0
#include "gks/tensor.h"

#include <cstdint>

#include <sstream>

namespace gks {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt8: return "int8";
    case DType::kInt32: return "int32";
    default: return "an unsupported dtype";
  }
}

int64_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: case DType::kInt32: return 4;
    case DType::kFloat16: case DType::kBFloat16: return 2;
    case DType::kInt8: return 1;
    default: return 0;
  }
}

std::string device_name(Device device) {
  switch (device.type) {
    case DeviceType::kCPU: return "cpu";
    case DeviceType::kCUDA: return "cuda:" + std::to_string(device.index);
    default: return "a non-CUDA device";
  }
}

TensorRef TensorRef::make(void* data, DType dtype, std::initializer_list<int64_t> shape,
                          Device device, std::initializer_list<int64_t> strides) {
  GKS_CHECK(shape.size() <= size_t(kMaxDims), kInvalidArgument)
      << "gks::TensorRef: at most " << kMaxDims << " dims are supported, got " << shape.size();
  GKS_CHECK(strides.size() == 0 || strides.size() == shape.size(), kInvalidArgument)
      << "gks::TensorRef: strides must be empty or have one entry per dim";
  TensorRef t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = int(shape.size());
  int d = 0;
  for (int64_t s : shape) t.shape[d++] = s;
  if (strides.size() == 0) {
    int64_t stride = 1;
    for (d = t.ndim - 1; d >= 0; --d) {
      t.strides[d] = stride;
      stride *= t.shape[d];
    }
  } else {
    d = 0;
    for (int64_t s : strides) t.strides[d++] = s;
  }
  return t;
}

int64_t TensorRef::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

std::string TensorRef::shape_string() const {
  std::ostringstream s;
  s << "[";
  for (int d = 0; d < ndim; ++d) s << (d ? ", " : "") << shape[d];
  s << "]";
  return s.str();
}

bool RowLayout::rows_aligned_to(int64_t elems) const {
  for (int d = 0; d < ndims; ++d)
    if (strides[d] % elems != 0) return false;
  return true;
}

void check_cuda(const TensorRef& t, const char* op, const char* arg) {
  GKS_CHECK(t.device.type == DeviceType::kCUDA, kInvalidArgument)
      << op << ": argument '" << arg << "' must be a CUDA tensor, got a tensor on "
      << device_name(t.device);
}

void check_dtype_float(const TensorRef& t, const char* op, const char* arg) {
  GKS_CHECK(t.dtype == DType::kFloat32 || t.dtype == DType::kFloat16 ||
                t.dtype == DType::kBFloat16,
            kUnsupportedDtype)
      << op << ": argument '" << arg << "' must be float32, float16 or bfloat16, got "
      << dtype_name(t.dtype);
}

void check_same_dtype(const TensorRef& a, const char* a_name, const TensorRef& b,
                      const char* b_name, const char* op) {
  GKS_CHECK(a.dtype == b.dtype, kUnsupportedDtype)
      << op << ": argument '" << b_name << "' must have the dtype of '" << a_name << "' ("
      << dtype_name(a.dtype) << "), got " << dtype_name(b.dtype);
}

void check_same_device(const TensorRef& a, const char* a_name, const TensorRef& b,
                       const char* b_name, const char* op) {
  GKS_CHECK(a.device.type == b.device.type && a.device.index == b.device.index,
            kInvalidArgument)
      << op << ": argument '" << b_name << "' must be on the device of '" << a_name << "' ("
      << device_name(a.device) << "), got " << device_name(b.device);
}

void check_same_shape(const TensorRef& a, const char* a_name, const TensorRef& b,
                      const char* b_name, const char* op) {
  bool same = a.ndim == b.ndim;
  for (int d = 0; same && d < a.ndim; ++d) same = a.shape[d] == b.shape[d];
  GKS_CHECK(same, kInvalidArgument)
      << op << ": argument '" << b_name << "' must have the shape of '" << a_name << "' "
      << a.shape_string() << ", got " << b.shape_string();
}

RowLayout row_layout(const TensorRef& x, const char* op, const char* arg) {
  GKS_CHECK(x.ndim >= 1 && x.ndim <= kMaxDims, kInvalidArgument)
      << op << ": argument '" << arg << "' must have 1 to " << kMaxDims << " dims, got "
      << x.ndim;
  for (int d = 0; d < x.ndim; ++d)
    GKS_CHECK(x.shape[d] >= 0, kInvalidArgument)
        << op << ": argument '" << arg << "' has a negative size " << x.shape_string();
  RowLayout layout;
  layout.cols = x.shape[x.ndim - 1];
  GKS_CHECK(x.strides[x.ndim - 1] == 1 || layout.cols <= 1, kInvalidArgument)
      << op << ": argument '" << arg << "' must be contiguous in its last dim (stride 1), got "
      << "stride " << x.strides[x.ndim - 1];
  layout.rows = 1;
  for (int d = 0; d < x.ndim - 1; ++d) layout.rows *= x.shape[d];
  // Kernels index rows in 32 bits (row_offset divides in 32 bits: 64-bit division is a
  // register-hungry subroutine call in every kernel that splits a row index).
  GKS_CHECK(layout.rows <= int64_t(INT32_MAX), kInvalidArgument)
      << op << ": argument '" << arg << "': at most 2^31 - 1 rows are supported, got " << layout.rows;
  // Keep the leading dims of size > 1, merging each into the one before it when the two
  // are contiguous with each other (outer stride == inner stride * inner size).
  for (int d = 0; d < x.ndim - 1; ++d) {
    if (x.shape[d] == 1) continue;
    if (layout.ndims > 0) {
      const int last = layout.ndims - 1;
      if (layout.strides[last] == x.strides[d] * x.shape[d]) {
        layout.sizes[last] *= x.shape[d];
        layout.strides[last] = x.strides[d];
        continue;
      }
    }
    layout.sizes[layout.ndims] = x.shape[d];
    layout.strides[layout.ndims] = x.strides[d];
    ++layout.ndims;
  }
  return layout;
}

}  // namespace gks
