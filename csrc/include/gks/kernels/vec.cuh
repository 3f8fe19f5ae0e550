// SPDX-License-Identifier: Apache-2.0
// 16-byte vector loads and stores, and fp32 conversions for the element types gks supports.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace gks::kernels {

// kN elements of T, loaded and stored as one access of sizeof(T) * kN bytes.
template <typename T, int kN>
struct alignas(sizeof(T) * kN) Vec {
  T v[kN];
};

template <typename T>
inline constexpr int kVec16 = 16 / sizeof(T);  // elements in a 16-byte access

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Cache behaviour of a vector access. kLastUse loads evict-first (the data is not read
// again); kStreaming stores evict-first (the output is not read back by this kernel).
enum class CacheHint { kDefault, kLastUse, kStreaming };

template <CacheHint kHint, typename V>
__device__ __forceinline__ V load_vec(const V* p) {
  if constexpr (kHint == CacheHint::kLastUse && sizeof(V) == 16) {
    const uint4 r = __ldcs(reinterpret_cast<const uint4*>(p));
    return *reinterpret_cast<const V*>(&r);
  } else {
    return *p;
  }
}

template <CacheHint kHint, typename V>
__device__ __forceinline__ void store_vec(V* p, const V& v) {
  if constexpr (kHint == CacheHint::kStreaming && sizeof(V) == 16) {
    __stcs(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(&v));
  } else {
    *p = v;
  }
}

// Loads elements [col, col + kN) of a row into fp32, reading only those below `cols` and
// filling the rest with `fill`. The full-width case is one vector access; `row` must then
// be aligned to sizeof(T) * kN bytes at `col`, which the host guarantees before it picks kN.
template <int kN, CacheHint kHint = CacheHint::kDefault, typename T>
__device__ __forceinline__ void load_row_vec(const T* row, int64_t col, int64_t cols,
                                             float (&out)[kN], float fill = 0.f) {
  if (col + kN <= cols) {
    const Vec<T, kN> v = load_vec<kHint>(reinterpret_cast<const Vec<T, kN>*>(row + col));
#pragma unroll
    for (int j = 0; j < kN; ++j) out[j] = to_float(v.v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < kN; ++j) out[j] = col + j < cols ? to_float(row[col + j]) : fill;
  }
}

// A row's vector access as held in registers by kernels that keep rows there. 16-byte
// accesses are kept as four raw 32-bit words, so 16-bit elements stay two to a register
// (a struct of eight 16-bit members gets split into eight registers); narrower ones as Vec.
template <typename T, int kN>
using Held = std::conditional_t<sizeof(T) * kN == 16, uint4, Vec<T, kN>>;

// Element j (a compile-time index once unrolled) of a held access, in fp32.
template <typename T, int kN>
__device__ __forceinline__ float held_at(const Vec<T, kN>& v, int j) { return to_float(v.v[j]); }
template <typename T>
__device__ __forceinline__ float held_at(const uint4& r, int j) {
  const uint32_t word = j * sizeof(T) / 4 == 0 ? r.x : j * sizeof(T) / 4 == 1 ? r.y
                        : j * sizeof(T) / 4 == 2 ? r.z : r.w;
  if constexpr (sizeof(T) == 4) {
    return __uint_as_float(word);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __uint_as_float(j % 2 == 0 ? word << 16 : word & 0xffff0000u);  // bf16 = top half of fp32
  } else {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(j % 2 == 0 ? word : word >> 16)));
  }
}

// Stores elements [col, col + kN) of a row from fp32, writing only those below `cols`.
template <int kN, CacheHint kHint = CacheHint::kDefault, typename T>
__device__ __forceinline__ void store_row_vec(T* row, int64_t col, int64_t cols,
                                              const float (&in)[kN]) {
  if (col + kN <= cols) {
    Vec<T, kN> v;
#pragma unroll
    for (int j = 0; j < kN; ++j) v.v[j] = from_float<T>(in[j]);
    store_vec<kHint>(reinterpret_cast<Vec<T, kN>*>(row + col), v);
  } else {
#pragma unroll
    for (int j = 0; j < kN; ++j)
      if (col + j < cols) row[col + j] = from_float<T>(in[j]);
  }
}

}  // namespace gks::kernels
