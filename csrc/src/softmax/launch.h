// SPDX-License-Identifier: Apache-2.0
// Launches a softmax-family row functor (SoftmaxRow, or the fused SoftmaxRmsNormRow of the
// norms family) for a plan: its one-element or 16-byte variant, and for registers plans of
// rows that are not a whole number of 16-byte accesses, the ragged instance.
#pragma once

#include <cuda_runtime_api.h>

#include "gks/kernels/rows/softmax.cuh"
#include "gks/kernels/vec.cuh"
#include "rows/launch.h"
#include "rows/plan.h"

namespace gks::detail {

// Calls f(Type<R>{}) with the functor type R of `Row` that runs the plan for rows of `cols`
// elements of T.
template <template <typename, int, bool> class Row, typename T, class F>
void with_softmax_row(const RowPlan& plan, int64_t cols, F&& f) {
  constexpr int kVec = kernels::kVec16<T>;
  if (plan.vec == 1) {
    f(Type<Row<T, 1, false>>{});
  } else if (plan.kind == RowPlan::Kind::kRegisters && cols % kVec != 0) {
    f(Type<Row<T, kVec, true>>{});
  } else {
    f(Type<Row<T, kVec, false>>{});
  }
}

template <template <typename, int, bool> class Row, typename T>
void launch_softmax_rows(const RowPlan& plan, const kernels::rows::SoftmaxParams& p,
                         cudaStream_t stream, const char* op) {
  with_softmax_row<Row, T>(plan, p.cols, [&](auto row) {
    launch_rows<typename decltype(row)::type>(plan, p, stream, op);
  });
}

template <template <typename, int, bool> class Row>
bool softmax_rows_have_kernel(const RowPlan& plan, DType dtype, int64_t cols) {
  bool found = false;
  GKS_DISPATCH_FLOAT(dtype, {
    with_softmax_row<Row, scalar_t>(plan, cols, [&](auto row) {
      found = row_kernel_exists<typename decltype(row)::type>(plan);
    });
  });
  return found;
}

}  // namespace gks::detail
