// SPDX-License-Identifier: Apache-2.0
#include "gks/softmax.h"

#include <algorithm>

#include "gks/kernels/softmax.cuh"
#include "launch.h"

namespace gks {
namespace detail {

// A thread keeps at most this many fp32 values of a row in registers: 32 values plus
// addressing fit the 64 registers a 1024-thread block allows each thread. (16 a thread
// measured slower: 3680 vs 4057 GB/s for fp16 32768x4096 on an H200.) Unaligned rows (one
// element an access) keep 8 accesses a thread, as RMSNorm does.
constexpr int kMaxValuesPerThread = 32;
constexpr int kMaxScalarAccessesPerThread = 8;
// The widest register-resident block. A 1024-thread block fills an SM, so its loads, its
// reductions and its stores do not overlap with another block's. fp32 rows still gain from
// being read once (H200, 8192x32768: 4152 GB/s vs 2844 looped); 16-bit rows, which move
// half the bytes for the same work, do better looped with several blocks an SM (3750 vs
// 3463 GB/s fp16; fused 2882 vs 2515), so for them blocks stop at 512 threads (16384 values).
constexpr int kMaxRegisterThreads32 = 1024;
constexpr int kMaxRegisterThreads16 = 512;
constexpr int kLoopedThreads = 512;

SoftmaxPlan plan_softmax(int64_t cols, DType dtype, bool aligned16, int config) {
  SoftmaxPlan plan;
  plan.vec = aligned16 ? int(16 / dtype_size(dtype)) : 1;
  const int max_vecs = plan.vec == 1 ? kMaxScalarAccessesPerThread : kMaxValuesPerThread / plan.vec;
  const int64_t accesses = ceil_div(std::max<int64_t>(cols, 1), plan.vec);
  const int max_threads = dtype_size(dtype) == 4 ? kMaxRegisterThreads32 : kMaxRegisterThreads16;
  if (config != 1 && accesses <= 32 * int64_t(max_vecs)) {
    // Short rows: a warp per row, four rows per block, no block barrier.
    plan.threads_per_row = 32;
    plan.rows_per_block = 4;
    int vecs = 1;
    while (32 * int64_t(vecs) < accesses) vecs *= 2;
    plan.vecs_per_thread = vecs;
  } else if (config != 1 && accesses <= int64_t(max_threads) * max_vecs) {
    // A block per row, as few threads as hold the row with max_vecs accesses each (more
    // loads in flight per thread, more blocks per SM).
    int threads = 64;
    while (int64_t(threads) * max_vecs < accesses) threads *= 2;
    plan.threads_per_row = threads;
    plan.vecs_per_thread = max_vecs;
  } else {
    plan.kind = SoftmaxPlan::Kind::kLooped;
    plan.threads_per_row = kLoopedThreads;
  }
  return plan;
}

namespace {

using kernels::SoftmaxParams;

template <typename T, int kVec, int kThreads, int kVecs, int kRows, bool kFused>
void launch_registers(const SoftmaxParams& p, cudaStream_t stream) {
  const dim3 block(kThreads, kRows);
  const auto grid = static_cast<unsigned>(ceil_div(p.rows, kRows));
  kernels::softmax_registers_kernel<T, kVec, kThreads, kVecs, kRows, kFused>
      <<<grid, block, 0, stream>>>(p);
}

// The largest vecs_per_thread plan_softmax picks for an access width (fewer instances).
template <int kVec>
constexpr int kMaxVecs = kVec == 1 ? kMaxScalarAccessesPerThread : kMaxValuesPerThread / kVec;

template <typename T, int kVec, bool kFused>
void launch_plan(const SoftmaxPlan& plan, const SoftmaxParams& p, cudaStream_t stream) {
  constexpr int kVecs = kMaxVecs<kVec>;
  static_assert(kVecs == 8 || kVecs == 4, "plan_softmax and these instances disagree");
  if (plan.kind == SoftmaxPlan::Kind::kLooped) {
    kernels::softmax_looped_kernel<T, kVec, kLoopedThreads, kFused>
        <<<static_cast<unsigned>(p.rows), kLoopedThreads, 0, stream>>>(p);
    return;
  }
  if (plan.threads_per_row == 32) {
    switch (plan.vecs_per_thread) {
      case 1: return launch_registers<T, kVec, 32, 1, 4, kFused>(p, stream);
      case 2: return launch_registers<T, kVec, 32, 2, 4, kFused>(p, stream);
      case 4: return launch_registers<T, kVec, 32, 4, 4, kFused>(p, stream);
      case 8:
        if constexpr (kVecs == 8) return launch_registers<T, kVec, 32, 8, 4, kFused>(p, stream);
        break;
      default: break;
    }
    GKS_CHECK(false, kInvalidArgument)
        << "gks.softmax: internal error: no warp-per-row kernel for " << plan.vecs_per_thread
        << " accesses a thread";
  }
  switch (plan.threads_per_row) {
    case 64: return launch_registers<T, kVec, 64, kVecs, 1, kFused>(p, stream);
    case 128: return launch_registers<T, kVec, 128, kVecs, 1, kFused>(p, stream);
    case 256: return launch_registers<T, kVec, 256, kVecs, 1, kFused>(p, stream);
    case 512: return launch_registers<T, kVec, 512, kVecs, 1, kFused>(p, stream);
    case 1024:
      if constexpr (sizeof(T) == 4) return launch_registers<T, kVec, 1024, kVecs, 1, kFused>(p, stream);
      break;
    default: break;
  }
  GKS_CHECK(false, kInvalidArgument)
      << "gks.softmax: internal error: no block-per-row kernel of " << plan.threads_per_row
      << " threads";
}

// Checks shared by both ops; returns the row layouts of x and y.
struct Rows {
  RowLayout x, y;
};

Rows check_x_y(const TensorRef& x, const TensorRef& y, const char* op) {
  check_cuda(x, op, "x");
  check_dtype_float(x, op, "x");
  check_same_device(x, "x", y, "y", op);
  check_same_dtype(x, "x", y, "y", op);
  Rows rows{row_layout(x, op, "x"), {}};
  check_same_shape(x, "x", y, "y", op);
  rows.y = row_layout(y, op, "y");
  GKS_CHECK(rows.x.rows <= int64_t(INT32_MAX), kInvalidArgument)
      << op << ": at most 2^31 - 1 rows are supported, got " << rows.x.rows;
  return rows;
}

void check_config(int config, const char* op) {
  GKS_CHECK(config >= -1 && config <= 1, kInvalidArgument)
      << op << ": argument 'config' must be -1 (heuristic), 0 (registers) or 1 (looped), got "
      << config;
}

template <bool kFused>
void launch(const TensorRef& x, const TensorRef& y, const void* weight, const Rows& rows,
            float eps, bool aligned, int config, const char* op, cudaStream_t stream) {
  const SoftmaxPlan plan = plan_softmax(rows.x.cols, x.dtype, aligned, config);
  const SoftmaxParams params{x.data, weight, y.data, rows.x, rows.y, rows.x.rows, rows.x.cols, eps};
  const DeviceGuard guard(x.device.index);
  GKS_DISPATCH_FLOAT(x.dtype, {
    if (plan.vec == 1)
      launch_plan<scalar_t, 1, kFused>(plan, params, stream);
    else
      launch_plan<scalar_t, kernels::kVec16<scalar_t>, kFused>(plan, params, stream);
  });
  check_launch(op);
}

}  // namespace
}  // namespace detail

void softmax(const SoftmaxArgs& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.softmax";
  const detail::Rows rows = detail::check_x_y(args.x, args.y, kOp);
  detail::check_config(args.config, kOp);
  if (rows.x.rows == 0 || rows.x.cols == 0) return;
  const int64_t vec = 16 / dtype_size(args.x.dtype);
  const bool aligned = detail::aligned16(args.x.data) && detail::aligned16(args.y.data) &&
                       rows.x.rows_aligned_to(vec) && rows.y.rows_aligned_to(vec);
  detail::launch<false>(args.x, args.y, nullptr, rows, 0.f, aligned, args.config, kOp, stream);
}

void softmax_rmsnorm(const SoftmaxRmsNormArgs& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.softmax_rmsnorm";
  const TensorRef &x = args.x, &w = args.weight;
  const detail::Rows rows = detail::check_x_y(x, args.y, kOp);
  check_same_device(x, "x", w, "weight", kOp);
  check_same_dtype(x, "x", w, "weight", kOp);
  GKS_CHECK(w.ndim == 1 && w.shape[0] == rows.x.cols, kInvalidArgument)
      << kOp << ": argument 'weight' must have shape [" << rows.x.cols
      << "] (the last dim of x), got " << w.shape_string();
  GKS_CHECK(w.strides[0] == 1 || w.shape[0] <= 1, kInvalidArgument)
      << kOp << ": argument 'weight' must be contiguous, got stride " << w.strides[0];
  GKS_CHECK(args.eps >= 0.f, kInvalidArgument)
      << kOp << ": argument 'eps' must be >= 0, got " << args.eps;
  detail::check_config(args.config, kOp);
  if (rows.x.rows == 0 || rows.x.cols == 0) return;
  const int64_t vec = 16 / dtype_size(x.dtype);
  const bool aligned = detail::aligned16(x.data) && detail::aligned16(args.y.data) &&
                       detail::aligned16(w.data) && rows.x.rows_aligned_to(vec) &&
                       rows.y.rows_aligned_to(vec);
  detail::launch<true>(x, args.y, w.data, rows, args.eps, aligned, args.config, kOp,
                        stream);
}

}  // namespace gks
