// SPDX-License-Identifier: Apache-2.0
// TMA tensor maps (cuTensorMapEncodeTiled), reached through the runtime's driver entry
// point so that the library does not link libcuda itself. Host code; the kernels take the
// maps as __grid_constant__ parameters.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "gks/tensor.h"

namespace gks::detail {

// A tiled tensor map over `rank` dims (innermost first) of 8- or 16-bit elements: sizes
// `dims`, byte strides of dims 1.. in `strides`, boxes of `box` elements, the 128-byte
// swizzle (a box's inner extent is 128 bytes) or with swizzle_bytes = 64 the 64-byte one
// (an inner extent of 64 bytes), zero fill outside the tensor. Returns the driver's result
// (CUDA_SUCCESS or why it refused the layout).
CUresult encode_tensor_map(CUtensorMap* map, DType dtype, int rank, const void* data,
                           const uint64_t* dims, const uint64_t* strides, const uint32_t* box,
                           int swizzle_bytes = 128);

}  // namespace gks::detail
