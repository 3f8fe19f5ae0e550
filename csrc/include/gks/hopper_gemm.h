// SPDX-License-Identifier: Apache-2.0
// gks::gemm: c[M, N] = a[M, K] @ b[K, N] for fp16/bf16 with fp32 accumulation, c in a's
// dtype or float32.
//
// Which kernel runs:
//  * On a compute-capability 9.0 GPU, in a build with sm_90a (GKS_WITH_SM90A, defined by
//    CMake when 90a is in GKS_CUDA_ARCHS): the Hopper kernel (kernels/hopper_gemm.cuh) —
//    persistent, warp-specialized, TMA loads into an mbarrier-guarded shared ring, wgmma
//    with fp32 accumulators.
//  * Otherwise, or when TMA cannot describe a or b (see tma_can_describe: base pointer not
//    16-byte aligned, leading-dimension byte stride not a multiple of 16), the WMMA kernel
//    (gks::wmma_gemm), with its own heuristic config. Both give the same result up to the
//    order of the fp32 sums. c has no alignment requirement on either path.
// Operands are row-major (stride(1) == 1) with any leading dimension >= their columns;
// transposed views are rejected (see gemm_common.h). K == 0 gives c = 0.
// Outputs too small to fill the GPU split K (hopper_k_splits): the partial sums go to a
// temporary of splits x M x N x 4 bytes from gks's stream-ordered pool (workspace.h), so
// such a call needs that much free device memory. The stream-K configs instead take a
// temporary of one tile's fp32 sums per SM (e.g. 64 KiB for 128 x 128 tiles).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "gks/gemm_common.h"
#include "gks/tensor.h"

namespace gks {

struct GemmArgs {
  TensorRef a;  // [M, K] float16 or bfloat16, row-major, any leading dimension
  TensorRef b;  // [K, N] a's dtype, row-major, any leading dimension
  TensorRef c;  // [M, N] a's dtype or float32, row-major, any leading dimension
  // Index into detail::hopper_gemm_configs() (-1: heuristic). It forces the Hopper kernel's
  // tile config; when the WMMA fallback runs instead, it is ignored.
  int config = -1;
};

// Validates the arguments (throws gks::Error naming the bad one) and launches on `stream`.
void gemm(const GemmArgs& args, cudaStream_t stream);

namespace detail {

// One compiled config of the Hopper kernel. `name` is stable (autotune caches key on it).
struct HopperGemmConfig {
  const char* name;
  int block_m;
  int block_n;
  int block_k;
  int stages;     // depth of the shared-memory ring
  int cluster_m;  // CTAs per cluster, stacked in M, sharing (multicasting) B tiles
  // The two consumer warpgroups take whole tiles in turn (ping-pong: one's epilogue runs
  // under the other's MMAs) instead of half of every tile's rows each (cooperative).
  bool ping_pong = false;
  // Stream-K (single CTAs only): the tiles past the last whole waves but one are shared
  // out by k-block over the whole grid, so no SM idles in a part-empty last wave; the
  // pieces of a tile are added through a workspace in L2 (kernels/hopper_gemm.cuh).
  bool stream_k = false;
  // CTAs per cluster side by side in N, sharing (multicasting) A tiles; cluster_m is then 1.
  int cluster_n = 1;
};

// The compiled configs, in index order (GemmArgs::config); hopper_gemm_sm90a.cu checks
// its kernels against this table at compile time.
inline constexpr HopperGemmConfig kHopperGemmConfigs[] = {
    {"128x256x64_s4_c1", 128, 256, 64, 4, 1},
    {"128x256x64_s4_c2", 128, 256, 64, 4, 2},
    {"256x128x64_s4_c1", 256, 128, 64, 4, 1},
    {"256x128x64_s4_c2", 256, 128, 64, 4, 2},
    {"128x128x64_s6_c1", 128, 128, 64, 6, 1},
    {"128x128x64_s6_c2", 128, 128, 64, 6, 2},
    {"128x64x64_s8_c1", 128, 64, 64, 8, 1},
    {"128x128x64_s6_c1_pp", 128, 128, 64, 6, 1, true},
    {"128x128x64_s6_c2_pp", 128, 128, 64, 6, 2, true},
    {"64x256x64_s5_c1_pp", 64, 256, 64, 5, 1, true},
    // Small tiles for outputs of few rows (M = 128: 128 tiles of 64x64 fill the GPU with
    // no split-K, as cuBLAS's 64x64 kernel does there).
    {"64x128x64_s8_c1_pp", 64, 128, 64, 8, 1, true},
    {"64x64x64_s10_c1_pp", 64, 64, 64, 10, 1, true},
    // Stream-K: for outputs whose tiles leave the last wave part empty.
    {"128x256x64_s4_c1_sk", 128, 256, 64, 4, 1, false, true},
    // Clusters along N: outputs of few rows, whose every tile reads all of A.
    {"128x128x64_s6_cn2", 128, 128, 64, 6, 1, false, false, 2},
    {"128x128x64_s6_cn4", 128, 128, 64, 6, 1, false, false, 4},
    {"128x64x64_s8_cn2", 128, 64, 64, 8, 1, false, false, 2},
    {"128x256x64_s4_cn2", 128, 256, 64, 4, 1, false, false, 2},
};
inline constexpr int kNumHopperGemmConfigs =
    int(sizeof(kHopperGemmConfigs) / sizeof(kHopperGemmConfigs[0]));

// The same kernel's int8 configs (gks::int8_gemm's Hopper path): a k-block is 128 bytes
// either way, so the int8 tiles are 128 elements deep with the 16-bit tiles' footprint.
// They follow the mma.sync configs in int8_gemm_configs() (see int8_gemm.h).
inline constexpr HopperGemmConfig kHopperInt8Configs[] = {
    {"hopper_128x256x128_s4_c1", 128, 256, 128, 4, 1},
    {"hopper_128x256x128_s4_c2", 128, 256, 128, 4, 2},
    {"hopper_256x128x128_s4_c1", 256, 128, 128, 4, 1},
    {"hopper_128x128x128_s6_c1", 128, 128, 128, 6, 1},
    {"hopper_128x64x128_s8_c1", 128, 64, 128, 8, 1},
};
inline constexpr int kNumHopperInt8Configs =
    int(sizeof(kHopperInt8Configs) / sizeof(kHopperInt8Configs[0]));

// The same table as a vector. Available in every build.
const std::vector<HopperGemmConfig>& hopper_gemm_configs();

// The config the heuristic picks for an M x N x K problem on `num_sms` multiprocessors.
int hopper_gemm_heuristic(int64_t m, int64_t n, int64_t k, int num_sms);
// The same for the int8 configs: an index into kHopperInt8Configs.
int hopper_int8_gemm_heuristic(int64_t m, int64_t n, int64_t k, int num_sms);

// Split-K: how many units share each tile's k-blocks, for an output of `tile_units`
// scheduling units (tiles, or cluster pairs of them), K of `k_blocks` k-blocks, and `slots`
// units the GPU runs at once. 1 unless the tiles fill at most half the slots; then enough
// splits to fill them, each of at least 4 k-blocks, at most 8.
int hopper_k_splits(int64_t tile_units, int64_t k_blocks, int64_t slots);

// How a stream-K config shares out `tiles` output tiles of `k_blocks` k-blocks over at
// most `max_ctas` resident CTAs: whole waves but the last are data-parallel (dp_tiles, a
// multiple of ctas), the remaining sk_tiles (one to two waves' worth, or all of them) are
// cut by k-block into ctas equal ranges; ctas falls below max_ctas only where that would
// leave a CTA under 4 k-blocks.
struct StreamKPlan {
  int64_t dp_tiles, sk_tiles, ctas;
};
StreamKPlan hopper_stream_k_plan(int64_t tiles, int64_t k_blocks, int64_t max_ctas);

// True when a TMA tensor map can describe the row-major operand `m` with `elem_bytes`-byte
// elements: base pointer 16-byte aligned, leading dimension in bytes a multiple of 16 (not
// needed for a single row) and below 2^40.
bool tma_can_describe(const GemmMatrix& m, int64_t elem_bytes);

// TMA coordinates are int32: every tile origin (up to 2 tiles of 256 past the edge for a
// cluster of 2) must stay representable, so no dim of a Hopper operand may exceed this.
inline constexpr int64_t kMaxTmaDim = INT32_MAX - 1024;

enum class GemmPath { kHopper, kWmma };
const char* gemm_path_name(GemmPath path);  // "hopper" / "wmma"

// Which kernel gemm() runs, from the facts it depends on (pure, for host tests).
GemmPath choose_gemm_path(bool device_is_sm90, bool built_with_sm90a, const GemmMatrix& a,
                          const GemmMatrix& b);

// Validates like gemm() and reports which kernel it would run on this machine.
GemmPath gemm_path(const GemmArgs& args);

// True when this build contains the sm_90a kernels.
constexpr bool hopper_gemm_compiled() {
#if defined(GKS_WITH_SM90A)
  return true;
#else
  return false;
#endif
}

// What the sm_90a launcher needs; built by gemm() after validation.
// (gks::int8_gemm builds it too, with dtype kInt8.)
struct HopperGemmLaunch {
  const void* a;
  int64_t lda;
  // 16-bit: b [K, N] row-major. int8: b transposed, [N, K] row-major (K-major), with a
  // leading dimension TMA can describe.
  const void* b;
  int64_t ldb;
  void* c;
  int64_t ldc;
  int m, n, k;    // all >= 1
  DType dtype;    // of a and b: kFloat16, kBFloat16 or kInt8
  DType c_dtype;  // kFloat32, or a's dtype (16-bit); kFloat32, kFloat16 or kBFloat16 (int8)
  bool c_vec;     // c's base and leading dimension are 16-byte aligned
  // int8 only: c = float(a @ b) * a_scale[row * a_scale_stride] * b_scale[col * ...].
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  int64_t a_scale_stride = 0, b_scale_stride = 0;
  int config;  // a valid index into kHopperGemmConfigs (16-bit) or kHopperInt8Configs (int8)
  int device;
  int num_sms;
};

// Defined in hopper_gemm_sm90a.cu, which exists in the library only when GKS_WITH_SM90A is
// defined; call it only under that macro.
void launch_hopper_gemm_sm90a(const HopperGemmLaunch& launch, cudaStream_t stream);

}  // namespace detail
}  // namespace gks
