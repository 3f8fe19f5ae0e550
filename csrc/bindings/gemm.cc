// SPDX-License-Identifier: Apache-2.0
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/string.h>

#include <algorithm>
#include <climits>

#include "common.h"

namespace {

gks::GemmArgs gemm_args(const tvm::ffi::TensorView& a, const tvm::ffi::TensorView& b,
                        const tvm::ffi::TensorView& c, int64_t config) {
  using gks::ffi::to_ref;
  gks::GemmArgs args{to_ref(a), to_ref(b), to_ref(c)};
  args.config = static_cast<int>(std::clamp<int64_t>(config, INT_MIN, INT_MAX));
  return args;
}

// c = a @ b (fp16/bf16 in, fp32 accumulate, c fp32 or a's dtype): the Hopper kernel on
// sm_90a, else the WMMA kernel.
void gemm(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView c,
          int64_t config) {
  gks::ffi::translate_errors([&] {
    const gks::GemmArgs args = gemm_args(a, b, c, config);
    gks::gemm(args, gks::ffi::stream_for(args.a));
  });
}

// gemm into a new [M, N] tensor of c_dtype (a's dtype or float32) from the caller's
// framework (see new_tensor). The torch op's eager path.
tvm::ffi::Tensor gemm_alloc(tvm::ffi::TensorView a, tvm::ffi::TensorView b, DLDataType c_dtype,
                            int64_t config) {
  tvm::ffi::Tensor c;
  gks::ffi::translate_errors([&] {
    gks::detail::check_matrix_rank(gks::ffi::to_ref(a), "gks.gemm", "a");
    gks::detail::check_matrix_rank(gks::ffi::to_ref(b), "gks.gemm", "b");
    c = gks::ffi::new_tensor({a.size(0), b.size(1)}, c_dtype, a.device(), "gks.gemm");
    const gks::GemmArgs args = gemm_args(a, b, c, config);
    gks::gemm(args, gks::ffi::stream_for(args.a));
  });
  return c;
}

// The names of the Hopper kernel's configs, in index order.
tvm::ffi::Array<tvm::ffi::String> gemm_configs() {
  tvm::ffi::Array<tvm::ffi::String> names;
  for (const auto& c : gks::detail::hopper_gemm_configs()) names.push_back(tvm::ffi::String(c.name));
  return names;
}

// "hopper" or "wmma": the kernel gemm(a, b, c) would run (after the same validation).
tvm::ffi::String gemm_path(tvm::ffi::TensorView a, tvm::ffi::TensorView b,
                           tvm::ffi::TensorView c) {
  const char* name = "";
  gks::ffi::translate_errors([&] {
    name = gks::detail::gemm_path_name(gks::detail::gemm_path(gemm_args(a, b, c, -1)));
  });
  return tvm::ffi::String(name);
}

int64_t gemm_heuristic(int64_t m, int64_t n, int64_t k, int64_t num_sms) {
  return gks::detail::hopper_gemm_heuristic(m, n, k, static_cast<int>(num_sms));
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm, gemm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm_alloc, gemm_alloc);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm_configs, gemm_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm_path, gemm_path);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(gemm_heuristic, gemm_heuristic);
