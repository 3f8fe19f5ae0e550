// SPDX-License-Identifier: Apache-2.0
// The small tensor view the C++ API takes: pointer, dtype, shape, strides (in elements),
// device. It owns nothing; the caller keeps the memory alive for the call. Every op refuses
// an output that repeats an element (a stride-0 view) or shares memory with another argument,
// except the in-place forms it documents (the row ops' y may be x): check_outputs below.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "gks/error.h"

#if defined(__CUDACC__)
#define GKS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define GKS_HOST_DEVICE inline
#endif

namespace gks {

constexpr int kMaxDims = 8;

// kFloat8E4M3: OCP fp8 e4m3 with no infinities (torch.float8_e4m3fn), max 448.
// kFloat8E5M2: OCP fp8 e5m2 (torch.float8_e5m2), max 57344.
enum class DType : uint8_t {
  kFloat32, kFloat16, kBFloat16, kInt8, kInt32, kInt64, kFloat8E4M3, kFloat8E5M2, kUnsupported
};
enum class DeviceType : uint8_t { kCPU, kCUDA, kOther };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
};

const char* dtype_name(DType dtype);
int64_t dtype_size(DType dtype);  // bytes per element; 0 for kUnsupported
std::string device_name(Device device);

struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::kUnsupported;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // in elements, not bytes
  Device device;

  // A tensor with the given shape; strides default to the contiguous row-major ones.
  static TensorRef make(void* data, DType dtype, std::initializer_list<int64_t> shape,
                        Device device, std::initializer_list<int64_t> strides = {});

  int64_t numel() const;
  int64_t size(int dim) const { return shape[dim < 0 ? dim + ndim : dim]; }
  int64_t stride(int dim) const { return strides[dim < 0 ? dim + ndim : dim]; }
  std::string shape_string() const;  // "[2, 3, 4]"
};

// Where each row of a tensor [..., N] starts, for rows whose last dim is contiguous and whose
// leading dims have arbitrary strides. Leading dims that are contiguous with each other are
// merged, so the usual case is a single dim: offset(row) = row * row_stride.
struct RowLayout {
  int64_t rows = 0;  // product of the leading dims (1 for a 1-D tensor)
  int64_t cols = 0;  // N, the size of the last dim
  int ndims = 0;     // leading dims left after merging; sizes/strides are innermost-last
  int64_t sizes[kMaxDims - 1] = {};
  int64_t strides[kMaxDims - 1] = {};

  // Element offset of row `row` (< rows, which row_layout keeps below 2^31).
  GKS_HOST_DEVICE int64_t row_offset(int64_t row) const {
    if (ndims <= 1) return ndims == 0 ? 0 : row * strides[0];
    int64_t offset = 0;
    auto r = static_cast<uint32_t>(row);
    for (int d = ndims - 1; d >= 0; --d) {
      const auto size = static_cast<uint32_t>(sizes[d]);
      offset += int64_t(r % size) * strides[d];
      r /= size;
    }
    return offset;
  }
  // True when every row starts at a multiple of `elems` elements from the base pointer.
  bool rows_aligned_to(int64_t elems) const;
};

// ---- validation helpers; each throws gks::Error naming `op` and `arg` ----
void check_cuda(const TensorRef& t, const char* op, const char* arg);
void check_dtype_float(const TensorRef& t, const char* op, const char* arg);
void check_dtype(const TensorRef& t, DType want, const char* op, const char* arg);  // exactly `want`
void check_same_dtype(const TensorRef& a, const char* a_name, const TensorRef& b,
                      const char* b_name, const char* op);
void check_same_device(const TensorRef& a, const char* a_name, const TensorRef& b,
                       const char* b_name, const char* op);
void check_same_shape(const TensorRef& a, const char* a_name, const TensorRef& b,
                      const char* b_name, const char* op);
// x must have ndim >= 1 and a contiguous last dim (stride 1, or any stride when N <= 1).
RowLayout row_layout(const TensorRef& x, const char* op, const char* arg);

// ---- validation alone: while a ValidateOnly object lives on its thread, every op checks its
// arguments as it always does, then returns before it touches the device. A framework's fake
// (meta) kernel runs the real checks this way on shapes, dtypes and strides alone (the data
// pointers it passes need not point at memory), so a traced program fails where a real call
// would, with the same message.
class ValidateOnly {
 public:
  ValidateOnly();
  ~ValidateOnly();
  ValidateOnly(const ValidateOnly&) = delete;
  ValidateOnly& operator=(const ValidateOnly&) = delete;
};
bool validating_only();

// ---- outputs: a kernel writes each element of an output once and reads its inputs while it
// writes, so an output must not repeat an element or share memory with another argument ----

// Whether two tensors share memory: kNo and kYes are exact; kUndecided when the two layouts
// interleave too intricately to tell apart in a bounded number of steps (callers refuse it).
// A tensor with a null data pointer (a check of shapes alone) shares nothing.
enum class Sharing : uint8_t { kNo, kYes, kUndecided };
Sharing shares_memory(const TensorRef& a, const TensorRef& b);

// out holds each of its elements once: no stride 0 over a dim of size > 1, and each dim,
// taken in order of stride, steps past the extent of the dims inside it.
void check_output(const TensorRef& out, const char* op, const char* arg);

struct NamedTensor {
  const TensorRef* tensor;
  const char* name;
};
// Throws unless output `out` shares no memory with `other` (an input or another output).
// `in_place` names the input out may be exactly, said in the message.
void check_apart(const NamedTensor& out, const NamedTensor& other, const char* op,
                 const char* in_place = nullptr);
// check_output for each output, then no output may share memory with another output or with
// an input, except that an output may be exactly the input named `in_place` (the same data,
// dtype, shape and strides: the in-place form an op documents). An input whose tensor is
// null (an optional argument not given) is skipped.
void check_outputs(std::initializer_list<NamedTensor> outputs,
                   std::initializer_list<NamedTensor> inputs, const char* op,
                   const char* in_place = nullptr);

}  // namespace gks
