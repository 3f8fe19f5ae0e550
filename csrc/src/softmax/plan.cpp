// SPDX-License-Identifier: Apache-2.0
#include "softmax/plan.h"

#include <algorithm>
#include <iterator>

#include "core/launch.h"

namespace gks::detail {

namespace {

// How many of a row's accesses a thread holds in registers. The unfused kernel holds them
// as loaded (16 bytes: 4 registers, whatever the dtype) and converts them to fp32 at each
// use, so that a thread needs about 32 registers and an SM holds 2048 threads: one row's
// loads then overlap other rows' reductions and stores. (Kept as fp32, 32 values a thread
// take 64 registers or more: 1024 threads an SM or fewer, too few for 16-bit rows of 32768
// to reach copy bandwidth; docs/perf/softmax.md.) It holds 4 accesses a thread. The fused
// kernel holds its values in fp32 (one exp a value, see kernels/rows/norm.cuh): 16 a
// thread, 4 fp32 or 2 16-bit accesses, at 40 registers.
// Rows longer than 1024 threads' worth take more a thread in a 1024-thread block, one to an
// SM, up to 8 fp32 or 4 16-bit accesses (so rows of up to 32768 elements). Unaligned rows
// (one element an access) keep 8 accesses a thread, as RMSNorm does, and 16-bit ones at
// most 512 threads.
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

using Path = SoftmaxConfig::Path;
// What the heuristic runs: registers (the config of that name), or staged rows (the fused
// op's config of that name).
constexpr SoftmaxConfig kHeuristic{"", Path::kRegisters};
constexpr SoftmaxConfig kHeuristicStaged{"", Path::kStaged};

}  // namespace

int64_t staged_smem_bytes(const RowPlan& plan) {
  return int64_t(plan.threads_per_row) *
         (plan.vecs_per_thread * plan.row_buffers + plan.weight_slots) * 16;
}

RowPlan plan_softmax(int64_t cols, DType dtype, bool aligned16, int config, int64_t smem_per_block) {
  const SoftmaxConfig* c = config >= 0 && config < int(std::size(kSoftmaxConfigs))
                               ? &kSoftmaxConfigs[config]
                               : nullptr;
  return plan_softmax_rows(cols, dtype, aligned16, c, false, false, smem_per_block);
}

RowPlan plan_softmax_rows(int64_t cols, DType dtype, bool aligned16, const SoftmaxConfig* config,
                          bool fused, bool clusters, int64_t smem_per_block) {
  RowPlan plan;
  const int elem_size = int(dtype_size(dtype));
  plan.vec = aligned16 ? 16 / elem_size : 1;
  const bool whole_accesses = aligned16 && cols % plan.vec == 0;
  bool heuristic = config == nullptr;
  const SoftmaxConfig* c = heuristic ? &kHeuristic : config;
  // The staged kernel takes the fused op's rows of 16385-32768 elements.
  if (heuristic && fused && whole_accesses && cols > 16384 && cols <= 32768) {
    heuristic = false;
    c = &kHeuristicStaged;
  }
  if (c->path == Path::kStaged && fused && whole_accesses) {
    // A row's slots; where shared memory has room, the weight's first 64 KiB beside them
    // (all of a 16-bit weight, half of an fp32 one), and then a second row buffer (16-bit).
    RowPlan staged = plan;
    staged.kind = RowPlan::Kind::kStaged;
    staged.threads_per_row = kStagedThreads;
    staged.vecs_per_thread = max_vecs(plan.vec, elem_size, false);
    if (cols <= int64_t(staged.threads_per_row) * staged.vecs_per_thread * plan.vec &&
        staged_smem_bytes(staged) <= smem_per_block) {
      RowPlan with_weight = staged;
      with_weight.weight_slots = std::min(staged.vecs_per_thread, kStagedWeightSlots);
      if (staged_smem_bytes(with_weight) > smem_per_block) return staged;
      RowPlan two_rows = with_weight;
      two_rows.row_buffers = 2;
      return staged_smem_bytes(two_rows) <= smem_per_block ? two_rows : with_weight;
    }
    heuristic = true;  // the shared memory is not there: the heuristic's plan
    c = &kHeuristic;
  }
  if (c->path == Path::kCluster && fused && clusters && whole_accesses) {
    // 256-thread CTAs of 16 values a thread, as few as hold the row (up to 8); a row one
    // CTA holds takes the registers config's plan.
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
  // thread) while 512 threads hold the row, looped beyond (docs/perf/norms.md has the
  // figures). fp32 keeps registers.
  if (heuristic && fused && elem_size == 2 && whole_accesses)
    c = cols / plan.vec > 512 * 2 * base_vecs(plan.vec, true) ? &kSoftmaxConfigs[1] : &kSoftmaxConfigs[2];
  const bool looped = c->path == Path::kLooped;
  const bool fused_ragged = fused && cols % plan.vec != 0;
  const int most = max_vecs(plan.vec, elem_size, fused_ragged);
  // registers-wide: twice the accesses a thread where that fits, half the threads.
  const int base = c->wide ? std::min(2 * base_vecs(plan.vec, fused), most) : base_vecs(plan.vec, fused);
  const int max_threads = plan.vec == 1 && elem_size != 4 ? kMaxScalarThreads16 : kMaxRegisterThreads;
  const int64_t accesses = ceil_div(std::max<int64_t>(cols, 1), plan.vec);
  // Short rows: a warp per row, four rows per block, no block barrier.
  if (!looped && accesses <= 32 * int64_t(base)) return warp_per_row(plan, accesses);
  // A block per row: as few threads as hold the row with `base` accesses each, or failing
  // that the widest block with as few accesses each as hold it.
  if (!looped && accesses <= int64_t(max_threads) * most &&
      fit_registers(accesses, base, most, max_threads, 1, plan))
    return plan;
  plan.kind = RowPlan::Kind::kLooped;
  plan.threads_per_row = kLoopedThreads;
  // The row kept in shared memory between the walks (softmax, whole 16-byte accesses):
  // looped-smem, and the heuristic's rows too long for registers, which then read HBM once
  // (8192 x 50304 bf16 on an H100: 1.48x the plain looped plan, within 2% of QuACK).
  const bool stage_row = c->stage_row || (heuristic && !fused);
  if (stage_row && !fused && whole_accesses && cols * elem_size + kLoopedRowSmemReserve <= smem_per_block)
    plan.row_smem_bytes = cols * elem_size;
  return plan;
}

}  // namespace gks::detail
