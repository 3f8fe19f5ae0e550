// SPDX-License-Identifier: Apache-2.0
// The fused epilogue of gks::gemm and gks::gemm_fp8 on the host: its checks (the messages
// every backend gives: gks.specs.gemm.check_epilogue), the kernels' view of it, and the
// finishing kernel's launch for the paths that compute the product elsewhere.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <utility>

#include "gks/gemm.h"
#include "gks/kernels/gemm/epilogue_terms.cuh"
#include "core/launch.h"
#include "gemm/launch.h"

namespace gks::detail {
namespace {

// A [len] tensor (or [len, 1] / [1, len] where `as_2d` says which dim is len, 0 or 1): its
// stride along len. Errors as check_epilogue's.
int64_t epilogue_vector(const TensorRef& t, int64_t len, int as_2d, const char* want, const char* op,
                        const char* arg) {
  const bool flat = t.ndim == 1 && t.shape[0] == len;
  const bool shaped = as_2d >= 0 && t.ndim == 2 && t.shape[as_2d] == len && t.shape[1 - as_2d] == 1;
  GKS_CHECK(flat || shaped, kInvalidArgument)
      << op << ": argument '" << arg << "' must have " << want << " = " << len << ", got " << t.shape_string();
  return len <= 1 ? 0 : t.strides[flat ? 0 : as_2d];
}

}  // namespace

int64_t check_gemm_epilogue(const GemmEpilogue& epi, int64_t m, int64_t n, const TensorRef& a, bool scales,
                            const char* op) {
  if (epi.bias) {
    const TensorRef& t = *epi.bias;
    check_same_device(a, "a", t, "bias", op);
    check_dtype_float(t, op, "bias");
    epilogue_vector(t, n, -1, "shape [N] with N", op, "bias");
  }
  for (const auto& [given, arg] : {std::pair{&epi.row_scale, "row_scale"}, std::pair{&epi.col_scale, "col_scale"}}) {
    if (!given->has_value()) continue;
    GKS_CHECK(scales, kInvalidArgument)
        << op << ": argument '" << arg << "' is gks.gemm's; this GEMM's per-row and per-column scales "
        << "are its scaling 'row'";
    const TensorRef& t = **given;
    check_same_device(a, "a", t, arg, op);
    check_dtype(t, DType::kFloat32, op, arg);
    const bool row = given == &epi.row_scale;
    epilogue_vector(t, row ? m : n, row ? 0 : 1,
                    row ? "shape [M] or [M, 1] with M" : "shape [N] or [1, N] with N", op, arg);
  }
  if (!epi.gated) return n;
  const int act = int(*epi.gated);
  GKS_CHECK(act >= 0 && act <= int(Activation::kGeluTanh), kInvalidArgument)
      << op << ": argument 'gated' must be None, 'silu', 'gelu' or 'gelu_tanh', got Activation(" << act << ")";
  GKS_CHECK(n % 2 == 0, kInvalidArgument)
      << op << ": argument 'gated' needs an even N (b's columns interleave gate and up), got N = " << n;
  return n / 2;
}

kernels::gemm::EpilogueTerms epilogue_terms(const GemmEpilogue& epi) {
  kernels::gemm::EpilogueTerms e{};
  auto stride = [](const TensorRef& t) {  // along its one dim of more than one element
    int64_t s = 0;
    for (int d = 0; d < t.ndim; ++d)
      if (t.shape[d] > 1) s = t.strides[d];
    return s;
  };
  if (epi.bias) {
    e.bias = epi.bias->data;
    e.bias_stride = stride(*epi.bias);
    e.bias_kind = gemm_c_kind(epi.bias->dtype);
  }
  if (epi.row_scale) {
    e.row_scale = static_cast<const float*>(epi.row_scale->data);
    e.row_scale_stride = stride(*epi.row_scale);
  }
  if (epi.col_scale) {
    e.col_scale = static_cast<const float*>(epi.col_scale->data);
    e.col_scale_stride = stride(*epi.col_scale);
  }
  e.gated = epi.gated ? 1 + int(*epi.gated) : 0;
  return e;
}

void apply_gemm_epilogue(const float* y, int64_t ldy, const GemmMatrix& c, DType c_dtype, int64_t m, int64_t n,
                         const kernels::gemm::EpilogueTerms& terms, cudaStream_t stream, const char* op) {
  namespace kg = kernels::gemm;
  const int64_t total = m * (terms.gated ? n / 2 : n);
  if (total == 0) return;
  const auto blocks = unsigned(std::min<int64_t>((total + 255) / 256, 65535));
  if (c_dtype == DType::kFloat32)
    kg::apply_epilogue_kernel<float><<<blocks, 256, 0, stream>>>(y, ldy, static_cast<float*>(c.data), c.ld,
                                                                int(m), int(n), terms);
  else if (c_dtype == DType::kFloat16)
    kg::apply_epilogue_kernel<__half><<<blocks, 256, 0, stream>>>(y, ldy, static_cast<__half*>(c.data), c.ld,
                                                                 int(m), int(n), terms);
  else
    kg::apply_epilogue_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(
        y, ldy, static_cast<__nv_bfloat16*>(c.data), c.ld, int(m), int(n), terms);
  check_launch(op);
}

}  // namespace gks::detail
