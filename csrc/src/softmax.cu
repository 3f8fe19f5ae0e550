// SPDX-License-Identifier: Apache-2.0
#include "gks/softmax.h"

#include <algorithm>

#include "gks/kernels/softmax.cuh"
#include "launch.h"

namespace gks {
namespace detail {

// How many of a row's accesses a thread holds in registers. The unfused kernel holds them
// as loaded (16 bytes: 4 registers, whatever the dtype) and converts them to fp32 at each
// use, so that a thread needs about 32 registers and an SM holds 2048 threads: one row's
// loads then overlap other rows' reductions and stores. (Kept as fp32, 32 values a thread
// took 64 registers or more: 1024 threads an SM or fewer, which left 16-bit rows of 32768
// well short of copy bandwidth.) It holds 4 accesses a thread. The fused kernel holds its
// values in fp32 (one exp a value, see softmax.cuh): 16 a thread, 4 fp32 or 2 16-bit
// accesses, at 40 registers.
// Rows longer than 1024 threads' worth take more a thread in a 1024-thread block, one to an
// SM (fp32 rows of 32768, 8 a thread: 4152 GB/s on an H200 at 8192x32768, vs 2844 looped),
// up to 8 fp32 or 4 16-bit accesses (so rows of up to 32768 elements). Unaligned rows (one
// element an access) keep 8 accesses a thread, as RMSNorm does, and 16-bit ones at most 512
// threads.
constexpr int kWideConfig = 2;
constexpr int kClusterConfig = 3;  // softmax_rmsnorm only, as the one below
constexpr int kStagedConfig = 4;
constexpr int kStagedThreads = 1024;
constexpr int kStagedWeightSlots = 4;  // 64 KiB of the weight (4 x 1024 threads x 16 bytes)
constexpr int kClusterThreads = 256;
constexpr int kMaxCluster = 8;
constexpr int kVecsPerThread = 4;
constexpr int kFusedValuesPerThread = 16;
constexpr int kMaxVecsPerThread32 = 8;
constexpr int kMaxVecsPerThread16 = 4;
constexpr int kScalarAccessesPerThread = 8;
constexpr int kMaxRegisterThreads = 1024;
constexpr int kMaxScalarThreads16 = 512;
constexpr int kLoopedThreads = 512;

constexpr int base_vecs(int vec, bool fused) {
  return vec == 1 ? kScalarAccessesPerThread : fused ? kFusedValuesPerThread / vec : kVecsPerThread;
}
// (Fused ragged fp32 rows stop at 4: 8 spilled.)
constexpr int max_vecs(int vec, int elem_size, bool fused_ragged) {
  return vec == 1 ? kScalarAccessesPerThread
                  : elem_size != 4 ? kMaxVecsPerThread16
                  : fused_ragged ? kMaxVecsPerThread32 / 2 : kMaxVecsPerThread32;
}

int64_t staged_smem_bytes(const SoftmaxPlan& plan) {
  return int64_t(plan.threads_per_row) *
         (plan.vecs_per_thread * plan.row_buffers + plan.weight_slots) * 16;
}

SoftmaxPlan plan_softmax(int64_t cols, DType dtype, bool aligned16, int config, bool fused,
                         bool clusters, int64_t smem_per_block) {
  SoftmaxPlan plan;
  const int elem_size = int(dtype_size(dtype));
  plan.vec = aligned16 ? 16 / elem_size : 1;
  const bool whole_accesses = aligned16 && cols % plan.vec == 0;
  // The staged kernel takes the fused op's rows of 16385-32768 elements (measured at
  // 8192x32768: see softmax.cuh).
  if (config == -1 && fused && whole_accesses && cols > 16384 && cols <= 32768) config = kStagedConfig;
  if (config == kStagedConfig && fused && whole_accesses) {
    // A row's slots; where shared memory has room, the weight's first 64 KiB beside them
    // (all of a 16-bit weight, half of an fp32 one), and then a second row buffer (16-bit).
    SoftmaxPlan staged = plan;
    staged.kind = SoftmaxPlan::Kind::kStaged;
    staged.threads_per_row = kStagedThreads;
    staged.vecs_per_thread = max_vecs(plan.vec, elem_size, false);
    if (cols <= int64_t(staged.threads_per_row) * staged.vecs_per_thread * plan.vec &&
        staged_smem_bytes(staged) <= smem_per_block) {
      SoftmaxPlan with_weight = staged;
      with_weight.weight_slots = std::min(staged.vecs_per_thread, kStagedWeightSlots);
      if (staged_smem_bytes(with_weight) > smem_per_block) return staged;
      SoftmaxPlan two_rows = with_weight;
      two_rows.row_buffers = 2;
      return staged_smem_bytes(two_rows) <= smem_per_block ? two_rows : with_weight;
    }
    config = -1;  // the shared memory is not there: the heuristic's plan
  }
  if (config == kClusterConfig && fused && clusters && whole_accesses) {
    // 256-thread CTAs of 16 values a thread, as few as hold the row (up to 8); a row one
    // CTA holds takes config 0's plan.
    const int64_t accesses = cols / plan.vec;
    const int vecs = base_vecs(plan.vec, true);
    int cluster = 2;
    while (cluster < kMaxCluster && int64_t(kClusterThreads) * vecs * cluster < accesses) cluster *= 2;
    if (accesses > int64_t(kClusterThreads) * vecs && accesses <= int64_t(kClusterThreads) * vecs * cluster) {
      plan.threads_per_row = kClusterThreads;
      plan.vecs_per_thread = vecs;
      plan.cluster = cluster;
      return plan;
    }
  }
  // The fused heuristic for aligned 16-bit rows: registers-wide (4 accesses, 32 values a
  // thread) while 512 threads hold the row, looped beyond. Measured on an H200 (2026-11-30,
  // bench --configs, µs): fp16 32768x4096 registers-wide 133.3 vs registers 152.7; 65536x1024
  // 68.8 vs 75.1; 8192x32768 looped 346.1 vs registers (1024 x 4 either way) 404.4. fp32
  // keeps registers: looped was 983.5 vs 612.9 at 8192x32768.
  if (config == -1 && fused && elem_size == 2 && whole_accesses)
    config = cols / plan.vec > 512 * 2 * base_vecs(plan.vec, true) ? 1 : kWideConfig;
  const bool fused_ragged = fused && cols % plan.vec != 0;
  const int most = max_vecs(plan.vec, elem_size, fused_ragged);
  // registers-wide (config 2): twice the accesses a thread where that fits, half the threads.
  const int base = config == kWideConfig ? std::min(2 * base_vecs(plan.vec, fused), most)
                                         : base_vecs(plan.vec, fused);
  const int max_threads = plan.vec == 1 && elem_size != 4 ? kMaxScalarThreads16 : kMaxRegisterThreads;
  const int64_t accesses = ceil_div(std::max<int64_t>(cols, 1), plan.vec);
  if (config != 1 && accesses <= 32 * int64_t(base)) {
    // Short rows: a warp per row, four rows per block, no block barrier.
    plan.threads_per_row = 32;
    plan.rows_per_block = 4;
    int vecs = 1;
    while (32 * int64_t(vecs) < accesses) vecs *= 2;
    plan.vecs_per_thread = vecs;
    return plan;
  }
  if (config != 1 && accesses <= int64_t(max_threads) * most) {
    // A block per row: as few threads as hold the row with `base` accesses each, or failing
    // that the widest block with as few accesses each as hold it.
    int threads = 64, vecs = base;
    while (int64_t(threads) * vecs < accesses) {
      if (threads < max_threads) {
        threads *= 2;
      } else {
        vecs *= 2;
      }
    }
    plan.threads_per_row = threads;
    plan.vecs_per_thread = vecs;
    return plan;
  }
  plan.kind = SoftmaxPlan::Kind::kLooped;
  plan.threads_per_row = kLoopedThreads;
  return plan;
}

namespace {

using kernels::SoftmaxParams;

template <typename T, int kVec, int kThreads, int kVecs, int kRows, bool kFused>
void launch_registers(const SoftmaxParams& p, cudaStream_t stream) {
  const dim3 block(kThreads, kRows);
  const auto grid = static_cast<unsigned>(ceil_div(p.rows, kRows));
  if constexpr (kVec > 1) {
    if (p.cols % kVec != 0) {
      if constexpr (kVecs <= max_vecs(kVec, int(sizeof(T)), kFused)) {
        kernels::softmax_registers_kernel<T, kVec, kThreads, kVecs, kRows, kFused, true>
            <<<grid, block, 0, stream>>>(p);
        return;
      }
      GKS_CHECK(false, kInvalidArgument) << "gks.softmax: internal error: no ragged kernel of "
                                         << kVecs << " accesses a thread";
    }
  }
  kernels::softmax_registers_kernel<T, kVec, kThreads, kVecs, kRows, kFused, false>
      <<<grid, block, 0, stream>>>(p);
}

template <typename T, int kVec, int kVecs, bool kFused>
void launch_block_per_row(int threads, const SoftmaxParams& p, cudaStream_t stream) {
  switch (threads) {
    case 64: return launch_registers<T, kVec, 64, kVecs, 1, kFused>(p, stream);
    case 128: return launch_registers<T, kVec, 128, kVecs, 1, kFused>(p, stream);
    case 256: return launch_registers<T, kVec, 256, kVecs, 1, kFused>(p, stream);
    case 512: return launch_registers<T, kVec, 512, kVecs, 1, kFused>(p, stream);
    case 1024:
      if constexpr (kVec > 1 || sizeof(T) == 4)
        return launch_registers<T, kVec, 1024, kVecs, 1, kFused>(p, stream);
      break;
    default: break;
  }
  GKS_CHECK(false, kInvalidArgument) << "gks.softmax: internal error: no block-per-row kernel of "
                                     << threads << " threads x " << kVecs << " accesses";
}

template <typename T, int kVec, int kCluster>
void launch_cluster(const SoftmaxParams& p, cudaStream_t stream) {
  constexpr int kVecs = base_vecs(kVec, true);
  const auto kernel = kernels::softmax_rmsnorm_cluster_kernel<T, kVec, kClusterThreads, kVecs, kCluster>;
  const LaunchConfig launch(dim3(static_cast<unsigned>(p.rows * kCluster)), dim3(kClusterThreads), 0,
                            stream, kCluster, /*early_start=*/false);
  cudaLaunchKernelEx(&launch.config, kernel, p);  // errors surface in check_launch
}

template <typename T, int kVec, bool kFused>
void launch_plan(const SoftmaxPlan& plan, const SoftmaxParams& p, cudaStream_t stream) {
  // The accesses a thread holds: kBase as plan_softmax picks them, up to kMax for the
  // longest rows (1024-thread blocks) and for registers-wide (twice kBase, any block).
  constexpr int kBase = base_vecs(kVec, kFused);
  constexpr int kMax = max_vecs(kVec, int(sizeof(T)), false);
  if (plan.kind == SoftmaxPlan::Kind::kLooped) {
    kernels::softmax_looped_kernel<T, kVec, kLoopedThreads, kFused>
        <<<static_cast<unsigned>(p.rows), kLoopedThreads, 0, stream>>>(p);
    return;
  }
  if constexpr (kFused && kVec > 1) {
    switch (plan.cluster) {
      case 1: break;
      case 2: return launch_cluster<T, kVec, 2>(p, stream);
      case 4: return launch_cluster<T, kVec, 4>(p, stream);
      default: return launch_cluster<T, kVec, 8>(p, stream);
    }
  }
  const int vecs = plan.vecs_per_thread, threads = plan.threads_per_row;
  if (threads == 32) {
    switch (vecs) {
      case 1: return launch_registers<T, kVec, 32, 1, 4, kFused>(p, stream);
      case 2: return launch_registers<T, kVec, 32, 2, 4, kFused>(p, stream);
      case 4:
        if constexpr (std::min(2 * kBase, kMax) >= 4) return launch_registers<T, kVec, 32, 4, 4, kFused>(p, stream);
        break;
      case 8:
        if constexpr (std::min(2 * kBase, kMax) >= 8) return launch_registers<T, kVec, 32, 8, 4, kFused>(p, stream);
        break;
      default: break;
    }
  } else if (vecs == kBase) {
    return launch_block_per_row<T, kVec, kBase, kFused>(threads, p, stream);
  } else if (threads < kMaxRegisterThreads) {
    if constexpr (2 * kBase <= kMax) {
      if (vecs == 2 * kBase) return launch_block_per_row<T, kVec, 2 * kBase, kFused>(threads, p, stream);
    }
  } else {
    if constexpr (2 * kBase <= kMax) {
      if (vecs == 2 * kBase) return launch_registers<T, kVec, 1024, 2 * kBase, 1, kFused>(p, stream);
    }
    if constexpr (4 * kBase <= kMax) {
      if (vecs == 4 * kBase) return launch_registers<T, kVec, 1024, 4 * kBase, 1, kFused>(p, stream);
    }
  }
  GKS_CHECK(false, kInvalidArgument)
      << "gks.softmax: internal error: no registers kernel of " << threads << " threads x "
      << vecs << " accesses";
}

template <typename T, int kBuffers, int kWeightSlots>
void launch_staged_kernel(const SoftmaxPlan& plan, const SoftmaxParams& p, int device,
                          const DeviceLimits& limits, cudaStream_t stream) {
  constexpr int kVec = kernels::kVec16<T>;
  constexpr int kVecs = max_vecs(kVec, int(sizeof(T)), false);
  constexpr auto kKernel = kernels::softmax_rmsnorm_staged_kernel<T, kVec, kStagedThreads, kVecs,
                                                                  kBuffers, kWeightSlots>;
  GKS_CHECK(plan.vecs_per_thread == kVecs && plan.threads_per_row == kStagedThreads &&
                plan.row_buffers == kBuffers && plan.weight_slots == kWeightSlots,
            kInvalidArgument)
      << "gks.softmax_rmsnorm: internal error: no staged kernel of " << plan.threads_per_row
      << " threads x " << plan.vecs_per_thread << " accesses, " << plan.row_buffers
      << " row buffers, " << plan.weight_slots << " of the weight staged";
  const int64_t smem = staged_smem_bytes(plan);
  // The default carveout: what the block's shared memory leaves is L1, where the weight is
  // read where it is not staged.
  prepare_smem_kernel<kKernel>(int(smem), device, /*max_carveout=*/false);
  const auto grid = static_cast<unsigned>(std::min<int64_t>(p.rows, limits.sms));  // one block an SM
  // Early start (sm_90): back to back, a call's launch overlaps the previous kernel's tail.
  const LaunchConfig launch(dim3(grid), dim3(kStagedThreads), size_t(smem), stream, 1,
                            /*early_start=*/limits.compute_capability >= 90);
  cudaLaunchKernelEx(&launch.config, kKernel, p);  // errors surface in check_launch
}

template <typename T>
void launch_staged(const SoftmaxPlan& plan, const SoftmaxParams& p, int device,
                   const DeviceLimits& limits, cudaStream_t stream) {
  if constexpr (sizeof(T) < 4) {  // two fp32 rows of 32768 take 256 KiB
    if (plan.row_buffers == 2)
      return launch_staged_kernel<T, 2, kStagedWeightSlots>(plan, p, device, limits, stream);
  }
  if (plan.weight_slots == kStagedWeightSlots)
    return launch_staged_kernel<T, 1, kStagedWeightSlots>(plan, p, device, limits, stream);
  launch_staged_kernel<T, 1, 0>(plan, p, device, limits, stream);
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
  return rows;
}

void check_config(int config, bool fused, const char* op) {
  GKS_CHECK(config >= -1 && config <= (fused ? kStagedConfig : kWideConfig), kInvalidArgument)
      << op << ": argument 'config' must be -1 (heuristic), 0 (registers), 1 (looped)"
      << (fused ? ", 2 (registers-wide), 3 (cluster) or 4 (staged)" : " or 2 (registers-wide)")
      << ", got " << config;
}

template <bool kFused>
void launch(const TensorRef& x, const TensorRef& y, const void* weight, const Rows& rows,
            float eps, bool aligned, int config, const char* op, cudaStream_t stream) {
  // Clusters split one row over several CTAs, one grid block each: the grid must hold them.
  const DeviceLimits limits = device_limits(x.device.index);
  const bool clusters = kFused && config == kClusterConfig && limits.clusters &&
                        rows.x.rows <= int64_t(INT32_MAX) / kMaxCluster;
  const SoftmaxPlan plan = plan_softmax(rows.x.cols, x.dtype, aligned, config, kFused, clusters,
                                        kFused ? limits.smem_per_block : 0);
  const SoftmaxParams params{x.data, weight, y.data, rows.x, rows.y, rows.x.rows, rows.x.cols, eps};
  const DeviceGuard guard(x.device.index);
  GKS_DISPATCH_FLOAT(x.dtype, {
    if (plan.kind == SoftmaxPlan::Kind::kStaged) {
      if constexpr (kFused) launch_staged<scalar_t>(plan, params, x.device.index, limits, stream);
    } else if (plan.vec == 1) {
      launch_plan<scalar_t, 1, kFused>(plan, params, stream);
    } else {
      launch_plan<scalar_t, kernels::kVec16<scalar_t>, kFused>(plan, params, stream);
    }
  });
  check_launch(op);
}

}  // namespace
}  // namespace detail

void softmax(const SoftmaxArgs& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.softmax";
  const detail::Rows rows = detail::check_x_y(args.x, args.y, kOp);
  detail::check_config(args.config, false, kOp);
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
  detail::check_config(args.config, true, kOp);
  if (rows.x.rows == 0 || rows.x.cols == 0) return;
  const int64_t vec = 16 / dtype_size(x.dtype);
  const bool aligned = detail::aligned16(x.data) && detail::aligned16(args.y.data) &&
                       detail::aligned16(w.data) && rows.x.rows_aligned_to(vec) &&
                       rows.y.rows_aligned_to(vec);
  detail::launch<true>(x, args.y, w.data, rows, args.eps, aligned, args.config, kOp,
                        stream);
}

}  // namespace gks
