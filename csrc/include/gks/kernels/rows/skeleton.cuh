// SPDX-License-Identifier: Apache-2.0
// The row-op skeleton's kernels: one template a launch shape (common.cuh), over a row
// functor that does the op's work. The host side (csrc/src/rows/) plans a shape from the
// row's length and launches the kernel the functor compiled for it.
//
// A row functor (norm.cuh, softmax.cuh, quantize.cuh) is a struct template over the
// element type and access width that gives:
//  - Params: the kernel's parameters (pointers, RowLayouts, rows, cols, the op's scalars);
//  - compiled<Shape>(): whether it has a kernel of that shape (the host dispatches only to
//    those; a shape an op does not need is not compiled);
//  - min_blocks<Shape>(): the launch bound's minimum blocks an SM (0: none), i.e. the
//    registers a thread may take;
//  - the bodies of the shapes it has: registers<Shape>(p), looped<kThreads>(p),
//    tiled<Shape>(p). A body finds its row (row_index, cluster_rank) and does the rest.
#pragma once

#include "gks/kernels/rows/common.cuh"

namespace gks::kernels::rows {

template <class Row, class S>
__global__ void __launch_bounds__(S::kThreads, Row::template min_blocks<S>())
    registers_kernel(const typename Row::Params p) {
  Row::template registers<S>(p);
}

template <class Row, class S>
__global__ void __launch_bounds__(S::kThreads, Row::template min_blocks<S>())
    looped_kernel(const typename Row::Params p) {
  Row::template looped<S>(p);
}

template <class Row, class S>
__global__ void __launch_bounds__(S::kThreads, Row::template min_blocks<S>())
    tiled_kernel(const typename Row::Params p) {
  Row::template tiled<S>(p);
}

}  // namespace gks::kernels::rows
