// SPDX-License-Identifier: Apache-2.0
// Host-side helpers the GEMM .cu files share: config descriptions, the one-CTA-per-tile
// launch, and the K = 0 case.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "gks/error.h"
#include "gks/gemm.h"
#include "core/launch.h"

namespace gks::detail {

// A compiled config's description, from its tile type (kBlockM/N/K, kThreads, kStages).
template <class Cfg>
GemmConfigInfo gemm_config_info(const char* name) {
  return {name, Cfg::kBlockM, Cfg::kBlockN, Cfg::kBlockK, Cfg::kThreads, Cfg::kStages};
}

// Launches kKernel, tile config Cfg, one CTA per Cfg::kBlockM x kBlockN output tile; sets
// the tile counts in p.s (m, n set) first.
template <class Cfg, auto kKernel, class Params>
void launch_gemm_tiles(Params p, int device, cudaStream_t stream) {
  p.s.tiles_m = int((p.s.m + Cfg::kBlockM - 1) / Cfg::kBlockM);
  p.s.tiles_n = int((p.s.n + Cfg::kBlockN - 1) / Cfg::kBlockN);
  prepare_smem_kernel<kKernel>(Cfg::kSmemBytes, device);
  const auto blocks = static_cast<unsigned>(int64_t(p.s.tiles_m) * p.s.tiles_n);
  kKernel<<<blocks, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
}

// c = 0 for K == 0 (an empty sum); the zero bit pattern is 0.0 in every float dtype.
inline void zero_gemm_output(const GemmMatrix& c, int64_t elem_bytes, cudaStream_t stream,
                             const char* op) {
  const cudaError_t err = cudaMemset2DAsync(c.data, size_t(c.ld * elem_bytes), 0,
                                            size_t(c.cols * elem_bytes), size_t(c.rows), stream);
  GKS_CHECK(err == cudaSuccess, kCudaError)
      << op << ": clearing the output for K = 0 failed: " << cudaGetErrorString(err);
}

// c's dtype as the GEMM kernels' parameter c_kind: 0 float32, 1 float16, 2 bfloat16.
inline int gemm_c_kind(DType c) { return c == DType::kFloat32 ? 0 : c == DType::kFloat16 ? 1 : 2; }

}  // namespace gks::detail
