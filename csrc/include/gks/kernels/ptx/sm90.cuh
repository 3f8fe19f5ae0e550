// SPDX-License-Identifier: Apache-2.0
// The sm_90 primitives: mbarriers, TMA loads and stores (cp.async.bulk.tensor), the bulk
// async-groups, proxy fences, stmatrix, thread block clusters, named barriers, register
// reallocation (setmaxnreg), programmatic dependent launch, and the release / acquire flag
// of a cross-CTA hand-off. The one place these are spelled out.
//
// ptxas serializes wgmmas (every one waits for the last: C7520 / C7515 in -Xptxas -v) when
// it sees a possibly divergent branch before them. So the waits keep their retry loop
// inside the asm, and the operations a kernel does only on some lanes take a predicate
// (the *_if forms) instead of sitting behind a branch.
#pragma once

#include <cuda.h>  // CUtensorMap (types only; the driver is reached through the runtime)

#include <cstdint>

#include "gks/kernels/ptx/common.cuh"

namespace gks::ptx {

// ---- mbarrier ----

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes the barrier initializations visible to the async proxy (TMA) and the cluster.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// Arrives on the barrier if `pred`.
__device__ __forceinline__ void mbar_arrive_if(uint32_t bar, bool pred) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.u32 p, %1, 0;\n"
      "@p mbarrier.arrive.shared::cta.b64 _, [%0];\n"
      "}\n" ::"r"(bar),
      "r"(uint32_t(pred))
      : "memory");
}

// Arrives (if `pred`) on the barrier at the same shared offset in CTA `cta` of this
// cluster. Default (release, CTA-scope) semantics, as for a local arrive: what it orders is
// this warp's wgmma reads of a slot, which wgmma.wait_group has already completed. A
// cluster-scope release would add a GPU-wide memory fence per arrival.
__device__ __forceinline__ void mbar_arrive_cluster_if(uint32_t bar, uint32_t cta, bool pred) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      ".reg .b32 remote;\n"
      "setp.ne.u32 p, %2, 0;\n"
      "@p mapa.shared::cluster.u32 remote, %0, %1;\n"
      "@p mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(bar),
      "r"(cta), "r"(uint32_t(pred))
      : "memory");
}

// Returns once the phase with parity `parity` has completed (i.e. the barrier's current
// phase has the other parity).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// ---- TMA (cp.async.bulk.tensor) ----

// 2-D TMA load of the box at (x = inner coordinate, y = outer) into shared `dst`,
// completing `bytes` on `bar`. Out-of-bounds elements are zero-filled.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int x, int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(x), "r"(y)
      : "memory");
}

// 3-D TMA load of the box at (x, y, z), innermost first (the grouped GEMM's [G, rows, K]
// operands: z is the group, so a box never reads into the next group's rows or K).
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int x, int y, int z) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(x), "r"(y), "r"(z)
      : "memory");
}

// As tma_load_2d, but the box lands at the same shared offset (and completes bytes on the
// barrier at the same offset) in every CTA of the cluster named in `cta_mask`.
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const CUtensorMap* map,
                                                      uint32_t bar, int x, int y,
                                                      uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(x), "r"(y), "h"(cta_mask)
      : "memory");
}

// 4-D TMA load of the box at (x, y, z, w), innermost first, into shared `dst`, completing
// `bytes` on `bar`; out-of-bounds elements are zero-filled (attention's [B, H, S, D]
// tensors: a box never reads past its own head's rows).
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int x, int y, int z, int w) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(x), "r"(y), "r"(z), "r"(w)
      : "memory");
}

// If `pred`: a 4-D TMA store of the shared box at `src` to (x, y, z, w) of the map's tensor,
// as a bulk async-group of its own; the part outside the tensor is not written.
__device__ __forceinline__ void tma_store_4d_if(const CUtensorMap* map, uint32_t src, int x, int y,
                                                int z, int w, bool pred) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.u32 p, %6, 0;\n"
      "@p cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
      "@p cp.async.bulk.commit_group;\n"
      "}\n" ::"l"(reinterpret_cast<uint64_t>(map)),
      "r"(src), "r"(x), "r"(y), "r"(z), "r"(w), "r"(uint32_t(pred))
      : "memory");
}

__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// If `pred`: a 2-D TMA store of the shared box at `src` to (x = inner coordinate, y = outer)
// of the map's tensor, as a bulk async-group of its own; the part of the box outside the
// tensor is not written.
__device__ __forceinline__ void tma_store_2d_if(const CUtensorMap* map, uint32_t src, int x, int y,
                                                bool pred) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.u32 p, %4, 0;\n"
      "@p cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
      "@p cp.async.bulk.commit_group;\n"
      "}\n" ::"l"(reinterpret_cast<uint64_t>(map)),
      "r"(src), "r"(x), "r"(y), "r"(uint32_t(pred))
      : "memory");
}

// ---- 1-D bulk copies (cp.async.bulk): contiguous bytes, 16-byte aligned, a multiple of 16 ----

// `bytes` from global `src` into shared `dst`, completing them on `bar`.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
      : "memory");
}

// dst[i] += src[i] for `bytes / 4` floats, shared `src` into global `dst`, done by the L2
// (no read-modify-write in the SM), as a bulk async-group of its own.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
      "cp.async.bulk.commit_group;\n" ::"l"(reinterpret_cast<uint64_t>(dst)),
      "r"(src), "r"(bytes)
      : "memory");
}

// If `pred`: waits until at most kPending of this thread's bulk async-groups are still
// reading shared memory (their global writes may still be in flight).
template <int kPending>
__device__ __forceinline__ void bulk_wait_read_if(bool pred) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.u32 p, %0, 0;\n"
      "@p cp.async.bulk.wait_group.read %1;\n"
      "}\n" ::"r"(uint32_t(pred)), "n"(kPending)
      : "memory");
}

// Waits until all of this thread's bulk async-groups have completed, writes included.
__device__ __forceinline__ void bulk_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// Makes this thread's generic-proxy writes to shared memory visible to the async proxy
// (wgmma's operand reads, a TMA store issued after a barrier).
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// stmatrix .x4: four 8x8 matrices of 16-bit values, r[i] holding this lane's pair of matrix
// i (row lane / 4, columns 2 * (lane % 4) + {0, 1}: the mma accumulator fragment); lanes
// 8i..8i+7 give the shared addresses of matrix i's eight 16-byte rows.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// ---- clusters, named barriers, register reallocation ----

__device__ __forceinline__ uint32_t cluster_cta_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}

// All threads of all CTAs in the cluster; orders shared-memory accesses across it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// Barrier among the `kCount` threads that use named barrier `id` (1..15; 0 is
// __syncthreads).
template <int kCount>
__device__ __forceinline__ void named_barrier_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kCount) : "memory");
}

// Arrives at named barrier `id` without waiting (the other side of a named_barrier_sync).
template <int kCount>
__device__ __forceinline__ void named_barrier_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kCount) : "memory");
}

template <int kRegisters>
__device__ __forceinline__ void registers_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

template <int kRegisters>
__device__ __forceinline__ void registers_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// ---- programmatic dependent launch (the host asks for it with LaunchConfig's early_start,
// csrc/src/core/launch.h). Both are no-ops in a kernel launched without it, and compile to
// nothing below sm_90. ----

// Waits until the grids before this one in the stream have completed and their writes are
// visible. Before any access to global memory.
__device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the stream's next kernel be scheduled now (it waits for this one in
// wait_for_prior_grids before it reads anything).
__device__ __forceinline__ void allow_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// ---- a flag in global memory that hands data from one CTA to another ----

// *flag = 1 with release semantics (GPU scope) by the thread whose `selector` is 0 (say
// its thread index in a group), ordering that thread's earlier writes, and those a barrier
// made visible to it, before the flag.
__device__ __forceinline__ void flag_release_if_zero(int* flag, uint32_t selector) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.eq.u32 p, %1, 0;\n"
      "@p st.release.gpu.global.b32 [%0], 1;\n"
      "}\n" ::"l"(flag),
      "r"(selector)
      : "memory");
}

// Spins until *flag != 0, with acquire semantics (GPU scope).
__device__ __forceinline__ void flag_acquire_wait(const int* flag) {
  asm volatile(
      "{\n"
      ".reg .pred ready;\n"
      ".reg .b32 flag;\n"
      "WAIT_%=:\n"
      "ld.acquire.gpu.global.b32 flag, [%0];\n"
      "setp.ne.u32 ready, flag, 0;\n"
      "@!ready bra WAIT_%=;\n"
      "}\n" ::"l"(flag)
      : "memory");
}

// ---- a counter in global memory that orders CTAs' turns (deterministic reductions) ----

// Spins until *counter == value (acquire, GPU scope), then orders the async proxy's later
// global accesses (a bulk reduce-add) after it.
__device__ __forceinline__ void counter_wait_eq(const int* counter, int value) {
  asm volatile(
      "{\n"
      ".reg .pred ready;\n"
      ".reg .b32 seen;\n"
      "WAIT_%=:\n"
      "ld.acquire.gpu.global.b32 seen, [%0];\n"
      "setp.eq.s32 ready, seen, %1;\n"
      "@!ready bra WAIT_%=;\n"
      "fence.proxy.async.global;\n"
      "}\n" ::"l"(counter),
      "r"(value)
      : "memory");
}

// Once this thread's bulk async-groups have completed (their global writes included),
// *counter += 1 with release semantics (GPU scope): the next turn sees those writes.
__device__ __forceinline__ void counter_release_increment(int* counter) {
  asm volatile(
      "cp.async.bulk.wait_group 0;\n"
      "fence.proxy.async.global;\n"
      "red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(counter)
      : "memory");
}

}  // namespace gks::ptx
