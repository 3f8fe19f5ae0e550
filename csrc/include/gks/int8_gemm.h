// SPDX-License-Identifier: Apache-2.0
// INT8 GEMM on Tensor Cores (mma.sync m16n8k32, int32 accumulation) with a dequantizing
// epilogue: c[m, n] = float(sum_k a_q[m, k] * b_q[k, n]) * a_scale[m] * b_scale[n].
// a_q and a_scale are what gks.quantize_int8(a) returns (per-row symmetric); b_q, b_scale
// come from quantizing b column-wise (quantize b.T per row, transpose the results back).
//
// b_q comes in either layout:
//  * row-major [K, N] (stride(1) == 1, stride(0) >= N), or
//  * K-major: a transposed view of an [N, K] row-major matrix (stride(0) == 1,
//    stride(1) >= K), e.g. q.t() where q, s = quantize_int8(b.t()), or the .t() of an
//    nn.Linear-style [N, K] weight. This is the layout the Hopper kernel reads.
//
// Which kernel runs (Int8GemmPath):
//  * On a compute-capability 9.0 GPU, in a build with sm_90a, when TMA can describe a_q
//    (base pointer and leading dimension 16-byte aligned): the Hopper kernel of gks::gemm
//    (kernels/hopper_gemm.cuh) with int8 wgmma (IGMMA). wgmma reads 8-bit operands K-major
//    only: a K-major b_q that TMA can describe is read in place; a row-major b_q is first
//    transposed into a temporary, which pays off only for M >= kInt8HopperMinRows (below
//    that the mma.sync kernel runs, unless a Hopper config is forced).
//  * Otherwise the mma.sync kernel (kernels/int8_gemm.cuh), which reads b row-major: a
//    K-major b_q is first transposed into a temporary.
// Temporaries (N x K bytes) come from a per-device stream-ordered memory pool that keeps
// its memory for reuse (cudaMallocFromPoolAsync on the caller's stream, freed in stream
// order; cudaMallocAsync while the stream is being captured into a graph).
// Every path computes the same int32 sums and applies the scales alike: they agree exactly.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "gks/gemm_common.h"
#include "gks/tensor.h"

namespace gks {

struct Int8GemmArgs {
  TensorRef a;        // [M, K] int8, row-major (stride(1) == 1), any leading dimension
  TensorRef b;        // [K, N] int8, row-major or K-major (see above), any leading dimension
  TensorRef a_scale;  // [M, 1] or [M] float32, any stride
  TensorRef b_scale;  // [1, N] or [N] float32, any stride
  TensorRef c;        // [M, N] float16, bfloat16 or float32, row-major, any leading dim
  // Index into detail::int8_gemm_configs(); -1 = heuristic pick (the Hopper kernel where
  // it can run). The first kInt8MmaConfigs are the mma.sync kernel's, the rest the Hopper
  // kernel's; a Hopper config where the Hopper path cannot run gives way to the mma.sync
  // heuristic's pick.
  int config = -1;
};

// Validates the arguments (throws gks::Error naming the bad one) and launches on `stream`.
void int8_gemm(const Int8GemmArgs& args, cudaStream_t stream);

namespace detail {
inline constexpr int kInt8MmaConfigs = 4;  // mma.sync configs lead int8_gemm_configs()
const std::vector<GemmConfigInfo>& int8_gemm_configs();
// The mma.sync config the heuristic picks (an index below kInt8MmaConfigs).
int int8_gemm_heuristic(int64_t m, int64_t n, int64_t k, int num_sms);

// The smallest M for which the Hopper path transposes a row-major b_q rather than leave
// the problem to the mma.sync kernel: the copy moves 2 N K bytes, which the faster
// Tensor Cores win back once M is about this large (measured on an H200).
inline constexpr int64_t kInt8HopperMinRows = 512;

enum class Int8GemmPath {
  kHopper,            // the Hopper kernel reads b_q in place (K-major)
  kHopperTransposed,  // b_q (row-major) transposed into a temporary, then the Hopper kernel
  kMma,               // the mma.sync kernel reads b_q in place (row-major)
  kMmaTransposed,     // b_q (K-major) transposed into a temporary, then the mma.sync kernel
};
// "hopper", "hopper+transpose", "mma", "mma+transpose"
const char* int8_gemm_path_name(Int8GemmPath path);

// The facts the choice depends on.
struct Int8PathFacts {
  bool device_is_sm90 = false;
  bool built_with_sm90a = false;
  GemmMatrix a;          // a_q
  bool b_k_major = false;
  GemmMatrix b_storage;  // b_q's storage as a row-major matrix: [K, N], or [N, K] if K-major
  int64_t n = 0;
  int config = -1;       // as in Int8GemmArgs
};
// Which path int8_gemm takes (pure, for host tests).
Int8GemmPath choose_int8_gemm_path(const Int8PathFacts& facts);
// Validates like int8_gemm() and reports which kernel it would run on this machine.
Int8GemmPath int8_gemm_path(const Int8GemmArgs& args);
}  // namespace detail

}  // namespace gks
