// SPDX-License-Identifier: Apache-2.0
// gks::grouped_gemm and gks::grouped_gemm_fp8: validation (the messages of
// gks.specs.gemm.check_grouped_gemm / check_grouped_gemm_fp8), the packing of operands TMA
// cannot read in place, the all-zero cases, and the launch of the Hopper kernel's grouped
// schedule (grouped_gemm_sm90a.cu).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gemm/byte_gemm.h"
#include "gemm/launch.h"
#include "gks/device_limits.h"
#include "gks/gemm.h"
#include "core/launch.h"
#include "core/workspace.h"

namespace gks {
namespace detail {

const std::vector<GemmConfigInfo>& grouped_gemm_configs() {
  static const std::vector<GemmConfigInfo> configs = hopper_config_infos(kHopperGroupedConfigs);
  return configs;
}

const std::vector<GemmConfigInfo>& grouped_gemm_fp8_configs() {
  static const std::vector<GemmConfigInfo> configs = hopper_config_infos(kHopperGroupedFp8Configs);
  return configs;
}

int grouped_gemm_heuristic(int64_t rows_per_group, int64_t n, int64_t /*k*/, int64_t groups, int num_sms) {
  // Groups of at most 64 rows (decode's masked layout, fine-grained experts) waste half of
  // a 128-row tile: 64-row tiles, ping-pong. Otherwise 128 x 128 tiles, or 128 x 256 where
  // even the wide tiles fill the GPU (few, large groups).
  if (rows_per_group <= 64) return 3;
  const int64_t wide_units = groups * ((rows_per_group + 127) / 128) * ((n + 255) / 256);
  return wide_units >= 2 * int64_t(num_sms) ? 2 : 0;
}

int grouped_gemm_fp8_heuristic(int64_t rows_per_group, int64_t /*n*/, int64_t /*k*/, int64_t /*groups*/,
                               int /*num_sms*/) {
  // As grouped_gemm's, without the wide tiles (fp8's promotion holds two more sets of
  // accumulators): 64-row tiles, ping-pong, for groups of at most 64 rows, else 128 x 128.
  return rows_per_group <= 64 ? 1 : 0;
}

namespace {

// Copies a [slabs, rows, cols] view (last dim contiguous, element strides s_slab, s_row)
// into a packed [slabs, rows, ld] buffer: for operands whose strides TMA cannot take.
template <typename T>
__global__ void pack_rows_kernel(const T* __restrict__ src, int64_t s_slab, int64_t s_row, T* __restrict__ dst,
                                 int64_t ld, int64_t slabs, int64_t rows, int64_t cols) {
  const int64_t total = slabs * rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t col = i % cols, row = (i / cols) % rows, slab = i / (cols * rows);
    dst[(slab * rows + row) * ld + col] = src[slab * s_slab + row * s_row + col];
  }
}

// A [slabs, rows, cols] operand as the kernel reads it.
struct Operand3d {
  const void* data;
  int64_t slabs, rows, cols;
  int64_t ld, slab_stride;  // elements
};

bool tma_readable(const Operand3d& o, int64_t elem) {
  const auto aligned = [&](int64_t elems) { return (elems * elem) % 16 == 0; };
  // (A stride of 0, an expanded view, is packed too: a tensor map wants real strides.)
  return reinterpret_cast<uintptr_t>(o.data) % 16 == 0 && (o.rows <= 1 || (o.ld > 0 && aligned(o.ld))) &&
         (o.slabs <= 1 || (o.slab_stride > 0 && aligned(o.slab_stride))) && o.ld * elem < (int64_t(1) << 40) &&
         o.slab_stride * elem < (int64_t(1) << 40);
}

// The operand itself where TMA can read it, else a packed copy (rows padded to 16 bytes) in
// `buffer`, which lives until the kernel is done (stream order). elem: 2 or 1 bytes.
Operand3d readable(const Operand3d& o, int64_t elem, int device, cudaStream_t stream,
                   std::optional<StreamBuffer>& buffer, const char* op, const char* what) {
  Operand3d out = o;
  const int64_t ld = (o.cols * elem + 15) / 16 * 16 / elem;
  // A single row or slab never steps to the next: give TMA strides it accepts.
  if (out.rows <= 1) out.ld = ld;
  if (out.slabs <= 1) out.slab_stride = out.rows * out.ld;
  if (tma_readable(out, elem)) return out;
  buffer.emplace(size_t(o.slabs * o.rows * ld * elem), device, stream, op, what);
  const int64_t total = o.slabs * o.rows * o.cols;
  const int blocks = int(std::min<int64_t>((total + 255) / 256, 4096));
  if (elem == 2)
    pack_rows_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint16_t*>(o.data), o.slab_stride, o.ld,
                                                 buffer->get<uint16_t>(), ld, o.slabs, o.rows, o.cols);
  else
    pack_rows_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint8_t*>(o.data), o.slab_stride, o.ld,
                                                 buffer->get<uint8_t>(), ld, o.slabs, o.rows, o.cols);
  check_launch(op);
  out.data = buffer->get<void>();
  out.ld = ld;
  out.slab_stride = o.rows * ld;
  return out;
}

// The stride of dim `d`, or what a contiguous tensor would have where the dim has one
// element (its stride then says nothing).
int64_t stride_or_packed(const TensorRef& t, int d, int64_t packed) {
  return t.shape[d] <= 1 ? packed : t.strides[d];
}

std::string strides_of(const TensorRef& t) {
  std::string s = "(";
  for (int d = 0; d < t.ndim; ++d) s += (d ? ", " : "") + std::to_string(t.strides[d]);
  return s + ")";
}

// What both ops take, seen alike: fp8 adds the scales (null for grouped_gemm).
struct Call {
  const char* op;
  const TensorRef& a;
  const TensorRef& b;
  const std::optional<TensorRef>& group_offsets;
  const std::optional<TensorRef>& group_counts;
  const TensorRef& c;
  int config;
  const TensorRef* a_scale;
  const TensorRef* b_scale;
  bool fp8() const { return a_scale != nullptr; }
};

struct Validated {
  bool masked;
  int64_t groups, rows, n, k;  // rows: T (contiguous) or M_max (masked)
  const TensorRef* counts_or_offsets;
  bool b_k_major;  // fp8: b [G, K, N] is the view of a [G, N, K] storage (stride(1) == 1)
};

// A scale tensor of exactly this shape (its strides free), float32, on a's device.
void check_scale(const Call& call, const TensorRef& s, const char* arg, std::initializer_list<int64_t> shape,
                 const std::string& what) {
  check_same_device(call.a, "a", s, arg, call.op);
  check_dtype(s, DType::kFloat32, call.op, arg);
  bool same = s.ndim == int(shape.size());
  for (int d = 0; same && d < s.ndim; ++d) same = s.shape[d] == shape.begin()[d];
  GKS_CHECK(same, kInvalidArgument) << call.op << ": argument '" << arg << "' must have shape " << what
                                    << ", got " << s.shape_string();
}

Validated validate(const Call& call) {
  const char* kOp = call.op;
  const bool has_offsets = call.group_offsets.has_value(), has_counts = call.group_counts.has_value();
  GKS_CHECK(has_offsets != has_counts, kInvalidArgument)
      << kOp << ": exactly one of the arguments 'group_offsets' (the contiguous layout) and 'group_counts' "
      << "(the masked layout) must be given, got " << (has_offsets ? "both" : "neither");
  Validated v;
  v.masked = has_counts;
  v.b_k_major = false;
  const char* groups_name = v.masked ? "group_counts" : "group_offsets";
  const TensorRef& groups = v.masked ? *call.group_counts : *call.group_offsets;
  v.counts_or_offsets = &groups;
  const TensorRef& a = call.a;
  const TensorRef& b = call.b;
  check_cuda(a, kOp, "a");
  if (call.fp8())
    check_dtype(a, DType::kFloat8E4M3, kOp, "a");
  else
    GKS_CHECK(a.dtype == DType::kFloat16 || a.dtype == DType::kBFloat16, kUnsupportedDtype)
        << kOp << ": argument 'a' must be float16 or bfloat16, got " << dtype_name(a.dtype);
  const int a_rank = v.masked ? 3 : 2;
  GKS_CHECK(a.ndim == a_rank, kInvalidArgument)
      << kOp << ": argument 'a' must be " << a_rank << "-D "
      << (v.masked ? "[G, M_max, K] (the masked layout: group_counts given)"
                   : "[T, K] (the contiguous layout: group_offsets given)")
      << ", got " << a.ndim << " dims (shape " << a.shape_string() << ")";
  check_same_device(a, "a", b, "b", kOp);
  check_same_device(a, "a", groups, groups_name, kOp);
  GKS_CHECK(b.dtype == a.dtype, kUnsupportedDtype)
      << kOp << ": argument 'b' must have the dtype of 'a' (" << dtype_name(a.dtype) << "), got "
      << dtype_name(b.dtype);
  GKS_CHECK(b.ndim == 3, kInvalidArgument)
      << kOp << ": argument 'b' must be 3-D [G, K, N], got " << b.ndim << " dims (shape " << b.shape_string()
      << ")";
  v.k = a.size(-1);
  GKS_CHECK(b.shape[1] == v.k, kInvalidArgument)
      << kOp << ": argument 'b' must have shape [G, K, N] with K = " << v.k << " (the last dim of 'a', "
      << a.shape_string() << "), got " << b.shape_string();
  v.groups = b.shape[0];
  GKS_CHECK(!v.masked || a.shape[0] == v.groups, kInvalidArgument)
      << kOp << ": argument 'b' must have shape [G, K, N] with G = " << a.shape[0] << " (dim 0 of 'a', "
      << a.shape_string() << "), got " << b.shape_string();
  GKS_CHECK(groups.dtype == DType::kInt32, kUnsupportedDtype)
      << kOp << ": argument '" << groups_name << "' must be int32, got " << dtype_name(groups.dtype);
  const int64_t want = v.masked ? v.groups : v.groups + 1;
  GKS_CHECK(groups.ndim == 1 && groups.shape[0] == want, kInvalidArgument)
      << kOp << ": argument '" << groups_name << "' must have shape " << (v.masked ? "[G]" : "[G + 1]")
      << " = [" << want << "] (G = " << v.groups << ", dim 0 of 'b'), got " << groups.shape_string();
  v.n = b.shape[2];
  if (call.fp8()) {
    GKS_CHECK(v.k % 16 == 0, kInvalidArgument)
        << kOp << ": K (the last dim of argument 'a') must be a multiple of 16, got " << v.k;
    GKS_CHECK(a.size(-1) <= 1 || a.stride(-1) == 1, kInvalidArgument)
        << kOp << ": argument 'a' must be row-major with a contiguous last dim (stride(-1) == 1), got strides "
        << strides_of(a);
    v.b_k_major = v.k > 1 && v.n > 1 && b.strides[1] == 1 && b.strides[2] != 1;
    GKS_CHECK(v.n <= 1 || v.k <= 1 || b.strides[2] == 1 || b.strides[1] == 1, kInvalidArgument)
        << kOp << ": argument 'b' must be row-major (stride(2) == 1) or K-major (stride(1) == 1: the view "
        << "w.transpose(1, 2) of a [G, N, K] w), got strides " << strides_of(b);
  } else {
    for (const auto& [t, name] : {std::pair<const TensorRef*, const char*>{&a, "a"}, {&b, "b"}})
      GKS_CHECK(t->size(-1) <= 1 || t->stride(-1) == 1, kInvalidArgument)
          << kOp << ": argument '" << name << "' must be row-major with a contiguous last dim "
          << "(stride(-1) == 1), got strides " << strides_of(*t);
  }
  for (const TensorRef* t : {&a, &b})
    for (int d = 0; d < t->ndim; ++d)
      GKS_CHECK(t->shape[d] < (int64_t(1) << 31), kInvalidArgument)
          << kOp << ": every dim of 'a' and 'b' must be below 2^31, got " << a.shape_string() << " and "
          << b.shape_string();
  v.rows = v.masked ? a.shape[1] : a.shape[0];
  if (call.fp8()) {
    const int64_t kg = (v.k + 127) / 128, nb = (v.n + 127) / 128;
    const std::string dims = "[" + std::to_string(v.groups) + ", " + std::to_string(v.rows) + ", " +
                             std::to_string(kg) + "]";
    if (v.masked)
      check_scale(call, *call.a_scale, "a_scale", {v.groups, v.rows, kg}, "[G, M_max, ceil(K / 128)] = " + dims);
    else
      check_scale(call, *call.a_scale, "a_scale", {v.rows, kg},
                  "[T, ceil(K / 128)] = [" + std::to_string(v.rows) + ", " + std::to_string(kg) + "]");
    check_scale(call, *call.b_scale, "b_scale", {v.groups, kg, nb},
                "[G, ceil(K / 128), ceil(N / 128)] = [" + std::to_string(v.groups) + ", " + std::to_string(kg) +
                    ", " + std::to_string(nb) + "]");
  }
  // c: a's rows by N, a's dtype (fp8: bfloat16, float16 or float32), its last dim contiguous.
  const TensorRef& c = call.c;
  check_cuda(c, kOp, "c");
  check_same_device(a, "a", c, "c", kOp);
  if (call.fp8())
    GKS_CHECK(c.dtype == DType::kBFloat16 || c.dtype == DType::kFloat16 || c.dtype == DType::kFloat32,
              kUnsupportedDtype)
        << kOp << ": argument 'c' must be bfloat16, float16 or float32, got " << dtype_name(c.dtype);
  else
    check_dtype(c, a.dtype, kOp, "c");
  const bool c_shape = c.ndim == a.ndim && c.size(-1) == v.n && c.shape[0] == a.shape[0] &&
                       (!v.masked || c.shape[1] == a.shape[1]);
  GKS_CHECK(c_shape, kInvalidArgument)
      << kOp << ": argument 'c' must have shape " << (v.masked ? "[G, M_max, N]" : "[T, N]") << " (a "
      << a.shape_string() << ", b " << b.shape_string() << "), got " << c.shape_string();
  GKS_CHECK(c.size(-1) <= 1 || c.stride(-1) == 1, kInvalidArgument)
      << kOp << ": argument 'c' must have a contiguous last dim (stride(-1) == 1)";
  if (call.fp8())
    check_outputs({{&c, "c"}},
                  {{&a, "a"}, {&b, "b"}, {call.a_scale, "a_scale"}, {call.b_scale, "b_scale"}, {&groups, groups_name}},
                  kOp);
  else
    check_outputs({{&c, "c"}}, {{&a, "a"}, {&b, "b"}, {&groups, groups_name}}, kOp);
  GKS_CHECK(v.rows <= kMaxTmaDim && v.n <= kMaxTmaDim && v.k <= kMaxTmaDim, kInvalidArgument)
      << kOp << ": the rows, N and K must be at most " << kMaxTmaDim;
  check_gemm_config(call.config, call.fp8() ? kNumHopperGroupedFp8Configs : kNumHopperGroupedConfigs, kOp);
  return v;
}

// c = 0 everywhere (no group, or K = 0): a 2-D memset a slab.
void zero_output(const TensorRef& c, bool masked, cudaStream_t stream, const char* op) {
  const int64_t elem = dtype_size(c.dtype);
  const int64_t slabs = masked ? c.shape[0] : 1;
  const int64_t rows = c.size(-2), cols = c.size(-1);
  const int64_t ld = stride_or_packed(c, c.ndim - 2, cols);
  const int64_t slab_stride = masked ? stride_or_packed(c, 0, rows * ld) : 0;
  for (int64_t s = 0; s < slabs; ++s) {
    const cudaError_t err = cudaMemset2DAsync(static_cast<char*>(c.data) + s * slab_stride * elem,
                                              size_t(ld * elem), 0, size_t(cols * elem), size_t(rows), stream);
    GKS_CHECK(err == cudaSuccess, kCudaError) << op << ": clearing c failed: " << cudaGetErrorString(err);
  }
}

// The stride of dim d of a scale tensor (any stride where the dim has one element).
int64_t scale_stride_of(const TensorRef& s, int d) { return s.shape[d] <= 1 ? 0 : s.strides[d]; }

void run(const Call& call, cudaStream_t stream) {
  const char* kOp = call.op;
  const Validated v = validate(call);
  if (validating_only()) return;
  const int device = call.a.device.index;
  const char* triton = call.fp8() ? "gks.triton.grouped_gemm_fp8" : "gks.triton.grouped_gemm";
  // Every call, empty ones too: no device but Hopper takes it.
  GKS_CHECK(hopper_gemm_compiled(), kInvalidArgument)
      << kOp << ": this build of gks has no sm_90a kernels (GKS_CUDA_ARCHS lacks 90a); the CUDA grouped GEMM "
      << "runs on the Hopper kernel only (" << triton << " runs elsewhere)";
  GKS_CHECK(device_is_sm90(device), kInvalidArgument)
      << kOp << ": argument 'a' is on device " << device << " (sm_" << device_limits(device).compute_capability
      << "): the CUDA grouped GEMM needs a compute-capability 9.0 GPU (" << triton << " runs elsewhere)";
  const TensorRef& c = call.c;
  if (c.numel() == 0) return;
  const DeviceGuard guard(device);
  if (v.groups == 0 || v.k == 0) {  // every row in no group, or every product an empty sum
    zero_output(c, v.masked, stream, kOp);
    return;
  }
#if defined(GKS_WITH_SM90A)
  const TensorRef& a = call.a;
  const TensorRef& b = call.b;
  const int64_t elem = dtype_size(a.dtype);
  const int64_t a_ld = stride_or_packed(a, a.ndim - 2, v.k);
  const Operand3d a_view{a.data, v.masked ? v.groups : 1, v.rows, v.k, a_ld,
                         v.masked ? stride_or_packed(a, 0, v.rows * a_ld) : v.rows * a_ld};
  std::optional<StreamBuffer> a_copy, b_copy;
  const Operand3d a_read = readable(a_view, elem, device, stream, a_copy, kOp, "a packed copy of a");
  Operand3d b_read;
  if (!call.fp8()) {
    const int64_t b_ld = stride_or_packed(b, 1, v.n);
    const Operand3d b_view{b.data, v.groups, v.k, v.n, b_ld, stride_or_packed(b, 0, v.k * b_ld)};
    b_read = readable(b_view, elem, device, stream, b_copy, kOp, "a packed copy of b");
  } else if (v.b_k_major) {  // [G, N, K] storage: read in place where TMA can
    const int64_t b_ld = stride_or_packed(b, 2, v.k);
    const Operand3d b_view{b.data, v.groups, v.n, v.k, b_ld, stride_or_packed(b, 0, v.n * b_ld)};
    b_read = readable(b_view, elem, device, stream, b_copy, kOp, "a packed copy of b");
  } else {  // row-major [G, K, N]: each b[g] transposed into a [G, N, K] temporary
    const int64_t ld = padded_ld(v.k);
    b_copy.emplace(size_t(v.groups * v.n * ld), device, stream, kOp, "a transposed copy of b");
    const int64_t ldb = stride_or_packed(b, 1, v.n), slab = stride_or_packed(b, 0, v.k * ldb);
    for (int64_t g = 0; g < v.groups; ++g)
      transpose_bytes(GemmMatrix{static_cast<int8_t*>(b.data) + g * slab, v.k, v.n, ldb},
                      b_copy->get<int8_t>() + g * v.n * ld, ld, stream, kOp);
    b_read = Operand3d{b_copy->get<void>(), v.groups, v.n, v.k, ld, v.n * ld};
  }

  HopperGroupedLaunch launch{};
  launch.a = a_read.data;
  launch.lda = a_read.ld;
  launch.a_slab_stride = a_read.slab_stride;
  launch.a_slabs = int(a_read.slabs);
  launch.b = b_read.data;
  launch.ldb = b_read.ld;
  launch.b_group_stride = b_read.slab_stride;
  launch.c = c.data;
  launch.ldc = stride_or_packed(c, c.ndim - 2, v.n);
  launch.c_group_stride = v.masked ? stride_or_packed(c, 0, v.rows * launch.ldc) : 0;
  const int64_t c_elem = dtype_size(c.dtype);
  launch.c_vec = reinterpret_cast<uintptr_t>(c.data) % 16 == 0 && (launch.ldc * c_elem) % 16 == 0 &&
                 (launch.c_group_stride * c_elem) % 16 == 0;
  const TensorRef& groups = *v.counts_or_offsets;
  launch.group_offsets = v.masked ? nullptr : static_cast<const int*>(groups.data);
  launch.group_counts = v.masked ? static_cast<const int*>(groups.data) : nullptr;
  launch.group_stride = groups.shape[0] <= 1 ? 1 : groups.strides[0];
  launch.groups = int(v.groups);
  launch.m = int(v.rows);
  launch.n = int(v.n);
  launch.k = int(v.k);
  launch.dtype = a.dtype;
  launch.c_dtype = c.dtype;
  if (call.fp8()) {
    const TensorRef& sa = *call.a_scale;
    const TensorRef& sb = *call.b_scale;
    launch.a_scale = static_cast<const float*>(sa.data);
    launch.a_scale_stride = scale_stride_of(sa, sa.ndim - 2);
    launch.a_scale_group_stride = scale_stride_of(sa, sa.ndim - 1);
    launch.a_scale_slab_stride = v.masked ? scale_stride_of(sa, 0) : 0;
    launch.b_scale = static_cast<const float*>(sb.data);
    launch.b_scale_slab_stride = scale_stride_of(sb, 0);
    launch.b_scale_group_stride = scale_stride_of(sb, 1);
    launch.b_scale_stride = scale_stride_of(sb, 2);
  }
  launch.device = device;
  launch.num_sms = device_sm_count(device);
  const int64_t rows_per_group = v.masked ? v.rows : std::max<int64_t>(1, v.rows / v.groups);
  launch.config_forced = call.config >= 0;
  launch.config = call.config >= 0 ? call.config
                  : call.fp8()     ? grouped_gemm_fp8_heuristic(rows_per_group, v.n, v.k, v.groups, launch.num_sms)
                                   : grouped_gemm_heuristic(rows_per_group, v.n, v.k, v.groups, launch.num_sms);
  launch_hopper_grouped_sm90a(launch, stream);
  check_launch(kOp);
#endif
}

}  // namespace
}  // namespace detail

void grouped_gemm(const GroupedGemmArgs& args, cudaStream_t stream) {
  detail::run({"gks.grouped_gemm", args.a, args.b, args.group_offsets, args.group_counts, args.c, args.config,
               nullptr, nullptr},
              stream);
}

void grouped_gemm_fp8(const GroupedGemmFp8Args& args, cudaStream_t stream) {
  detail::run({"gks.grouped_gemm_fp8", args.a, args.b, args.group_offsets, args.group_counts, args.c,
               args.config, &args.a_scale, &args.b_scale},
              stream);
}

}  // namespace gks
