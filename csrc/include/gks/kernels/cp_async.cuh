// SPDX-License-Identifier: Apache-2.0
// cp.async (sm_80+): asynchronous global -> shared copies, which the GEMMs and
// FlashAttention use to fill their tile rings and the staged softmax(RMSNorm) kernel to
// fetch a block's next row.
#pragma once

#include <cstdint>

namespace gks::kernels {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies `src_bytes` (0..kBytes) from global `src` to shared `dst` and zero-fills the rest
// of the kBytes destination; with src_bytes == 0 nothing is read (the caller still passes
// an address inside the tensor). 16-byte copies bypass L1 (.cg); smaller ones cannot.
// `dst` is a shared-window address (smem_addr) or a generic pointer to shared memory.
template <int kBytes>
__device__ __forceinline__ void cp_async_zfill(uint32_t d, const void* src, int src_bytes) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes");
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(d), "l"(src),
                 "n"(kBytes), "r"(src_bytes));
  }
}
template <int kBytes>
__device__ __forceinline__ void cp_async_zfill(void* dst, const void* src, int src_bytes) {
  cp_async_zfill<kBytes>(smem_addr(dst), src, src_bytes);
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most kPending of this thread's committed groups are still in flight. (No
// compiler fence: the GEMMs follow it with a barrier before they read the tiles.)
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace gks::kernels
