// SPDX-License-Identifier: Apache-2.0
// The Hopper GEMM's launch machinery, shared by the *_sm90a.cu sources that instantiate its
// operand types (gemm_sm90a.cu: fp16; gemm_bf16_sm90a.cu, gemm_int8_sm90a.cu, gemm_fp8_sm90a.cu), which are
// compiled apart so that the instantiations build in parallel: tensor maps, the persistent
// grid, split-K and stream-K workspaces, and the launch of one config of a table.
// Include only from *_sm90a.cu sources.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>

#include "gemm/launch.h"
#include "gks/activation.h"
#include "gks/gemm.h"
#include "gks/kernels/gemm/sm90/kernel.cuh"
#include "core/launch.h"
#include "core/tensor_map.h"
#include "core/workspace.h"

namespace gks::detail::hopper {

namespace hk = kernels::gemm::sm90;

// A 2-D tensor map over a row-major [rows, cols] matrix of 16-bit or 8-bit elements, read
// (or, for c, written) in boxes of [box_rows, 128 bytes] with the 128-byte swizzle the wgmma
// descriptors and the epilogue's stmatrix use. Elements outside the matrix read as zero and
// are not written.
// row_bytes = 64: boxes of [box_rows, 64 bytes] in the 64-byte swizzle (a gated unit's c).
inline CUtensorMap make_tensor_map(const void* data, DType dtype, int64_t rows, int64_t cols, int64_t ld,
                                   int box_rows, const char* op, const char* arg, int row_bytes = hk::kRowBytes) {
  CUtensorMap map;
  const int64_t elem = dtype_size(dtype);
  // A single row never steps to a next row; pad its stride to what TMA accepts.
  const int64_t stride_bytes = rows <= 1 ? (cols * elem + 15) / 16 * 16 : ld * elem;
  const uint64_t dims[2] = {uint64_t(cols), uint64_t(rows)};
  const uint64_t strides[1] = {uint64_t(stride_bytes)};
  const uint32_t box[2] = {uint32_t(row_bytes / elem), uint32_t(box_rows)};
  const CUresult result = encode_tensor_map(&map, dtype, 2, data, dims, strides, box, row_bytes);
  GKS_CHECK(result == CUDA_SUCCESS, kCudaError)
      << op << ": cuTensorMapEncodeTiled failed (error " << int(result) << ") for argument '"
      << arg << "' (shape [" << rows << ", " << cols << "], leading dimension " << ld << ")";
  return map;
}

// A 3-D tensor map over [depth, rows, cols] (cols contiguous; ld and depth_stride in
// elements), boxes of [1, box_rows, 128 bytes], as make_tensor_map's: the grouped GEMM's a
// ([slabs, rows, K]) and b ([G, K, N]), so that a box never reads into another slab.
inline CUtensorMap make_tensor_map_3d(const void* data, DType dtype, int64_t depth, int64_t rows,
                                      int64_t cols, int64_t ld, int64_t depth_stride, int box_rows,
                                      const char* op, const char* arg) {
  CUtensorMap map;
  const int64_t elem = dtype_size(dtype);
  const uint64_t dims[3] = {uint64_t(cols), uint64_t(rows), uint64_t(depth)};
  const uint64_t strides[2] = {uint64_t(ld * elem), uint64_t(depth_stride * elem)};
  const uint32_t box[3] = {uint32_t(hk::kRowBytes / elem), uint32_t(box_rows), 1};
  const CUresult result = encode_tensor_map(&map, dtype, 3, data, dims, strides, box);
  GKS_CHECK(result == CUDA_SUCCESS, kCudaError)
      << op << ": cuTensorMapEncodeTiled failed (error " << int(result) << ") for argument '"
      << arg << "' (shape [" << depth << ", " << rows << ", " << cols << "], strides [" << depth_stride
      << ", " << ld << ", 1])";
  return map;
}

// The kernel parameters every launch sets alike: c and the problem's shape.
template <class Op>
hk::Params shape_params(void* c, int64_t ldc, int m, int n, int k) {
  hk::Params p{};
  p.c = c;
  p.ldc = ldc;
  p.m = m;
  p.n = n;
  p.k = k;
  p.k_blocks = int(ceil_div(k, hk::kBlockK<Op>));
  return p;
}

// How many clusters of the kernel fit on the GPU at once (the persistent grid), per device.
template <auto kKernel, int kClusterSize>
inline int max_active_clusters(int device, int num_sms, int smem_bytes) {
  if constexpr (kClusterSize == 1) {
    return num_sms;
  } else {
    return once_per_device(device, [&](int) {
      const LaunchConfig launch(dim3(unsigned(num_sms / kClusterSize * kClusterSize)),
                                dim3(hk::kThreads), size_t(smem_bytes), nullptr, kClusterSize,
                                /*early_start=*/false);
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, kKernel, &launch.config) != cudaSuccess ||
          clusters <= 0) {
        (void)cudaGetLastError();  // not fatal: fall back to what the SM count allows
        clusters = std::max(1, num_sms / kClusterSize);
      }
      return clusters;
    });
  }
}

// Launches config kTable[kIndex] of the kernel on operands Op, with its epilogue's Scales.
template <class Op, class Scales, const HopperGemmConfig* kTable, int kIndex>
void launch_config(const HopperGemmLaunch& L, cudaStream_t stream) {
  constexpr HopperGemmConfig kConfig = kTable[kIndex];
  static_assert(kConfig.block_k == hk::kBlockK<Op>, "a k-block is 128 bytes of K");
  using Cfg = hk::Tile<kConfig.block_m, kConfig.block_n, kConfig.stages, kConfig.cluster_m,
                       kConfig.ping_pong, kConfig.cluster_n>;
  using Scheduler =
      std::conditional_t<kConfig.stream_k, hk::StreamKScheduler, hk::DataParallelScheduler>;
  constexpr auto kernel = hk::gemm_kernel<hk::Mainloop<Op, Cfg>, hk::Epilogue<Scales>, Scheduler>;
  prepare_smem_kernel<kernel>(Cfg::kSmemBytes, L.device);
  const char* op = L.dtype == DType::kInt8                        ? "gks.int8_gemm"
                   : dtype_size(L.dtype) == 1 ? "gks.gemm_fp8"
                                              : "gks.gemm";

  // A boxes are a CTA's part of an A tile: all of it, or 1/kClusterN in a cluster along N.
  const CUtensorMap map_a =
      make_tensor_map(L.a, L.dtype, L.m, L.k, L.lda, Cfg::kAPartRows, op, "a");
  // B boxes are 64 columns of c by one k-block: [64 k][64 n] of b, or [64 n][128 k] of the
  // transposed 8-bit b.
  const CUtensorMap map_b =
      Op::kBKMajor ? make_tensor_map(L.b, L.dtype, L.n, L.k, L.ldb, hk::kBBlockCols, op, "b")
                : make_tensor_map(L.b, L.dtype, L.k, L.n, L.ldb, hk::kBlockK<Op>, op, "b");

  hk::Params p = shape_params<Op>(L.c, L.ldc, L.m, L.n, L.k);
  const int64_t tiles_m = ceil_div(L.m, Cfg::kBlockM);
  const int64_t unit_rows = ceil_div(tiles_m, Cfg::kClusterM);
  const int64_t unit_cols = ceil_div(ceil_div(L.n, Cfg::kBlockN), Cfg::kClusterN);
  const int max_clusters =
      max_active_clusters<kernel, Cfg::kClusterSize>(L.device, L.num_sms, Cfg::kSmemBytes);
  int64_t units = 0;
  int64_t clusters = 0;
  if constexpr (Scheduler::kStreamK) {
    const StreamKPlan plan = hopper_stream_k_plan(unit_rows * unit_cols, p.k_blocks, max_clusters);
    units = plan.dp_tiles;
    p.sk_tiles = int(plan.sk_tiles);
    clusters = plan.ctas;
    p.kb_per_split = p.k_blocks;
    p.k_splits = 1;
  } else {
    // Split-K for outputs too small to fill the GPU; every split gets at least one k-block.
    p.kb_per_split = int(ceil_div(
        p.k_blocks,
        hopper_k_splits(unit_rows * unit_cols, p.k_blocks, L.num_sms / Cfg::kClusterSize)));
    p.k_splits = int(ceil_div(p.k_blocks, p.kb_per_split));
    units = unit_rows * unit_cols * p.k_splits;
    clusters = std::min<int64_t>(units, max_clusters);
  }
  // The unit loop adds the grid to a unit index: keep that sum inside int.
  GKS_CHECK(units <= int64_t(INT_MAX) - 4096, kInvalidArgument)
      << op << ": the output " << L.m << " x " << L.n << " has too many tiles (" << units << ")";
  p.unit_rows = int(unit_rows);
  p.unit_cols = int(unit_cols);
  p.num_units = int(units);
  p.c_kind = gemm_c_kind(L.c_dtype);
  p.c_vec = L.c_vec ? 1 : 0;
  // A 16-bit c is written by TMA stores where the config has room for their buffers and c's
  // rows are 16-byte aligned (what a tensor map needs); split-K writes partial sums instead.
  // Of the gated units, the two with a sigmoid form (silu, gelu_tanh) have a TMA store;
  // erf's gelu stages (store_atom_tma_gated says why).
  p.c_tma = Cfg::kTmaStore && L.c_vec && L.c_dtype != DType::kFloat32 && p.k_splits == 1 &&
            L.epi.gated != 1 + int(Activation::kGelu);
  CUtensorMap map_c;
  std::memset(&map_c, 0, sizeof(map_c));
  // Its boxes are the epilogue's 64 x 64 sub-tiles (128 bytes of a row, as for a and b), or
  // with a gated unit the 64 x 32 outputs of one (64 bytes of a row, the 64-byte swizzle).
  if (p.c_tma && L.epi.gated)
    map_c = make_tensor_map(L.c, L.c_dtype, L.m, L.n / 2, L.ldc, 64, op, "c", hk::kRowBytes / 2);
  else if (p.c_tma)
    map_c = make_tensor_map(L.c, L.c_dtype, L.m, L.n, L.ldc, 64, op, "c");
  p.epi = L.epi;
  p.a_scale = L.a_scale;
  p.b_scale = L.b_scale;
  p.a_scale_stride = L.a_scale_stride;
  p.b_scale_stride = L.b_scale_stride;
  p.block_scales = L.block_scaled ? 1 : 0;
  p.a_scale_group_stride = L.a_scale_group_stride;
  p.b_scale_group_stride = L.b_scale_group_stride;

  // Units in flight form a block of about group_m rows x (clusters / group_m) columns;
  // square it in elements so A rows and B columns are reused equally from L2.
  const double rows_in_flight = std::sqrt(double(clusters) * Cfg::kBlockN * Cfg::kClusterN /
                                          double(Cfg::kBlockM * Cfg::kClusterM));
  p.group_m = int(std::clamp<int64_t>(std::llround(rows_in_flight), 1, unit_rows));

  // The split-K workspace lives until the reduction (freed in stream order after it).
  std::optional<StreamBuffer> partial;
  if (p.k_splits > 1) {
    partial.emplace(size_t(p.k_splits) * size_t(L.m) * size_t(L.n) * 4, L.device, stream, op,
                    "the split-K partial sums");
    p.partial = partial->get<void>();
  }
  // Stream-K: a slot of raw sums for each consumer warpgroup of each CTA, then one flag a
  // slot, zeroed in stream order before the kernel.
  std::optional<StreamBuffer> sk_workspace;
  if (p.sk_tiles > 0) {
    const size_t slots = size_t(clusters) * hk::kConsumerWarpgroups;
    const size_t slot_bytes = size_t(Cfg::kWarpgroupM) * Cfg::kBlockN * 4;
    sk_workspace.emplace(slots * (slot_bytes + 4), L.device, stream, op,
                         "the stream-K partial sums");
    p.sk_partial = sk_workspace->get<void>();
    p.sk_flags = reinterpret_cast<int*>(sk_workspace->get<uint8_t>() + slots * slot_bytes);
    const cudaError_t err = cudaMemsetAsync(p.sk_flags, 0, slots * 4, stream);
    GKS_CHECK(err == cudaSuccess, kCudaError)
        << op << ": clearing the stream-K flags failed: " << cudaGetErrorString(err);
  }

  // Both kernels start early (programmatic dependent launch; they wait for the previous
  // kernel before touching memory): back to back, a call's launch and set-up then overlap
  // the tail of the kernel before it.
  const LaunchConfig launch(dim3(unsigned(clusters * Cfg::kClusterSize)), dim3(hk::kThreads),
                            size_t(Cfg::kSmemBytes), stream, Cfg::kClusterSize,
                            /*early_start=*/true);
  cudaError_t err = cudaLaunchKernelEx(&launch.config, kernel, map_a, map_b, map_c, p);
  GKS_CHECK(err == cudaSuccess, kCudaError)
      << op << ": launching the Hopper kernel (config " << kConfig.name
      << ") failed: " << cudaGetErrorString(err);
  if (p.k_splits > 1) {
    const int64_t blocks = std::min<int64_t>(ceil_div(int64_t(L.m) * L.n, 256), 8 * L.num_sms);
    const LaunchConfig reduce(dim3(unsigned(blocks)), dim3(256), 0, stream, 1, /*early_start=*/true);
    err = cudaLaunchKernelEx(&reduce.config, hk::split_k_reduce_kernel<Op, Scales>, p);
    GKS_CHECK(err == cudaSuccess, kCudaError)
        << op << ": launching the split-K reduction failed: " << cudaGetErrorString(err);
  }
}

// Launches config kTable[kIndex] of the grouped kernel (GroupedScheduler; kTable is
// kHopperGroupedConfigs, or kHopperGroupedFp8Configs for fp8): a persistent grid of one CTA
// an SM (the units' count lives on the device), the schedule's shared memory after the
// config's own, no split-K and no TMA stores (a tile's rows stop at its group's end, which
// a tensor map of c cannot clip).
template <const HopperGemmConfig* kTable, int kIndex>
using GroupedTile = hk::Tile<kTable[kIndex].block_m, kTable[kIndex].block_n, kTable[kIndex].stages, 1,
                             kTable[kIndex].ping_pong, 1>;

// The dynamic shared memory config kIndex of the grouped kernel takes for `groups` groups:
// the config's own and the schedule's. It fits where 1 KiB (the block scan's static shared
// memory, with room to spare) more stays inside the SM's opt-in limit.
template <const HopperGemmConfig* kTable, int kIndex>
constexpr int64_t grouped_smem_bytes(int groups) {
  using Cfg = GroupedTile<kTable, kIndex>;
  return Cfg::kSmemBytes + 4 * int64_t(hk::GroupedScheduler<Cfg::kBlockM>::smem_ints(groups));
}
constexpr bool grouped_smem_fits(int64_t bytes) { return bytes + 1024 <= hk::kSmemLimit; }

template <class Op, const HopperGemmConfig* kTable, int kIndex>
void launch_grouped_config(const HopperGroupedLaunch& L, cudaStream_t stream) {
  constexpr HopperGemmConfig kConfig = kTable[kIndex];
  static_assert(kConfig.block_k == hk::kBlockK<Op> && kConfig.cluster_m == 1 && kConfig.cluster_n == 1,
                "grouped configs are single CTAs with 128-byte k-blocks");
  using Cfg = GroupedTile<kTable, kIndex>;
  using Scheduler = hk::GroupedScheduler<Cfg::kBlockM>;
  constexpr auto kernel = hk::gemm_kernel<hk::Mainloop<Op, Cfg>, hk::Epilogue<hk::NoScales>, Scheduler>;
  const char* op = Op::kPromote ? "gks.grouped_gemm_fp8" : "gks.grouped_gemm";
  const int64_t smem = grouped_smem_bytes<kTable, kIndex>(L.groups);
  GKS_CHECK(grouped_smem_fits(smem), kInvalidArgument)
      << op << ": G = " << L.groups << " groups need " << smem << " bytes of shared memory with config "
      << kConfig.name << ", past the " << hk::kSmemLimit << " an SM has; use fewer groups a call";
  // The attribute is set once a device: to the most any G may take.
  prepare_smem_kernel<kernel>(hk::kSmemLimit - 1024, L.device);

  const CUtensorMap map_a = make_tensor_map_3d(L.a, L.dtype, L.a_slabs, L.m, L.k, L.lda, L.a_slab_stride,
                                               Cfg::kBlockM, op, "a");
  // B boxes as launch_config's: [64 k][64 n] of a 16-bit b [G, K, N], or [64 n][128 k] of
  // an 8-bit one stored [G, N, K].
  const CUtensorMap map_b =
      Op::kBKMajor
          ? make_tensor_map_3d(L.b, L.dtype, L.groups, L.n, L.k, L.ldb, L.b_group_stride, hk::kBBlockCols, op, "b")
          : make_tensor_map_3d(L.b, L.dtype, L.groups, L.k, L.n, L.ldb, L.b_group_stride, hk::kBlockK<Op>, op,
                               "b");
  CUtensorMap map_c;
  std::memset(&map_c, 0, sizeof(map_c));

  hk::Params p = shape_params<Op>(L.c, L.ldc, L.m, L.n, L.k);
  p.unit_cols = int(ceil_div(L.n, Cfg::kBlockN));
  p.unit_rows = 0;  // per group, on the device
  p.group_m = 1;
  p.c_kind = gemm_c_kind(L.c_dtype);
  p.c_vec = L.c_vec ? 1 : 0;
  p.c_tma = 0;
  p.k_splits = 1;
  p.kb_per_split = p.k_blocks;
  p.group_offsets = L.group_offsets;
  p.group_counts = L.group_counts;
  p.group_stride = L.group_stride;
  p.groups = L.groups;
  p.c_group_stride = L.c_group_stride;
  p.block_scales = Op::kPromote ? 1 : 0;
  p.a_scale = L.a_scale;
  p.b_scale = L.b_scale;
  p.a_scale_stride = L.a_scale_stride;
  p.a_scale_group_stride = L.a_scale_group_stride;
  p.a_scale_slab_stride = L.a_scale_slab_stride;
  p.b_scale_stride = L.b_scale_stride;
  p.b_scale_group_stride = L.b_scale_group_stride;
  p.b_scale_slab_stride = L.b_scale_slab_stride;
  // A group's units (at most its rows' tiles by the column tiles) are counted in int; the
  // schedule's running totals are int64 (groups that overlap may add up past int).
  const int64_t group_units = ceil_div(L.m, Cfg::kBlockM) * p.unit_cols;
  GKS_CHECK(group_units <= int64_t(INT_MAX) - 4096, kInvalidArgument)
      << op << ": a group's output has too many tiles (up to " << group_units << ")";
  p.num_units = 0;  // counted on the device (the schedule's shared memory)

  const LaunchConfig launch(dim3(unsigned(L.num_sms)), dim3(hk::kThreads), size_t(smem), stream, 1,
                            /*early_start=*/true);
  const cudaError_t err = cudaLaunchKernelEx(&launch.config, kernel, map_a, map_b, map_c, p);
  GKS_CHECK(err == cudaSuccess, kCudaError)
      << op << ": launching the Hopper kernel (config " << kConfig.name
      << ") failed: " << cudaGetErrorString(err);
}

// Launches config L.config of the kCount configs in kTable: every config is its own
// kernel instantiation, picked at run time.
template <class Op, class Scales, const HopperGemmConfig* kTable, size_t... kIndex>
void launch_table(const HopperGemmLaunch& L, cudaStream_t stream, const char* op,
                  std::index_sequence<kIndex...>) {
  const bool launched =
      ((L.config == int(kIndex) &&
        (launch_config<Op, Scales, kTable, int(kIndex)>(L, stream), true)) ||
       ...);
  GKS_CHECK(launched, kInvalidArgument) << op << ": no Hopper config " << L.config;
}

}  // namespace gks::detail::hopper
