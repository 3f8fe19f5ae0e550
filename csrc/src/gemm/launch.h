// SPDX-License-Identifier: Apache-2.0
// Host-side helpers the GEMM .cu files share: config descriptions, the one-CTA-per-tile
// launch, and the K = 0 case.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "gks/error.h"
#include "gks/gemm.h"
#include "core/launch.h"

namespace gks::detail {

// A GEMM's compiled configs are a list of tile types (std::tuple<Tile...>), each naming
// itself (kName), in index order: the `config` argument indexes it, and the table the
// library reports (and the autotuner keys on) is made from it.
template <class Cfg>
GemmConfigInfo gemm_config_info() {
  return {Cfg::kName, Cfg::kBlockM, Cfg::kBlockN, Cfg::kBlockK, Cfg::kThreads, Cfg::kStages};
}

template <class Configs, size_t... kI>
std::vector<GemmConfigInfo> gemm_config_infos(std::index_sequence<kI...>) {
  return {gemm_config_info<std::tuple_element_t<kI, Configs>>()...};
}
template <class Configs>
std::vector<GemmConfigInfo> gemm_config_infos() {
  return gemm_config_infos<Configs>(std::make_index_sequence<std::tuple_size_v<Configs>>{});
}

// A table of Hopper kernel configs as the config list the library reports (384 threads:
// the producer and two consumer warpgroups).
template <size_t kCount>
std::vector<GemmConfigInfo> hopper_config_infos(const HopperGemmConfig (&table)[kCount]) {
  std::vector<GemmConfigInfo> list;
  for (const HopperGemmConfig& c : table) list.push_back({c.name, c.block_m, c.block_n, c.block_k, 384, c.stages});
  return list;
}

// Calls f(Cfg{}) with the tile type of config `index` of Configs (a valid index).
template <class Configs, class F, size_t... kI>
void with_gemm_config(int index, F&& f, std::index_sequence<kI...>) {
  ((index == int(kI) && (f(std::tuple_element_t<kI, Configs>{}), true)) || ...);
}
template <class Configs, class F>
void with_gemm_config(int index, F&& f) {
  with_gemm_config<Configs>(index, f, std::make_index_sequence<std::tuple_size_v<Configs>>{});
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
