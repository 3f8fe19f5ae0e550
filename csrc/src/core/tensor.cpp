// SPDX-License-Identifier: Apache-2.0
#include "gks/tensor.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <sstream>

namespace gks {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt8: return "int8";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kFloat8E4M3: return "float8_e4m3fn";
    case DType::kFloat8E5M2: return "float8_e5m2";
    default: return "an unsupported dtype";
  }
}

int64_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: case DType::kInt32: return 4;
    case DType::kFloat16: case DType::kBFloat16: return 2;
    case DType::kInt8: case DType::kFloat8E4M3: case DType::kFloat8E5M2: return 1;
    case DType::kInt64: return 8;
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

void check_dtype(const TensorRef& t, DType want, const char* op, const char* arg) {
  GKS_CHECK(t.dtype == want, kUnsupportedDtype)
      << op << ": argument '" << arg << "' must be " << dtype_name(want) << ", got " << dtype_name(t.dtype);
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

namespace {
thread_local int validate_only_depth = 0;
}  // namespace

ValidateOnly::ValidateOnly() { ++validate_only_depth; }
ValidateOnly::~ValidateOnly() { --validate_only_depth; }
bool validating_only() { return validate_only_depth > 0; }

namespace {

// A tensor's memory as a set of byte intervals: base + sum_k i_k * stride[k] + [0, width) for
// 0 <= i_k < size[k], strides positive and outermost first.
struct Span {
  int64_t base = 0, width = 0;
  int n = 0;
  int64_t size[kMaxDims] = {}, stride[kMaxDims] = {};

  int64_t lo() const { return base; }
  int64_t hi() const {
    int64_t h = base + width;
    for (int k = 0; k < n; ++k) h += (size[k] - 1) * stride[k];
    return h;
  }
  // Block 0 of the outermost dim, moved by `shift` bytes.
  Span inner(int64_t shift) const {
    Span s;
    s.base = base + shift;
    s.width = width;
    s.n = n - 1;
    std::copy(size + 1, size + n, s.size);
    std::copy(stride + 1, stride + n, s.stride);
    return s;
  }
};

// For a tensor of numel() > 0. Dims of size 1 or stride 0 add no memory; a negative stride
// walks the same memory from its other end; a dim whose steps leave no gap between the
// intervals inside it widens them instead.
Span span_of(const TensorRef& t) {
  const int64_t elem = std::max<int64_t>(dtype_size(t.dtype), 1);
  Span s;
  s.base = static_cast<int64_t>(reinterpret_cast<intptr_t>(t.data));
  s.width = elem;
  int64_t sizes[kMaxDims], strides[kMaxDims];
  int n = 0;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] <= 1 || t.strides[d] == 0) continue;
    int64_t step = t.strides[d] * elem;
    if (step < 0) {
      s.base += (t.shape[d] - 1) * step;
      step = -step;
    }
    sizes[n] = t.shape[d];
    strides[n++] = step;
  }
  int order[kMaxDims];
  std::iota(order, order + n, 0);
  std::sort(order, order + n, [&](int a, int b) { return strides[a] < strides[b]; });
  int k = 0;
  for (; k < n && strides[order[k]] <= s.width; ++k) s.width += (sizes[order[k]] - 1) * strides[order[k]];
  for (int j = n - 1; j >= k; --j) {
    s.size[s.n] = sizes[order[j]];
    s.stride[s.n++] = strides[order[j]];
  }
  return s;
}

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((b - 1 - a) / b); }

// Splits the span with the larger outermost stride into its blocks and recurses on the
// blocks whose range meets the other span's; two spans with the same outermost stride split
// together, and since block j of b against block i of a depends on j - i alone, each
// difference is tried once (so views interleaved in one buffer take a few steps, not one per
// row). `budget` bounds the steps.
Sharing overlap(const Span& a, const Span& b, int& budget) {
  if (a.hi() <= b.lo() || b.hi() <= a.lo()) return Sharing::kNo;
  if (a.n == 0 && b.n == 0) return Sharing::kYes;
  if (--budget < 0) return Sharing::kUndecided;
  const bool joint = a.n > 0 && b.n > 0 && a.stride[0] == b.stride[0];
  const bool split_a = joint || b.n == 0 || (a.n > 0 && a.stride[0] > b.stride[0]);
  const Span& big = split_a ? a : b;
  const Span& other = split_a ? b : a;
  const int64_t step = big.stride[0];
  const Span block = big.inner(0);
  const Span fixed = joint ? other.inner(0) : other;
  // Offsets i (block i of `big`, or the difference j - i when joint) whose block meets `fixed`:
  // block.lo + i * step < fixed.hi and block.hi + i * step > fixed.lo.
  const int64_t first = joint ? -(other.size[0] - 1) : 0;
  const int64_t i_lo = std::max(first, floor_div(fixed.lo() - block.hi(), step) + 1);
  const int64_t i_hi = std::min(big.size[0] - 1, -floor_div(block.lo() - fixed.hi(), step) - 1);
  Sharing result = Sharing::kNo;
  for (int64_t i = i_lo; i <= i_hi; ++i) {
    const Sharing r = overlap(big.inner(i * step), fixed, budget);
    if (r == Sharing::kYes) return r;
    if (r == Sharing::kUndecided) result = r;
    if (budget < 0) return Sharing::kUndecided;
  }
  return result;
}

bool same_view(const TensorRef& a, const TensorRef& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d)
    if (a.shape[d] != b.shape[d] || (a.shape[d] > 1 && a.strides[d] != b.strides[d])) return false;
  return true;
}

std::string strides_string(const TensorRef& t) {
  std::ostringstream s;
  s << "[";
  for (int d = 0; d < t.ndim; ++d) s << (d ? ", " : "") << t.strides[d];
  s << "]";
  return s.str();
}

}  // namespace

Sharing shares_memory(const TensorRef& a, const TensorRef& b) {
  // A null data pointer (host-side checks of shapes alone) describes no memory.
  if (a.numel() == 0 || b.numel() == 0 || !a.data || !b.data) return Sharing::kNo;
  int budget = 1 << 14;
  return overlap(span_of(a), span_of(b), budget);
}

void check_output(const TensorRef& out, const char* op, const char* arg) {
  if (out.numel() == 0) return;
  int order[kMaxDims];
  int n = 0;
  for (int d = 0; d < out.ndim; ++d) {
    if (out.shape[d] <= 1) continue;
    GKS_CHECK(out.strides[d] != 0, kInvalidArgument)
        << op << ": argument '" << arg << "' must hold each of its elements once, got stride 0 "
        << "over dim " << d << " (size " << out.shape[d] << ") of shape " << out.shape_string()
        << " (an expanded view): every row would be written into the same memory";
    order[n++] = d;
  }
  std::sort(order, order + n, [&](int a, int b) {
    return std::abs(out.strides[a]) < std::abs(out.strides[b]);
  });
  int64_t extent = 1;  // elements spanned by the dims inside the current one
  for (int k = 0; k < n; ++k) {
    const int64_t step = std::abs(out.strides[order[k]]);
    GKS_CHECK(step >= extent, kInvalidArgument)
        << op << ": argument '" << arg << "' must hold each of its elements once: each dim, in "
        << "order of stride, must step past the dims inside it; got shape " << out.shape_string()
        << " with strides " << strides_string(out);
    extent += (out.shape[order[k]] - 1) * step;
  }
}

void check_apart(const NamedTensor& out, const NamedTensor& other, const char* op,
                 const char* in_place) {
  const Sharing s = shares_memory(*out.tensor, *other.tensor);
  const bool may_alias = in_place != nullptr && std::strcmp(other.name, in_place) == 0;
  GKS_CHECK(s == Sharing::kNo, kInvalidArgument)
      << op << ": argument '" << out.name << "' must not share memory with argument '"
      << other.name << "'"
      << (may_alias ? std::string(" unless it is exactly '") + in_place + "' (the same data, "
                          "shape and strides: the op in place)"
                    : std::string())
      << (s == Sharing::kUndecided ? " (their layouts interleave too intricately to tell "
                                     "apart; pass separate tensors)"
                                   : "");
}

void check_outputs(std::initializer_list<NamedTensor> outputs,
                   std::initializer_list<NamedTensor> inputs, const char* op,
                   const char* in_place) {
  for (const NamedTensor& o : outputs) check_output(*o.tensor, op, o.name);
  for (auto o = outputs.begin(); o != outputs.end(); ++o) {
    for (auto p = outputs.begin(); p != o; ++p) check_apart(*o, *p, op);
    for (const NamedTensor& in : inputs) {
      if (in.tensor == nullptr) continue;
      const bool exact = in_place != nullptr && std::strcmp(in.name, in_place) == 0 &&
                         same_view(*o->tensor, *in.tensor);
      if (!exact) check_apart(*o, in, op, in_place);
    }
  }
}

}  // namespace gks
