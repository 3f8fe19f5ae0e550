// SPDX-License-Identifier: Apache-2.0
// The quantize family's launch planners (pure: host tests check them without a GPU).
#pragma once

#include <cstdint>

#include "gks/tensor.h"
#include "rows/plan.h"

namespace gks::detail {

// quantize_int8: aligned, x and q 16-byte aligned row by row. A plan's vec is the chunk a
// thread takes at once: 16 elements (4 or 2 16-byte loads of x, one 16-byte store of q), or
// 1 when unaligned.
RowPlan plan_quantize_int8(int64_t cols, DType dtype, bool aligned);

// dequantize_int8 (kTiled): a chunk is one 16-byte store of out (4 fp32, 8 fp16/bf16), or
// 1 element when unaligned; 256-thread blocks of threads_per_row x rows_per_block, 1 or 2
// chunks a thread.
RowPlan plan_dequantize_int8(int64_t cols, DType out_dtype, bool aligned);

// quantize_fp8 per 1 x 128 group / per tensor (kTiled): chunks of 16 elements (8 lanes a
// group), 256-thread blocks of threads_per_row x rows_per_block, 1 or 2 chunks a thread.
// vec is 16 whether or not the rows are aligned (the kernel's kVector says how it accesses).
RowPlan plan_quantize_fp8_groups(int64_t cols);

// True when the library compiled the op's kernel for the plan (host tests check every plan).
bool quantize_int8_plan_has_kernel(const RowPlan& plan, DType dtype);
bool dequantize_int8_plan_has_kernel(const RowPlan& plan, DType out_dtype);
bool quantize_fp8_token_plan_has_kernel(const RowPlan& plan, DType dtype);
bool quantize_fp8_groups_plan_has_kernel(const RowPlan& plan, DType dtype);
bool dequantize_fp8_plan_has_kernel(const RowPlan& plan, DType out_dtype);

}  // namespace gks::detail
