// SPDX-License-Identifier: Apache-2.0
#include "core/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstring>

#include "gks/error.h"

namespace gks::detail {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                             cudaEnableDefault, &status);
    GKS_CHECK(err == cudaSuccess && status == cudaDriverEntryPointSuccess && fn != nullptr,
              kCudaError)
        << "gks: the CUDA driver does not provide cuTensorMapEncodeTiled ("
        << cudaGetErrorString(err) << ")";
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

}  // namespace

CUresult encode_tensor_map(CUtensorMap* map, DType dtype, int rank, const void* data,
                           const uint64_t* dims, const uint64_t* strides, const uint32_t* box,
                           int swizzle_bytes) {
  std::memset(map, 0, sizeof(*map));
  cuuint64_t dims_[5], strides_[4];
  cuuint32_t box_[5], element_strides[5];
  for (int d = 0; d < rank; ++d) {
    dims_[d] = dims[d];
    box_[d] = box[d];
    element_strides[d] = 1;
    if (d + 1 < rank) strides_[d] = strides[d];
  }
  // 8-bit types travel as bytes (TMA's zero fill is the same 0 either way).
  const CUtensorMapDataType type = dtype_size(dtype) == 1      ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : dtype == DType::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                               : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return tensor_map_encoder()(map, type, cuuint32_t(rank), const_cast<void*>(data), dims_, strides_,
                              box_, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              swizzle_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

}  // namespace gks::detail
