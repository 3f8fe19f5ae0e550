// SPDX-License-Identifier: Apache-2.0
// apache-tvm-ffi entry points over the C++ API, one file per kernel family beside this one.
// Tensors arrive as DLPack views (zero-copy from PyTorch, JAX or CuPy); kernels run on the
// caller's current stream, which tvm-ffi takes from the framework (torch's current stream)
// or from tvm_ffi.use_raw_stream.
#include <string>

#include "common.h"

namespace {
std::string version() { return gks::kVersion; }
}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(version, version);
