// SPDX-License-Identifier: Apache-2.0
// The quantize family's FP8 (e4m3) kernels on the row skeleton; the contract is in
// gks/quantize.h. They share INT8's chunks (quantize.cuh: a thread's unit is 16 contiguous
// elements of a row, loaded as raw bits, absmax as sign-cleared fp32 bits) and differ in the
// output: Fp8Store below turns a chunk into 16 e4m3 bytes, one 16-byte store.
//  - per token: QuantizeRowOf over Fp8Format (int8's registers / looped shapes);
//  - per 1 x 128 group and per tensor: QuantizeFp8GroupRow, tiled, no reduction along the
//    row: the 8 lanes that hold a group's 8 chunks reduce it with 3 shuffles (per tensor:
//    the scale comes from fp8_tensor_absmax_kernel's atomic max, a first pass);
//  - per 128 x 128 block: QuantizeFp8BlockTile, a 256-thread block a block of x held in
//    registers (4 chunks a thread), one block reduction.
// Fp8Store is also the output policy of the fused norm / activation + quantize ops.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "gks/kernels/reduce.cuh"
#include "gks/kernels/rows/common.cuh"
#include "gks/kernels/rows/quantize.cuh"

namespace gks::kernels::rows {

struct QuantizeFp8Params {
  const void* x;
  uint8_t* q;  // e4m3 bytes
  float* scale;
  RowLayout x_rows;
  RowLayout q_rows;
  RowLayout scale_rows;  // token / group: a row of x's scales; block: a row of blocks
  int64_t rows;
  int64_t cols;
  bool scale_ue8m0;
  int64_t col_blocks;       // tiled kernels: blocks along a row
  int64_t blocks;           // tiled kernels: all of them
  uint32_t* tensor_absmax;  // per tensor: the absmax's bits (atomic max of the first pass)
};

struct DequantizeFp8Params {
  const uint8_t* q;
  const float* scale;
  void* out;
  RowLayout q_rows;
  RowLayout scale_rows;
  RowLayout out_rows;
  int64_t rows;
  int64_t cols;
  int64_t col_blocks;
  int64_t blocks;
  int mode;  // gks::Fp8Granularity: 0 tensor, 1 token, 2 group, 3 block
};

namespace fp8q {

constexpr float kMax = 448.f;  // e4m3fn's largest finite value
constexpr int kGroup = 128;    // 1 x 128 groups, 128 x 128 blocks
constexpr int kChunk = 16;     // elements a thread takes at once (kGroup / kChunk lanes a group)

// absmax / 448 (IEEE); with ue8m0, rounded up to a power of two (at least 2^-126: the bits
// of a subnormal plus 0x7fffff carry into the smallest exponent). 0, inf and NaN stay.
__device__ __forceinline__ float group_scale(float absmax, bool ue8m0) {
  float s = __fdiv_rn(absmax, kMax);
  if (ue8m0) {
    const uint32_t b = __float_as_uint(s);
    if (s != 0.f && b < 0x7f800000u) s = __uint_as_float((b + 0x7fffffu) & 0xff800000u);
  }
  return s;
}

struct Scale {
  float scale;
  float inv;  // 1 / scale, correctly rounded (the fast path only)
  bool fast;  // scale in [2^-64, 2^126]: Markstein's quotient is x / scale, see quantize.cuh
};

__device__ __forceinline__ Scale make_scale(float scale) {
  Scale s;
  s.scale = scale;
  s.fast = scale >= int8q::kFastMin && scale <= int8q::kFastMax;
  s.inv = __frcp_rn(scale);
  return s;
}

// v = x / scale correctly rounded (Markstein on the fast path, as int8's: the quotients it
// could get wrong lie far below e4m3's smallest subnormal's half, 2^-10, and round to 0
// either way); 0 where scale is 0.
template <bool kFast>
__device__ __forceinline__ float divide(float x, const Scale& s) {
  if constexpr (kFast) {
    const float q0 = x * s.inv;
    const float rem = fmaf(-q0, s.scale, x);
    // x / scale has x's sign; the correction's +0 + -0 would lose it for x = -0.
    return copysignf(fmaf(rem, s.inv, q0), x);
  } else {
    const float v = __fdiv_rn(x, s.scale);
    return s.scale == 0.f ? 0.f : v;
  }
}

// e4m3 of (a, b, c, d) as one little-endian word, rounded to nearest even, saturated to
// +-448 (which is clamp(v, -448, 448): the contract's), NaN kept. One cvt per pair on
// sm_89+ (the header's software path on sm_80).
__device__ __forceinline__ uint32_t pack4(float a, float b, float c, float d) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}
__device__ __forceinline__ uint8_t to_e4m3(float v) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float from_e4m3(uint8_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
  return __half2float(__half(h));
}

// Loads elements [col, col + kN) of a row (0 past `cols`): 16-byte accesses when kVector and
// the chunk lies inside the row, else one element at a time.
template <bool kVector, typename T, int kN>
__device__ __forceinline__ void load(const T* row, int64_t col, int64_t cols, int8q::Chunk<T, kN>& c) {
  if constexpr (kVector) {
    int8q::load_chunk(row, col, cols, c);
  } else {
#pragma unroll
    for (int i = 0; i < int8q::Chunk<T, kN>::kWords; ++i) c.w[i] = 0;
#pragma unroll
    for (int j = 0; j < kN; ++j)
      if (col + j < cols)
        c.w[j * int(sizeof(T)) / 4] |= int8q::raw_bits(row[col + j]) << (8 * ((j * int(sizeof(T))) % 4));
  }
}

// The output policy: values of a chunk -> e4m3 bytes q_row[col, col + kN) (those below
// `cols`), one 16-byte store when kVector, kN == 16 and the chunk lies inside the row.
// `value(j)` gives the chunk's j-th value before the division by the scale.
template <bool kFast, bool kVector, int kN, class Value>
__device__ __forceinline__ void store_values(Value&& value, const Scale& s, uint8_t* q_row,
                                             int64_t col, int64_t cols) {
  if constexpr (kVector && kN == 16) {
    if (col + kN <= cols) {
      uint32_t w[4];
#pragma unroll
      for (int g = 0; g < 4; ++g)
        w[g] = pack4(divide<kFast>(value(4 * g), s), divide<kFast>(value(4 * g + 1), s),
                     divide<kFast>(value(4 * g + 2), s), divide<kFast>(value(4 * g + 3), s));
      *reinterpret_cast<uint4*>(q_row + col) = make_uint4(w[0], w[1], w[2], w[3]);
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < kN; ++j)
    if (col + j < cols) q_row[col + j] = to_e4m3(divide<kFast>(value(j), s));
}

template <bool kFast, bool kVector, typename T, int kN>
__device__ __forceinline__ void store_chunk(const int8q::Chunk<T, kN>& c, const Scale& s,
                                            uint8_t* q_row, int64_t col, int64_t cols) {
  store_values<kFast, kVector, kN>([&](int j) { return int8q::chunk_value(c, j); }, s, q_row, col, cols);
}

// Calls body(fast) with fast a std::integral_constant<bool, s.fast>: the path picked once.
template <class Body>
__device__ __forceinline__ void with_path(const Scale& s, Body&& body) {
  if (s.fast)
    body(std::true_type{});
  else
    body(std::false_type{});
}

// The absmax bits of a chunk reduced over the kGroup / kChunk lanes that hold a group.
template <typename T>
__device__ __forceinline__ float group_absmax(const int8q::Chunk<T, kChunk>& c) {
  int8q::AbsMaxBits acc;
  int8q::accumulate_absmax(c, acc);
  return warp_reduce<kGroup / kChunk>(__uint_as_float(acc.bits), int8q::AbsMaxBitsOp{});
}

}  // namespace fp8q

// ---- per token: the per-row quantizer (quantize.cuh) over the e4m3 format ----

struct Fp8Format {
  using Params = QuantizeFp8Params;
  using Scale = fp8q::Scale;
  static __device__ __forceinline__ Scale make_scale(float absmax, const Params& p) {
    return fp8q::make_scale(fp8q::group_scale(absmax, p.scale_ue8m0));
  }
  static __device__ __forceinline__ float scale_value(const Scale& s) { return s.scale; }
  template <class Body>
  static __device__ __forceinline__ void with_store(const Scale& s, Body&& body) {
    fp8q::with_path(s, [&](auto fast) {
      body([&](const auto& c, uint8_t* q_row, int64_t col, int64_t cols) {
        // kChunk is 16 only on the aligned path (the host's choice), 1 otherwise.
        fp8q::store_chunk<decltype(fast)::value, true>(c, s, q_row, col, cols);
      });
    });
  }
};

template <typename T, int kChunk>
struct QuantizeFp8TokenRow : QuantizeRowOf<T, kChunk, Fp8Format> {};

// ---- per 1 x 128 group (kTensor: one scale for all, from the first pass) ----

// Block b covers rows [(b / col_blocks) * kRowsPerBlock, + kRowsPerBlock) and
// kChunksPerThread * kThreadsPerRow chunks of 16 of them from chunk (b % col_blocks) * that;
// consecutive lanes take consecutive chunks, so lanes 8k .. 8k + 7 hold one group. Every lane
// of a warp takes part in the shuffles (a warp is one row: kThreadsPerRow >= 32).
// kVector: x and q rows 16-byte aligned (else scalar accesses, still a chunk a thread).
template <typename T, bool kVector, bool kTensor>
struct QuantizeFp8GroupRow : ElementwiseTiles {
  using Params = QuantizeFp8Params;

  template <class S>
  static __device__ __forceinline__ void tiled(const Params& p) {
    constexpr int kThreadsPerRow = S::kThreadsPerRow, kRowsPerBlock = S::kRowsPerBlock;
    constexpr int kChunksPerThread = S::kVecsPerThread;
    using namespace fp8q;
    constexpr int64_t kBlockCols = int64_t(kChunksPerThread) * kThreadsPerRow * kChunk;
    fp8q::Scale tensor_scale{};
    if constexpr (kTensor) {
      tensor_scale = make_scale(group_scale(__uint_as_float(*p.tensor_absmax), p.scale_ue8m0));
      if (blockIdx.x == 0 && threadIdx.x == 0 && threadIdx.y == 0) p.scale[0] = tensor_scale.scale;
    }
    for (int64_t b = blockIdx.x; b < p.blocks; b += gridDim.x) {
      const int64_t row = (b / p.col_blocks) * kRowsPerBlock + threadIdx.y;
      if (row >= p.rows) continue;  // a whole warp: no shuffle is left half done
      const int64_t first = (b % p.col_blocks) * kBlockCols + int64_t(threadIdx.x) * kChunk;
      const T* x = static_cast<const T*>(p.x) + p.x_rows.row_offset(row);
      uint8_t* q = p.q + p.q_rows.row_offset(row);
      int8q::Chunk<T, kChunk> c[kChunksPerThread];
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i)
        load<kVector>(x, first + int64_t(i) * kThreadsPerRow * kChunk, p.cols, c[i]);
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        const int64_t col = first + int64_t(i) * kThreadsPerRow * kChunk;
        fp8q::Scale s = tensor_scale;
        if constexpr (!kTensor) {
          // Lanes past the row's end hold zeros and take part in the group's shuffles.
          s = make_scale(group_scale(group_absmax(c[i]), p.scale_ue8m0));
          if (threadIdx.x % (kGroup / kChunk) == 0 && col < p.cols)
            p.scale[p.scale_rows.row_offset(row) + col / kGroup] = s.scale;
        }
        if (col < p.cols)
          with_path(s, [&](auto fast) { store_chunk<decltype(fast)::value, kVector>(c[i], s, q, col, p.cols); });
      }
    }
  }
};

// The first pass of per-tensor quantization: the absmax of x by an atomic max of the bits
// (sign-cleared fp32 bits order as their values, NaN above inf). Block b of p.blocks takes
// 4096 columns (256 threads x 16) of row b / col_blocks; the grid strides.
template <typename T, bool kVector>
__global__ void __launch_bounds__(256) fp8_tensor_absmax_kernel(const QuantizeFp8Params p) {
  __shared__ float scratch[256 / 32];
  int8q::AbsMaxBits acc;
  for (int64_t b = blockIdx.x; b < p.blocks; b += gridDim.x) {
    const int64_t row = b / p.col_blocks;
    const int64_t col = (b % p.col_blocks) * (256 * fp8q::kChunk) + int64_t(threadIdx.x) * fp8q::kChunk;
    int8q::Chunk<T, fp8q::kChunk> c;
    fp8q::load<kVector>(static_cast<const T*>(p.x) + p.x_rows.row_offset(row), col, p.cols, c);
    int8q::accumulate_absmax(c, acc);
  }
  const float m = group_reduce<256>(__uint_as_float(acc.bits), int8q::AbsMaxBitsOp{}, scratch);
  if (threadIdx.x == 0) atomicMax(p.tensor_absmax, __float_as_uint(m));
}

// ---- per 128 x 128 block (x 2-D) ----

// A 256-thread block takes block (b / col_blocks, b % col_blocks) of x: thread t holds the
// chunk t % 8 of rows t / 8 + 32 i (i < 4), so a warp reads 4 rows of 256 bytes or more.
template <typename T, bool kVector>
struct QuantizeFp8BlockTile {
  using Params = QuantizeFp8Params;
  static constexpr int kThreads = 256, kRowsAtOnce = kThreads / (fp8q::kGroup / fp8q::kChunk);
  static constexpr int kChunksPerThread = fp8q::kGroup / kRowsAtOnce;
  using Shape = Tiled<kThreads, 1, kChunksPerThread>;

  template <class S>
  static constexpr bool compiled() {
    return std::is_same_v<S, Shape>;
  }
  template <class S>
  static constexpr int min_blocks() {
    return 0;
  }

  template <class S>
  static __device__ __forceinline__ void tiled(const Params& p) {
    using namespace fp8q;
    __shared__ float scratch[kThreads / 32];
    const int lane = threadIdx.x % (kGroup / kChunk), r0 = threadIdx.x / (kGroup / kChunk);
    for (int64_t b = blockIdx.x; b < p.blocks; b += gridDim.x) {
      const int64_t block_row = b / p.col_blocks, block_col = b % p.col_blocks;
      const int64_t col = block_col * kGroup + lane * kChunk;
      int8q::Chunk<T, kChunk> c[kChunksPerThread];
      int8q::AbsMaxBits acc;
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        const int64_t row = block_row * kGroup + r0 + i * kRowsAtOnce;
        const T* x = static_cast<const T*>(p.x) + p.x_rows.row_offset(row < p.rows ? row : 0);
        load<kVector>(x, col, row < p.rows ? p.cols : 0, c[i]);
        int8q::accumulate_absmax(c[i], acc);
      }
      const float absmax = group_reduce<kThreads>(__uint_as_float(acc.bits), int8q::AbsMaxBitsOp{}, scratch);
      const Scale s = make_scale(group_scale(absmax, p.scale_ue8m0));
      if (threadIdx.x == 0) p.scale[p.scale_rows.row_offset(block_row) + block_col] = s.scale;
      if (col >= p.cols) continue;
      with_path(s, [&](auto fast) {
#pragma unroll
        for (int i = 0; i < kChunksPerThread; ++i) {
          const int64_t row = block_row * kGroup + r0 + i * kRowsAtOnce;
          if (row < p.rows)
            store_chunk<decltype(fast)::value, kVector>(c[i], s, p.q + p.q_rows.row_offset(row), col, p.cols);
        }
      });
    }
  }
};

// ---- dequantize: out = q * scale, tiled as int8's (DequantizeRow) ----

template <typename T, int kChunk>
struct DequantizeFp8Row : ElementwiseTiles {
  using Params = DequantizeFp8Params;

  // The scale of elements [col, col + kChunk) of `row` (a chunk never straddles a group:
  // kChunk divides 128).
  static __device__ __forceinline__ float scale_at(const Params& p, int64_t row, int64_t col) {
    switch (p.mode) {
      case 0: return p.scale[0];
      case 1: return p.scale[p.scale_rows.row_offset(row)];
      case 2: return p.scale[p.scale_rows.row_offset(row) + col / fp8q::kGroup];
      default: return p.scale[p.scale_rows.row_offset(row / fp8q::kGroup) + col / fp8q::kGroup];
    }
  }

  template <class S>
  static __device__ __forceinline__ void tiled(const Params& p) {
    constexpr int kThreadsPerRow = S::kThreadsPerRow, kRowsPerBlock = S::kRowsPerBlock;
    constexpr int kChunksPerThread = S::kVecsPerThread;
    constexpr int64_t kBlockCols = int64_t(kChunksPerThread) * kThreadsPerRow * kChunk;
    for (int64_t b = blockIdx.x; b < p.blocks; b += gridDim.x) {
      const int64_t row = (b / p.col_blocks) * kRowsPerBlock + threadIdx.y;
      if (row >= p.rows) continue;
      const int64_t first = (b % p.col_blocks) * kBlockCols + int64_t(threadIdx.x) * kChunk;
      const int8_t* q = reinterpret_cast<const int8_t*>(p.q) + p.q_rows.row_offset(row);
      T* out = static_cast<T*>(p.out) + p.out_rows.row_offset(row);
      int8q::Chunk<int8_t, kChunk> c[kChunksPerThread];
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i)
        int8q::load_chunk(q, first + int64_t(i) * kThreadsPerRow * kChunk, p.cols, c[i]);
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        const int64_t col = first + int64_t(i) * kThreadsPerRow * kChunk;
        if (col >= p.cols) break;
        const float s = scale_at(p, row, col);
        float v[kChunk];
#pragma unroll
        for (int j = 0; j < kChunk; ++j)
          v[j] = fp8q::from_e4m3(static_cast<uint8_t>(c[i].w[j / 4] >> (8 * (j % 4)))) * s;
        int8q::store_out_chunk<T>(out, col, p.cols, v);
      }
    }
  }
};

// ---- quantized row outputs: the output policy of the fused ops (norm + quantize, ...) ----
//
// A row functor that has a thread's fp32 results in registers, as accesses of kVec values
// (access i of the thread at vector first + i * kThreadsPerRow of its row, the usual
// Registers layout; accesses i >= live lie past the row and hold 0), hands them to one of
// these, which reduces the scales, writes them, and stores q (kVec bytes an access):
//  - QuantOutInt8Token: int8 per row (quantize_int8's contract on the values);
//  - QuantOutFp8Token:  e4m3 per row; QuantOutFp8Group: e4m3 per 1 x 128 group, the row a
//    whole number of groups (the host checks), a group's 128 / kVec lanes reduced by
//    shuffles (kVec >= 4), or, for one-element accesses, by 4 warps through shared memory.
// Every thread of the row calls store (it holds reductions); the thread with first == 0
// writes a per-row scale.
struct QuantOutParams {
  uint8_t* q;  // int8 or e4m3 bytes
  float* scale;
  RowLayout q_rows;
  RowLayout scale_rows;
  bool scale_ue8m0;
};

namespace quant_out {

template <int kVec>
__device__ __forceinline__ void store_bytes(uint8_t* dst, const uint32_t (&w)[(kVec + 3) / 4], const uint8_t (&b)[kVec]) {
  if constexpr (kVec == 8) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
  } else if constexpr (kVec == 4) {
    *reinterpret_cast<uint32_t*>(dst) = w[0];
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) dst[j] = b[j];
  }
}

// The e4m3 bytes of an access's values divided by s, stored at dst.
template <bool kFast, int kVec>
__device__ __forceinline__ void store_fp8(uint8_t* dst, const float (&y)[kVec], const fp8q::Scale& s) {
  uint32_t w[(kVec + 3) / 4] = {};
  uint8_t b[kVec];
  if constexpr (kVec % 4 == 0) {
#pragma unroll
    for (int g = 0; g < kVec / 4; ++g)
      w[g] = fp8q::pack4(fp8q::divide<kFast>(y[4 * g], s), fp8q::divide<kFast>(y[4 * g + 1], s),
                         fp8q::divide<kFast>(y[4 * g + 2], s), fp8q::divide<kFast>(y[4 * g + 3], s));
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) b[j] = fp8q::to_e4m3(fp8q::divide<kFast>(y[j], s));
  }
  store_bytes<kVec>(dst, w, b);
}

template <bool kFast, int kVec>
__device__ __forceinline__ void store_int8(uint8_t* dst, const float (&y)[kVec], const int8q::RowScale& s) {
  uint32_t w[(kVec + 3) / 4] = {};
  uint8_t b[kVec];
  if constexpr (kVec % 4 == 0) {
#pragma unroll
    for (int g = 0; g < kVec / 4; ++g)
      w[g] = int8q::pack_low_bytes(int8q::quantize_bits<kFast>(y[4 * g], s), int8q::quantize_bits<kFast>(y[4 * g + 1], s),
                                   int8q::quantize_bits<kFast>(y[4 * g + 2], s), int8q::quantize_bits<kFast>(y[4 * g + 3], s));
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) b[j] = static_cast<uint8_t>(int8q::low_byte_q(int8q::quantize_bits<kFast>(y[j], s)));
  }
  store_bytes<kVec>(dst, w, b);
}

template <int kN, int kVec>
__device__ __forceinline__ float thread_absmax(const float (&y)[kN][kVec]) {
  int8q::AbsMaxBits acc;
#pragma unroll
  for (int i = 0; i < kN; ++i)
#pragma unroll
    for (int j = 0; j < kVec; ++j) acc.add(y[i][j]);
  return __uint_as_float(acc.bits);
}

}  // namespace quant_out

// kInt8: int8 (absmax / 127) else e4m3 (absmax / 448, UE8M0 if asked).
template <bool kInt8>
struct QuantOutToken {
  static constexpr bool kNeedsBlockRow = false;
  template <int kThreadsPerRow, int kN, int kVec>
  static __device__ __forceinline__ void store(const QuantOutParams& p, int64_t row, int64_t first, int live,
                                               const float (&y)[kN][kVec], float* scratch) {
    const float absmax = row_reduce<kThreadsPerRow>(quant_out::thread_absmax(y), int8q::AbsMaxBitsOp{}, scratch);
    uint8_t* q = p.q + p.q_rows.row_offset(row);
    if constexpr (kInt8) {
      const int8q::RowScale s = int8q::row_scale(absmax);
      if (first == 0) p.scale[p.scale_rows.row_offset(row)] = s.scale;
      const auto pass = [&](auto fast) {
#pragma unroll
        for (int i = 0; i < kN; ++i)
          if (i < live) quant_out::store_int8<decltype(fast)::value, kVec>(q + (first + int64_t(i) * kThreadsPerRow) * kVec, y[i], s);
      };
      s.fast ? pass(std::true_type{}) : pass(std::false_type{});
    } else {
      const fp8q::Scale s = fp8q::make_scale(fp8q::group_scale(absmax, p.scale_ue8m0));
      if (first == 0) p.scale[p.scale_rows.row_offset(row)] = s.scale;
      fp8q::with_path(s, [&](auto fast) {
#pragma unroll
        for (int i = 0; i < kN; ++i)
          if (i < live) quant_out::store_fp8<decltype(fast)::value, kVec>(q + (first + int64_t(i) * kThreadsPerRow) * kVec, y[i], s);
      });
    }
  }
};
using QuantOutInt8Token = QuantOutToken<true>;
using QuantOutFp8Token = QuantOutToken<false>;

struct QuantOutFp8Group {
  // One-element accesses put a group on 4 warps of one row: block-per-row shapes only.
  static constexpr bool kNeedsBlockRow = true;
  template <int kThreadsPerRow, int kN, int kVec>
  static __device__ __forceinline__ void store(const QuantOutParams& p, int64_t row, int64_t first, int live,
                                               const float (&y)[kN][kVec], float* scratch) {
    constexpr int kLanes = fp8q::kGroup / kVec;  // lanes a group
    static_assert(kLanes <= kThreadsPerRow, "a group lies in one row's threads");
    uint8_t* q = p.q + p.q_rows.row_offset(row);
    float* scale_row = p.scale + p.scale_rows.row_offset(row);
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      float a[1][kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) a[0][j] = y[i][j];
      float absmax = quant_out::thread_absmax(a);
      if constexpr (kLanes <= 32) {
        absmax = warp_reduce<kLanes>(absmax, int8q::AbsMaxBitsOp{});
      } else {
        // 128 one-element lanes: the 4 warps of the group meet in shared memory.
        absmax = warp_reduce<32>(absmax, int8q::AbsMaxBitsOp{});
        const int warp = threadIdx.x / 32;
        if (threadIdx.x % 32 == 0) scratch[warp] = absmax;
        __syncthreads();
        const int base = warp / 4 * 4;
        absmax = int8q::AbsMaxBitsOp{}(int8q::AbsMaxBitsOp{}(scratch[base], scratch[base + 1]),
                                       int8q::AbsMaxBitsOp{}(scratch[base + 2], scratch[base + 3]));
        __syncthreads();
      }
      const fp8q::Scale s = fp8q::make_scale(fp8q::group_scale(absmax, p.scale_ue8m0));
      const int64_t col = (first + int64_t(i) * kThreadsPerRow) * kVec;
      if (i < live) {
        if (threadIdx.x % kLanes == 0) scale_row[col / fp8q::kGroup] = s.scale;
        fp8q::with_path(s, [&](auto fast) { quant_out::store_fp8<decltype(fast)::value, kVec>(q + col, y[i], s); });
      }
    }
  }
};

}  // namespace gks::kernels::rows
