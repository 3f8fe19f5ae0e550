// SPDX-License-Identifier: Apache-2.0
#include "quantize/plan.h"

#include <algorithm>

#include "core/launch.h"

namespace gks::detail {

namespace {

// Raw x bytes a thread keeps in registers on the register path: 128 bytes = 32 registers
// (2 aligned chunks of fp32, 4 of fp16/bf16), or 8 scalars on the unaligned path.
int max_chunks_per_thread(DType dtype, bool aligned) {
  return aligned ? int(128 / (16 * dtype_size(dtype))) : 8;
}

// Longest row the register path holds: 1024 threads x 32 fp32, or 512 x 64 fp16/bf16 (that
// kernel needs ~100 registers, so 1024 threads of it would spill); unaligned rows hold at
// most 1024 x 8 elements.
constexpr int64_t kMaxRegisterRow = 32768;

}  // namespace

RowPlan plan_quantize_int8(int64_t cols, DType dtype, bool aligned) {
  RowPlan plan;
  plan.vec = aligned ? 16 : 1;
  const int max_chunks = max_chunks_per_thread(dtype, aligned);
  const int64_t chunks = ceil_div(std::max<int64_t>(cols, 1), plan.vec);
  // Short rows: a warp per row, four rows per block, no block barrier.
  if (chunks <= 32 * int64_t(max_chunks)) return warp_per_row(plan, chunks);
  // A block per row with as few threads as keep each at max_chunks (more accesses in flight
  // per thread, more blocks per SM).
  if (chunks <= 1024 * int64_t(max_chunks) && chunks * plan.vec <= kMaxRegisterRow &&
      fit_registers(chunks, max_chunks, max_chunks, 1024, 1, plan))
    return plan;
  plan.kind = RowPlan::Kind::kLooped;
  plan.threads_per_row = 512;
  return plan;
}

RowPlan plan_dequantize_int8(int64_t cols, DType out_dtype, bool aligned) {
  RowPlan plan;
  plan.kind = RowPlan::Kind::kTiled;
  plan.vec = aligned ? int(16 / dtype_size(out_dtype)) : 1;
  const int64_t chunks = ceil_div(std::max<int64_t>(cols, 1), plan.vec);
  // Up to 2 chunks per thread, then as many threads along the row as that leaves work for,
  // between a warp and the whole 256-thread block: as many bytes in flight as 4 chunks a
  // thread, in shorter blocks (docs/perf/quantize.md).
  int per_thread = 1;
  while (per_thread < 2 && 32 * int64_t(per_thread) < chunks) per_thread *= 2;
  int threads = 32;
  while (threads < 256 && int64_t(threads) * per_thread < chunks) threads *= 2;
  plan.vecs_per_thread = per_thread;
  plan.threads_per_row = threads;
  plan.rows_per_block = 256 / threads;
  return plan;
}

RowPlan plan_quantize_fp8_groups(int64_t cols) {
  RowPlan plan;
  plan.kind = RowPlan::Kind::kTiled;
  plan.vec = 16;
  const int64_t chunks = ceil_div(std::max<int64_t>(cols, 1), plan.vec);
  // As dequantize's: up to 2 chunks a thread, then threads along the row (a warp at least,
  // so that a group's 8 lanes are one warp's and a warp is one row's).
  int per_thread = 1;
  while (per_thread < 2 && 32 * int64_t(per_thread) < chunks) per_thread *= 2;
  int threads = 32;
  while (threads < 256 && int64_t(threads) * per_thread < chunks) threads *= 2;
  plan.vecs_per_thread = per_thread;
  plan.threads_per_row = threads;
  plan.rows_per_block = 256 / threads;
  return plan;
}

}  // namespace gks::detail
