// SPDX-License-Identifier: Apache-2.0
#include "gks/gemm.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <tuple>

#include "gemm/byte_gemm.h"
#include "gemm/launch.h"
#include "gks/kernels/gemm/int8.cuh"
#include "core/launch.h"
#include "core/workspace.h"

namespace gks {
namespace detail {
namespace {

// The compiled configs. Template arguments: warps (m, n), m16 tiles per warp, n8 tiles per
// warp (= bytes a lane reads per B row), block K in bytes, pipeline stages. The 128x128
// tiles run fastest on large outputs, 128x256 a little behind; 64x64x128 is for small and
// skinny outputs (docs/perf/gemm.md has the tile rates).
struct Int8_128x128x64 : kernels::gemm::Int8Tile<2, 2, 4, 8, 64, 4> {
  static constexpr const char* kName = "128x128x64_w64x64_s4";
};
struct Int8_128x128x128 : kernels::gemm::Int8Tile<2, 2, 4, 8, 128, 3> {
  static constexpr const char* kName = "128x128x128_w64x64_s3";
};
struct Int8_128x256x128 : kernels::gemm::Int8Tile<2, 4, 4, 8, 128, 3> {
  static constexpr const char* kName = "128x256x128_w64x64_s3";
};
struct Int8_64x64x128 : kernels::gemm::Int8Tile<2, 2, 2, 4, 128, 4> {
  static constexpr const char* kName = "64x64x128_w32x32_s4";
};
using Int8MmaConfigs = std::tuple<Int8_128x128x64, Int8_128x128x128, Int8_128x256x128, Int8_64x64x128>;
constexpr int kMmaConfigs = int(std::tuple_size_v<Int8MmaConfigs>);

template <class Cfg>
void launch_config(kernels::gemm::Int8GemmParams p, bool aligned, int device, cudaStream_t stream) {
  if (aligned)
    launch_gemm_tiles<Cfg, kernels::gemm::int8_gemm_kernel<Cfg, true>>(p, device, stream);
  else
    launch_gemm_tiles<Cfg, kernels::gemm::int8_gemm_kernel<Cfg, false>>(p, device, stream);
}

}  // namespace

const std::vector<GemmConfigInfo>& int8_gemm_configs() {
  static const std::vector<GemmConfigInfo> configs = [] {
    std::vector<GemmConfigInfo> list = gemm_config_infos<Int8MmaConfigs>();
    for (const HopperGemmConfig& c : kHopperInt8Configs)
      list.push_back({c.name, c.block_m, c.block_n, c.block_k, 384, c.stages});
    return list;
  }();
  return configs;
}

Int8GemmConfigRef int8_gemm_config_ref(int config) {
  if (config < 0) return {Int8GemmKernel::kHeuristic, -1};
  if (config < kMmaConfigs) return {Int8GemmKernel::kMma, config};
  return {Int8GemmKernel::kHopper, config - kMmaConfigs};
}

int int8_gemm_heuristic(int64_t m, int64_t n, int64_t /*k*/, int num_sms) {
  // Relative speeds on large outputs (docs/perf/gemm.md); blocks per SM from registers and
  // shared memory.
  static const std::vector<GemmConfigTraits> traits = {{2, 1.0}, {2, 0.98}, {1, 0.9}, {4, 0.65}};
  static const std::vector<GemmConfigInfo> mma = gemm_config_infos<Int8MmaConfigs>();
  return pick_gemm_config(mma, traits, m, n, num_sms);
}

const char* int8_gemm_path_name(Int8GemmPath path) {
  switch (path) {
    case Int8GemmPath::kHopper: return "hopper";
    case Int8GemmPath::kHopperTransposed: return "hopper+transpose";
    case Int8GemmPath::kMma: return "mma";
    default: return "mma+transpose";
  }
}

Int8GemmPath choose_int8_gemm_path(const Int8PathFacts& f) {
  const Int8GemmPath mma = f.b_k_major ? Int8GemmPath::kMmaTransposed : Int8GemmPath::kMma;
  const Int8GemmKernel forced = int8_gemm_config_ref(f.config).kernel;
  const bool forced_mma = forced == Int8GemmKernel::kMma;
  const bool forced_hopper = forced == Int8GemmKernel::kHopper;
  if (forced_mma || !f.device_is_sm90 || !f.built_with_sm90a || !tma_can_describe(f.a, 1))
    return mma;
  if (f.a.rows > kMaxTmaDim || f.a.cols > kMaxTmaDim || f.n > kMaxTmaDim) return mma;
  if (f.b_k_major) return tma_can_describe(f.b_storage, 1) ? Int8GemmPath::kHopper : mma;
  return forced_hopper || f.a.rows >= kInt8HopperMinRows ? Int8GemmPath::kHopperTransposed : mma;
}

namespace {

constexpr const char* kOp = "gks.int8_gemm";

// int8_gemm's arguments once validated.
struct Int8Validated : ByteOperands {
  int64_t sa_stride = 0, sb_stride = 0;
};

Int8Validated validate(const Int8GemmArgs& args) {
  check_cuda(args.a, kOp, "a_q");
  check_dtype(args.a, DType::kInt8, kOp, "a_q");
  check_same_device(args.a, "a_q", args.b, "b_q", kOp);
  check_dtype(args.b, DType::kInt8, kOp, "b_q");
  check_scales_and_output(args.a, "a_q", args.a_scale, args.b_scale, args.c, kOp);
  Int8Validated v;
  static_cast<ByteOperands&>(v) = byte_operands(args.a, "a_q", args.b, "b_q", args.c, args.config,
                                                int(int8_gemm_configs().size()), kOp);
  v.sa_stride = scale_stride(args.a_scale, v.ops.a.rows, true, kOp, "a_scale");
  v.sb_stride = scale_stride(args.b_scale, v.ops.n, false, kOp, "b_scale");
  check_outputs({{&args.c, "c"}},
                {{&args.a, "a_q"}, {&args.b, "b_q"}, {&args.a_scale, "a_scale"}, {&args.b_scale, "b_scale"}},
                kOp);
  return v;
}

Int8PathFacts path_facts(const Int8GemmArgs& args, const Int8Validated& v) {
  Int8PathFacts f;
  f.device_is_sm90 = device_is_sm90(args.a.device.index);
  f.built_with_sm90a = hopper_gemm_compiled();
  f.a = v.ops.a;
  f.b_k_major = v.b_k_major;
  f.b_storage = v.b_storage;
  f.n = v.ops.n;
  f.config = args.config;
  return f;
}

#if defined(GKS_WITH_SM90A)
// The Hopper kernel on a_q and the K-major b `bt` ([N, K], leading dimension ldbt).
void launch_hopper(const Int8GemmArgs& args, const Int8Validated& v, const void* bt, int64_t ldbt,
                   int config, int device, cudaStream_t stream) {
  const GemmMatrix &a = v.ops.a, &c = v.ops.c;
  HopperGemmLaunch launch{};
  launch.a = a.data;
  launch.lda = a.ld;
  launch.b = bt;
  launch.ldb = ldbt;
  launch.c = c.data;
  launch.ldc = c.ld;
  launch.m = int(v.ops.m);
  launch.n = int(v.ops.n);
  launch.k = int(v.ops.k);
  launch.dtype = DType::kInt8;
  launch.c_dtype = args.c.dtype;
  launch.c_vec = gemm_rows_aligned16(c, dtype_size(args.c.dtype));
  // The scales are the fused epilogue's row and column scales.
  launch.epi.row_scale = static_cast<const float*>(args.a_scale.data);
  launch.epi.col_scale = static_cast<const float*>(args.b_scale.data);
  launch.epi.row_scale_stride = v.sa_stride;
  launch.epi.col_scale_stride = v.sb_stride;
  launch.config = config;
  launch.device = device;
  launch.num_sms = device_sm_count(device);
  launch_hopper_gemm_sm90a(launch, stream);
  check_launch(kOp);
}
#endif

// The mma.sync kernel on a_q and the row-major b [K, N] at `b` (leading dimension ldb).
void launch_mma(const Int8GemmArgs& args, const Int8Validated& v, const void* b, int64_t ldb,
                int device, cudaStream_t stream) {
  const GemmMatrix &a = v.ops.a, &c = v.ops.c;
  const int64_t m = v.ops.m, n = v.ops.n, k = v.ops.k;
  const auto& configs = int8_gemm_configs();
  const Int8GemmConfigRef forced = int8_gemm_config_ref(args.config);
  const int config = forced.kernel == Int8GemmKernel::kMma
                         ? forced.index
                         : int8_gemm_heuristic(m, n, k, device_sm_count(device));
  GKS_CHECK(gemm_tile_count(configs[config], m, n) <= INT_MAX, kInvalidArgument)
      << kOp << ": the output " << m << " x " << n << " needs more than 2^31 - 1 tiles";
  const GemmMatrix b_rows{const_cast<void*>(b), k, n, ldb};

  kernels::gemm::Int8GemmParams p{};
  p.a = static_cast<const int8_t*>(a.data);
  p.b = static_cast<const int8_t*>(b);
  p.a_scale = static_cast<const float*>(args.a_scale.data);
  p.b_scale = static_cast<const float*>(args.b_scale.data);
  p.c = c.data;
  p.s.m = int(m);
  p.s.n = int(n);
  p.s.k = int(k);
  p.s.lda = a.ld;
  p.s.ldb = ldb;
  p.s.ldc = c.ld;
  p.a_scale_stride = v.sa_stride;
  p.b_scale_stride = v.sb_stride;
  p.c_kind = gemm_c_kind(args.c.dtype);
  p.c_vec = gemm_rows_aligned16(c, dtype_size(args.c.dtype));
  const bool aligned = gemm_rows_aligned16(a, 1) && gemm_rows_aligned16(b_rows, 1);
  with_gemm_config<Int8MmaConfigs>(config, [&](auto cfg) {
    launch_config<decltype(cfg)>(p, aligned, device, stream);
  });
  check_launch(kOp);
}

}  // namespace

Int8GemmPath int8_gemm_path(const Int8GemmArgs& args) {
  const Int8Validated v = validate(args);
  return choose_int8_gemm_path(path_facts(args, v));
}

}  // namespace detail

void int8_gemm(const Int8GemmArgs& args, cudaStream_t stream) {
  using namespace detail;
  const Int8Validated v = validate(args);
  const int64_t m = v.ops.m, n = v.ops.n, k = v.ops.k;
  if (validating_only() || m == 0 || n == 0) return;

  const int device = args.a.device.index;
  const DeviceGuard guard(device);
  if (k == 0) {
    zero_gemm_output(v.ops.c, dtype_size(args.c.dtype), stream, kOp);
    return;
  }
  const Int8GemmPath path = choose_int8_gemm_path(path_facts(args, v));
  const GemmMatrix& bs = v.b_storage;
  switch (path) {
#if defined(GKS_WITH_SM90A)
    case Int8GemmPath::kHopper:
    case Int8GemmPath::kHopperTransposed: {
      const Int8GemmConfigRef forced = int8_gemm_config_ref(args.config);
      const int config = forced.kernel == Int8GemmKernel::kHopper
                             ? forced.index
                             : hopper_int8_gemm_heuristic(m, n, k, device_sm_count(device));
      if (path == Int8GemmPath::kHopper) {
        launch_hopper(args, v, bs.data, bs.ld, config, device, stream);
      } else {
        const int64_t ldbt = padded_ld(k);
        StreamBuffer bt(size_t(n) * size_t(ldbt), device, stream, kOp, "the transposed b_q");
        transpose_bytes(bs, bt.get<int8_t>(), ldbt, stream, kOp);  // [K, N] -> [N, K]
        launch_hopper(args, v, bt.get<int8_t>(), ldbt, config, device, stream);
      }
      return;
    }
#endif
    case Int8GemmPath::kMmaTransposed: {
      const int64_t ldb = padded_ld(n);
      StreamBuffer b(size_t(k) * size_t(ldb), device, stream, kOp, "the transposed b_q");
      transpose_bytes(bs, b.get<int8_t>(), ldb, stream, kOp);  // [N, K] -> [K, N]
      launch_mma(args, v, b.get<int8_t>(), ldb, device, stream);
      return;
    }
    default:
      launch_mma(args, v, bs.data, bs.ld, device, stream);
      return;
  }
}

}  // namespace gks
