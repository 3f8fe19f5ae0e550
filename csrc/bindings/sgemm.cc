// SPDX-License-Identifier: Apache-2.0
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/string.h>

#include <algorithm>
#include <climits>

#include "common.h"

namespace {

// c = a @ b (fp32 FFMA). config: an index into sgemm_configs(), or -1 for the heuristic.
void sgemm(tvm::ffi::TensorView a, tvm::ffi::TensorView b, tvm::ffi::TensorView c,
           int64_t config) {
  using namespace gks::ffi;
  translate_errors([&] {
    gks::SgemmArgs args{to_ref(a), to_ref(b), to_ref(c)};
    args.config = static_cast<int>(std::clamp<int64_t>(config, INT_MIN, INT_MAX));
    gks::sgemm(args, stream_for(args.a));
  });
}

// The compiled tile configs' names, in index order.
tvm::ffi::Array<tvm::ffi::String> sgemm_configs() {
  tvm::ffi::Array<tvm::ffi::String> names;
  for (const auto& c : gks::detail::sgemm_configs()) names.push_back(tvm::ffi::String(c.name));
  return names;
}

// The config the heuristic picks for an M x N x K problem on a GPU with num_sms SMs.
int64_t sgemm_heuristic(int64_t m, int64_t n, int64_t k, int64_t num_sms) {
  return gks::detail::sgemm_heuristic(m, n, k, static_cast<int>(num_sms));
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(sgemm, sgemm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(sgemm_configs, sgemm_configs);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(sgemm_heuristic, sgemm_heuristic);
