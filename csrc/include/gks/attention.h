// SPDX-License-Identifier: Apache-2.0
// FlashAttention forward with the log-sum-exp of each query row:
//   o[b, h, i] = softmax_j(scale * q[b, h, i] . k[b, h / G, j]) @ v[b, h / G]
//   lse[b, h, i] = log(sum_j exp(scale * q[b, h, i] . k[b, h / G, j]))   (natural log, fp32)
// with G = Hq / Hkv (grouped- and multi-query attention). Query i sees key j when
//   j <= i + (Sk - Sq) + right   and   j >= i + (Sk - Sq) - left
// for the window (left, right), -1 unbounded (FlashAttention's window_size, aligned
// bottom-right); causal is right = 0. With softcap > 0 the scaled scores s become
// softcap * tanh(s / softcap) (Gemma-2's cap) before the softmax, and lse is of those.
// A row that sees no key gets o = 0 and lse = -inf. Head dims: D (q, k) one of 32, 64,
// 96, 128, 192, 256, and v's the same or, with D = 192, 128 (DeepSeek-V3). Tensor Core
// matmuls with fp32 accumulation; any Sq and Sk.
//
// Three kernels (the `config` argument, gks.registry's configs for the op):
//  0 "mma.sync": FlashAttention-2's design on mma.sync (kernels/attention/fwd_sm80.cuh);
//    every head dim, every GPU gks builds for.
//  1 "wgmma": the same algorithm on Hopper's wgmma, cp.async loads, two CTAs an SM
//    (kernels/attention/fwd_sm90.cuh).
//  2 "wgmma.ws": warp-specialized and persistent on Hopper: a TMA producer warp, two
//    consumer warpgroups in ping-pong, softmax overlapped with the P V wgmma, TMA stores
//    (fwd_sm90.cuh, namespace ws). Needs Sq, Sk > 0 and tensors TMA can address.
// The Hopper kernels run on a compute-capability 9.0 GPU in a build with sm_90a: wgmma for
// head dims 64 and 128, wgmma.ws for every head dim but 32 (and 192 / 128). config -1 picks
// the first of wgmma.ws, wgmma, mma.sync that can run; a forced config that cannot run
// gives way to the next in that order (flash_attention_fwd_path says which runs).
#pragma once

#include <cuda_runtime_api.h>

#include <optional>

#include "gks/tensor.h"

namespace gks {

// The kernels the `config` argument forces (-1: the best kernel here).
struct FlashAttentionFwdConfig {
  enum class Kernel { kMmaSync, kWgmma, kWgmmaWs };
  const char* name;  // stable: the autotuner's tables key on the names
  Kernel kernel;
};
inline constexpr FlashAttentionFwdConfig kFlashAttentionFwdConfigs[] = {
    {"mma.sync", FlashAttentionFwdConfig::Kernel::kMmaSync},
    {"wgmma", FlashAttentionFwdConfig::Kernel::kWgmma},
    {"wgmma.ws", FlashAttentionFwdConfig::Kernel::kWgmmaWs},
};

struct FlashAttentionFwdArgs {
  TensorRef q;    // [B, Hq, Sq, D], fp16 or bf16, last dim contiguous, other strides free
  TensorRef k;    // [B, Hkv, Sk, D], q's dtype, Hq % Hkv == 0
  TensorRef v;    // [B, Hkv, Sk, Dv], q's dtype; Dv = D, or 128 with D = 192
  TensorRef o;    // [B, Hq, Sq, Dv], q's dtype, last dim contiguous, other strides free
  TensorRef lse;  // [B, Hq, Sq], float32, any strides
  bool causal = false;
  std::optional<float> softmax_scale;  // unset: 1 / sqrt(D); otherwise finite and > 0
  // The sliding window (FlashAttention's window_size): keys more than window_left before or
  // window_right after the query's diagonal are masked; -1 is unbounded. With causal,
  // window_right must be -1 or 0 (causal is right = 0).
  int64_t window_left = -1;
  int64_t window_right = -1;
  double softcap = 0.0;  // 0: none; else finite and > 0 (checked before any narrowing)
  int config = -1;  // -1: the best kernel here; else an index into kFlashAttentionFwdConfigs
};

// Validates the arguments (throws gks::Error) and launches on `stream`.
// q, k, v and o must be 16-byte aligned: base pointers at 16 bytes and the batch, head and
// sequence strides multiples of 8 elements (always so for tensors allocated contiguous).
void flash_attention_fwd(const FlashAttentionFwdArgs& args, cudaStream_t stream);

// The head dims of q and k the kernels are instantiated for; v's is the same, or 128 with
// 192 (DeepSeek-V3's shape).
inline constexpr int kFlashAttentionHeadDims[] = {32, 64, 96, 128, 192, 256};

// "wgmma.ws", "wgmma" or "mma.sync": the kernel flash_attention_fwd(args) runs on this GPU
// (after the same validation).
const char* flash_attention_fwd_path(const FlashAttentionFwdArgs& args);

// ---- the backward: dq, dk, dv of flash_attention_fwd's o ----
// From dO (the gradient of o), the forward's o and lse, and q, k, v with the forward's
// options (the same meaning): with S the scaled, capped, masked scores and P = exp(S - lse),
// dV = P^T dO, dP = dO V^T, delta = rowsum(dO * o), dS = P * (dP - delta) (times 1 - tanh^2
// of the capped score under a softcap), dQ = scale dS K, dK = scale dS^T Q; dk and dv are
// summed over the query heads of each key/value head. A row with lse = -inf (it saw no key)
// contributes nothing and gets dq = 0. With deterministic = true every element is summed in
// a fixed order, so a call gives the same bits every time; otherwise dq's fp32 sums may be
// added in the order the GPU's blocks finish (its last bits vary).
// The backward's kernels (the `config` argument; -1: the best kernel here):
//  0 "mma.sync": kernels/attention/bwd_sm80.cuh, every head dim, every GPU gks builds for;
//    deterministic (no atomics: dQ in a pass of its own that recomputes the scores).
//  1 "wgmma": kernels/attention/bwd_sm90.cuh on a compute-capability 9.0 GPU in a build with
//    sm_90a, head dims 64 and 128 (v's the same); dQ added with fp32 atomics, so its last
//    bits vary from run to run. Forced where it cannot run, or with deterministic = true,
//    it gives way to mma.sync (flash_attention_bwd_path says which runs).
//  2 "wgmma.ws": the same products warp-specialized (TMA loads, a dQ writer warp adding with
//    bulk reduce-adds); also Sq, Sk > 0 and tensors TMA can address. Forced where it cannot
//    run it gives way to wgmma, then mma.sync. The default where it runs. Deterministic
//    too (each query block's dQ added by one key block at a time, in a fixed order): with
//    a causal or window mask always (a key block waits only on blocks started before it),
//    without one where a head's ceil(Sk / 128) key blocks are at most the GPU's SM count
//    (any may wait on any other, so all must run at once); beyond, mma.sync runs.
struct FlashAttentionBwdConfig {
  enum class Kernel { kMmaSync, kWgmma, kWgmmaWs };
  const char* name;  // stable: the autotuner's tables key on the names
  Kernel kernel;
};
inline constexpr FlashAttentionBwdConfig kFlashAttentionBwdConfigs[] = {
    {"mma.sync", FlashAttentionBwdConfig::Kernel::kMmaSync},
    {"wgmma", FlashAttentionBwdConfig::Kernel::kWgmma},
    {"wgmma.ws", FlashAttentionBwdConfig::Kernel::kWgmmaWs},
};

struct FlashAttentionBwdArgs {
  TensorRef dout;  // dO [B, Hq, Sq, Dv], q's dtype, last dim contiguous ('do' in messages)
  TensorRef q;     // [B, Hq, Sq, D], as flash_attention_fwd takes it
  TensorRef k;     // [B, Hkv, Sk, D]
  TensorRef v;     // [B, Hkv, Sk, Dv]
  TensorRef o;     // [B, Hq, Sq, Dv], the forward's, last dim contiguous
  TensorRef lse;   // [B, Hq, Sq], float32, the forward's
  TensorRef dq;    // [B, Hq, Sq, D], q's dtype, last dim contiguous (written)
  TensorRef dk;    // [B, Hkv, Sk, D] (written)
  TensorRef dv;    // [B, Hkv, Sk, Dv] (written)
  bool causal = false;
  std::optional<float> softmax_scale;
  int64_t window_left = -1;
  int64_t window_right = -1;
  double softcap = 0.0;
  bool deterministic = false;  // true: bit-identical results run after run
  int config = -1;  // -1: the best kernel here; else an index into kFlashAttentionBwdConfigs
};

// Validates the arguments (throws gks::Error) and launches on `stream` (three to five
// kernels; delta, and the wgmma kernels' fp32 dQ, lse2 and turn counters, in stream-ordered
// temporaries). Every
// tensor but lse must be 16-byte aligned, as flash_attention_fwd's.
void flash_attention_bwd(const FlashAttentionBwdArgs& args, cudaStream_t stream);

// The name of the kernel flash_attention_bwd(args) runs on this GPU ("wgmma" or "mma.sync"),
// after the same argument checks.
const char* flash_attention_bwd_path(const FlashAttentionBwdArgs& args);

// ---- variable-length batches: B sequences packed along one row dim ----
// Sequence b is rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of q, o and lse, and its keys
// are rows [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of k and v, of which the first
// seqused_k[b] when given; within a sequence the semantics are flash_attention_fwd's (causal
// and windows bottom-right per sequence, GQA, softcap; a row that sees no key gets o = 0,
// lse = -inf). cu_seqlens stay on the device: the kernel reads them, clamps every bound into
// [0, total] (a decreasing entry empties its sequence) and never reads outside the tensors,
// and max_seqlen_q only sizes the grid (a longer sequence is still computed whole), so a
// call needs no host synchronization and a CUDA graph replays with other lengths.
// With page_table the keys live in a paged cache (vLLM's and FlashAttention's layout): k and v
// are [num_pages, page_size, Hkv, D] and key j of sequence b is row j % page_size of page
// page_table[b, j / page_size]; sequence b has cu_seqlens_k[b + 1] - cu_seqlens_k[b] keys (or
// seqused_k[b]), clamped to [0, max_pages * page_size]; a page index outside [0, num_pages)
// reads as zeros (never out of bounds).
struct FlashAttentionVarlenFwdArgs {
  TensorRef q;             // [total_q, Hq, D], fp16/bf16, last dim contiguous, other strides free
  TensorRef k;             // [total_k, Hkv, D] (paged: [num_pages, page_size, Hkv, D]), q's dtype, Hq % Hkv == 0
  TensorRef v;             // k's shape but for Dv, q's dtype; Dv = D, or 128 with D = 192
  TensorRef cu_seqlens_q;  // [B + 1], int32, on q's device
  TensorRef cu_seqlens_k;  // [B + 1], int32
  std::optional<TensorRef> seqused_k;  // [B], int32: the keys each sequence uses
  std::optional<TensorRef> page_table;  // [B, max_pages], int32: the keys are paged
  int64_t max_seqlen_q = 0;            // >= 0; the longest sequence of q, as a hint
  TensorRef o;             // [total_q, Hq, Dv], q's dtype, last dim contiguous
  TensorRef lse;           // [Hq, total_q], float32, any strides
  bool causal = false;
  std::optional<float> softmax_scale;  // as FlashAttentionFwdArgs
  int64_t window_left = -1;
  int64_t window_right = -1;
  double softcap = 0.0;
  // -1: the wgmma kernel where it runs (sm_90, D = Dv = 64 or 128), else mma.sync; or an
  // index into kFlashAttentionVarlenFwdConfigs: "wgmma" gives way to mma.sync where it cannot
  // run.
  int config = -1;
};
inline constexpr FlashAttentionFwdConfig kFlashAttentionVarlenFwdConfigs[] = {
    {"mma.sync", FlashAttentionFwdConfig::Kernel::kMmaSync},
    {"wgmma", FlashAttentionFwdConfig::Kernel::kWgmma},
};
// Validates the arguments (throws gks::Error) and launches on `stream`. q, k, v and o must
// be 16-byte aligned (base and every stride but the last a multiple of 8 elements).
void flash_attention_varlen_fwd(const FlashAttentionVarlenFwdArgs& args, cudaStream_t stream);

// The backward of flash_attention_varlen_fwd (packed keys, no page table): per sequence,
// flash_attention_bwd's gradients, with dq in q's packed layout and dk, dv in k's and v's.
// Rows of dq, dk and dv outside every sequence are left as they are. max_seqlen_q and
// max_seqlen_k size the grids only (a longer sequence is still computed whole). One kernel
// family: the mma.sync kernels of flash_attention_bwd (deterministic, every head dim).
struct FlashAttentionVarlenBwdArgs {
  TensorRef dout;          // dO [total_q, Hq, Dv], q's dtype, last dim contiguous ('do' in messages)
  TensorRef q;             // [total_q, Hq, D], as flash_attention_varlen_fwd takes it
  TensorRef k;             // [total_k, Hkv, D]
  TensorRef v;             // [total_k, Hkv, Dv]
  TensorRef cu_seqlens_q;  // [B + 1], int32, on q's device
  TensorRef cu_seqlens_k;  // [B + 1], int32
  int64_t max_seqlen_q = 0;  // >= 0: the longest sequence of q, as a hint
  int64_t max_seqlen_k = 0;  // >= 0: the longest of k
  TensorRef o;             // [total_q, Hq, Dv], the forward's
  TensorRef lse;           // [Hq, total_q], float32, the forward's
  TensorRef dq;            // [total_q, Hq, D], q's dtype, last dim contiguous (written)
  TensorRef dk;            // [total_k, Hkv, D] (written)
  TensorRef dv;            // [total_k, Hkv, Dv] (written)
  bool causal = false;
  std::optional<float> softmax_scale;
  int64_t window_left = -1;
  int64_t window_right = -1;
  double softcap = 0.0;
  bool deterministic = false;  // the mma.sync kernels are deterministic whatever it says
  int config = -1;             // -1 or 0 ("mma.sync", kFlashAttentionVarlenBwdConfigs)
};
inline constexpr FlashAttentionBwdConfig kFlashAttentionVarlenBwdConfigs[] = {
    {"mma.sync", FlashAttentionBwdConfig::Kernel::kMmaSync},
};
// Validates the arguments (throws gks::Error) and launches on `stream`. Every tensor but lse
// and the cu_seqlens must be 16-byte aligned (base and every stride but the last).
void flash_attention_varlen_bwd(const FlashAttentionVarlenBwdArgs& args, cudaStream_t stream);

// ---- merging partial attention states (split-KV decode, cascade attention) ----
// A state (v, s) is the attention output of a row over some of its keys and the lse of
// those scores (natural log, fp32, as flash_attention_fwd writes them). Merged:
//   m = max_k s_k,  s = m + log(sum_k exp(s_k - m)),  v = sum_k exp(s_k - m) v_k / sum_k exp(s_k - m).
// A state with s = -inf saw no key and contributes nothing (its v is not read); a row
// whose states all saw nothing gets v = 0 and s = -inf; a NaN or +inf s gives a NaN row.

struct MergeStateArgs {
  TensorRef v_a;  // [..., D], fp32/fp16/bf16, last dim contiguous, other strides free
  TensorRef s_a;  // [...] (v_a's leading dims), float32, any strides
  TensorRef v_b;  // v_a's shape and dtype
  TensorRef s_b;  // s_a's shape
  TensorRef v;    // v_a's shape and dtype; may be exactly v_a (in place)
  TensorRef s;    // s_a's shape, float32; may be exactly s_a (in place)
};
// Validates the arguments (throws gks::Error) and launches on `stream`.
void merge_state(const MergeStateArgs& args, cudaStream_t stream);

struct MergeStatesArgs {
  TensorRef v;      // [..., K, D]: K states of each row, fp32/fp16/bf16, last dim contiguous
  TensorRef s;      // [..., K], float32, any strides; K may be 0 (v_out = 0, s_out = -inf)
  TensorRef v_out;  // [..., D], v's dtype, last dim contiguous, apart from the inputs
  TensorRef s_out;  // [...], float32, apart from the inputs
};
void merge_states(const MergeStatesArgs& args, cudaStream_t stream);

// ---- split-KV decode (flash-decoding) over a dense or paged KV cache ----
// Each sequence b holds keys [0, L_b) of its cache, L_b = cache_seqlens[b] clamped to [0,
// capacity] (capacity: S_max dense, max_pages * page_size paged), and its Sq queries are its
// last Sq positions: query i sits at L_b - Sq + i and sees key j when
//   j <= L_b - Sq + i + right   and   j >= L_b - Sq + i - left   and   j < L_b
// (causal is right = 0), as flash_attention_fwd with Sk = L_b. A row that sees no key gets
// o = 0 and lse = -inf. Paged: key j is row j % page_size of page page_table[b, j / page_size];
// a page index outside [0, num_pages) reads as zeros (never out of bounds).
// Two phases: a kernel per (row block of the G = Hq / Hkv heads sharing a KV head times Sq,
// KV head, batch, split) walks its split's keys and writes a partial (o, lse) in fp32; the
// merge kernel (kernels/attention/merge.cuh) combines the splits into o. With one split the
// first kernel writes o and lse itself. The split count comes from the shapes and the SM
// count alone (num_splits = 0) or is forced; the partials live in a stream-ordered
// temporary sized from the shapes, so a call is CUDA-graph safe: no host synchronization,
// nothing sized by cache_seqlens' values.
struct FlashAttentionDecodeArgs {
  TensorRef q;              // [B, Hq, Sq, D], fp16/bf16, D in kFlashAttentionDecodeHeadDims,
                            // last dim contiguous, other strides free
  TensorRef k_cache;        // dense [B, Hkv, S_max, D] or paged [num_pages, page_size, Hkv, D],
                            // q's dtype, last dim contiguous, other strides free
  TensorRef v_cache;        // k_cache's shape and dtype
  TensorRef cache_seqlens;  // [B], int32, on q's device
  TensorRef o;              // [B, Hq, Sq, D], q's dtype, last dim contiguous
  TensorRef lse;            // [B, Hq, Sq], float32, any strides
  std::optional<TensorRef> page_table;  // [B, max_pages], int32: the cache is paged
  bool causal = true;
  std::optional<float> softmax_scale;  // unset: 1 / sqrt(D); otherwise finite and > 0
  int64_t window_left = -1;            // as FlashAttentionFwdArgs
  int64_t window_right = -1;
  double softcap = 0.0;
  int64_t num_splits = 0;  // 0: from the shapes and the SM count; else 1 to kFlashAttentionDecodeMaxSplits
};

inline constexpr int kFlashAttentionDecodeHeadDims[] = {64, 128, 256};
inline constexpr int kFlashAttentionDecodeMaxSplits = 256;

// Validates the arguments (throws gks::Error) and launches on `stream`. q, k_cache,
// v_cache and o must be 16-byte aligned (base and every stride but the last a multiple of 8
// elements).
void flash_attention_decode(const FlashAttentionDecodeArgs& args, cudaStream_t stream);

namespace detail {
// The tile a launch uses, chosen from the head dim and the mask alone (a pure function host
// tests check).
struct FlashAttentionFwdPlan {
  int block_m = 0;               // query rows per CTA (16 or 32 per warp)
  int block_n = 0;               // keys per K/V tile
  int warps = 0;                 // warps per CTA
  bool q_in_registers = false;   // Q fragments held in registers for the whole K loop
  int64_t smem_bytes = 0;        // Q tile + two stages of K and V tiles
};
// head_dim_v: v's head dim (-1: head_dim's). Throws gks::Error for head dims with no kernel.
FlashAttentionFwdPlan plan_flash_attention_fwd(int64_t head_dim, bool causal,
                                               int64_t head_dim_v = -1);

// The split-KV decode's launch, from shapes alone (host tests check it).
struct FlashAttentionDecodePlan {
  int block_m = 0;    // query rows (of the G x Sq a KV head has) per CTA: 16, 32 or 64
  int block_n = 0;    // keys per K/V tile (each of the warps takes 16 of them)
  int warps = 0;
  int stages = 0;     // K/V tiles in flight (cp.async pipeline)
  int m_blocks = 0;   // CTAs along a KV head's G x Sq rows
  int splits = 0;     // CTAs along the keys; 1: no merge
  int64_t smem_bytes = 0;
  int64_t workspace_bytes = 0;  // fp32 partials: splits x B x Hq x Sq x (D + 1) x 4 (0 for one split)
};
// capacity: the keys a sequence's cache holds; num_splits 0 picks (see decode_num_splits).
// Throws gks::Error for a head dim with no kernel.
FlashAttentionDecodePlan plan_flash_attention_decode(int64_t batch, int64_t heads_q, int64_t heads_kv,
                                                     int64_t seqlen_q, int64_t capacity,
                                                     int64_t head_dim, int64_t num_splits, int sms);
// The split count for num_splits = 0: 1 when the batch x KV heads x row blocks CTAs fill the
// SMs; else about two CTAs an SM, each split at least two key tiles, evened over the tiles
// (gks.specs.attention.decode_num_splits is the same function for the Triton port).
int decode_num_splits(int64_t batch, int64_t heads_kv, int64_t m_blocks, int64_t capacity,
                      int64_t block_n, int sms);

// The (q/k, v) head dims some kernel serves: kFlashAttentionHeadDims with v's the same, and
// (192, 128).
constexpr bool flash_head_dims(int64_t head_dim, int64_t head_dim_v) {
  for (int d : kFlashAttentionHeadDims)
    if (head_dim == d) return head_dim_v == d || (d == 192 && head_dim_v == 128);
  return false;
}
// Those the Hopper kernels serve (on a GPU and build that have them): wgmma, wgmma.ws.
constexpr bool wgmma_flash_head_dims(int64_t head_dim, int64_t head_dim_v) {
  return head_dim == head_dim_v && (head_dim == 64 || head_dim == 128);
}
constexpr bool ws_flash_head_dims(int64_t head_dim, int64_t head_dim_v) {
  return flash_head_dims(head_dim, head_dim_v) && head_dim != 32;
}
}  // namespace detail

}  // namespace gks
