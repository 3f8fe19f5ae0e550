// SPDX-License-Identifier: Apache-2.0
// top_k's device code: the k largest values of each row and their indices, by radix select.
//
// A kernel of its own rather than a row functor on rows/skeleton.cuh: the skeleton's shells
// map one row in to one row of the same length out, in one or two sweeps; top-k makes up to
// 4 histogram sweeps whose next step depends on a block-wide decision, writes k values (not
// N), sorts them in shared memory, and splits a long row over a thread block cluster whose
// CTAs exchange histograms and counts through distributed shared memory.
//
// The order: each value maps to an unsigned key whose integer order is the order torch.topk
// uses (largest=True): every NaN above +inf and equal to each other, -0.0 equal to 0.0.
// Equal keys are broken by the lower index. The selection is then a threshold on the key:
//  1. Radix select, 8-bit digits from the top (4 sweeps for fp32 keys, 2 for 16-bit ones):
//     a shared-memory histogram of the digit among the elements whose higher digits equal
//     the prefix chosen so far; the bin where the count from the top reaches k is the next
//     digit. Stops early once the chosen bin holds exactly the elements still needed.
//     With a cluster (sm_90), each CTA histograms its slice of the row and every CTA sums
//     the cluster's histograms through distributed shared memory, so all choose alike.
//     A slice that fits in shared memory is kept there as keys after the first sweep.
//  2. Gather, in index order: the elements above the threshold prefix take slots
//     [0, count_above) in index order, the elements on it the next slots in index order
//     while slots remain (so the lowest indices win ties). A block-wide scan of warp
//     ballots gives each element its slot; the CTAs of a cluster start from the counts of
//     the ranks before them (their histograms say how many each holds).
//  3. sorted: the k picks, packed as (key << 32 | ~index) in 64 bits, are sorted in
//     descending order by a bitonic sort in shared memory (of rank 0 of a cluster, which the
//     other ranks write through distributed shared memory). Unsorted: the slots of step 2.
// Values are read back from x at the chosen indices, so their bits (a NaN's payload, the
// sign of a zero) are x's.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "gks/tensor.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#include <cooperative_groups.h>
#endif

namespace gks::kernels::rows {

struct TopKParams {
  const void* x;
  void* values;
  int64_t* indices;
  RowLayout x_rows, values_rows, indices_rows;
  int64_t rows;
  int cols;          // N
  int k;             // 1 .. min(N, 2048)
  int slice;         // elements a CTA of a row's cluster takes (N for one CTA a row)
  int sort_cap;      // the bitonic sort's length: the power of two >= k (sorted), else 0
  bool sorted;
};

// The order-preserving key of a value's bits (as an unsigned integer of the value's width).
template <typename T>
struct TopKKey;

template <>
struct TopKKey<float> {
  using Bits = uint32_t;
  static constexpr int kBits = 32;
  __device__ __forceinline__ static uint32_t of(uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0xffffffffu;  // NaN: above +inf
    if (u == 0x80000000u) u = 0u;                               // -0.0 is 0.0
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  }
};

template <uint32_t kInf>
struct TopKKey16 {
  using Bits = uint16_t;
  static constexpr int kBits = 16;
  __device__ __forceinline__ static uint32_t of(uint32_t u) {
    if ((u & 0x7fffu) > kInf) return 0xffffu;
    if (u == 0x8000u) u = 0u;
    return (u & 0x8000u) ? (~u & 0xffffu) : (u | 0x8000u);
  }
};
template <>
struct TopKKey<__half> : TopKKey16<0x7c00u> {};
template <>
struct TopKKey<__nv_bfloat16> : TopKKey16<0x7f80u> {};

// The cluster operations, or their one-CTA stand-ins (kCluster == 1 compiles for any arch;
// the host launches clusters only on sm_90).
template <int kCluster>
struct TopKCluster {
  __device__ __forceinline__ static int rank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (kCluster > 1) return int(cooperative_groups::this_cluster().block_rank());
#endif
    return 0;
  }
  // Every thread of every CTA of the cluster; orders shared-memory accesses across it.
  __device__ __forceinline__ static void sync() {
    if constexpr (kCluster > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      cooperative_groups::this_cluster().sync();
#else
      __trap();
#endif
    } else {
      __syncthreads();
    }
  }
  // The same shared-memory object in CTA `r` of the cluster.
  template <typename U>
  __device__ __forceinline__ static U* at(U* p, int r) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (kCluster > 1) return cooperative_groups::this_cluster().map_shared_rank(p, r);
#endif
    (void)r;
    return p;
  }
};

// Dynamic shared memory a CTA needs: the sort buffer, then (kCache) its slice as keys.
template <typename T>
__host__ __device__ constexpr int64_t topk_smem_bytes(int sort_cap, int slice, bool cache) {
  return int64_t(sort_cap) * 8 + (cache ? int64_t(slice) * int64_t(sizeof(typename TopKKey<T>::Bits)) : 0);
}

template <typename T, int kThreads, int kCluster, bool kCache>
__global__ void __launch_bounds__(kThreads) topk_kernel(const TopKParams p) {
  static_assert(kThreads >= 256 && kThreads <= 1024 && kThreads % 32 == 0, "256..1024 threads");
  using Key = TopKKey<T>;
  using Bits = typename Key::Bits;
  using C = TopKCluster<kCluster>;
  constexpr int kWarps = kThreads / 32;
  constexpr int kPasses = Key::kBits / 8;
  constexpr int kUnroll = 4;

  extern __shared__ __align__(16) unsigned char smem[];
  uint64_t* sort_buf = reinterpret_cast<uint64_t*>(smem);
  Bits* cache = reinterpret_cast<Bits*>(smem + int64_t(p.sort_cap) * 8);
  __shared__ uint32_t hist[2][256];
  __shared__ uint32_t scan[2][32];
  __shared__ uint32_t chosen[3];    // digit, elements still needed, done
  __shared__ uint32_t counts[2];    // this CTA's elements above the threshold, on it
  __shared__ uint32_t above_acc;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t row = blockIdx.x / kCluster;
  const int rank = C::rank();
  const int lo = rank * p.slice;
  const int len = max(0, min(p.cols - lo, p.slice));
  const Bits* x = reinterpret_cast<const Bits*>(static_cast<const T*>(p.x) + p.x_rows.row_offset(row));
  const Bits* xs = x + lo;

  if (rank == 0 && p.sorted)
    for (int i = p.k + tid; i < p.sort_cap; i += kThreads) sort_buf[i] = 0;  // below every pick
  if (tid == 0) above_acc = 0;

  // 1. radix select
  uint32_t prefix = 0, mask = 0;
  uint32_t need = uint32_t(p.k);
  uint32_t my_above = 0;  // thread t < 256: this CTA's elements in bins above the digit
  int pass = 0;
  for (; pass < kPasses; ++pass) {
    const int shift = Key::kBits - 8 * (pass + 1);
    uint32_t* h = hist[pass & 1];
    for (int i = tid; i < 256; i += kThreads) h[i] = 0;
    __syncthreads();
    if (kCache && pass > 0) {
      for (int j = tid; j < len; j += kThreads) {
        const uint32_t key = cache[j];
        if ((key & mask) == prefix) atomicAdd(&h[(key >> shift) & 0xffu], 1u);
      }
    } else {
      // From global memory: kUnroll loads in flight a thread before their atomics.
      const auto count = [&](int j, uint32_t key) {
        if constexpr (kCache) cache[j] = Bits(key);  // (the first sweep: mask and prefix 0)
        if ((key & mask) == prefix) atomicAdd(&h[(key >> shift) & 0xffu], 1u);
      };
      int j = tid;
      for (; j + (kUnroll - 1) * kThreads < len; j += kUnroll * kThreads) {
        Bits raw[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) raw[u] = __ldg(xs + j + u * kThreads);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) count(j + u * kThreads, Key::of(raw[u]));
      }
      for (; j < len; j += kThreads) count(j, Key::of(__ldg(xs + j)));
    }
    C::sync();  // every CTA's histogram complete (and, for one CTA, this one's)
    // The bin where the count from the top reaches `need`: a suffix scan over 256 bins,
    // one a thread of the first 8 warps.
    uint32_t total = 0, suffix = 0;
    if (tid < 256) {
#pragma unroll
      for (int r = 0; r < kCluster; ++r) total += C::at(h, r)[tid];
      suffix = total;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t n = __shfl_down_sync(0xffffffffu, suffix, o);
        if (lane + o < 32) suffix += n;
      }
      if (lane == 0) scan[pass & 1][warp] = suffix;
    }
    __syncthreads();
    if (tid < 256) {
      for (int w = warp + 1; w < 8; ++w) suffix += scan[pass & 1][w];
      const uint32_t before = suffix - total;  // elements in bins above this one
      if (before < need && suffix >= need) {
        chosen[0] = uint32_t(tid);
        chosen[1] = need - before;
        chosen[2] = total == need - before;
      }
    }
    __syncthreads();
    const uint32_t digit = chosen[0];
    need = chosen[1];
    if (tid < 256 && uint32_t(tid) > digit) my_above += h[tid];
    if (chosen[2] || pass == kPasses - 1) {
      if (tid == 0) counts[1] = h[digit];
    }
    prefix |= digit << shift;
    mask |= 0xffu << shift;
    if (chosen[2]) break;
  }
  // This CTA's elements above the threshold (from its histograms) and on it.
  if (my_above) atomicAdd(&above_acc, my_above);
  __syncthreads();
  if (tid == 0) counts[0] = above_acc;
  C::sync();  // every CTA's counts written
  const uint32_t local_above = counts[0], local_on = counts[1];
  const uint32_t all_above = uint32_t(p.k) - need;
  uint32_t above_run = 0, on_run = 0;  // the elements of the ranks before this one
  for (int r = 0; r < rank; ++r) {
    const uint32_t* c = C::at(counts, r);
    above_run += c[0];
    on_run += c[1];
  }

  // 2. gather in index order
  uint64_t* dest = C::at(sort_buf, 0);
  T* values = static_cast<T*>(p.values) + p.values_rows.row_offset(row);
  int64_t* indices = p.indices + p.indices_rows.row_offset(row);
  const T* xv = reinterpret_cast<const T*>(x);
  uint32_t seen_above = 0, seen_on = 0;
  const uint32_t lanes_below = (1u << lane) - 1u;
  // Without the cache, the next chunk's element is loaded before this one's barrier.
  Bits next = 0;
  if (!kCache && tid < len) next = __ldg(xs + tid);
  for (int base = 0, buf = 0; base < len; base += kThreads, buf ^= 1) {
    if (seen_above == local_above && (seen_on == local_on || on_run + seen_on >= need)) break;
    const int j = base + tid;
    const bool in = j < len;
    uint32_t key = 0;
    if constexpr (kCache) {
      if (in) key = cache[j];
    } else {
      key = Key::of(next);
      if (j + kThreads < len) next = __ldg(xs + j + kThreads);
    }
    const bool above = in && (key & mask) > prefix;
    const bool on = in && (key & mask) == prefix;
    const uint32_t b_above = __ballot_sync(0xffffffffu, above);
    const uint32_t b_on = __ballot_sync(0xffffffffu, on);
    if (lane == 0) scan[buf][warp] = __popc(b_above) | (uint32_t(__popc(b_on)) << 16);
    __syncthreads();
    const uint32_t v = lane < kWarps ? scan[buf][lane] : 0u;
    uint32_t incl = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t n = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += n;
    }
    const uint32_t warp_before = __shfl_sync(0xffffffffu, incl - v, warp);
    const uint32_t chunk = __shfl_sync(0xffffffffu, incl, kWarps - 1);
    int slot = -1;
    if (above) {
      slot = int(above_run + seen_above + (warp_before & 0xffffu) + __popc(b_above & lanes_below));
    } else if (on) {
      const uint32_t r = on_run + seen_on + (warp_before >> 16) + __popc(b_on & lanes_below);
      if (r < need) slot = int(all_above + r);
    }
    if (slot >= 0) {
      const uint32_t index = uint32_t(lo + j);
      if (p.sorted) {
        dest[slot] = (uint64_t(key) << 32) | uint64_t(~index);
      } else {
        values[slot] = xv[index];
        indices[slot] = index;
      }
    }
    seen_above += chunk & 0xffffu;
    seen_on += chunk >> 16;
  }

  // 3. sort (rank 0)
  C::sync();  // every pick written; no CTA reads another's shared memory past here
  if (!p.sorted || rank != 0) return;
  const int n = p.sort_cap;
  for (int size = 2; size <= n; size <<= 1) {
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      for (int i = tid; i < n / 2; i += kThreads) {
        const int a = 2 * i - (i & (stride - 1));
        const int b = a + stride;
        const uint64_t va = sort_buf[a], vb = sort_buf[b];
        const bool descending = (a & size) == 0;
        if ((va < vb) == descending) {
          sort_buf[a] = vb;
          sort_buf[b] = va;
        }
      }
      __syncthreads();
    }
  }
  for (int i = tid; i < p.k; i += kThreads) {
    const uint32_t index = ~uint32_t(sort_buf[i]);
    values[i] = xv[index];
    indices[i] = index;
  }
}

}  // namespace gks::kernels::rows
