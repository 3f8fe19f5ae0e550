// SPDX-License-Identifier: Apache-2.0
// The quantize family on the row skeleton (skeleton.cuh): INT8 quantize and dequantize;
// the contract is in gks/quantize.h.
//
// A thread's unit of work is a chunk of kChunk contiguous elements of one row. Quantize
// uses kChunk = 16: 4 or 2 16-byte loads of x (fp32 or fp16/bf16) and one 16-byte int8
// store. Dequantize uses one 16-byte store of out per chunk (see its kernel). Tensors the
// host finds unaligned use kChunk = 1: scalar accesses, still coalesced across a warp.
//
// Quantize has two shapes of kernel, as RMSNorm (QuantizeRow):
//  - registers: the row (a warp's or a block's) is read once into registers as raw x,
//    reduced to absmax, then quantized from the registers and written;
//  - looped: a block walks a long row twice (absmax, then quantize; the second read mostly
//    hits L2).
// The aligned fast path spends no conversion-unit instruction per element: the division is
// three FP32 ops (Markstein, from a per-row reciprocal), rounding is one FADD (magic
// number), packing four bytes is three byte permutes.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gks/kernels/reduce.cuh"
#include "gks/kernels/rows/common.cuh"
#include "gks/kernels/vec.cuh"
#include "gks/tensor.h"

namespace gks::kernels::rows {

struct QuantizeInt8Params {
  const void* x;
  int8_t* q;
  float* scale;
  RowLayout x_rows;
  RowLayout q_rows;
  RowLayout scale_rows;
  int64_t rows;
  int64_t cols;
};

struct DequantizeInt8Params {
  const int8_t* q;
  const float* scale;
  void* out;
  RowLayout q_rows;
  RowLayout scale_rows;
  RowLayout out_rows;
  int64_t rows;
  int64_t cols;
  int64_t col_blocks;  // blocks along one row
  int64_t blocks;      // col_blocks * blocks along the rows
};

namespace int8q {

// Adding 1.5 * 2^23 to |v| <= 2^22 leaves rint(v) (round half to even: the default
// rounding of the add) in the low mantissa bits: bits(v + kMagic) = kMagicBits + rint(v).
// For |rint(v)| <= 127 the low byte is rint(v) as a two's-complement int8.
constexpr float kMagic = 12582912.0f;
constexpr int32_t kMagicBits = 0x4B400000;

// Rows whose scale lies in [kFastMin, kFastMax] take the Markstein path. Below 2^-64 the
// remainder fma could lose bits to underflow; above 2^126 the reciprocal would be
// subnormal (a finite scale is at most FLT_MAX / 127 < 2^121, so this excludes only inf).
// NaN fails both comparisons.
constexpr float kFastMin = 0x1p-64f;
constexpr float kFastMax = 0x1p126f;

// kN consecutive elements of a row as raw bits, packed into 32-bit words (two fp16/bf16 or
// four int8 to a word) so that a register holds as many values as memory does, whichever
// way the chunk was loaded.
template <typename T, int kN>
struct Chunk {
  static constexpr int kWords = (kN * int(sizeof(T)) + 3) / 4;
  uint32_t w[kWords];
};

template <typename T>
__device__ __forceinline__ uint32_t raw_bits(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return __float_as_uint(v);
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half_as_ushort(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat16_as_ushort(v);
  } else {
    static_assert(std::is_same_v<T, int8_t>, "float, half, bfloat16 or int8");
    return static_cast<uint8_t>(v);
  }
}

// Element j of a chunk (j a compile-time constant after unrolling) in fp32, exactly.
template <typename T, int kN>
__device__ __forceinline__ float chunk_value(const Chunk<T, kN>& c, int j) {
  if constexpr (std::is_same_v<T, float>) {
    return __uint_as_float(c.w[j]);
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(c.w[j / 2] >> (16 * (j % 2)))));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __uint_as_float(j % 2 ? c.w[j / 2] & 0xffff0000u : c.w[j / 2] << 16);
  } else {
    return static_cast<float>(static_cast<int8_t>(c.w[j / 4] >> (8 * (j % 4))));
  }
}

// Loads elements [col, col + kN) of a row. When the whole chunk lies inside the row it is
// 16-byte accesses (8 or 4 bytes for a smaller chunk; the host guarantees the alignment
// before it picks kN > 1); otherwise one element at a time, and elements at or past `cols`
// read as 0.
template <typename T, int kN>
__device__ __forceinline__ void load_chunk(const T* row, int64_t col, int64_t cols,
                                           Chunk<T, kN>& c) {
  constexpr int kBytes = kN * int(sizeof(T));
  if constexpr (kN > 1 && (kBytes % 16 == 0 || kBytes == 8 || kBytes == 4)) {
    if (col + kN <= cols) {
      const T* p = row + col;
      if constexpr (kBytes % 16 == 0) {
#pragma unroll
        for (int i = 0; i < kBytes / 16; ++i) {
          const uint4 v = reinterpret_cast<const uint4*>(p)[i];
          c.w[4 * i] = v.x;
          c.w[4 * i + 1] = v.y;
          c.w[4 * i + 2] = v.z;
          c.w[4 * i + 3] = v.w;
        }
      } else if constexpr (kBytes == 8) {
        const uint2 v = *reinterpret_cast<const uint2*>(p);
        c.w[0] = v.x;
        c.w[1] = v.y;
      } else {
        c.w[0] = *reinterpret_cast<const uint32_t*>(p);
      }
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < Chunk<T, kN>::kWords; ++i) c.w[i] = 0;
#pragma unroll
  for (int j = 0; j < kN; ++j)
    if (col + j < cols)
      c.w[j * int(sizeof(T)) / 4] |= raw_bits(row[col + j]) << (8 * ((j * int(sizeof(T))) % 4));
}

// ---- absmax ----

// max |x| kept as the bit pattern of a non-negative fp32: with the sign cleared, integer
// order is float order and every NaN pattern sorts above +inf, so one NaN wins the max
// (fmaxf would drop it).
struct AbsMaxBits {
  uint32_t bits = 0;
  __device__ __forceinline__ void add_bits(uint32_t fp32_bits) {
    bits = max(bits, fp32_bits & 0x7fffffffu);
  }
  __device__ __forceinline__ void add(float v) { add_bits(__float_as_uint(v)); }
};

// The same max for warp_reduce / group_reduce, on floats that carry such patterns.
struct AbsMaxBitsOp {
  __device__ __forceinline__ float operator()(float a, float b) const {
    return __uint_as_float(max(__float_as_uint(a), __float_as_uint(b)));
  }
};

template <typename T2>
__device__ __forceinline__ T2 word_as(uint32_t w) {
  T2 v;
  memcpy(&v, &w, sizeof(v));
  return v;
}

template <typename T, int kN>
__device__ __forceinline__ void accumulate_absmax(const Chunk<T, kN>& c, AbsMaxBits& acc) {
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int j = 0; j < kN; ++j) acc.add_bits(c.w[j]);
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr bool kPacked = kN % 2 == 0;
#else
    constexpr bool kPacked = false;
#endif
    if constexpr (kPacked) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
      // fp16/bf16: |.| and a NaN-propagating max on packed pairs, exact in the input type.
      using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
      T2 m = word_as<T2>(0u);
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) m = __hmax2_nan(m, __habs2(word_as<T2>(c.w[i])));
      acc.add(__low2float(m));
      acc.add(__high2float(m));
#endif
    } else {
#pragma unroll
      for (int j = 0; j < kN; ++j) acc.add(chunk_value(c, j));
    }
  }
}

// ---- quantize one value ----

struct RowScale {
  float scale;  // absmax / 127, correctly rounded
  float inv;    // 1 / scale, correctly rounded (used on the fast path only)
  bool fast;
};

__device__ __forceinline__ RowScale row_scale(float absmax) {
  RowScale s;
  s.scale = __fdiv_rn(absmax, 127.f);
  s.fast = s.scale >= kFastMin && s.scale <= kFastMax;
  s.inv = __frcp_rn(s.scale);
  return s;
}

// Returns the fp32 bits whose low byte is q (see kMagic).
template <bool kFast>
__device__ __forceinline__ uint32_t quantize_bits(float x, const RowScale& s) {
  float v;
  if constexpr (kFast) {
    // Markstein: q0 is within an ulp of x / scale, the fma gives the exact remainder, and
    // the corrected quotient is x / scale correctly rounded (quotients far below 1/2 may
    // differ in low bits; they round to 0 either way). |v| <= 127 * (1 + 2^-23) here, so
    // no clamp is needed and no NaN can occur.
    const float q0 = x * s.inv;
    const float rem = fmaf(-q0, s.scale, x);
    v = fmaf(rem, s.inv, q0);
  } else {
    // Rows with scale 0, tiny, inf or NaN: true division, then NaN -> 0 and the clamp.
    v = __fdiv_rn(x, s.scale);
    v = isnan(v) ? 0.f : fminf(fmaxf(v, -127.f), 127.f);
  }
  return __float_as_uint(v + kMagic);
}

__device__ __forceinline__ int8_t low_byte_q(uint32_t bits) {
  return static_cast<int8_t>(static_cast<int32_t>(bits) - kMagicBits);
}

// Four values' low bytes, in order, as one little-endian word.
__device__ __forceinline__ uint32_t pack_low_bytes(uint32_t a, uint32_t b, uint32_t c,
                                                   uint32_t d) {
  return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

// Quantizes a chunk and stores it to q[col, col + kN) (elements below `cols` only).
template <bool kFast, typename T, int kN>
__device__ __forceinline__ void quantize_store_chunk(const Chunk<T, kN>& c, const RowScale& s,
                                                     int8_t* q_row, int64_t col, int64_t cols) {
  if constexpr (kN == 16) {
    if (col + kN <= cols) {
      // Four values at a time into a word: fewer values live at once (registers).
      uint32_t w[4];
#pragma unroll
      for (int g = 0; g < 4; ++g)
        w[g] = pack_low_bytes(quantize_bits<kFast>(chunk_value(c, 4 * g), s),
                              quantize_bits<kFast>(chunk_value(c, 4 * g + 1), s),
                              quantize_bits<kFast>(chunk_value(c, 4 * g + 2), s),
                              quantize_bits<kFast>(chunk_value(c, 4 * g + 3), s));
      *reinterpret_cast<uint4*>(q_row + col) = make_uint4(w[0], w[1], w[2], w[3]);
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < kN; ++j)
    if (col + j < cols) q_row[col + j] = low_byte_q(quantize_bits<kFast>(chunk_value(c, j), s));
}

// ---- dequantize helpers ----

__device__ __forceinline__ uint32_t pack2(float a, float b, __half*) {
  const __half2 h = __floats2half2_rn(a, b);
  uint32_t u;
  memcpy(&u, &h, sizeof(u));
  return u;
}
__device__ __forceinline__ uint32_t pack2(float a, float b, __nv_bfloat16*) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  uint32_t u;
  memcpy(&u, &h, sizeof(u));
  return u;
}

// Stores v to out[col, col + kN) (elements below `cols` only), 16 bytes per access when the
// whole chunk lies inside the row.
template <typename T, int kN>
__device__ __forceinline__ void store_out_chunk(T* row, int64_t col, int64_t cols,
                                                const float (&v)[kN]) {
  if constexpr (kN > 1) {
    if (col + kN <= cols) {
      if constexpr (std::is_same_v<T, float>) {
#pragma unroll
        for (int i = 0; i < kN / 4; ++i)
          *reinterpret_cast<float4*>(row + col + 4 * i) =
              make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
      } else {
#pragma unroll
        for (int i = 0; i < kN / 8; ++i) {
          uint4 w;
          w.x = pack2(v[8 * i + 0], v[8 * i + 1], static_cast<T*>(nullptr));
          w.y = pack2(v[8 * i + 2], v[8 * i + 3], static_cast<T*>(nullptr));
          w.z = pack2(v[8 * i + 4], v[8 * i + 5], static_cast<T*>(nullptr));
          w.w = pack2(v[8 * i + 6], v[8 * i + 7], static_cast<T*>(nullptr));
          *reinterpret_cast<uint4*>(row + col + 8 * i) = w;
        }
      }
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < kN; ++j)
    if (col + j < cols) row[col + j] = from_float<T>(v[j]);
}

}  // namespace int8q

// ---- the functors ----

// Block: kThreadsPerRow x kRowsPerBlock threads; threadIdx.y picks the row in the block.
// Thread tid holds chunks i * kThreadsPerRow + tid of its row (i < kChunksPerThread).
// At most 64 registers a thread (the minimum-blocks bound), so that an SM holds 1024+
// threads' worth of rows in flight: the raw x takes 32, and left alone ptxas spends ~100 on
// quantizing 16 values at once, which halves the bytes in flight and the bandwidth.
template <int kThreads>
inline constexpr int kMinBlocksFor64Regs = kThreads >= 1024 ? 1 : 1024 / kThreads;

// What a per-row quantizer's format gives QuantizeRowOf (Int8Format below; FP8 e4m3 in
// quantize_fp8.cuh): Params (x, q, scale, their RowLayouts, rows, cols), a Scale made from
// the row's absmax (make_scale) and written to p.scale (scale_value), and with_store(s, body),
// which calls body(store) with store(chunk, q_row, col, cols) quantizing one chunk of the
// row (a call per row, so that a format may pick its per-row path once: int8's fast path).
struct Int8Format {
  using Params = QuantizeInt8Params;
  using Scale = int8q::RowScale;
  static __device__ __forceinline__ Scale make_scale(float absmax, const Params&) {
    return int8q::row_scale(absmax);
  }
  static __device__ __forceinline__ float scale_value(const Scale& s) { return s.scale; }
  template <class Body>
  static __device__ __forceinline__ void with_store(const Scale& s, Body&& body) {
    if (s.fast) {
      body([&](const auto& c, int8_t* q_row, int64_t col, int64_t cols) {
        int8q::quantize_store_chunk<true>(c, s, q_row, col, cols);
      });
    } else {
      body([&](const auto& c, int8_t* q_row, int64_t col, int64_t cols) {
        int8q::quantize_store_chunk<false>(c, s, q_row, col, cols);
      });
    }
  }
};

// The per-row quantizer's body, over a Format; QuantizeRow (int8) is it with Int8Format.
template <typename T, int kChunk, class Format>
struct QuantizeRowOf {
  using Params = typename Format::Params;
  // Chunks a thread holds in registers: 128 bytes of raw x (2 aligned chunks of fp32, 4 of
  // fp16/bf16), or 8 scalars on the unaligned path.
  static constexpr int kMaxChunks = kChunk == 1 ? 8 : 128 / (16 * int(sizeof(T)));

  // Registers: warps of 1 to kMaxChunks chunks a thread (4 rows a block); blocks of 64-512
  // threads of kMaxChunks (1024 where those rows fit: fp32 and unaligned ones). Looped: 512.
  template <class S>
  static constexpr bool compiled() {
    if constexpr (kIsLooped<S>) {
      return S::kThreads == 512;
    } else if constexpr (kIsRegisters<S>) {
      if (S::kCluster != 1) return false;
      if (S::kThreadsPerRow == 32) return S::kRowsPerBlock == 4 && S::kVecsPerThread <= kMaxChunks;
      return S::kRowsPerBlock == 1 && S::kVecsPerThread == kMaxChunks &&
             (S::kThreadsPerRow < 1024 || kChunk == 1 || kMaxChunks == 2);
    } else {
      return false;
    }
  }

  template <class S>
  static constexpr int min_blocks() {
    if constexpr (kIsRegisters<S>)
      return kMinBlocksFor64Regs<S::kThreads>;
    else
      return 0;
  }

  template <class S>
  static __device__ __forceinline__ void registers(const Params& p) {
    constexpr int kThreadsPerRow = S::kThreadsPerRow, kChunksPerThread = S::kVecsPerThread;
    using namespace int8q;
    __shared__ float scratch[kThreadsPerRow / 32 > 0 ? kThreadsPerRow / 32 : 1];
    const int64_t row = row_index<S>();
    if (row >= p.rows) return;  // only in warp-per-row blocks, which have no block barrier
    const T* x = static_cast<const T*>(p.x) + p.x_rows.row_offset(row);
    const int tid = threadIdx.x;

    Chunk<T, kChunk> c[kChunksPerThread];
#pragma unroll
    for (int i = 0; i < kChunksPerThread; ++i)
      load_chunk(x, (int64_t(i) * kThreadsPerRow + tid) * kChunk, p.cols, c[i]);
    AbsMaxBits acc;
#pragma unroll
    for (int i = 0; i < kChunksPerThread; ++i) accumulate_absmax(c[i], acc);
    float absmax = __uint_as_float(acc.bits);
    absmax = row_reduce<kThreadsPerRow>(absmax, AbsMaxBitsOp{}, scratch);

    const typename Format::Scale s = Format::make_scale(absmax, p);
    if (tid == 0) p.scale[p.scale_rows.row_offset(row)] = Format::scale_value(s);
    const auto q = p.q + p.q_rows.row_offset(row);
    Format::with_store(s, [&](auto store) {
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        const int64_t col = (int64_t(i) * kThreadsPerRow + tid) * kChunk;
        if (col >= p.cols) break;
        store(c[i], q, col, p.cols);
      }
    });
  }

  // One row per kThreads-thread block, walked twice with kUnroll chunks in flight per thread.
  template <class S>
  static __device__ __forceinline__ void looped(const Params& p) {
    constexpr int kThreads = S::kThreads;
    using namespace int8q;
    constexpr int kUnroll = kChunk > 1 ? 2 : 8;
    constexpr int64_t kStep = int64_t(kThreads) * kChunk;
    __shared__ float scratch[kThreads / 32];
    const int64_t row = blockIdx.x;
    const T* x = static_cast<const T*>(p.x) + p.x_rows.row_offset(row);
    const int64_t first = int64_t(threadIdx.x) * kChunk;

    AbsMaxBits acc;
    for (int64_t base = first; base < p.cols; base += kStep * kUnroll) {
      Chunk<T, kChunk> c[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) load_chunk(x, base + u * kStep, p.cols, c[u]);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) accumulate_absmax(c[u], acc);
    }
    const float absmax = group_reduce<kThreads>(__uint_as_float(acc.bits), AbsMaxBitsOp{}, scratch);

    const typename Format::Scale s = Format::make_scale(absmax, p);
    if (threadIdx.x == 0) p.scale[p.scale_rows.row_offset(row)] = Format::scale_value(s);
    const auto q = p.q + p.q_rows.row_offset(row);
    Format::with_store(s, [&](auto store) {
      for (int64_t base = first; base < p.cols; base += kStep * kUnroll) {
        Chunk<T, kChunk> c[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) load_chunk(x, base + u * kStep, p.cols, c[u]);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (base + u * kStep < p.cols) store(c[u], q, base + u * kStep, p.cols);
      }
    });
  }
};

// INT8 per row (quantize_int8). A struct of its own, not an alias, so that its kernels keep
// their names (the SASS tools and the spec's sass_kernels find them by it).
template <typename T, int kChunk>
struct QuantizeRow : QuantizeRowOf<T, kChunk, Int8Format> {};

// The shapes of the elementwise functors (dequantize, the fp8 group and block quantizers):
// tiled, 256 threads, one or two chunks a thread; the grid strides over the blocks.
struct ElementwiseTiles {
  template <class S>
  static constexpr bool compiled() {
    if constexpr (kIsTiled<S>)
      return S::kThreads == 256 && S::kVecsPerThread <= 2;
    else
      return false;
  }
  template <class S>
  static constexpr int min_blocks() {
    return 0;
  }
};

// Elementwise: block b covers rows [(b / col_blocks) * kRowsPerBlock, + kRowsPerBlock) and
// kChunksPerThread * kThreadsPerRow chunks of them starting at chunk (b % col_blocks) * that.
// A chunk is one 16-byte store of out (kChunk = 4 fp32 or 8 fp16/bf16, from a 4- or 8-byte
// load of q), and consecutive lanes take consecutive chunks, so every warp access is
// contiguous. (Chunks of 16 int8 per lane would make each fp32 store instruction touch 32
// separate 16-byte pieces, and stores do not merge in L1 the way loads hit it;
// docs/perf/quantize.md.) The grid may be smaller than p.blocks; blocks then stride.
template <typename T, int kChunk>
struct DequantizeRow : ElementwiseTiles {
  using Params = DequantizeInt8Params;

  template <class S>
  static __device__ __forceinline__ void tiled(const Params& p) {
    constexpr int kThreadsPerRow = S::kThreadsPerRow, kRowsPerBlock = S::kRowsPerBlock;
    constexpr int kChunksPerThread = S::kVecsPerThread;
    using namespace int8q;
    constexpr int64_t kBlockCols = int64_t(kChunksPerThread) * kThreadsPerRow * kChunk;
    for (int64_t b = blockIdx.x; b < p.blocks; b += gridDim.x) {
      const int64_t row = (b / p.col_blocks) * kRowsPerBlock + threadIdx.y;
      if (row >= p.rows) continue;  // no barriers in this kernel
      const int64_t first = (b % p.col_blocks) * kBlockCols + int64_t(threadIdx.x) * kChunk;
      const int8_t* q = p.q + p.q_rows.row_offset(row);
      T* out = static_cast<T*>(p.out) + p.out_rows.row_offset(row);
      const float s = p.scale[p.scale_rows.row_offset(row)];

      Chunk<int8_t, kChunk> c[kChunksPerThread];
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i)
        load_chunk(q, first + int64_t(i) * kThreadsPerRow * kChunk, p.cols, c[i]);
#pragma unroll
      for (int i = 0; i < kChunksPerThread; ++i) {
        const int64_t col = first + int64_t(i) * kThreadsPerRow * kChunk;
        if (col >= p.cols) break;
        float v[kChunk];
#pragma unroll
        for (int j = 0; j < kChunk; ++j) v[j] = chunk_value(c[i], j) * s;
        store_out_chunk<T>(out, col, p.cols, v);
      }
    }
  }
};

}  // namespace gks::kernels::rows
