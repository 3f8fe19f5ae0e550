// SPDX-License-Identifier: Apache-2.0
#include "gks/int8_gemm.h"

#include <climits>

#include "gemm_launch.h"
#include "gks/kernels/int8_gemm.cuh"
#include "launch.h"

namespace gks {
namespace detail {
namespace {

// The compiled configs. Template arguments: warps (m, n), m16 tiles per warp, n8 tiles per
// warp (= bytes a lane reads per B row), block K in bytes, pipeline stages. Measured on an
// H200 (TOP/s at 4096^3 / 8192^3; torch._int_mm: 105 / 109): 128x128x64 s4 684 / 737,
// 128x128x128 s3 692 / 702, 128x256x128 s3 627 / 672 (128x256x64 and 256x128x64: 545-589);
// 64x64x128 (462 / 482) is for small and skinny outputs.
using Int8_128x128x64 = kernels::Int8Tile<2, 2, 4, 8, 64, 4>;
using Int8_128x128x128 = kernels::Int8Tile<2, 2, 4, 8, 128, 3>;
using Int8_128x256x128 = kernels::Int8Tile<2, 4, 4, 8, 128, 3>;
using Int8_64x64x128 = kernels::Int8Tile<2, 2, 2, 4, 128, 4>;

template <class Cfg>
void launch_config(kernels::Int8GemmParams p, bool aligned, int device, cudaStream_t stream) {
  if (aligned)
    launch_gemm_tiles<Cfg, kernels::int8_gemm_kernel<Cfg, true>>(p, device, stream);
  else
    launch_gemm_tiles<Cfg, kernels::int8_gemm_kernel<Cfg, false>>(p, device, stream);
}

// The scale's one non-trivial dim: [len, 1] (a) or [1, len] (b), or a 1-D [len].
int64_t scale_stride(const TensorRef& s, int64_t len, bool column, const char* op,
                     const char* arg) {
  check_cuda(s, op, arg);
  GKS_CHECK(s.dtype == DType::kFloat32, kUnsupportedDtype)
      << op << ": argument '" << arg << "' must be float32, got " << dtype_name(s.dtype);
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

}  // namespace

const std::vector<GemmConfigInfo>& int8_gemm_configs() {
  static const std::vector<GemmConfigInfo> configs = {
      gemm_config_info<Int8_128x128x64>("128x128x64_w64x64_s4"),
      gemm_config_info<Int8_128x128x128>("128x128x128_w64x64_s3"),
      gemm_config_info<Int8_128x256x128>("128x256x128_w64x64_s3"),
      gemm_config_info<Int8_64x64x128>("64x64x128_w32x32_s4"),
  };
  return configs;
}

int int8_gemm_heuristic(int64_t m, int64_t n, int64_t /*k*/, int num_sms) {
  // Relative speeds as measured (see above); blocks per SM from registers and shared memory.
  static const std::vector<GemmConfigTraits> traits = {{2, 1.0}, {2, 0.98}, {1, 0.9}, {4, 0.65}};
  return pick_gemm_config(int8_gemm_configs(), traits, m, n, num_sms);
}

}  // namespace detail

void int8_gemm(const Int8GemmArgs& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.int8_gemm";
  check_cuda(args.a, kOp, "a_q");
  GKS_CHECK(args.a.dtype == DType::kInt8, kUnsupportedDtype)
      << kOp << ": argument 'a_q' must be int8, got " << dtype_name(args.a.dtype);
  check_same_device(args.a, "a_q", args.b, "b_q", kOp);
  GKS_CHECK(args.b.dtype == DType::kInt8, kUnsupportedDtype)
      << kOp << ": argument 'b_q' must be int8, got " << dtype_name(args.b.dtype);
  check_same_device(args.a, "a_q", args.a_scale, "a_scale", kOp);
  check_same_device(args.a, "a_q", args.b_scale, "b_scale", kOp);
  check_same_device(args.a, "a_q", args.c, "c", kOp);
  GKS_CHECK(args.c.dtype == DType::kFloat16 || args.c.dtype == DType::kBFloat16 ||
                args.c.dtype == DType::kFloat32,
            kUnsupportedDtype)
      << kOp << ": argument 'c' must be float16, bfloat16 or float32, got "
      << dtype_name(args.c.dtype);
  const auto& configs = detail::int8_gemm_configs();
  const detail::GemmOperands ops = detail::gemm_operands(args.a, "a_q", args.b, "b_q", args.c,
                                                         args.config, int(configs.size()), kOp);
  const detail::GemmMatrix &a = ops.a, &b = ops.b, &c = ops.c;
  const int64_t m = ops.m, n = ops.n, k = ops.k;
  const int64_t sa_stride = detail::scale_stride(args.a_scale, a.rows, true, kOp, "a_scale");
  const int64_t sb_stride = detail::scale_stride(args.b_scale, b.cols, false, kOp, "b_scale");
  if (m == 0 || n == 0) return;

  const int device = args.a.device.index;
  const detail::DeviceGuard guard(device);
  const int64_t c_elem = dtype_size(args.c.dtype);
  if (k == 0) {
    detail::zero_gemm_output(c, c_elem, stream, kOp);
    return;
  }
  const int config = args.config >= 0
                         ? args.config
                         : detail::int8_gemm_heuristic(m, n, k, detail::device_sm_count(device));
  GKS_CHECK(detail::gemm_tile_count(configs[config], m, n) <= INT_MAX, kInvalidArgument)
      << kOp << ": the output " << m << " x " << n << " needs more than 2^31 - 1 tiles";

  kernels::Int8GemmParams p{};
  p.a = static_cast<const int8_t*>(a.data);
  p.b = static_cast<const int8_t*>(b.data);
  p.a_scale = static_cast<const float*>(args.a_scale.data);
  p.b_scale = static_cast<const float*>(args.b_scale.data);
  p.c = c.data;
  p.s.m = int(m);
  p.s.n = int(n);
  p.s.k = int(k);
  p.s.lda = a.ld;
  p.s.ldb = b.ld;
  p.s.ldc = c.ld;
  p.a_scale_stride = sa_stride;
  p.b_scale_stride = sb_stride;
  p.c_kind = args.c.dtype == DType::kFloat32 ? 0 : args.c.dtype == DType::kFloat16 ? 1 : 2;
  p.c_vec = detail::gemm_rows_aligned16(c, c_elem);
  const bool aligned = detail::gemm_rows_aligned16(a, 1) && detail::gemm_rows_aligned16(b, 1);
  switch (config) {
    case 0: detail::launch_config<detail::Int8_128x128x64>(p, aligned, device, stream); break;
    case 1: detail::launch_config<detail::Int8_128x128x128>(p, aligned, device, stream); break;
    case 2: detail::launch_config<detail::Int8_128x256x128>(p, aligned, device, stream); break;
    default: detail::launch_config<detail::Int8_64x64x128>(p, aligned, device, stream); break;
  }
  detail::check_launch(kOp);
}

}  // namespace gks
