// SPDX-License-Identifier: Apache-2.0
// 16-byte vector loads and stores, rows held as loaded (Raw), and the fp32 conversions of
// the element types gks supports.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "gks/kernels/ptx/common.cuh"

namespace gks::kernels {

// kN elements of T, loaded and stored as one access of sizeof(T) * kN bytes.
template <typename T, int kN>
struct alignas(sizeof(T) * kN) Vec {
  T v[kN];
};

template <typename T>
inline constexpr int kVec16 = 16 / sizeof(T);  // elements in a 16-byte access

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

// Two fp32 values as one 32-bit word of two 16-bit values (rounded to nearest), `lo` in the
// low half: what a 16-bit mma fragment register or a pair of outputs holds.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

// L2 eviction priority of a 16-byte load (one-element accesses ignore it). A kernel that
// reads its input twice marks the first read kKeepInL2 and the second kLastUse, so the
// rows it will re-read outlive the output it streams through L2 meanwhile.
enum class CacheHint { kDefault, kKeepInL2, kLastUse };

template <CacheHint kHint, typename V>
__device__ __forceinline__ V load_vec(const V* p) {
  if constexpr (kHint == CacheHint::kDefault || sizeof(V) != 16) {
    return *p;
  } else {
    const uint64_t policy = kHint == CacheHint::kKeepInL2 ? ptx::l2_policy_evict_last()
                                                          : ptx::l2_policy_evict_first();
    const uint4 r = ptx::ld_global_v4_hint(p, policy);
    return *reinterpret_cast<const V*>(&r);
  }
}

// An access as loaded, in 32-bit words: a 16-byte vector (4 words) or one element (a 16-bit
// one in the low half of its word). Kernels that hold rows in registers keep them in this
// form and convert to fp32 at each use: a 16-bit row takes half the registers it would as
// fp32 values (and its bits stay packed two a register, which a struct of 16-bit members
// does not ensure: the compiler splits it into a register an element), so more rows fit an
// SM; a conversion is an instruction or two a use.
template <typename T, int kVec>
struct Raw {
  static_assert(kVec == 1 || kVec * sizeof(T) == 16, "a 16-byte vector or one element");
  static constexpr int kPerWord = kVec == 1 ? 1 : int(4 / sizeof(T));  // elements a word
  static constexpr int kWords = kVec / kPerWord;
  uint32_t w[kWords];
};

template <typename T>
__device__ __forceinline__ uint32_t bits_of(T v) {
  if constexpr (sizeof(T) == 4) {
    return __float_as_uint(v);
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half_as_ushort(v);
  } else {
    return __bfloat16_as_ushort(v);
  }
}

// The access at p (aligned to it), as loaded.
template <CacheHint kHint = CacheHint::kDefault, typename T, int kVec>
__device__ __forceinline__ Raw<T, kVec> load_raw_vec(const Vec<T, kVec>* p) {
  Raw<T, kVec> r;
  if constexpr (kVec == 1) {
    r.w[0] = bits_of(p->v[0]);
  } else {
    const uint4 v = load_vec<kHint>(reinterpret_cast<const uint4*>(p));
    r.w[0] = v.x, r.w[1] = v.y, r.w[2] = v.z, r.w[3] = v.w;
  }
  return r;
}

// kVec fp32 values rounded to T, as an access held in registers.
template <typename T, int kVec>
__device__ __forceinline__ Raw<T, kVec> raw_of(const float (&v)[kVec]) {
  using R = Raw<T, kVec>;
  R r;
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) r.w[j] = __float_as_uint(v[j]);
  } else if constexpr (kVec == 1) {
    r.w[0] = bits_of(from_float<T>(v[0]));
  } else {
#pragma unroll
    for (int k = 0; k < R::kWords; ++k) r.w[k] = pack2<T>(v[2 * k], v[2 * k + 1]);
  }
  return r;
}

// Stores a held access at p (aligned to it).
template <typename T, int kVec>
__device__ __forceinline__ void store_raw_vec(Vec<T, kVec>* p, const Raw<T, kVec>& r) {
  if constexpr (kVec == 1) {
    if constexpr (sizeof(T) == 4) {
      p->v[0] = __uint_as_float(r.w[0]);
    } else {
      const auto bits = static_cast<unsigned short>(r.w[0]);
      if constexpr (std::is_same_v<T, __half>)
        p->v[0] = __ushort_as_half(bits);
      else
        p->v[0] = __ushort_as_bfloat16(bits);
    }
  } else {
    *reinterpret_cast<uint4*>(p) = make_uint4(r.w[0], r.w[1], r.w[2], r.w[3]);
  }
}

// Element j of an access, in fp32.
template <typename T, int kVec>
__device__ __forceinline__ float elem(const Raw<T, kVec>& r, int j) {
  constexpr int kPerWord = Raw<T, kVec>::kPerWord;
  const uint32_t w = r.w[j / kPerWord];
  const bool high = j % kPerWord != 0;
  if constexpr (sizeof(T) == 4) {
    return __uint_as_float(w);
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(high ? w >> 16 : w)));
  } else {
    return __uint_as_float(high ? w & 0xffff0000u : w << 16);  // bf16: the top half of fp32
  }
}

}  // namespace gks::kernels
