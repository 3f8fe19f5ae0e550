// SPDX-License-Identifier: Apache-2.0
// apache-tvm-ffi entry points over the C++ API, one file per kernel family beside this one.
// Tensors arrive as DLPack views (zero-copy from PyTorch, JAX or CuPy); kernels run on the
// caller's current stream, which tvm-ffi takes from the framework (torch's current stream)
// or from tvm_ffi.use_raw_stream.
#include <memory>
#include <string>
#include <vector>

#include "common.h"

namespace {
std::string version() { return gks::kVersion; }

// Enters (true) or leaves (false) gks::ValidateOnly on the calling thread: the fake kernels
// (gks/_torch_ops/_fake.py) run the real checks this way on tensors described by metadata.
thread_local std::vector<std::unique_ptr<gks::ValidateOnly>> validate_only_scopes;
void validate_only(bool on) {
  if (on)
    validate_only_scopes.push_back(std::make_unique<gks::ValidateOnly>());
  else if (!validate_only_scopes.empty())
    validate_only_scopes.pop_back();
}
}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(version, version);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(validate_only, validate_only);
