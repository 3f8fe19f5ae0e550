// SPDX-License-Identifier: Apache-2.0
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/string.h>

#include <algorithm>
#include <climits>

#include "common.h"

namespace {

// c = a @ b on Tensor Cores (fp16/bf16 in, fp32 accumulate, c fp32 or a's dtype).
void wmma_gemm(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView c,
               int64_t config) {
  using namespace gks::ffi;
  translate_errors([&] {
    gks::WmmaGemmArgs args{to_ref(a), to_ref(b), to_ref(c)};
    args.config = static_cast<int>(std::clamp<int64_t>(config, INT_MIN, INT_MAX));
    gks::wmma_gemm(args, stream_for(args.a));
  });
}

tvm::ffi::Array<tvm::ffi::String> wmma_gemm_configs() {
  tvm::ffi::Array<tvm::ffi::String> names;
  for (const auto& c : gks::detail::wmma_gemm_configs())
    names.push_back(tvm::ffi::String(c.name));
  return names;
}

int64_t wmma_gemm_heuristic(int64_t m, int64_t n, int64_t k, int64_t num_sms) {
  return gks::detail::wmma_gemm_heuristic(m, n, k, static_cast<int>(num_sms));
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(wmma_gemm, wmma_gemm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(wmma_gemm_configs, wmma_gemm_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(wmma_gemm_heuristic, wmma_gemm_heuristic);
