// SPDX-License-Identifier: Apache-2.0
// gks::gemm_fp8: validation, b's layout and the launch of the Hopper kernel's fp8 operands
// (per-tensor and per-row scales in the epilogue, as its row and column scales; block scales
// applied as each 128 of K is promoted into fp32 in the mainloop; the bias and gated unit of
// GemmEpilogue in the epilogue either way).
#include <optional>
#include <utility>
#include <vector>

#include "gemm/byte_gemm.h"
#include "gemm/launch.h"
#include "gks/device_limits.h"
#include "gks/gemm.h"
#include "core/launch.h"
#include "core/workspace.h"

namespace gks {
namespace detail {

const std::vector<GemmConfigInfo>& gemm_fp8_configs() {
  static const std::vector<GemmConfigInfo> configs = hopper_config_infos(kHopperFp8Configs);
  return configs;
}

namespace {

constexpr const char* kOp = "gks.gemm_fp8";
constexpr int64_t kGroup = 128;  // block scaling: a's 1 x 128 groups, b's 128 x 128 blocks

struct Fp8Validated : ByteOperands {
  int64_t sa_stride = 0, sb_stride = 0;              // rows of a_scale, columns of b_scale
  int64_t sa_group_stride = 0, sb_group_stride = 0;  // block: along K
};

bool is_fp8(DType d) { return d == DType::kFloat8E4M3 || d == DType::kFloat8E5M2; }

// A scale of one element (shape [] or [1], any rank of ones): its stride is 0 for every
// row and column.
void check_one_scale(const TensorRef& s, const char* arg) {
  check_cuda(s, kOp, arg);
  check_dtype(s, DType::kFloat32, kOp, arg);
  GKS_CHECK(s.numel() == 1 && s.ndim <= 1, kInvalidArgument)
      << kOp << ": argument '" << arg << "' must have one element (shape [] or [1]) for scaling "
      << "'tensor', got " << s.shape_string();
}

// A 2-D [rows, cols] fp32 scale on the GPU: (row stride, column stride).
std::pair<int64_t, int64_t> block_scale(const TensorRef& s, int64_t rows, int64_t cols, const char* arg,
                                        const char* want) {
  check_cuda(s, kOp, arg);
  check_dtype(s, DType::kFloat32, kOp, arg);
  GKS_CHECK(s.ndim == 2 && s.shape[0] == rows && s.shape[1] == cols, kInvalidArgument)
      << kOp << ": argument '" << arg << "' must have shape " << want << " = [" << rows << ", " << cols
      << "] for scaling 'block', got " << s.shape_string();
  return {s.strides[0], s.strides[1]};
}

Fp8Validated validate(const GemmFp8Args& args) {
  check_cuda(args.a, kOp, "a");
  GKS_CHECK(is_fp8(args.a.dtype), kUnsupportedDtype)
      << kOp << ": argument 'a' must be float8_e4m3fn or float8_e5m2, got " << dtype_name(args.a.dtype);
  check_same_device(args.a, "a", args.b, "b", kOp);
  check_same_dtype(args.a, "a", args.b, "b", kOp);
  check_scales_and_output(args.a, "a", args.a_scale, args.b_scale, args.c, kOp);
  Fp8Validated v;
  static_cast<ByteOperands&>(v) = byte_operands(args.a, "a", args.b, "b", args.c, args.config,
                                                int(gemm_fp8_configs().size()), kOp, &args.epilogue,
                                                /*epi_scales=*/false);
  const int64_t m = v.ops.m, n = v.ops.n, k = v.ops.k;
  GKS_CHECK(k % 16 == 0, kInvalidArgument)
      << kOp << ": K (the columns of argument 'a') must be a multiple of 16, got " << k;
  switch (args.scaling) {
    case Fp8Scaling::kTensor:
      check_one_scale(args.a_scale, "a_scale");
      check_one_scale(args.b_scale, "b_scale");
      break;
    case Fp8Scaling::kRow:
      v.sa_stride = scale_stride(args.a_scale, m, true, kOp, "a_scale");
      v.sb_stride = scale_stride(args.b_scale, n, false, kOp, "b_scale");
      break;
    case Fp8Scaling::kBlock: {
      const auto [sa_row, sa_group] =
          block_scale(args.a_scale, m, ceil_div(k, kGroup), "a_scale", "[M, ceil(K / 128)]");
      const auto [sb_group, sb_col] = block_scale(args.b_scale, ceil_div(k, kGroup), ceil_div(n, kGroup),
                                                  "b_scale", "[ceil(K / 128), ceil(N / 128)]");
      v.sa_stride = sa_row, v.sa_group_stride = sa_group;
      v.sb_stride = sb_col, v.sb_group_stride = sb_group;
      break;
    }
    default:
      GKS_CHECK(false, kInvalidArgument) << kOp << ": unknown scaling " << int(args.scaling);
  }
  check_outputs({{&args.c, "c"}},
                {{&args.a, "a"},
                 {&args.b, "b"},
                 {&args.a_scale, "a_scale"},
                 {&args.b_scale, "b_scale"},
                 {args.epilogue.bias ? &*args.epilogue.bias : nullptr, "bias"}},
                kOp);
  return v;
}

// The Hopper kernel is the only fp8 path: say plainly where it cannot run.
void check_hopper(const GemmFp8Args& args, const Fp8Validated& v) {
  const int device = args.a.device.index;
  GKS_CHECK(hopper_gemm_compiled(), kInvalidArgument)
      << kOp << ": this build of gks has no sm_90a kernels (GKS_CUDA_ARCHS lacks 90a); the CUDA fp8 "
      << "GEMM runs on Hopper's fp8 wgmma only";
  GKS_CHECK(device_is_sm90(device), kInvalidArgument)
      << kOp << ": argument 'a' is on device " << device << " (sm_" << device_limits(device).compute_capability
      << "): the CUDA fp8 GEMM needs a compute-capability 9.0 GPU (fp8 wgmma)";
  GKS_CHECK(v.ops.m <= kMaxTmaDim && v.ops.n <= kMaxTmaDim && v.ops.k <= kMaxTmaDim, kInvalidArgument)
      << kOp << ": M, N and K must be at most " << kMaxTmaDim << ", got " << v.ops.m << ", " << v.ops.n
      << ", " << v.ops.k;
}

// The config to run: the forced one, else the heuristic's pick.
int pick_config(const GemmFp8Args& args, int64_t m, int64_t n, int64_t k, int num_sms) {
  return args.config >= 0 ? args.config : hopper_fp8_gemm_heuristic(m, n, k, num_sms);
}

}  // namespace
}  // namespace detail

void gemm_fp8(const GemmFp8Args& args, cudaStream_t stream) {
  using namespace detail;
  const Fp8Validated v = validate(args);
  const int64_t m = v.ops.m, n = v.ops.n, k = v.ops.k;
  if (validating_only()) return;
  check_hopper(args, v);  // every call, empty ones too: no device but Hopper takes it
  if (m == 0 || n == 0) return;
  const int device = args.a.device.index;
  const DeviceGuard guard(device);
  // The epilogue's bias and gated unit; the scaling's scales join it below (K = 0 leaves
  // them out: the product is 0 whatever they are).
  kernels::gemm::EpilogueTerms terms = epilogue_terms(args.epilogue);
  if (k == 0) {
    if (has_epilogue(args.epilogue))
      apply_gemm_epilogue(nullptr, 0, v.ops.c, args.c.dtype, m, n, terms, stream, kOp);
    else
      zero_gemm_output(v.ops.c, dtype_size(args.c.dtype), stream, kOp);
    return;
  }
#if defined(GKS_WITH_SM90A)
  HopperGemmLaunch launch{};
  launch.a = v.ops.a.data;
  launch.lda = v.ops.a.ld;
  // An a that TMA cannot describe (base or leading dimension not 16-byte aligned) is read
  // from a copy with padded rows, which lives until the kernel is done (stream order).
  std::optional<StreamBuffer> a_copy;
  if (!tma_can_describe(v.ops.a, 1)) {
    const int64_t ld = padded_ld(k);
    a_copy.emplace(size_t(m) * size_t(ld), device, stream, kOp, "a copy of a");
    const cudaError_t err = cudaMemcpy2DAsync(a_copy->get<void>(), size_t(ld), v.ops.a.data, size_t(v.ops.a.ld),
                                              size_t(k), size_t(m), cudaMemcpyDeviceToDevice, stream);
    GKS_CHECK(err == cudaSuccess, kCudaError) << kOp << ": copying a failed: " << cudaGetErrorString(err);
    launch.a = a_copy->get<void>();
    launch.lda = ld;
  }
  launch.c = v.ops.c.data;
  launch.ldc = v.ops.c.ld;
  launch.m = int(m);
  launch.n = int(n);
  launch.k = int(k);
  launch.dtype = args.a.dtype;
  launch.c_dtype = args.c.dtype;
  launch.c_vec = gemm_rows_aligned16(v.ops.c, dtype_size(args.c.dtype));
  launch.block_scaled = args.scaling == Fp8Scaling::kBlock;
  if (launch.block_scaled) {  // the mainloop's, as it promotes each k-block
    launch.a_scale = static_cast<const float*>(args.a_scale.data);
    launch.b_scale = static_cast<const float*>(args.b_scale.data);
    launch.a_scale_stride = v.sa_stride;
    launch.b_scale_stride = v.sb_stride;
    launch.a_scale_group_stride = v.sa_group_stride;
    launch.b_scale_group_stride = v.sb_group_stride;
  } else {  // the epilogue's row and column scales (stride 0 for one scale)
    terms.row_scale = static_cast<const float*>(args.a_scale.data);
    terms.col_scale = static_cast<const float*>(args.b_scale.data);
    terms.row_scale_stride = v.sa_stride;
    terms.col_scale_stride = v.sb_stride;
  }
  launch.epi = terms;
  launch.device = device;
  launch.num_sms = device_sm_count(device);
  launch.config = pick_config(args, m, n, k, launch.num_sms);
  // wgmma reads B K-major: a K-major b that TMA can describe in place, else b^T in a
  // temporary that lives until the kernel is done (stream order).
  const GemmMatrix& bs = v.b_storage;
  std::optional<StreamBuffer> bt;
  if (v.b_k_major && tma_can_describe(bs, 1)) {
    launch.b = bs.data;
    launch.ldb = bs.ld;
  } else if (v.b_k_major) {  // [N, K] storage of a leading dimension TMA cannot take
    const int64_t ld = padded_ld(k);
    bt.emplace(size_t(n) * size_t(ld), device, stream, kOp, "a copy of b");
    const cudaError_t err = cudaMemcpy2DAsync(bt->get<void>(), size_t(ld), bs.data, size_t(bs.ld), size_t(k),
                                              size_t(n), cudaMemcpyDeviceToDevice, stream);
    GKS_CHECK(err == cudaSuccess, kCudaError) << kOp << ": copying b failed: " << cudaGetErrorString(err);
    launch.b = bt->get<void>();
    launch.ldb = ld;
  } else {  // row-major [K, N]
    const int64_t ld = padded_ld(k);
    bt.emplace(size_t(n) * size_t(ld), device, stream, kOp, "the transposed b");
    transpose_bytes(bs, bt->get<void>(), ld, stream, kOp);
    launch.b = bt->get<void>();
    launch.ldb = ld;
  }
  launch_hopper_gemm_sm90a(launch, stream);
  check_launch(kOp);
#endif
}

}  // namespace gks
