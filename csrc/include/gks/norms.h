// SPDX-License-Identifier: Apache-2.0
// The norms family, over the last dim with fp32 math, outputs in x's dtype:
//  - rmsnorm: y = x / sqrt(mean(x^2) + eps) * weight; rmsnorm_bwd, its gradients;
//  - fused_add_rmsnorm: the residual added first (r = x + residual, stored), then rmsnorm(r);
//  - layernorm: y = (x - mean) / sqrt(var + eps) * weight (+ bias);
//  - softmax_rmsnorm: y = softmax(x / sqrt(mean(x^2) + eps) * weight) in one kernel. The
//    normalized row stays in fp32 (it is never rounded to x's dtype); only y is rounded.
//    Non-finite input as for gks::softmax.
// The sum of squares is fp32 (as in torch's F.rms_norm): a row is normalized exactly while
// sum(x^2) < 3.4e38 (float32's largest value; elements below about 1.8e19 / sqrt(N)); past
// that the sum is inf and the row gives 0 (NaN where x is inf), what the fp32 formula gives.
#pragma once

#include <cuda_runtime_api.h>

#include "gks/quantize.h"  // Fp8Granularity
#include "gks/softmax.h"   // SoftmaxConfig
#include "gks/tensor.h"

namespace gks {

// A kernel shape the `config` argument of rmsnorm forces; -1 leaves it to the heuristic.
// Rows that do not fit a config's shape fall back to a wider one, and then to looped.
struct RmsNormConfig {
  enum class Path {
    kRegisters,  // the row held in registers: `vecs` 16-byte accesses a thread, CTAs of up
                 // to `max_threads`, split over a thread block cluster beyond that (sm_90)
    kLooped,     // the row walked twice, the second time from L2
  };
  const char* name;  // stable: the autotuner's tables key on the names
  Path path;
  int vecs = 4;
  int max_threads = 1024;
  int looped_threads = 0;  // kLooped: threads a row; 0: the fewest whose rows in flight fit
                           // half the L2
};

//  registers-8x16B  rows in registers, each thread holding up to 8 16-byte accesses;
//  looped           each row walked twice, the second time from L2;
//  registers-4x16B  rows in registers, up to 4 accesses a thread (more threads per row);
//  cluster-256t     as registers-4x16B, but CTAs of at most 256 threads, a row split over
//                   a thread block cluster of up to 8 CTAs beyond that (sm_90);
//  registers-2x16B  rows in registers, up to 2 accesses a thread (twice the threads of
//                   registers-4x16B);
//  looped-512t      looped with 512 threads a row whatever the row's length (the shape
//                   torch.compile runs fp32 rows of 4096 in: two passes, 512 threads).
inline constexpr RmsNormConfig kRmsNormConfigs[] = {
    {"registers-8x16B", RmsNormConfig::Path::kRegisters, 8, 1024},
    {"looped", RmsNormConfig::Path::kLooped},
    {"registers-4x16B", RmsNormConfig::Path::kRegisters, 4, 1024},
    {"cluster-256t", RmsNormConfig::Path::kRegisters, 4, 256},
    {"registers-2x16B", RmsNormConfig::Path::kRegisters, 2, 1024},
    {"looped-512t", RmsNormConfig::Path::kLooped, 0, 0, 512},
};

struct RmsNormArgs {
  TensorRef x;       // [..., N], fp32/fp16/bf16, last dim contiguous, any row strides
  TensorRef weight;  // [N], x's dtype, contiguous
  TensorRef y;       // x's shape and dtype, last dim contiguous, any row strides; may be x (in place)
  float eps = 1e-6f;
  int config = -1;  // -1: the heuristic; else an index into kRmsNormConfigs
};

// Validates the arguments (throws gks::Error) and launches on `stream`.
void rmsnorm(const RmsNormArgs& args, cudaStream_t stream);

// rmsnorm_bwd: the gradients of rmsnorm from dy (the gradient of y), with rstd = 1 /
// sqrt(mean(x^2) + eps) recomputed from x (the forward keeps nothing but x and weight):
//   dx = (dy * weight - xhat * mean(dy * weight * xhat)) * rstd, xhat = x * rstd,
//   dweight = the sum over the rows of dy * xhat,
// fp32 math (the row sums and the sum over the rows); dx in x's dtype, dweight in weight's.
// Deterministic, without atomics: each block of a persistent grid keeps fp32 column sums of
// the rows it walks, written to a stream-ordered temporary [blocks, N] that a second kernel
// adds up in a fixed order (the grid is the planner's, from N and the device: the same
// inputs on the same device give the same bits). No rows: dweight = 0.
//
// Its configs (the row kernels' shapes; the heuristic is registers-2x16B):
//  registers-2x16B  rows in registers, up to 2 16-byte accesses a thread (warps of 4 rows,
//                   then blocks of up to 1024 threads);
//  registers-4x16B  up to 4 accesses a thread, blocks of up to 512 threads (fewer threads a
//                   row), then as registers-2x16B;
//  looped           each row walked twice by 512 threads, the column sums kept in the
//                   temporary (rows too long for registers take it whatever the config).
inline constexpr RmsNormConfig kRmsNormBwdConfigs[] = {
    {"registers-2x16B", RmsNormConfig::Path::kRegisters, 2, 1024},
    {"registers-4x16B", RmsNormConfig::Path::kRegisters, 4, 512},
    {"looped", RmsNormConfig::Path::kLooped, 0, 0, 512},
};

struct RmsNormBwdArgs {
  TensorRef dy;       // x's shape and dtype, last dim contiguous, any row strides
  TensorRef x;        // [..., N], fp32/fp16/bf16, last dim contiguous, any row strides
  TensorRef weight;   // [N], x's dtype, contiguous
  TensorRef dx;       // x's shape and dtype, last dim contiguous, any row strides; may be x (in place)
  TensorRef dweight;  // [N], weight's dtype, contiguous
  float eps = 1e-6f;
  int config = -1;  // -1: the heuristic; else an index into kRmsNormBwdConfigs
};

// Validates the arguments (throws gks::Error) and launches on `stream`.
void rmsnorm_bwd(const RmsNormBwdArgs& args, cudaStream_t stream);

// fused_add_rmsnorm: residual_out = x + residual (added in fp32, rounded to x's dtype), and
// y = rmsnorm(residual_out) * weight, from the rounded sum: what the two steps give one
// after the other, in one pass over the row. In place (FlashInfer's form): y is x and
// residual_out is residual. Its configs are kRmsNormConfigs (the same kernel shapes).
struct FusedAddRmsNormArgs {
  TensorRef x;             // [..., N], fp32/fp16/bf16, last dim contiguous, any row strides
  TensorRef residual;      // x's shape and dtype, last dim contiguous, any row strides
  TensorRef weight;        // [N], x's dtype, contiguous
  TensorRef y;             // x's shape and dtype, last dim contiguous; may be x (in place)
  TensorRef residual_out;  // x's shape and dtype, last dim contiguous; may be residual (in place)
  float eps = 1e-6f;
  int config = -1;  // -1: the heuristic; else an index into kRmsNormConfigs
};

// Validates the arguments (throws gks::Error) and launches on `stream`.
void fused_add_rmsnorm(const FusedAddRmsNormArgs& args, cudaStream_t stream);

// layernorm: y = (x - mean) / sqrt(var + eps) * weight (+ bias), mean and the biased variance
// over the last dim in fp32 (F.layer_norm's), in the corrected two-pass form (robust to a
// mean far from 0 and to outliers; a row holding a NaN or inf comes out NaN). Its configs
// are kRmsNormConfigs (the same kernel shapes).
struct LayerNormArgs {
  TensorRef x;       // [..., N], fp32/fp16/bf16, last dim contiguous, any row strides
  TensorRef weight;  // [N], x's dtype, contiguous
  TensorRef bias;    // [N], x's dtype, contiguous; read only with has_bias
  TensorRef y;       // x's shape and dtype, last dim contiguous, any row strides; may be x (in place)
  bool has_bias = false;
  float eps = 1e-5f;
  int config = -1;  // -1: the heuristic; else an index into kRmsNormConfigs
};

// Validates the arguments (throws gks::Error) and launches on `stream`.
void layernorm(const LayerNormArgs& args, cudaStream_t stream);

// The fused op's configs: softmax's, then
//  cluster  16-byte aligned rows of more than 256 threads' worth of 16 values split over a
//           thread block cluster of 256-thread CTAs (sm_90; up to 8 CTAs, so rows of up to
//           32768), else as registers;
//  staged   16-byte aligned rows of up to 32768 elements, a whole number of 16-byte
//           accesses, in persistent 1024-thread blocks that fetch their next row into
//           shared memory while they process the current one from registers (the first
//           64 KiB of the weight, too, where they fit), else the heuristic's plan.
inline constexpr SoftmaxConfig kSoftmaxRmsNormConfigs[] = {
    kSoftmaxConfigs[0],
    kSoftmaxConfigs[1],
    kSoftmaxConfigs[2],
    {"cluster", SoftmaxConfig::Path::kCluster},
    {"staged", SoftmaxConfig::Path::kStaged},
};

struct SoftmaxRmsNormArgs {
  TensorRef x;       // [..., N], fp32/fp16/bf16, last dim contiguous, any row strides
  TensorRef weight;  // [N], x's dtype, contiguous
  TensorRef y;       // x's shape and dtype, last dim contiguous, any row strides; may be x (in place)
  float eps = 1e-6f;
  int config = -1;  // -1: the heuristic; else an index into kSoftmaxRmsNormConfigs
};

// Validates the arguments (throws gks::Error) and launches on `stream`.
void softmax_rmsnorm(const SoftmaxRmsNormArgs& args, cudaStream_t stream);

// rmsnorm_quant / fused_add_rmsnorm_quant: RMSNorm (after the residual add, as
// fused_add_rmsnorm's) with a quantized output, in one pass: y = x * inv_rms * weight in
// fp32 (not rounded to x's dtype) is quantized as gks/quantize.h says, with q's dtype
// picking the format:
//   q int8:           per token (granularity kToken): scale = absmax(y) / 127, quantize_int8's
//                     contract on y;
//   q float8_e4m3fn:  per token (kToken), or per 1 x 128 group (kGroup; the last dim must be a
//                     multiple of 128), quantize_fp8's contract on y (scale_ue8m0 as there).
// scale: [..., 1] (token) or [..., N / 128] (group), fp32. residual and residual_out (the
// fused add only): x's shape and dtype; residual_out = x + residual (fp32 add, rounded to x's
// dtype), then normalized. The CUDA kernel holds a row in registers: rows of up to 65536
// (fp16/bf16) or 32768 (fp32) elements when 16-byte aligned, 8192 otherwise; longer ones are
// refused (argument 'x').
struct RmsNormQuantArgs {
  TensorRef x;             // [..., N], fp32/fp16/bf16, last dim contiguous, any row strides
  TensorRef residual;      // fused add only: x's shape and dtype
  TensorRef residual_out;  // fused add only: x's shape and dtype
  TensorRef weight;        // [N], x's dtype, contiguous
  TensorRef q;             // x's shape, int8 or float8_e4m3fn, last dim contiguous
  TensorRef scale;         // fp32, [..., 1] or [..., N / 128]
  float eps = 1e-6f;
  Fp8Granularity granularity = Fp8Granularity::kToken;  // kToken or kGroup
  bool scale_ue8m0 = false;
};

void rmsnorm_quant(const RmsNormQuantArgs& args, cudaStream_t stream);
void fused_add_rmsnorm_quant(const RmsNormQuantArgs& args, cudaStream_t stream);

}  // namespace gks
