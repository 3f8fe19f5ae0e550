// SPDX-License-Identifier: Apache-2.0
// The row skeleton's launch plan (kernels/rows/common.cuh has the shapes): how a row op's
// launch covers the rows, chosen on the host from the row's length, dtype and alignment.
// Plans are pure values, so host tests check the planners without a GPU.
#pragma once

#include <cstdint>

namespace gks::detail {

struct RowPlan {
  enum class Kind {
    kRegisters,  // Registers<threads_per_row, vecs_per_thread, rows_per_block, cluster>
    kLooped,     // Looped<threads_per_row>
    kStaged,     // softmax_rmsnorm's persistent kernel (threads_per_row a block)
    kTiled,      // Tiled<threads_per_row, rows_per_block, vecs_per_thread>
  };
  Kind kind = Kind::kRegisters;
  int vec = 1;              // elements a thread takes at once: 16 bytes' worth (quantize:
                            // a chunk of 16), or 1 when the rows are not aligned for that
  int threads_per_row = 32;
  int vecs_per_thread = 1;  // kRegisters, kStaged, kTiled: accesses each thread holds
  int rows_per_block = 1;
  int cluster = 1;          // kRegisters: CTAs (a thread block cluster) sharing one row
  int weight_slots = 0;     // kStaged: the weight's accesses a thread copies to shared memory
  int row_buffers = 1;      // kStaged: rows in shared memory at once
  // kLooped: dynamic shared memory that holds the row between its two walks (0: the second
  // walk reads global memory again).
  int64_t row_smem_bytes = 0;
  // kRegisters (clusters of 1) and kLooped: 0, a block for each row (or rows_per_block rows);
  // else a persistent grid of at most this many blocks, block b walking the row groups b,
  // b + gridDim.x, ... (for an op that sums over the rows per block: rmsnorm_bwd's dweight).
  int64_t max_blocks = 0;

  friend bool operator==(const RowPlan& a, const RowPlan& b) {
    return a.kind == b.kind && a.vec == b.vec && a.threads_per_row == b.threads_per_row &&
           a.vecs_per_thread == b.vecs_per_thread && a.rows_per_block == b.rows_per_block &&
           a.cluster == b.cluster && a.weight_slots == b.weight_slots &&
           a.row_buffers == b.row_buffers && a.row_smem_bytes == b.row_smem_bytes &&
           a.max_blocks == b.max_blocks;
  }
};

// A looped plan keeps its row in shared memory only with this much of the block's opt-in
// limit to spare (the kernel's static scratch).
inline constexpr int64_t kLoopedRowSmemReserve = 1024;

// "registers 256 threads x 4 accesses" and so on, for messages.
const char* row_plan_kind_name(RowPlan::Kind kind);

// A warp per row, four rows a block (no block barrier): the fewest accesses a thread, a
// power of two, that cover `accesses` (at most 256).
RowPlan warp_per_row(RowPlan plan, int64_t accesses);

// The fewest threads a CTA (64 up to max_threads), then the fewest accesses a thread
// (`vecs` up to max_vecs), then the fewest CTAs a cluster (up to max_cluster), all powers of
// two, that cover `accesses` (kRegisters, one row a block). False, plan untouched, if even
// the largest do not.
bool fit_registers(int64_t accesses, int vecs, int max_vecs, int max_threads, int max_cluster,
                   RowPlan& plan);

}  // namespace gks::detail
