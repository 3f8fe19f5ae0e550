// SPDX-License-Identifier: Apache-2.0
// The GEMM family: sgemm (fp32 FFMA), wmma_gemm (fp16/bf16 on mma.sync), int8_gemm (int8
// Tensor Cores with a dequantizing epilogue) and gemm (fp16/bf16: the Hopper kernel, TMA +
// wgmma, on sm_90a; WMMA elsewhere). What they share comes first.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "gks/activation.h"
#include "gks/kernels/gemm/epilogue_terms.h"
#include "gks/tensor.h"

// What the three GEMMs (sgemm, wmma_gemm, int8_gemm) share on the host: the description of
// a compiled tile config, the validated view of a row-major matrix operand, and the
// config-selection helpers. Operands are row-major with any leading dimension:
// stride(1) == 1 and stride(0) >= cols. A transposed view (stride(0) == 1) is rejected with
// a message that says so; pass a contiguous copy instead.

namespace gks {

// One compiled tile config of a GEMM. `name` is stable (the autotune cache stores indices
// and a hash of the names, so reordering or renaming configs invalidates old entries).
struct GemmConfigInfo {
  const char* name;
  int block_m;
  int block_n;
  int block_k;
  int threads;
  int stages;
};

// The fused epilogue of gks::gemm and gks::gemm_fp8 (every part optional; none by default):
//   y = (a @ b) * row_scale[m] * col_scale[n] + bias[n]        (fp32, in that order)
//   c = y, or with `gated` c[:, j] = act(y[:, 2j]) * y[:, 2j + 1]: b's columns interleave
//       each gate with its up (SwiGLU for kSilu), N is even and c is [M, N / 2].
// K = 0 gives the epilogue of a zero product. row_scale and col_scale are gemm's (gemm_fp8's
// per-row and per-column scales are its scaling kRow).
struct GemmEpilogue {
  std::optional<TensorRef> bias;       // [N] float32, float16 or bfloat16, any stride
  std::optional<TensorRef> row_scale;  // [M] or [M, 1] float32, any stride
  std::optional<TensorRef> col_scale;  // [N] or [1, N] float32, any stride
  std::optional<Activation> gated;
};

namespace detail {

// A validated 2-D row-major operand: element (r, c) lives at data + r * ld + c.
struct GemmMatrix {
  void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;  // elements between row starts (>= cols; equal to cols when rows <= 1)
};

// Checks that `t` is 2-D (gemm_matrix's rank check, on its own for callers that size an
// output from the operands before validating them). Errors name `op` and `arg`.
void check_matrix_rank(const TensorRef& t, const char* op, const char* arg);

// Checks that `t` is a 2-D CUDA tensor of shape [rows, cols] (either bound may be -1 for
// "any"), row-major (stride(1) == 1 when cols > 1, stride(0) >= cols when rows > 1), and
// returns its view. Errors name `op` and `arg`.
GemmMatrix gemm_matrix(const TensorRef& t, const char* op, const char* arg, int64_t rows,
                       int64_t cols);

// True when the matrix's rows can be read with 16-byte accesses: the base pointer is
// 16-byte aligned and the leading dimension is a multiple of 16 bytes.
bool gemm_rows_aligned16(const GemmMatrix& m, int64_t elem_bytes);

// The number of multiprocessors of `device`, cached per device (the heuristics need it).
int device_sm_count(int device);

// Checks `config` against the list (-1 = heuristic) and throws a gks::Error naming the
// argument otherwise.
void check_gemm_config(int config, int count, const char* op);

// The largest dims any GEMM accepts: M, N and K must each fit in int32 (offsets are 64-bit).
void check_gemm_dims(int64_t m, int64_t n, int64_t k, const char* op);

// The operands of c = a @ b once their shapes are checked: a [M, K], b [K, N], c [M, N].
struct GemmOperands {
  GemmMatrix a, b, c;
  int64_t m = 0, n = 0, k = 0;
};

// The shape checks every GEMM shares (after its own device and dtype checks): each operand
// a row-major matrix (gemm_matrix), b's rows equal to a's columns, an epilogue where given
// (check_gemm_epilogue; `epi_scales`: it may have scales), c [M, N] (gated: [M, N / 2]),
// `config` in [-1, config_count), and M, N, K in range. Errors name the arguments as given.
GemmOperands gemm_operands(const TensorRef& a, const char* a_name, const TensorRef& b,
                           const char* b_name, const TensorRef& c, int config, int config_count,
                           const char* op, const GemmEpilogue* epi = nullptr, bool epi_scales = true);

// The dtype and device checks of the 16-bit GEMMs (wmma_gemm, gemm), then gemm_operands:
// a and b float16 or bfloat16, one dtype, on one CUDA device; c float32 or a's dtype.
GemmOperands half_gemm_operands(const TensorRef& a, const TensorRef& b, const TensorRef& c,
                                int config, int config_count, const char* op,
                                const GemmEpilogue* epi = nullptr);

// The checks of an epilogue for an M x N product of `a` (its device): each tensor given
// on a's device with its dtype and shape (GemmEpilogue), row_scale and col_scale only where
// `scales` (gemm's), an even N where gated. Returns c's columns (N, or N / 2 gated).
int64_t check_gemm_epilogue(const GemmEpilogue& epi, int64_t m, int64_t n, const TensorRef& a, bool scales,
                            const char* op);

// The kernels' view of a checked epilogue.
kernels::gemm::EpilogueTerms epilogue_terms(const GemmEpilogue& epi);

// c [M, N or N / 2] = the epilogue `terms` of y [M, N] (fp32, leading dimension ldy), or of
// a zero product when y is null (K = 0), on `stream`: what finishes the paths that compute
// the product elsewhere (the WMMA fallback) or not at all.
void apply_gemm_epilogue(const float* y, int64_t ldy, const GemmMatrix& c, DType c_dtype, int64_t m, int64_t n,
                         const kernels::gemm::EpilogueTerms& terms, cudaStream_t stream, const char* op);

// Whether an epilogue has any part.
inline bool has_epilogue(const GemmEpilogue& e) {
  return e.bias.has_value() || e.row_scale.has_value() || e.col_scale.has_value() || e.gated.has_value();
}

// What the heuristic knows about a config beyond its tile shape: how many blocks fit on an
// SM and how close to peak its inner loop runs once the GPU is full (a relative guess; the
// autotuner measures the real thing).
struct GemmConfigTraits {
  int blocks_per_sm;
  double efficiency;
};

// Picks the config with the best estimated throughput for an M x N output: its efficiency
// x the share of the last wave that is busy x the share of the tiles' area inside the
// matrix (padding waste). Ties go to the earlier config. Pure, so host tests can check it.
int pick_gemm_config(const std::vector<GemmConfigInfo>& configs,
                     const std::vector<GemmConfigTraits>& traits, int64_t m, int64_t n,
                     int num_sms);

// Tiles a config's block shape needs to cover an M x N output.
int64_t gemm_tile_count(const GemmConfigInfo& c, int64_t m, int64_t n);

}  // namespace detail
// --------------------------------------------------------------------------------------
// SGEMM: c[M, N] = a[M, K] @ b[K, N] in fp32 with fp32 FMA arithmetic (no TF32).

struct SgemmArgs {
  TensorRef a;  // [M, K] float32, row-major (stride(1) == 1), any leading dimension
  TensorRef b;  // [K, N] float32, row-major, any leading dimension
  TensorRef c;  // [M, N] float32, row-major, any leading dimension; overwritten
  int config = -1;  // index into detail::sgemm_configs(); -1 = heuristic pick by shape
};

// Validates the arguments (throws gks::Error naming the bad one) and launches on `stream`.
// Transposed views (stride(0) == 1) are rejected: pass a contiguous copy.
void sgemm(const SgemmArgs& args, cudaStream_t stream);

namespace detail {
// The compiled tile configs, in a fixed order (the autotuner's tie band prefers earlier).
const std::vector<GemmConfigInfo>& sgemm_configs();
// The config the heuristic picks for an M x N x K problem on a GPU with `num_sms` SMs.
int sgemm_heuristic(int64_t m, int64_t n, int64_t k, int num_sms);
}  // namespace detail

// --------------------------------------------------------------------------------------
// Tensor Core GEMM through nvcuda::wmma (mma.sync): c[M, N] = a[M, K] @ b[K, N] with fp16
// or bf16 inputs and fp32 accumulation; c is fp32 or the input dtype.

struct WmmaGemmArgs {
  TensorRef a;  // [M, K] float16 or bfloat16, row-major (stride(1) == 1), any leading dim
  TensorRef b;  // [K, N] a's dtype, row-major, any leading dimension
  TensorRef c;  // [M, N] float32 or a's dtype, row-major, any leading dimension
  int config = -1;  // index into detail::wmma_gemm_configs(); -1 = heuristic pick
};

// Validates the arguments (throws gks::Error naming the bad one) and launches on `stream`.
// Transposed views (stride(0) == 1) are rejected: pass a contiguous copy.
void wmma_gemm(const WmmaGemmArgs& args, cudaStream_t stream);

namespace detail {
const std::vector<GemmConfigInfo>& wmma_gemm_configs();
int wmma_gemm_heuristic(int64_t m, int64_t n, int64_t k, int num_sms);
}  // namespace detail

// --------------------------------------------------------------------------------------
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
//    (kernels/gemm/sm90/) with int8 wgmma (IGMMA). wgmma reads 8-bit operands K-major
//    only: a K-major b_q that TMA can describe is read in place; a row-major b_q is first
//    transposed into a temporary, which pays off only for M >= kInt8HopperMinRows (below
//    that the mma.sync kernel runs, unless a Hopper config is forced).
//  * Otherwise the mma.sync kernel (kernels/gemm/int8.cuh), which reads b row-major: a
//    K-major b_q is first transposed into a temporary.
// Temporaries (N x K bytes) come from a per-device stream-ordered memory pool that keeps
// its memory for reuse (cudaMallocFromPoolAsync on the caller's stream, freed in stream
// order; cudaMallocAsync while the stream is being captured into a graph).
// Every path computes the same int32 sums and applies the scales alike: they agree exactly.

struct Int8GemmArgs {
  TensorRef a;        // [M, K] int8, row-major (stride(1) == 1), any leading dimension
  TensorRef b;        // [K, N] int8, row-major or K-major (see above), any leading dimension
  TensorRef a_scale;  // [M, 1] or [M] float32, any stride
  TensorRef b_scale;  // [1, N] or [N] float32, any stride
  TensorRef c;        // [M, N] float16, bfloat16 or float32, row-major, any leading dim
  // Index into detail::int8_gemm_configs(); -1 = heuristic pick (the Hopper kernel where
  // it can run). The list holds the mma.sync kernel's configs, then the Hopper kernel's
  // ("hopper_..."); a Hopper config where the Hopper path cannot run gives way to the
  // mma.sync heuristic's pick.
  int config = -1;
};

// Validates the arguments (throws gks::Error naming the bad one) and launches on `stream`.
void int8_gemm(const Int8GemmArgs& args, cudaStream_t stream);

namespace detail {
const std::vector<GemmConfigInfo>& int8_gemm_configs();
// Which kernel config `config` (an index into int8_gemm_configs(), or -1) is of, and its
// index in that kernel's own table (the mma.sync tiles, or kHopperInt8Configs).
enum class Int8GemmKernel { kHeuristic, kMma, kHopper };
struct Int8GemmConfigRef {
  Int8GemmKernel kernel;
  int index;
};
Int8GemmConfigRef int8_gemm_config_ref(int config);
// The mma.sync config the heuristic picks (an index into the mma.sync kernel's table).
int int8_gemm_heuristic(int64_t m, int64_t n, int64_t k, int num_sms);

// The smallest M for which the Hopper path transposes a row-major b_q rather than leave
// the problem to the mma.sync kernel: the copy moves 2 N K bytes, which the faster
// Tensor Cores win back once M is about this large (docs/perf/gemm.md).
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

// --------------------------------------------------------------------------------------
// gks::gemm_fp8: c[M, N] = (a[M, K] @ b[K, N]) scaled, a and b fp8 (both e4m3 or both e5m2),
// fp32 accumulation, c bfloat16, float16 or float32. The scaling modes (Fp8Scaling):
//  * kTensor: a_scale and b_scale hold one fp32 each (shape [] or [1]):
//    c = float(a @ b) * a_scale * b_scale;
//  * kRow: a_scale [M] or [M, 1], b_scale [N] or [1, N], any strides:
//    c[m, n] = float(a @ b)[m, n] * a_scale[m] * b_scale[n];
//  * kBlock (DeepSeek-V3's, DeepGEMM's): a_scale [M, ceil(K / 128)] (1 x 128 groups of a
//    along K), b_scale [ceil(K / 128), ceil(N / 128)] (128 x 128 blocks of b), any strides:
//    c[m, n] = sum over groups g of float(a[m, g] @ b[g, n]) * a_scale[m, g] *
//    b_scale[g, n / 128], each group's fp32 products scaled as they complete (the
//    "promotion" of DeepGEMM; kHopperFp8Configs).
// K must be a multiple of 16 (fp8 rows of a TMA tensor map are 16-byte multiples); K == 0
// gives c = 0. b comes in either layout, as in int8_gemm: row-major [K, N], or K-major (the
// transposed view of a row-major [N, K], e.g. an nn.Linear weight's .t()), which wgmma
// reads in place; a row-major b is first transposed into a temporary (N x K bytes from the
// stream-ordered pool), and an a (or K-major b) whose base or leading dimension is not
// 16-byte aligned is copied with padded rows first (what TMA can read). It runs the Hopper kernel (kernels/gemm/sm90/, fp8 wgmma) with its
// fp8 configs (kHopperFp8Configs), which promote every 128 of K into fp32 accumulators in
// every scaling (Hopper's fp8 sums keep about 14 bits); there is no fp8 Tensor Core path
// below compute capability 9.0, so elsewhere (and in a build without sm_90a) it throws
// kInvalidArgument, empty problems included.

enum class Fp8Scaling { kTensor, kRow, kBlock };

struct GemmFp8Args {
  TensorRef a;        // [M, K] float8_e4m3fn or float8_e5m2, row-major, any leading dim
  TensorRef b;        // [K, N] a's dtype, row-major or K-major, any leading dimension
  TensorRef a_scale;  // float32, see Fp8Scaling
  TensorRef b_scale;  // float32, see Fp8Scaling
  TensorRef c;        // [M, N] (gated: [M, N / 2]) bfloat16, float16 or float32, row-major, any leading dim
  Fp8Scaling scaling = Fp8Scaling::kTensor;
  int config = -1;    // index into detail::gemm_fp8_configs(); -1 = heuristic
  GemmEpilogue epilogue{};  // bias and gated unit (no row_scale / col_scale: see scaling kRow)
};

// Validates the arguments (throws gks::Error naming the bad one) and launches on `stream`.
void gemm_fp8(const GemmFp8Args& args, cudaStream_t stream);

namespace detail {
// The configs `config` indexes: kHopperFp8Configs, for every scaling.
const std::vector<GemmConfigInfo>& gemm_fp8_configs();
}  // namespace detail

// --------------------------------------------------------------------------------------
// gks::grouped_gemm: the MoE expert GEMMs in one launch, c[rows of g] = a[rows of g] @ b[g]
// for each group g, fp16/bf16 with fp32 accumulation, c in a's dtype. Exactly one of
// group_offsets and group_counts is given:
//  * contiguous (group_offsets [G + 1] int32): a [T, K] (tokens sorted by expert), c [T, N];
//    group g is rows [group_offsets[g], group_offsets[g + 1]), every bound clamped into
//    [0, T] and each end to at least its start. A row in no group is written 0; where
//    offsets out of order make groups overlap, a row holds the last such group's product.
//  * masked (group_counts [G] int32): a [G, M_max, K], c [G, M_max, N]; group g is the
//    first clamp(group_counts[g], 0, M_max) rows of its slab, the rest of c's slab is 0.
// b is [G, K, N]. Every tensor's last dim is contiguous; the other strides are free (a
// layout TMA cannot read in place, e.g. an odd K or N, is first packed into a temporary
// from the stream-ordered pool). The offsets and counts are read on the device only: no
// host synchronization, CUDA-graph safe (a capture replays with other groups).
// The Hopper kernel (kernels/gemm/sm90/, GroupedScheduler: persistent, each group's tiles
// from its first row, so no tile computes two groups) runs it; there is no other CUDA path,
// so elsewhere (an sm_80 GPU, or a build without sm_90a) it throws kInvalidArgument. Its
// schedule lives in shared memory, 16 bytes a group: past what a config leaves (1592 to 3132
// groups) the heuristic's pick gives way to the roomiest config, and past every config's
// room (or with a forced config that has none) the call is refused, naming G.

struct GroupedGemmArgs {
  TensorRef a;  // [T, K] (contiguous) or [G, M_max, K] (masked), float16 or bfloat16
  TensorRef b;  // [G, K, N], a's dtype
  std::optional<TensorRef> group_offsets;  // [G + 1] int32: the contiguous layout
  std::optional<TensorRef> group_counts;   // [G] int32: the masked layout
  TensorRef c;  // [T, N] or [G, M_max, N], a's dtype
  int config = -1;  // index into detail::grouped_gemm_configs(); -1 = heuristic
};

// Validates the arguments (throws gks::Error naming the bad one) and launches on `stream`.
void grouped_gemm(const GroupedGemmArgs& args, cudaStream_t stream);

// --------------------------------------------------------------------------------------
// gks::grouped_gemm_fp8: the same grouped product (both layouts, the same group semantics)
// of float8_e4m3fn a and b with DeepSeek-V3's block scales, as gemm_fp8's "block" scaling
// does it a group at a time: a_scale one fp32 scale per row and 128 of K ([T, ceil(K / 128)]
// or [G, M_max, ceil(K / 128)]), b_scale one per 128 x 128 block of each b[g] ([G, ceil(K /
// 128), ceil(N / 128)]); each 128-wide k-block's product is promoted to fp32 and scaled as
// it is added. c is bfloat16, float16 or float32. b [G, K, N] may be row-major or K-major
// (stride(1) == 1: the view w.transpose(1, 2) of the [G, N, K] expert weights, read in
// place; a row-major b is transposed into a temporary first). K is a multiple of 16; a's
// last dim contiguous; the scales take any strides. The same Hopper kernel and schedule
// (kHopperGroupedFp8Configs); the same refusals off sm_90a.

struct GroupedGemmFp8Args {
  TensorRef a;        // [T, K] or [G, M_max, K], float8_e4m3fn
  TensorRef b;        // [G, K, N], float8_e4m3fn, row-major or K-major
  TensorRef a_scale;  // [T, ceil(K / 128)] or [G, M_max, ceil(K / 128)], float32
  TensorRef b_scale;  // [G, ceil(K / 128), ceil(N / 128)], float32
  std::optional<TensorRef> group_offsets;
  std::optional<TensorRef> group_counts;
  TensorRef c;        // [T, N] or [G, M_max, N]: bfloat16, float16 or float32
  int config = -1;    // index into detail::grouped_gemm_fp8_configs(); -1 = heuristic
};

void grouped_gemm_fp8(const GroupedGemmFp8Args& args, cudaStream_t stream);

// --------------------------------------------------------------------------------------
// gks::gemm: c[M, N] = a[M, K] @ b[K, N] for fp16/bf16 with fp32 accumulation, c in a's
// dtype or float32.
//
// Which kernel runs:
//  * On a compute-capability 9.0 GPU, in a build with sm_90a (GKS_WITH_SM90A, defined by
//    CMake when 90a is in GKS_CUDA_ARCHS): the Hopper kernel (kernels/gemm/sm90/) —
//    persistent, warp-specialized, TMA loads into an mbarrier-guarded shared ring, wgmma
//    with fp32 accumulators.
//  * Otherwise, or when TMA cannot describe a or b (see tma_can_describe: base pointer not
//    16-byte aligned, leading-dimension byte stride not a multiple of 16), the WMMA kernel
//    (gks::wmma_gemm), with its own heuristic config. Both give the same result up to the
//    order of the fp32 sums. c has no alignment requirement on either path.
// Operands are row-major (stride(1) == 1) with any leading dimension >= their columns;
// transposed views are rejected (see above). K == 0 gives c = 0.
// Outputs too small to fill the GPU split K (hopper_k_splits): the partial sums go to a
// temporary of splits x M x N x 4 bytes from gks's stream-ordered pool (workspace.h), so
// such a call needs that much free device memory. The stream-K configs instead take a
// temporary of one tile's fp32 sums per SM (e.g. 64 KiB for 128 x 128 tiles).

struct GemmArgs {
  TensorRef a;  // [M, K] float16 or bfloat16, row-major, any leading dimension
  TensorRef b;  // [K, N] a's dtype, row-major, any leading dimension
  TensorRef c;  // [M, N] (gated: [M, N / 2]) a's dtype or float32, row-major, any leading dimension
  // Index into detail::hopper_gemm_configs() (-1: heuristic). It forces the Hopper kernel's
  // tile config; when the WMMA fallback runs instead, it is ignored.
  int config = -1;
  GemmEpilogue epilogue{};  // bias, row / column scales, gated unit: see GemmEpilogue
};

// Validates the arguments (throws gks::Error naming the bad one) and launches on `stream`.
void gemm(const GemmArgs& args, cudaStream_t stream);

namespace detail {

// One compiled config of the Hopper kernel. `name` is stable (autotune caches key on it).
struct HopperGemmConfig {
  const char* name;
  int block_m;
  int block_n;
  int block_k;
  int stages;     // depth of the shared-memory ring
  int cluster_m;  // CTAs per cluster, stacked in M, sharing (multicasting) B tiles
  // The two consumer warpgroups take whole tiles in turn (ping-pong: one's epilogue runs
  // under the other's MMAs) instead of half of every tile's rows each (cooperative).
  bool ping_pong = false;
  // Stream-K (single CTAs only): the tiles past the last whole waves but one are shared
  // out by k-block over the whole grid, so no SM idles in a part-empty last wave; the
  // pieces of a tile are added through a workspace in L2 (kernels/gemm/sm90/).
  bool stream_k = false;
  // CTAs per cluster side by side in N, sharing (multicasting) A tiles; cluster_m is then 1.
  int cluster_n = 1;
};

// The compiled configs, in index order (GemmArgs::config); gemm_sm90a.cu checks
// its kernels against this table at compile time.
inline constexpr HopperGemmConfig kHopperGemmConfigs[] = {
    {"128x256x64_s4_c1", 128, 256, 64, 4, 1},
    {"128x256x64_s4_c2", 128, 256, 64, 4, 2},
    {"256x128x64_s4_c1", 256, 128, 64, 4, 1},
    {"256x128x64_s4_c2", 256, 128, 64, 4, 2},
    {"128x128x64_s6_c1", 128, 128, 64, 6, 1},
    {"128x128x64_s6_c2", 128, 128, 64, 6, 2},
    {"128x64x64_s8_c1", 128, 64, 64, 8, 1},
    {"128x128x64_s6_c1_pp", 128, 128, 64, 6, 1, true},
    {"128x128x64_s6_c2_pp", 128, 128, 64, 6, 2, true},
    {"64x256x64_s5_c1_pp", 64, 256, 64, 5, 1, true},
    // Small tiles for outputs of few rows (M = 128: 128 tiles of 64x64 fill the GPU with
    // no split-K, as cuBLAS's 64x64 kernel does there).
    {"64x128x64_s8_c1_pp", 64, 128, 64, 8, 1, true},
    {"64x64x64_s10_c1_pp", 64, 64, 64, 10, 1, true},
    // Stream-K: for outputs whose tiles leave the last wave part empty.
    {"128x256x64_s4_c1_sk", 128, 256, 64, 4, 1, false, true},
    // Clusters along N: outputs of few rows, whose every tile reads all of A.
    {"128x128x64_s6_cn2", 128, 128, 64, 6, 1, false, false, 2},
    {"128x128x64_s6_cn4", 128, 128, 64, 6, 1, false, false, 4},
    {"128x64x64_s8_cn2", 128, 64, 64, 8, 1, false, false, 2},
    {"128x256x64_s4_cn2", 128, 256, 64, 4, 1, false, false, 2},
};
inline constexpr int kNumHopperGemmConfigs =
    int(sizeof(kHopperGemmConfigs) / sizeof(kHopperGemmConfigs[0]));

// The same kernel's int8 configs (gks::int8_gemm's Hopper path): a k-block is 128 bytes
// either way, so the int8 tiles are 128 elements deep with the 16-bit tiles' footprint.
// They follow the mma.sync configs in int8_gemm_configs().
inline constexpr HopperGemmConfig kHopperInt8Configs[] = {
    {"hopper_128x256x128_s4_c1", 128, 256, 128, 4, 1},
    {"hopper_128x256x128_s4_c2", 128, 256, 128, 4, 2},
    {"hopper_256x128x128_s4_c1", 256, 128, 128, 4, 1},
    {"hopper_128x128x128_s6_c1", 128, 128, 128, 6, 1},
    {"hopper_128x64x128_s8_c1", 128, 64, 128, 8, 1},
};
inline constexpr int kNumHopperInt8Configs =
    int(sizeof(kHopperInt8Configs) / sizeof(kHopperInt8Configs[0]));

// gks::gemm_fp8's configs: a k-block's products are promoted into the fp32 total as it
// completes (kernels/gemm/sm90/mainloop.cuh's kPromote), two k-blocks deep, which holds two
// more sets of accumulators: tiles of at most 128 columns a warpgroup (so that one block scale of b
// covers a tile's k-block).
inline constexpr HopperGemmConfig kHopperFp8Configs[] = {
    {"hopper_128x128x128_s6_c1", 128, 128, 128, 6, 1},
    {"hopper_128x128x128_s6_c2", 128, 128, 128, 6, 2},
    {"hopper_128x64x128_s8_c1", 128, 64, 128, 8, 1},
    {"hopper_64x128x128_s8_c1_pp", 64, 128, 128, 8, 1, true},
};
inline constexpr int kNumHopperFp8Configs =
    int(sizeof(kHopperFp8Configs) / sizeof(kHopperFp8Configs[0]));

// gks::grouped_gemm's configs (single CTAs: the grouped schedule has no clusters), with
// rings a stage or two shorter than gemm's, leaving shared memory for the schedule (16
// bytes a group: up to 1592 groups with 64x128 tiles, 3132 with 128x256).
inline constexpr HopperGemmConfig kHopperGroupedConfigs[] = {
    {"grouped_128x128x64_s5", 128, 128, 64, 5, 1},
    {"grouped_128x128x64_s5_pp", 128, 128, 64, 5, 1, true},
    {"grouped_128x256x64_s3", 128, 256, 64, 3, 1},
    {"grouped_64x128x64_s7_pp", 64, 128, 64, 7, 1, true},
};
inline constexpr int kNumHopperGroupedConfigs =
    int(sizeof(kHopperGroupedConfigs) / sizeof(kHopperGroupedConfigs[0]));
// grouped_gemm_fp8's: fp8's tiles (at most 64 x 128 a warpgroup: the promotion holds two
// more sets of accumulators, kHopperFp8Configs) with the grouped rings.
inline constexpr HopperGemmConfig kHopperGroupedFp8Configs[] = {
    {"grouped_fp8_128x128x128_s5", 128, 128, 128, 5, 1},
    {"grouped_fp8_64x128x128_s7_pp", 64, 128, 128, 7, 1, true},
    {"grouped_fp8_128x64x128_s7", 128, 64, 128, 7, 1},
};
inline constexpr int kNumHopperGroupedFp8Configs =
    int(sizeof(kHopperGroupedFp8Configs) / sizeof(kHopperGroupedFp8Configs[0]));
// The configs GroupedGemmArgs::config indexes (kHopperGroupedConfigs), and
// GroupedGemmFp8Args::config (kHopperGroupedFp8Configs).
const std::vector<GemmConfigInfo>& grouped_gemm_configs();
const std::vector<GemmConfigInfo>& grouped_gemm_fp8_configs();
// The config the heuristic picks for groups of about `rows_per_group` rows (the contiguous
// layout's mean, the masked layout's M_max): row tiles no taller than a group needs.
int grouped_gemm_heuristic(int64_t rows_per_group, int64_t n, int64_t k, int64_t groups, int num_sms);
int grouped_gemm_fp8_heuristic(int64_t rows_per_group, int64_t n, int64_t k, int64_t groups, int num_sms);

// The same table as a vector. Available in every build.
const std::vector<HopperGemmConfig>& hopper_gemm_configs();

// The config the heuristic picks for an M x N x K problem on `num_sms` multiprocessors.
int hopper_gemm_heuristic(int64_t m, int64_t n, int64_t k, int num_sms);
// The same for the int8 configs: an index into kHopperInt8Configs.
int hopper_int8_gemm_heuristic(int64_t m, int64_t n, int64_t k, int num_sms);
// The same for gemm_fp8's configs: an index into kHopperFp8Configs.
int hopper_fp8_gemm_heuristic(int64_t m, int64_t n, int64_t k, int num_sms);

// Split-K: how many units share each tile's k-blocks, for an output of `tile_units`
// scheduling units (tiles, or cluster pairs of them), K of `k_blocks` k-blocks, and `slots`
// units the GPU runs at once. 1 unless the tiles fill at most half the slots; then enough
// splits to fill them, each of at least 4 k-blocks, at most 8.
int hopper_k_splits(int64_t tile_units, int64_t k_blocks, int64_t slots);

// How a stream-K config shares out `tiles` output tiles of `k_blocks` k-blocks over at
// most `max_ctas` resident CTAs: whole waves but the last are data-parallel (dp_tiles, a
// multiple of ctas), the remaining sk_tiles (one to two waves' worth, or all of them) are
// cut by k-block into ctas equal ranges; ctas falls below max_ctas only where that would
// leave a CTA under 4 k-blocks.
struct StreamKPlan {
  int64_t dp_tiles, sk_tiles, ctas;
};
StreamKPlan hopper_stream_k_plan(int64_t tiles, int64_t k_blocks, int64_t max_ctas);

// True when a TMA tensor map can describe the row-major operand `m` with `elem_bytes`-byte
// elements: base pointer 16-byte aligned, leading dimension in bytes a multiple of 16 (not
// needed for a single row) and below 2^40.
bool tma_can_describe(const GemmMatrix& m, int64_t elem_bytes);

// TMA coordinates are int32: every tile origin (up to 2 tiles of 256 past the edge for a
// cluster of 2) must stay representable, so no dim of a Hopper operand may exceed this.
inline constexpr int64_t kMaxTmaDim = INT32_MAX - 1024;

enum class GemmPath { kHopper, kWmma };
const char* gemm_path_name(GemmPath path);  // "hopper" / "wmma"

// Which kernel gemm() runs, from the facts it depends on (pure, for host tests).
GemmPath choose_gemm_path(bool device_is_sm90, bool built_with_sm90a, const GemmMatrix& a,
                          const GemmMatrix& b);

// Validates like gemm() and reports which kernel it would run on this machine.
GemmPath gemm_path(const GemmArgs& args);

// True when this build contains the sm_90a kernels.
constexpr bool hopper_gemm_compiled() {
#if defined(GKS_WITH_SM90A)
  return true;
#else
  return false;
#endif
}

// What the sm_90a launcher needs; built by gemm() after validation.
// (gks::int8_gemm builds it too, with dtype kInt8.)
struct HopperGemmLaunch {
  const void* a;
  int64_t lda;
  // 16-bit: b [K, N] row-major. 8-bit: b transposed, [N, K] row-major (K-major), with a
  // leading dimension TMA can describe.
  const void* b;
  int64_t ldb;
  void* c;
  int64_t ldc;
  int m, n, k;    // all >= 1
  DType dtype;    // of a and b: kFloat16, kBFloat16, kInt8, kFloat8E4M3 or kFloat8E5M2
  DType c_dtype;  // kFloat32, or a's dtype (16-bit); kFloat32, kFloat16 or kBFloat16 (8-bit)
  bool c_vec;     // c's base and leading dimension are 16-byte aligned
  // The fused epilogue (kernels/gemm/epilogue_terms.h): gemm's options; int8_gemm's and
  // gemm_fp8's per-tensor / per-row scales are its row and column scales (stride 0: one
  // scale for every row or column). Gated: c is [M, N / 2].
  kernels::gemm::EpilogueTerms epi{};
  // fp8 block scaling only (kernels/gemm/sm90/tile.cuh's Params): a_scale [M, K / 128] (row
  // stride a_scale_stride), b_scale [K / 128, N / 128] (column stride b_scale_stride).
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  int64_t a_scale_stride = 0, b_scale_stride = 0;
  bool block_scaled = false;
  int64_t a_scale_group_stride = 0, b_scale_group_stride = 0;
  // A valid index into kHopperGemmConfigs (16-bit), kHopperInt8Configs (int8) or
  // kHopperFp8Configs (fp8).
  int config;
  int device;
  int num_sms;
};

// What the grouped launcher needs; built by grouped_gemm() and grouped_gemm_fp8() after
// validation. a and b are read through 3-D tensor maps: a as [slabs, rows, K] (contiguous:
// 1 slab of T rows; masked: G slabs of M_max), b as [G, K, N] (16-bit) or [G, N, K] (fp8:
// K-major); every stride a multiple of 16 bytes.
struct HopperGroupedLaunch {
  const void* a;
  int64_t lda, a_slab_stride;  // elements
  int a_slabs;
  const void* b;
  int64_t ldb, b_group_stride;
  void* c;
  int64_t ldc, c_group_stride;
  bool c_vec;  // c's base, leading dimension and slab stride are 16-byte aligned
  const int* group_offsets;  // one of the two is null
  const int* group_counts;
  int64_t group_stride;  // elements between entries
  int groups;
  int m, n, k;  // m: rows of a slab (T or M_max); all >= 1
  DType dtype;  // of a and b: kFloat16 or kBFloat16, or kFloat8E4M3 (grouped_gemm_fp8)
  DType c_dtype;  // a's (16-bit); kBFloat16, kFloat16 or kFloat32 (fp8)
  // fp8: the block scales (kernels/gemm/sm90/tile.cuh's Params, their strides in elements):
  // a_scale[slab * a_scale_slab_stride + row * a_scale_stride + kb * a_scale_group_stride],
  // b_scale[g * b_scale_slab_stride + kb * b_scale_group_stride + (col / 128) * b_scale_stride].
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  int64_t a_scale_stride = 0, a_scale_group_stride = 0, a_scale_slab_stride = 0;
  int64_t b_scale_stride = 0, b_scale_group_stride = 0, b_scale_slab_stride = 0;
  int config;   // a valid index into kHopperGroupedConfigs (kHopperGroupedFp8Configs: fp8)
  bool config_forced;  // false: the heuristic's, which gives way where G leaves it no room
  int device;
  int num_sms;
};
// Defined in grouped_gemm_sm90a.cu (only when GKS_WITH_SM90A is defined).
void launch_hopper_grouped_sm90a(const HopperGroupedLaunch& launch, cudaStream_t stream);

// Defined in gemm_sm90a.cu, which exists in the library only when GKS_WITH_SM90A is
// defined; call it only under that macro.
void launch_hopper_gemm_sm90a(const HopperGemmLaunch& launch, cudaStream_t stream);
// Its parts by operand type and epilogue, each a source of its own so that they compile in
// parallel (gemm_fp8_sm90a.cu, gemm_bf16_sm90a.cu, gemm_int8_sm90a.cu with the fused
// epilogue; gemm_fp16_plain_sm90a.cu and gemm_bf16_plain_sm90a.cu without one, for calls
// that give no term); launch_hopper_gemm_sm90a (gemm_sm90a.cu: fp16 with the fused
// epilogue itself) calls them.
void launch_hopper_fp8_sm90a(const HopperGemmLaunch& launch, cudaStream_t stream);
void launch_hopper_bf16_sm90a(const HopperGemmLaunch& launch, cudaStream_t stream);
void launch_hopper_int8_sm90a(const HopperGemmLaunch& launch, cudaStream_t stream);
void launch_hopper_fp16_plain_sm90a(const HopperGemmLaunch& launch, cudaStream_t stream);
void launch_hopper_bf16_plain_sm90a(const HopperGemmLaunch& launch, cudaStream_t stream);

}  // namespace detail
}  // namespace gks
