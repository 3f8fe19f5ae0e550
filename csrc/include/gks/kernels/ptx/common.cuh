// SPDX-License-Identifier: Apache-2.0
// PTX every architecture gks builds for has: shared-memory addresses, the SFU's exp2 and tanh, the
// L2 cache-hinted 16-byte load, and an add the compiler cannot see through. The one place
// these are spelled out.
#pragma once

#include <cstdint>

namespace gks::ptx {

// The shared-window address of a generic pointer to shared memory.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// `raw` (dynamic shared memory) advanced to the next kAlign-byte boundary of the shared window.
// Pointer arithmetic on `raw` itself, not a round trip through an integer: the compiler then
// still knows the result points to shared memory and emits LDS / STS for accesses through
// it (through an integer it emits generic LD / ST, slower on the same addresses).
template <int kAlign>
__device__ __forceinline__ uint8_t* align_smem(uint8_t* raw) {
  static_assert((kAlign & (kAlign - 1)) == 0, "a power of two");
  return raw + ((kAlign - (smem_addr(raw) & (kAlign - 1))) & (kAlign - 1));
}

// 2^x on the SFU, one MUFU.EX2 (relative error ~2^-22; ex2(-inf) = 0). ftz flushes results
// below 2^-126 to 0. Not volatile: the compiler may schedule, merge and drop it as a pure
// function. (exp2f would add a subnormal fix-up: 3 more instructions a value.)
__device__ __forceinline__ float ex2_approx_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// tanh.approx.f32 (sm_75+): about 2^-11 relative error.
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// An L2 cache policy for the loads below: evict_last (keep what will be read again) or
// evict_first (last use).
__device__ __forceinline__ uint64_t l2_policy_evict_last() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// A 16-byte global load under `policy`. Not volatile: the compiler may schedule it like a
// plain load (a kernel that reads what it writes must order them by data dependence).
__device__ __forceinline__ uint4 ld_global_v4_hint(const void* p, uint64_t policy) {
  uint4 r;
  asm("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p), "l"(policy));
  return r;
}

// w + zero, where `zero` is 0 at run time but unknown to the compiler: a fresh value it
// cannot relate to w (so it does not merge a conversion of w with an earlier one).
__device__ __forceinline__ void add_opaque(uint32_t& w, uint32_t zero) {
  asm volatile("add.u32 %0, %0, %1;" : "+r"(w) : "r"(zero));
}

}  // namespace gks::ptx
