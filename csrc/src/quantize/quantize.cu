// SPDX-License-Identifier: Apache-2.0
#include "gks/quantize_int8.h"

#include <algorithm>

#include "gks/kernels/quantize_int8.cuh"
#include "launch.h"

namespace gks {
namespace detail {

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

QuantizeInt8Plan plan_quantize_int8(int64_t cols, DType dtype, bool aligned) {
  QuantizeInt8Plan plan;
  plan.chunk = aligned ? 16 : 1;
  const int max_chunks = max_chunks_per_thread(dtype, aligned);
  const int64_t chunks = ceil_div(std::max<int64_t>(cols, 1), plan.chunk);
  if (chunks <= 32 * int64_t(max_chunks)) {
    // Short rows: a warp per row, four rows per block, no block barrier.
    plan.threads_per_row = 32;
    plan.rows_per_block = 4;
    int per_thread = 1;
    while (32 * int64_t(per_thread) < chunks) per_thread *= 2;
    plan.chunks_per_thread = per_thread;
  } else if (chunks <= 1024 * int64_t(max_chunks) && chunks * plan.chunk <= kMaxRegisterRow) {
    // A block per row with as few threads as keep each at max_chunks (more accesses in
    // flight per thread, more blocks per SM).
    int threads = 64;
    while (int64_t(threads) * max_chunks < chunks) threads *= 2;
    plan.threads_per_row = threads;
    plan.chunks_per_thread = max_chunks;
  } else {
    plan.kind = QuantizeInt8Plan::Kind::kLooped;
    plan.threads_per_row = 512;
  }
  return plan;
}

DequantizeInt8Plan plan_dequantize_int8(int64_t cols, DType out_dtype, bool aligned) {
  DequantizeInt8Plan plan;
  plan.chunk = aligned ? int(16 / dtype_size(out_dtype)) : 1;
  const int64_t chunks = ceil_div(std::max<int64_t>(cols, 1), plan.chunk);
  // Up to 2 chunks per thread, then as many threads along the row as that leaves work for,
  // between a warp and the whole 256-thread block. 2 chunks a thread (over more threads and
  // blocks) ran 2.5-4.7% faster than 4 on an H200 (32768x4096, 8192x32768, 65536x1024; fp32
  // and fp16 out): as many bytes in flight, in shorter blocks.
  int per_thread = 1;
  while (per_thread < 2 && 32 * int64_t(per_thread) < chunks) per_thread *= 2;
  int threads = 32;
  while (threads < 256 && int64_t(threads) * per_thread < chunks) threads *= 2;
  plan.chunks_per_thread = per_thread;
  plan.threads_per_row = threads;
  plan.rows_per_block = 256 / threads;
  return plan;
}

namespace {

using kernels::DequantizeInt8Params;
using kernels::QuantizeInt8Params;

template <typename T, int kChunk, int kThreads, int kChunks, int kRows>
void launch_quantize_registers(const QuantizeInt8Params& p, cudaStream_t stream) {
  const dim3 block(kThreads, kRows);
  const auto grid = static_cast<unsigned>(ceil_div(p.rows, kRows));
  kernels::quantize_int8_registers_kernel<T, kChunk, kThreads, kChunks, kRows>
      <<<grid, block, 0, stream>>>(p);
}

template <typename T, int kChunk, int kMaxChunks>
void launch_quantize_plan(const QuantizeInt8Plan& plan, const QuantizeInt8Params& p,
                          cudaStream_t stream) {
  if (plan.kind == QuantizeInt8Plan::Kind::kLooped) {
    kernels::quantize_int8_looped_kernel<T, kChunk, 512>
        <<<static_cast<unsigned>(p.rows), 512, 0, stream>>>(p);
    return;
  }
  if (plan.threads_per_row == 32) {
    switch (plan.chunks_per_thread) {
      case 1: return launch_quantize_registers<T, kChunk, 32, 1, 4>(p, stream);
      case 2: return launch_quantize_registers<T, kChunk, 32, 2, 4>(p, stream);
      case 4:
        if constexpr (kMaxChunks >= 4) return launch_quantize_registers<T, kChunk, 32, 4, 4>(p, stream);
        break;
      case 8:
        if constexpr (kMaxChunks >= 8) return launch_quantize_registers<T, kChunk, 32, 8, 4>(p, stream);
        break;
      default: break;
    }
    GKS_CHECK(false, kCudaError) << "gks.quantize_int8: no kernel for the plan (a gks bug)";
  }
  switch (plan.threads_per_row) {
    case 64: return launch_quantize_registers<T, kChunk, 64, kMaxChunks, 1>(p, stream);
    case 128: return launch_quantize_registers<T, kChunk, 128, kMaxChunks, 1>(p, stream);
    case 256: return launch_quantize_registers<T, kChunk, 256, kMaxChunks, 1>(p, stream);
    case 512: return launch_quantize_registers<T, kChunk, 512, kMaxChunks, 1>(p, stream);
    default:
      // Aligned 16-bit rows never need 1024 threads (see kMaxRegisterRow).
      if constexpr (kChunk == 1 || kMaxChunks == 2)
        return launch_quantize_registers<T, kChunk, 1024, kMaxChunks, 1>(p, stream);
      break;
  }
  GKS_CHECK(false, kCudaError) << "gks.quantize_int8: no kernel for the plan (a gks bug)";
}

template <typename T, int kChunk, int kThreads, int kChunks>
void launch_dequantize(const DequantizeInt8Params& p, cudaStream_t stream) {
  constexpr int kRows = 256 / kThreads;
  const auto grid = static_cast<unsigned>(std::min<int64_t>(p.blocks, INT32_MAX));
  kernels::dequantize_int8_kernel<T, kChunk, kThreads, kRows, kChunks>
      <<<grid, dim3(kThreads, kRows), 0, stream>>>(p);
}

template <typename T, int kChunk, int kThreads>
void launch_dequantize_chunks(const DequantizeInt8Plan& plan, const DequantizeInt8Params& p,
                              cudaStream_t stream) {
  if (plan.chunks_per_thread == 1) return launch_dequantize<T, kChunk, kThreads, 1>(p, stream);
  launch_dequantize<T, kChunk, kThreads, 2>(p, stream);
}

template <typename T, int kChunk>
void launch_dequantize_plan(const DequantizeInt8Plan& plan, const DequantizeInt8Params& p,
                            cudaStream_t stream) {
  switch (plan.threads_per_row) {
    case 32: return launch_dequantize_chunks<T, kChunk, 32>(plan, p, stream);
    case 64: return launch_dequantize_chunks<T, kChunk, 64>(plan, p, stream);
    case 128: return launch_dequantize_chunks<T, kChunk, 128>(plan, p, stream);
    default: return launch_dequantize_chunks<T, kChunk, 256>(plan, p, stream);
  }
}

// scale must be `like` with its last dim 1: [..., 1].
void check_scale_shape(const TensorRef& like, const char* like_name, const TensorRef& scale,
                       const char* op) {
  bool ok = scale.ndim == like.ndim && scale.ndim >= 1;
  for (int d = 0; ok && d + 1 < like.ndim; ++d) ok = scale.shape[d] == like.shape[d];
  ok = ok && scale.shape[scale.ndim - 1] == 1;
  if (ok) return;
  TensorRef expected = like;
  expected.shape[like.ndim - 1] = 1;
  GKS_CHECK(false, kInvalidArgument)
      << op << ": argument 'scale' must have shape " << expected.shape_string() << " ('"
      << like_name << "' with its last dim 1), got " << scale.shape_string();
}

void check_int8(const TensorRef& t, const char* op, const char* arg) {
  GKS_CHECK(t.dtype == DType::kInt8, kUnsupportedDtype)
      << op << ": argument '" << arg << "' must be int8, got " << dtype_name(t.dtype);
}

void check_float32(const TensorRef& t, const char* op, const char* arg) {
  GKS_CHECK(t.dtype == DType::kFloat32, kUnsupportedDtype)
      << op << ": argument '" << arg << "' must be float32, got " << dtype_name(t.dtype);
}

}  // namespace
}  // namespace detail

void quantize_int8(const QuantizeInt8Args& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.quantize_int8";
  const TensorRef &x = args.x, &q = args.q, &scale = args.scale;
  check_cuda(x, kOp, "x");
  check_dtype_float(x, kOp, "x");
  check_same_device(x, "x", q, "q", kOp);
  check_same_device(x, "x", scale, "scale", kOp);
  detail::check_int8(q, kOp, "q");
  detail::check_float32(scale, kOp, "scale");
  const RowLayout x_rows = row_layout(x, kOp, "x");
  check_same_shape(x, "x", q, "q", kOp);
  const RowLayout q_rows = row_layout(q, kOp, "q");
  detail::check_scale_shape(x, "x", scale, kOp);
  const RowLayout scale_rows = row_layout(scale, kOp, "scale");
  // Rows of length 0 still get their scale (0); only no rows at all launches nothing.
  if (x_rows.rows == 0) return;

  const int64_t x_vec = 16 / dtype_size(x.dtype);
  const bool aligned = detail::aligned16(x.data) && detail::aligned16(q.data) &&
                       x_rows.rows_aligned_to(x_vec) && q_rows.rows_aligned_to(16);
  const detail::QuantizeInt8Plan plan = detail::plan_quantize_int8(x_rows.cols, x.dtype, aligned);
  const kernels::QuantizeInt8Params params{x.data,      static_cast<int8_t*>(q.data),
                                           static_cast<float*>(scale.data),
                                           x_rows,      q_rows,
                                           scale_rows,  x_rows.rows,
                                           x_rows.cols};
  const detail::DeviceGuard guard(x.device.index);
  GKS_DISPATCH_FLOAT(x.dtype, {
    if (plan.chunk == 1) {
      detail::launch_quantize_plan<scalar_t, 1, 8>(plan, params, stream);
    } else {
      constexpr int kMaxChunks = 128 / (16 * int(sizeof(scalar_t)));
      detail::launch_quantize_plan<scalar_t, 16, kMaxChunks>(plan, params, stream);
    }
  });
  detail::check_launch(kOp);
}

void dequantize_int8(const DequantizeInt8Args& args, cudaStream_t stream) {
  constexpr const char* kOp = "gks.dequantize_int8";
  const TensorRef &q = args.q, &scale = args.scale, &out = args.out;
  check_cuda(q, kOp, "q");
  detail::check_int8(q, kOp, "q");
  check_same_device(q, "q", scale, "scale", kOp);
  check_same_device(q, "q", out, "out", kOp);
  detail::check_float32(scale, kOp, "scale");
  check_dtype_float(out, kOp, "out");
  const RowLayout q_rows = row_layout(q, kOp, "q");
  detail::check_scale_shape(q, "q", scale, kOp);
  const RowLayout scale_rows = row_layout(scale, kOp, "scale");
  check_same_shape(q, "q", out, "out", kOp);
  const RowLayout out_rows = row_layout(out, kOp, "out");
  if (q_rows.rows == 0 || q_rows.cols == 0) return;

  // A chunk is one 16-byte store of out and a 4- or 8-byte load of q.
  const int64_t out_vec = 16 / dtype_size(out.dtype);
  const bool aligned = reinterpret_cast<uintptr_t>(q.data) % out_vec == 0 &&
                       detail::aligned16(out.data) && q_rows.rows_aligned_to(out_vec) &&
                       out_rows.rows_aligned_to(out_vec);
  const detail::DequantizeInt8Plan plan =
      detail::plan_dequantize_int8(q_rows.cols, out.dtype, aligned);
  const int64_t col_blocks = detail::ceil_div(
      q_rows.cols, int64_t(plan.chunk) * plan.threads_per_row * plan.chunks_per_thread);
  const int64_t row_blocks = detail::ceil_div(q_rows.rows, plan.rows_per_block);
  const kernels::DequantizeInt8Params params{static_cast<const int8_t*>(q.data),
                                             static_cast<const float*>(scale.data),
                                             out.data,
                                             q_rows,
                                             scale_rows,
                                             out_rows,
                                             q_rows.rows,
                                             q_rows.cols,
                                             col_blocks,
                                             col_blocks * row_blocks};
  const detail::DeviceGuard guard(q.device.index);
  GKS_DISPATCH_FLOAT(out.dtype, {
    if (plan.chunk == 1) {
      detail::launch_dequantize_plan<scalar_t, 1>(plan, params, stream);
    } else {
      detail::launch_dequantize_plan<scalar_t, kernels::kVec16<scalar_t>>(plan, params, stream);
    }
  });
  detail::check_launch(kOp);
}

}  // namespace gks
