// SPDX-License-Identifier: Apache-2.0
#include "gemm/byte_gemm.h"

#include <algorithm>

#include "core/launch.h"
#include "gks/kernels/gemm/transpose.cuh"

namespace gks::detail {

ByteOperands byte_operands(const TensorRef& a, const char* a_name, const TensorRef& b,
                           const char* b_name, const TensorRef& c, int config, int config_count,
                           const char* op, const GemmEpilogue* epi, bool epi_scales) {
  ByteOperands v;
  v.b_k_major = b.ndim == 2 && b.shape[0] > 1 && b.shape[1] > 1 && b.strides[0] == 1 &&
                b.strides[1] != 1;
  TensorRef b_shape = b;
  if (v.b_k_major) {
    b_shape.strides[0] = b.shape[1];
    b_shape.strides[1] = 1;
  }
  v.ops = gemm_operands(a, a_name, b_shape, b_name, c, config, config_count, op, epi, epi_scales);
  if (v.b_k_major) {
    GKS_CHECK(b.strides[1] >= b.shape[0], kInvalidArgument)
        << op << ": argument '" << b_name << "' is a K-major view (stride(0) == 1), so its stride(1) "
        << "must be at least its " << b.shape[0] << " rows (K), got " << b.strides[1];
    v.b_storage = GemmMatrix{b.data, b.shape[1], b.shape[0], b.strides[1]};
    v.ops.b.data = nullptr;  // not a row-major matrix: only b_storage may be read
  } else {
    v.b_storage = v.ops.b;
  }
  return v;
}

void check_scales_and_output(const TensorRef& a, const char* a_name, const TensorRef& a_scale,
                             const TensorRef& b_scale, const TensorRef& c, const char* op) {
  check_same_device(a, a_name, a_scale, "a_scale", op);
  check_same_device(a, a_name, b_scale, "b_scale", op);
  check_same_device(a, a_name, c, "c", op);
  GKS_CHECK(c.dtype == DType::kFloat16 || c.dtype == DType::kBFloat16 || c.dtype == DType::kFloat32,
            kUnsupportedDtype)
      << op << ": argument 'c' must be float16, bfloat16 or float32, got " << dtype_name(c.dtype);
}

int64_t scale_stride(const TensorRef& s, int64_t len, bool column, const char* op, const char* arg) {
  check_cuda(s, op, arg);
  check_dtype(s, DType::kFloat32, op, arg);
  const bool as_1d = s.ndim == 1 && s.shape[0] == len;
  const bool as_2d = s.ndim == 2 && (column ? (s.shape[0] == len && s.shape[1] == 1)
                                            : (s.shape[0] == 1 && s.shape[1] == len));
  GKS_CHECK(as_1d || as_2d, kInvalidArgument)
      << op << ": argument '" << arg << "' must have shape "
      << (column ? "[M, 1] or [M] with M = " : "[1, N] or [N] with N = ") << len << ", got "
      << s.shape_string();
  if (as_1d) return s.strides[0];
  return column ? s.strides[0] : s.strides[1];
}

void transpose_bytes(const GemmMatrix& src, void* dst, int64_t ld_dst, cudaStream_t stream,
                     const char* op) {
  kernels::gemm::TransposeBytesParams t{};
  t.src = static_cast<const int8_t*>(src.data);
  t.ld_src = src.ld;
  t.dst = static_cast<int8_t*>(dst);
  t.ld_dst = ld_dst;
  t.rows = int(src.rows);
  t.cols = int(src.cols);
  t.src_vec = gemm_rows_aligned16(src, 1);
  const dim3 grid(unsigned(ceil_div(src.cols, kernels::gemm::kTransposeTile)),
                  unsigned(std::min<int64_t>(ceil_div(src.rows, kernels::gemm::kTransposeTile), 65535)));
  kernels::gemm::transpose_bytes_kernel<<<grid, kernels::gemm::kTransposeThreads, 0, stream>>>(t);
  check_launch(op);
}

}  // namespace gks::detail
