// SPDX-License-Identifier: Apache-2.0
// The row skeleton's host side: the kernel of a plan's shape, for a row functor
// (kernels/rows/skeleton.cuh), found among the shapes the functor compiles.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/launch.h"
#include "gks/device_limits.h"
#include "gks/error.h"
#include "gks/kernels/rows/skeleton.cuh"
#include "gks/kernels/vec.cuh"
#include "rows/plan.h"

namespace gks::detail {

// A type as a value (for visitors that pick a functor).
template <typename T>
struct Type {
  using type = T;
};

// Calls f(Type<T>{}, std::integral_constant<int, kVec>{}) with dtype's float type T and the
// plan's access width kVec (one element, or 16 bytes' worth): what a row functor is
// instantiated on. The caller names its functor, e.g.
//   with_row_elements(dtype, plan, [&](auto t, auto vec) {
//     launch_rows<RmsNormRow<typename decltype(t)::type, decltype(vec)::value>>(plan, p, stream, op);
//   });
// kWide, when not 0, is the wide access's width for every dtype (a functor whose 16-byte
// access is of its 1-byte output: the quantize rows).
template <int kWide = 0, class F>
void with_row_elements(DType dtype, const RowPlan& plan, F&& f) {
  GKS_DISPATCH_FLOAT(dtype, {
    if (plan.vec == 1)
      f(Type<scalar_t>{}, std::integral_constant<int, 1>{});
    else
      f(Type<scalar_t>{}, std::integral_constant<int, kWide != 0 ? kWide : kernels::kVec16<scalar_t>>{});
  });
}

// The blocks of the grid for `groups` row groups: a block each, or, for a persistent plan
// (max_blocks > 0), at most max_blocks (a host that sizes a workspace a block asks here).
inline int64_t row_grid(const RowPlan& plan, int64_t groups) {
  return plan.max_blocks > 0 ? std::min(groups, plan.max_blocks) : groups;
}

namespace rows_launch {

namespace kr = kernels::rows;

template <int... kValues>
using Ints = std::integer_sequence<int, kValues...>;

// Every shape a row functor may compile; RowFunctor::compiled<Shape>() picks its own. One
// row a block but for warps (4 rows a block); clusters of 2, 4 or 8 CTAs.
template <int kThreads, int... kVecs>
using WarpShapes = std::tuple<kr::Registers<kThreads, kVecs, 4, 1>...>;
template <int kThreads, int kVecs, int... kClusters>
using ClusterShapes = std::tuple<kr::Registers<kThreads, kVecs, 1, kClusters>...>;
template <int kThreads, int... kVecs>
using BlockShapes = decltype(std::tuple_cat(ClusterShapes<kThreads, kVecs, 1, 2, 4, 8>{}...));
using RegisterShapes = decltype(std::tuple_cat(
    WarpShapes<32, 1, 2, 4, 8>{}, BlockShapes<64, 1, 2, 4, 8>{}, BlockShapes<128, 1, 2, 4, 8>{},
    BlockShapes<256, 1, 2, 4, 8>{}, BlockShapes<512, 1, 2, 4, 8>{},
    BlockShapes<1024, 1, 2, 4, 8>{}));
using LoopedShapes = std::tuple<kr::Looped<128>, kr::Looped<256>, kr::Looped<512>, kr::Looped<1024>>;
template <int... kThreadsPerRow>
using TiledShapesOf = decltype(std::tuple_cat(
    std::tuple<kr::Tiled<kThreadsPerRow, 256 / kThreadsPerRow, 1>,
               kr::Tiled<kThreadsPerRow, 256 / kThreadsPerRow, 2>>{}...));
using TiledShapes = TiledShapesOf<32, 64, 128, 256>;

template <class S>
bool matches(const RowPlan& plan) {
  if constexpr (kr::kIsRegisters<S>) {
    return plan.kind == RowPlan::Kind::kRegisters && plan.threads_per_row == S::kThreadsPerRow &&
           plan.vecs_per_thread == S::kVecsPerThread && plan.rows_per_block == S::kRowsPerBlock &&
           plan.cluster == S::kCluster;
  } else if constexpr (kr::kIsLooped<S>) {
    return plan.kind == RowPlan::Kind::kLooped && plan.threads_per_row == S::kThreads;
  } else {
    return plan.kind == RowPlan::Kind::kTiled && plan.threads_per_row == S::kThreadsPerRow &&
           plan.rows_per_block == S::kRowsPerBlock && plan.vecs_per_thread == S::kVecsPerThread;
  }
}

// The grid: a block (or a cluster of blocks) a row or per rows_per_block rows (a persistent
// plan's fewer: row_grid); tiled kernels take p.blocks blocks (striding when there are more
// than a grid holds).
template <class Row, class S>
void launch(const RowPlan& plan, const typename Row::Params& p, cudaStream_t stream) {
  if constexpr (kr::kIsRegisters<S>) {
    const auto kernel = kr::registers_kernel<Row, S>;
    const dim3 block(S::kThreadsPerRow, S::kRowsPerBlock);
    const auto grid = static_cast<unsigned>(row_grid(plan, ceil_div(p.rows, S::kRowsPerBlock)) * S::kCluster);
    if constexpr (S::kCluster == 1) {
      kernel<<<grid, block, 0, stream>>>(p);
    } else {
      const LaunchConfig launch(dim3(grid), block, 0, stream, S::kCluster, /*early_start=*/false);
      cudaLaunchKernelEx(&launch.config, kernel, p);  // errors surface in check_launch
    }
  } else if constexpr (kr::kIsLooped<S>) {
    // A row kept in shared memory (softmax's looped-smem) is the launch's dynamic part.
    // Its limit is raised once a device, to what any plan asks (kLoopedRowSmemReserve below
    // the block's opt-in limit: room for the kernel's static scratch).
    constexpr auto kernel = kr::looped_kernel<Row, S>;
    const int smem = static_cast<int>(plan.row_smem_bytes);
    if (smem > 0) {
      int device = 0;
      cudaGetDevice(&device);
      prepare_smem_kernel<kernel>(int(device_limits(device).smem_per_block - kLoopedRowSmemReserve), device);
    }
    kernel<<<static_cast<unsigned>(row_grid(plan, p.rows)), S::kThreads, smem, stream>>>(p);
  } else {
    const auto grid = static_cast<unsigned>(std::min<int64_t>(p.blocks, INT32_MAX));
    kr::tiled_kernel<Row, S><<<grid, dim3(S::kThreadsPerRow, S::kRowsPerBlock), 0, stream>>>(p);
  }
}

template <class Row, class Shapes, size_t... kI>
bool launch_first(const RowPlan& plan, const typename Row::Params& p, cudaStream_t stream,
                  std::index_sequence<kI...>) {
  const auto try_one = [&](auto shape) {
    using S = decltype(shape);
    if constexpr (Row::template compiled<S>()) {
      if (matches<S>(plan)) {
        launch<Row, S>(plan, p, stream);
        return true;
      }
    }
    return false;
  };
  return (try_one(std::tuple_element_t<kI, Shapes>{}) || ...);
}

template <class Row, class Shapes, size_t... kI>
bool has_any(const RowPlan& plan, std::index_sequence<kI...>) {
  const auto one = [&](auto shape) {
    using S = decltype(shape);
    if constexpr (Row::template compiled<S>()) return matches<S>(plan);
    return false;
  };
  return (one(std::tuple_element_t<kI, Shapes>{}) || ...);
}

template <class Row, class Shapes>
constexpr auto indices = std::make_index_sequence<std::tuple_size_v<Shapes>>{};

}  // namespace rows_launch

// True when Row compiles a kernel of the plan's shape (host tests check every plan).
template <class Row>
bool row_kernel_exists(const RowPlan& plan) {
  using namespace rows_launch;
  return has_any<Row, RegisterShapes>(plan, indices<Row, RegisterShapes>) ||
         has_any<Row, LoopedShapes>(plan, indices<Row, LoopedShapes>) ||
         has_any<Row, TiledShapes>(plan, indices<Row, TiledShapes>);
}

// Launches Row's kernel of the plan's shape on `stream`; an internal error (a gks bug) if
// the functor has none.
template <class Row>
void launch_rows(const RowPlan& plan, const typename Row::Params& p, cudaStream_t stream,
                 const char* op) {
  using namespace rows_launch;
  const bool launched = launch_first<Row, RegisterShapes>(plan, p, stream, indices<Row, RegisterShapes>) ||
                        launch_first<Row, LoopedShapes>(plan, p, stream, indices<Row, LoopedShapes>) ||
                        launch_first<Row, TiledShapes>(plan, p, stream, indices<Row, TiledShapes>);
  GKS_CHECK(launched, kInvalidArgument)
      << op << ": internal error: no " << row_plan_kind_name(plan.kind) << " kernel of "
      << plan.threads_per_row << " threads x " << plan.vecs_per_thread << " accesses, "
      << plan.rows_per_block << " rows a block, clusters of " << plan.cluster << " (a gks bug)";
}

// For a functor Row<T, kVec> instantiated as with_row_elements<kWide> picks: whether the
// plan's kernel exists, and its launch.
template <template <typename, int> class Row, int kWide = 0>
bool row_plan_has_kernel(const RowPlan& plan, DType dtype) {
  bool found = false;
  with_row_elements<kWide>(dtype, plan, [&](auto t, auto vec) {
    found = row_kernel_exists<Row<typename decltype(t)::type, decltype(vec)::value>>(plan);
  });
  return found;
}

template <template <typename, int> class Row, int kWide = 0, class Params>
void launch_row_plan(const RowPlan& plan, DType dtype, const Params& p, cudaStream_t stream, const char* op) {
  with_row_elements<kWide>(dtype, plan, [&](auto t, auto vec) {
    launch_rows<Row<typename decltype(t)::type, decltype(vec)::value>>(plan, p, stream, op);
  });
}

}  // namespace gks::detail
