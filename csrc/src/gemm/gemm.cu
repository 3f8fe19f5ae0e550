// SPDX-License-Identifier: Apache-2.0
// gks::gemm: validation, the Hopper-or-WMMA decision, config choice and dispatch. Compiled
// for every architecture; the sm_90a kernels live in gemm_sm90a.cu and are reached
// only under GKS_WITH_SM90A. The fused epilogue runs in the Hopper kernel's stores; the
// WMMA fallback computes the product into an fp32 temporary that apply_gemm_epilogue
// finishes.
#include "gks/gemm.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <iterator>

#include "gemm/launch.h"
#include "core/launch.h"
#include "core/workspace.h"

namespace gks {
namespace detail {
namespace {

constexpr const char* kOp = "gks.gemm";

GemmOperands validate(const GemmArgs& args) {
  return half_gemm_operands(args.a, args.b, args.c, args.config, kNumHopperGemmConfigs, kOp, &args.epilogue);
}

// The heuristic over one config table (see hopper_gemm_heuristic).
template <size_t kCount>
int pick_hopper_config(const HopperGemmConfig (&table)[kCount], int64_t m, int64_t n, int num_sms) {
  // Single-CTA configs only: one CTA per SM (persistent), so the score is the share of the
  // last wave that is busy x the share of the tiles inside the matrix x a guess at the
  // inner loop's efficiency (wide tiles reuse more per byte loaded). The cluster,
  // ping-pong and stream-K configs are left to the autotuner (but see
  // hopper_gemm_heuristic's one row of tiles).
  std::vector<GemmConfigInfo> infos;
  std::vector<GemmConfigTraits> traits;
  std::vector<int> index;
  for (int i = 0; i < int(kCount); ++i) {
    const HopperGemmConfig& c = table[i];
    if (c.cluster_m != 1 || c.cluster_n != 1 || c.ping_pong || c.stream_k) continue;
    infos.push_back({c.name, c.block_m, c.block_n, c.block_k, 384, c.stages});
    const int area = c.block_m * c.block_n;
    traits.push_back({1, area >= 128 * 256 ? (c.block_n >= c.block_m ? 1.0 : 0.99)
                         : area >= 128 * 128 ? 0.85
                                             : 0.6});
    index.push_back(i);
  }
  return index[pick_gemm_config(infos, traits, m, n, num_sms)];
}

}  // namespace

const std::vector<HopperGemmConfig>& hopper_gemm_configs() {
  static const std::vector<HopperGemmConfig> configs(std::begin(kHopperGemmConfigs),
                                                     std::end(kHopperGemmConfigs));
  return configs;
}

int hopper_gemm_heuristic(int64_t m, int64_t n, int64_t /*k*/, int num_sms) {
  const int pick = pick_hopper_config(kHopperGemmConfigs, m, n, num_sms);
  // One row of 128 x 128 tiles, enough of them not to split K: every tile reads all of A,
  // which a cluster of 4 along N loads once for four tiles (docs/perf/gemm.md).
  const HopperGemmConfig& c = kHopperGemmConfigs[pick];
  const int64_t tiles_n = (n + c.block_n - 1) / c.block_n;
  if (c.block_m == 128 && c.block_n == 128 && c.cluster_m == 1 && m <= c.block_m &&
      2 * tiles_n > num_sms) {
    for (int i = 0; i < kNumHopperGemmConfigs; ++i) {
      const HopperGemmConfig& t = kHopperGemmConfigs[i];
      if (t.block_m == 128 && t.block_n == 128 && t.cluster_n == 4 && t.stages == c.stages)
        return i;
    }
  }
  return pick;
}

int hopper_int8_gemm_heuristic(int64_t m, int64_t n, int64_t /*k*/, int num_sms) {
  return pick_hopper_config(kHopperInt8Configs, m, n, num_sms);
}

int hopper_fp8_gemm_heuristic(int64_t m, int64_t n, int64_t /*k*/, int num_sms) {
  return pick_hopper_config(kHopperFp8Configs, m, n, num_sms);
}

int hopper_k_splits(int64_t tile_units, int64_t k_blocks, int64_t slots) {
  if (tile_units <= 0 || 2 * tile_units > slots) return 1;
  const int64_t splits = std::min<int64_t>({slots / tile_units, k_blocks / 4, 8});
  return int(std::max<int64_t>(splits, 1));
}

StreamKPlan hopper_stream_k_plan(int64_t tiles, int64_t k_blocks, int64_t max_ctas) {
  constexpr int64_t kMinIterations = 4;
  StreamKPlan plan;
  plan.dp_tiles = tiles >= 2 * max_ctas ? (tiles / max_ctas - 1) * max_ctas : 0;
  plan.sk_tiles = tiles - plan.dp_tiles;
  plan.ctas = plan.dp_tiles > 0
                  ? max_ctas
                  : std::clamp<int64_t>(plan.sk_tiles * k_blocks / kMinIterations, 1, max_ctas);
  return plan;
}

bool tma_can_describe(const GemmMatrix& m, int64_t elem_bytes) {
  if (reinterpret_cast<uintptr_t>(m.data) % 16 != 0) return false;
  if (m.rows <= 1) return true;  // the row stride is never used (the launcher pads it)
  const int64_t stride_bytes = m.ld * elem_bytes;
  return stride_bytes % 16 == 0 && stride_bytes < (int64_t(1) << 40);
}

const char* gemm_path_name(GemmPath path) { return path == GemmPath::kHopper ? "hopper" : "wmma"; }

GemmPath choose_gemm_path(bool device_is_sm90, bool built_with_sm90a, const GemmMatrix& a,
                          const GemmMatrix& b) {
  if (!device_is_sm90 || !built_with_sm90a) return GemmPath::kWmma;
  if (!tma_can_describe(a, 2) || !tma_can_describe(b, 2)) return GemmPath::kWmma;
  if (a.rows > kMaxTmaDim || a.cols > kMaxTmaDim || b.cols > kMaxTmaDim) return GemmPath::kWmma;
  return GemmPath::kHopper;
}

GemmPath gemm_path(const GemmArgs& args) {
  const GemmOperands ops = validate(args);
  return choose_gemm_path(device_is_sm90(args.a.device.index), hopper_gemm_compiled(), ops.a,
                          ops.b);
}

}  // namespace detail

void gemm(const GemmArgs& args, cudaStream_t stream) {
  const detail::GemmOperands ops = detail::validate(args);
  const int64_t m = ops.a.rows, n = ops.b.cols, k = ops.a.cols;
  if (validating_only() || m == 0 || n == 0) return;
  const int device = args.a.device.index;
  const detail::DeviceGuard guard(device);
  const int64_t c_elem = dtype_size(args.c.dtype);
  const bool fused = detail::has_epilogue(args.epilogue);
  const kernels::gemm::EpilogueTerms terms = detail::epilogue_terms(args.epilogue);
  if (k == 0) {
    if (fused)
      detail::apply_gemm_epilogue(nullptr, 0, ops.c, args.c.dtype, m, n, terms, stream, detail::kOp);
    else
      detail::zero_gemm_output(ops.c, c_elem, stream, detail::kOp);
    return;
  }
  const detail::GemmPath path = detail::choose_gemm_path(
      detail::device_is_sm90(device), detail::hopper_gemm_compiled(), ops.a, ops.b);
  if (path == detail::GemmPath::kWmma) {
    WmmaGemmArgs fallback;
    fallback.a = args.a;
    fallback.b = args.b;
    fallback.c = args.c;
    if (!fused) {
      wmma_gemm(fallback, stream);
      return;
    }
    // The product in fp32 (a temporary that lives until the epilogue is done: stream order),
    // then the epilogue into c.
    detail::StreamBuffer y(size_t(m) * size_t(n) * 4, device, stream, detail::kOp, "the product before the epilogue");
    fallback.c = TensorRef::make(y.get<void>(), DType::kFloat32, {m, n}, args.a.device);
    wmma_gemm(fallback, stream);
    detail::apply_gemm_epilogue(y.get<float>(), n, ops.c, args.c.dtype, m, n, terms, stream, detail::kOp);
    return;
  }
#if defined(GKS_WITH_SM90A)
  detail::HopperGemmLaunch launch{};
  launch.a = ops.a.data;
  launch.lda = ops.a.ld;
  launch.b = ops.b.data;
  launch.ldb = ops.b.ld;
  launch.c = ops.c.data;
  launch.ldc = ops.c.ld;
  launch.m = int(m);
  launch.n = int(n);
  launch.k = int(k);
  launch.dtype = args.a.dtype;
  launch.c_dtype = args.c.dtype;
  launch.c_vec = detail::gemm_rows_aligned16(ops.c, c_elem);
  launch.epi = terms;
  launch.device = device;
  launch.num_sms = detail::device_sm_count(device);
  launch.config = args.config >= 0 ? args.config
                                   : detail::hopper_gemm_heuristic(m, n, k, launch.num_sms);
  detail::launch_hopper_gemm_sm90a(launch, stream);
  detail::check_launch(detail::kOp);
#endif
}

}  // namespace gks
