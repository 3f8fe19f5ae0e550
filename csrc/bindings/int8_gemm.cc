// SPDX-License-Identifier: Apache-2.0
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/string.h>

#include <algorithm>
#include <climits>

#include "common.h"

namespace {

// c = float(a_q @ b_q) * a_scale * b_scale (int8 Tensor Cores, int32 accumulate).
void int8_gemm(tvm::ffi::TensorView a_q, tvm::ffi::TensorView b_q, tvm::ffi::TensorView a_scale,
               tvm::ffi::TensorView b_scale, tvm::ffi::TensorView c, int64_t config) {
  using namespace gks::ffi;
  translate_errors([&] {
    gks::Int8GemmArgs args{to_ref(a_q), to_ref(b_q), to_ref(a_scale), to_ref(b_scale),
                           to_ref(c)};
    args.config = static_cast<int>(std::clamp<int64_t>(config, INT_MIN, INT_MAX));
    gks::int8_gemm(args, stream_for(args.a));
  });
}

// int8_gemm into a new [M, N] tensor of c_dtype from the caller's framework (see
// new_tensor). The torch op's eager path.
tvm::ffi::Tensor int8_gemm_alloc(tvm::ffi::TensorView a_q, tvm::ffi::TensorView b_q,
                                 tvm::ffi::TensorView a_scale, tvm::ffi::TensorView b_scale,
                                 DLDataType c_dtype, int64_t config) {
  tvm::ffi::Tensor c;
  gks::ffi::translate_errors([&] {
    gks::detail::check_matrix_rank(gks::ffi::to_ref(a_q), "gks.int8_gemm", "a_q");
    gks::detail::check_matrix_rank(gks::ffi::to_ref(b_q), "gks.int8_gemm", "b_q");
    c = gks::ffi::new_tensor({a_q.size(0), b_q.size(1)}, c_dtype, a_q.device(), "gks.int8_gemm");
  });
  int8_gemm(a_q, b_q, a_scale, b_scale, c, config);
  return c;
}

tvm::ffi::Array<tvm::ffi::String> int8_gemm_configs() {
  tvm::ffi::Array<tvm::ffi::String> names;
  for (const auto& c : gks::detail::int8_gemm_configs())
    names.push_back(tvm::ffi::String(c.name));
  return names;
}

int64_t int8_gemm_heuristic(int64_t m, int64_t n, int64_t k, int64_t num_sms) {
  return gks::detail::int8_gemm_heuristic(m, n, k, static_cast<int>(num_sms));
}

// The path int8_gemm(..., config) would take: "hopper", "hopper+transpose", "mma" or
// "mma+transpose" (after the same validation).
tvm::ffi::String int8_gemm_path(tvm::ffi::TensorView a_q, tvm::ffi::TensorView b_q,
                                tvm::ffi::TensorView a_scale, tvm::ffi::TensorView b_scale,
                                tvm::ffi::TensorView c, int64_t config) {
  using namespace gks::ffi;
  const char* name = "";
  translate_errors([&] {
    gks::Int8GemmArgs args{to_ref(a_q), to_ref(b_q), to_ref(a_scale), to_ref(b_scale),
                           to_ref(c)};
    args.config = static_cast<int>(std::clamp<int64_t>(config, INT_MIN, INT_MAX));
    name = gks::detail::int8_gemm_path_name(gks::detail::int8_gemm_path(args));
  });
  return tvm::ffi::String(name);
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(int8_gemm, int8_gemm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(int8_gemm_alloc, int8_gemm_alloc);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(int8_gemm_configs, int8_gemm_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(int8_gemm_heuristic, int8_gemm_heuristic);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(int8_gemm_path, int8_gemm_path);
