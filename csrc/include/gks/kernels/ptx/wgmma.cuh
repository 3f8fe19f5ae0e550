// SPDX-License-Identifier: Apache-2.0
// wgmma (sm_90a): the shared-memory matrix descriptor, the fence / commit / wait around
// asynchronous warpgroup MMAs, and the MMAs themselves, m64nNk16 (fp16 / bf16 in, fp32
// accumulators) and m64nNk32 (int8 in, int32 accumulators; fp8 e4m3 / e5m2 in, fp32
// accumulators) for N = 64, 128, 256 (and 96, 192 for wgmma_rs):
//  - wgmma_ss: A and B both from shared memory through descriptors, each K-major or (16-bit
//    only, kTransA / kTransB) MN-major;
//  - wgmma_rs: A from registers (a warp's mma.sync A fragment), B MN-major in shared memory.
// The accumulator fragment of m64nN is per warp that of mma.sync m16n8 tiles: warp w of the
// warpgroup owns rows 16w..16w+15; lane (g, t) = (lane / 4, lane % 4) holds rows g and g + 8,
// columns 2t and 2t + 1 of each 8-column group, registers 4j + {0, 1} and 4j + {2, 3}.
// The one place these are spelled out. Include only from sm_90a code.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

namespace gks::ptx {

// A wgmma shared-memory matrix descriptor for a 128-byte-swizzled operand:
// bits 0-13 start address >> 4, 16-29 leading byte offset >> 4, 32-45 stride byte offset
// >> 4, 49-51 base offset (0: every swizzle atom starts 1024-byte aligned), 62-63 layout
// (1 = 128-byte swizzle).
__device__ __forceinline__ uint64_t smem_descriptor(uint32_t addr, uint32_t leading_bytes,
                                                    uint32_t stride_bytes) {
  uint64_t desc = 0;
  desc |= uint64_t((addr & 0x3FFFF) >> 4);
  desc |= uint64_t((leading_bytes >> 4) & 0x3FFF) << 16;
  desc |= uint64_t((stride_bytes >> 4) & 0x3FFF) << 32;
  desc |= uint64_t(1) << 62;
  return desc;
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most kPending committed wgmma groups of this warp are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving reads or writes of accumulator registers across the
// asynchronous wgmma boundary (the registers are written by the Tensor Cores, not by the
// instruction the compiler sees).
template <int kN>
__device__ __forceinline__ void fence_registers(float (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int kN>
__device__ __forceinline__ void fence_registers(int32_t (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// The operand lists, spelled out for the preprocessor: a thread's N / 2 accumulator
// registers (%0 ...), then the other operands.
#define GKS_WGMMA_REGS32 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15" \
  ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define GKS_WGMMA_REGS48 \
  GKS_WGMMA_REGS32 \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define GKS_WGMMA_REGS64 \
  GKS_WGMMA_REGS32 \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47" \
  ", %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define GKS_WGMMA_REGS96 \
  GKS_WGMMA_REGS64 \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79" \
  ", %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define GKS_WGMMA_REGS128 \
  GKS_WGMMA_REGS64 \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79" \
  ", %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95" \
  ", %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111" \
  ", %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
// Accumulator operands with constraint C ("+f" or "+r").
#define GKS_WGMMA_D8(C, i) \
  C(d[i]), C(d[i + 1]), C(d[i + 2]), C(d[i + 3]), C(d[i + 4]), C(d[i + 5]), C(d[i + 6]), C(d[i + 7])
#define GKS_WGMMA_D32(C) GKS_WGMMA_D8(C, 0), GKS_WGMMA_D8(C, 8), GKS_WGMMA_D8(C, 16), GKS_WGMMA_D8(C, 24)
#define GKS_WGMMA_D48(C) GKS_WGMMA_D32(C), GKS_WGMMA_D8(C, 32), GKS_WGMMA_D8(C, 40)
#define GKS_WGMMA_D64(C) \
  GKS_WGMMA_D32(C), GKS_WGMMA_D8(C, 32), GKS_WGMMA_D8(C, 40), GKS_WGMMA_D8(C, 48), GKS_WGMMA_D8(C, 56)
#define GKS_WGMMA_D96(C)                                                                      \
  GKS_WGMMA_D64(C), GKS_WGMMA_D8(C, 64), GKS_WGMMA_D8(C, 72), GKS_WGMMA_D8(C, 80),             \
      GKS_WGMMA_D8(C, 88)
#define GKS_WGMMA_D128(C)                                                                     \
  GKS_WGMMA_D64(C), GKS_WGMMA_D8(C, 64), GKS_WGMMA_D8(C, 72), GKS_WGMMA_D8(C, 80),            \
      GKS_WGMMA_D8(C, 88), GKS_WGMMA_D8(C, 96), GKS_WGMMA_D8(C, 104), GKS_WGMMA_D8(C, 112),   \
      GKS_WGMMA_D8(C, 120)
// One wgmma of SHAPE_TYPES (e.g. "m64n256k16.f32.bf16.bf16"): PRED names the scale-d flag
// operand, AB the A and B operands, TAIL ends the instruction (the 16-bit forms add the
// scale and transpose immediates), OUTS are the accumulators and INS the other operands.
#define GKS_WGMMA_ASM(SHAPE_TYPES, REGS, AB, PRED, TAIL, OUTS, ...)                            \
  asm volatile("{\n"                                                                           \
               ".reg .pred p;\n"                                                               \
               "setp.ne.b32 p, " PRED ", 0;\n"                                                  \
               "wgmma.mma_async.sync.aligned." SHAPE_TYPES "\n"                                 \
               "{" REGS "},\n"                                                                  \
               " " AB ", p" TAIL "\n"                                                           \
               "}\n"                                                                            \
               : OUTS                                                                          \
               : __VA_ARGS__)

// The accumulator type of a wgmma on In.
template <typename In>
using WgmmaAcc = std::conditional_t<std::is_same_v<In, int8_t>, int32_t, float>;

// One wgmma_ss of N columns on In: TAIL16 is the 16-bit forms' immediates (scale-a 1,
// scale-b 1, A not transposed, B transposed or not); the fp8 forms take the two scales
// only, the int8 form none.
#define GKS_WGMMA_SS_TYPED(N, REGS, AB, PRED, TAIL16, DN)                                      \
  if constexpr (std::is_same_v<In, int8_t>)                                                    \
    GKS_WGMMA_ASM("m64n" N "k32.s32.s8.s8", REGS, AB, PRED, ";", DN("+r"), GKS_WGMMA_SS_INS);  \
  else if constexpr (std::is_same_v<In, __nv_fp8_e4m3>)                                        \
    GKS_WGMMA_ASM("m64n" N "k32.f32.e4m3.e4m3", REGS, AB, PRED, ", 1, 1;", DN("+f"),            \
                  GKS_WGMMA_SS_INS);                                                           \
  else if constexpr (std::is_same_v<In, __nv_fp8_e5m2>)                                        \
    GKS_WGMMA_ASM("m64n" N "k32.f32.e5m2.e5m2", REGS, AB, PRED, ", 1, 1;", DN("+f"),            \
                  GKS_WGMMA_SS_INS);                                                           \
  else if constexpr (std::is_same_v<In, __nv_bfloat16>)                                        \
    GKS_WGMMA_ASM("m64n" N "k16.f32.bf16.bf16", REGS, AB, PRED, TAIL16, DN("+f"),               \
                  GKS_WGMMA_SS_INS);                                                           \
  else                                                                                         \
    GKS_WGMMA_ASM("m64n" N "k16.f32.f16.f16", REGS, AB, PRED, TAIL16, DN("+f"), GKS_WGMMA_SS_INS)
#define GKS_WGMMA_SS_N(N, REGS, AB, PRED, DN)                      \
  if constexpr (kTransA && kTransB)                                \
    GKS_WGMMA_SS_TYPED(N, REGS, AB, PRED, ", 1, 1, 1, 1;", DN);   \
  else if constexpr (kTransA)                                      \
    GKS_WGMMA_SS_TYPED(N, REGS, AB, PRED, ", 1, 1, 1, 0;", DN);   \
  else if constexpr (kTransB)                                      \
    GKS_WGMMA_SS_TYPED(N, REGS, AB, PRED, ", 1, 1, 0, 1;", DN);   \
  else                                                             \
    GKS_WGMMA_SS_TYPED(N, REGS, AB, PRED, ", 1, 1, 0, 0;", DN)
#define GKS_WGMMA_SS_INS "l"(desc_a), "l"(desc_b), "r"(accumulate)

// d (+)= A B, both from shared memory: A [64 x K-step] K-major or, with kTransA, MN-major;
// B [K-step x kN] K-major or, with kTransB, MN-major (the MN-major forms: 16-bit inputs
// only; 8-bit operands are K-major always). A K-step is 32 bytes of K (16 16-bit or 32
// 8-bit elements). accumulate == 0 overwrites d.
template <typename In, int kN, bool kTransB, bool kTransA = false>
__device__ __forceinline__ void wgmma_ss(WgmmaAcc<In> (&d)[kN / 2], uint64_t desc_a,
                                         uint64_t desc_b, int accumulate) {
  static_assert(kN == 64 || kN == 128 || kN == 256, "N: 64, 128 or 256");
  static_assert(std::is_same_v<In, __half> || std::is_same_v<In, __nv_bfloat16> ||
                    std::is_same_v<In, int8_t> || std::is_same_v<In, __nv_fp8_e4m3> ||
                    std::is_same_v<In, __nv_fp8_e5m2>,
                "fp16, bf16, int8 or fp8 inputs");
  static_assert(!((kTransA || kTransB) && sizeof(In) == 1), "8-bit operands are K-major");
  if constexpr (kN == 64) {
    GKS_WGMMA_SS_N("64", GKS_WGMMA_REGS32, "%32, %33", "%34", GKS_WGMMA_D32);
  } else if constexpr (kN == 128) {
    GKS_WGMMA_SS_N("128", GKS_WGMMA_REGS64, "%64, %65", "%66", GKS_WGMMA_D64);
  } else {
    GKS_WGMMA_SS_N("256", GKS_WGMMA_REGS128, "%128, %129", "%130", GKS_WGMMA_D128);
  }
}

// d += A B: A [64 x 16] from registers (a warp's mma.sync m16n8k16 A fragment), B [16 x kN]
// MN-major in shared memory; fp16 or bf16 in, fp32 accumulators. N: 64, 96, 128, 192 or 256
// (attention's P V, N = the head dim).
template <typename In, int kN>
__device__ __forceinline__ void wgmma_rs(float (&d)[kN / 2], const uint32_t (&a)[4],
                                         uint64_t desc_b) {
  static_assert(kN == 64 || kN == 96 || kN == 128 || kN == 192 || kN == 256,
                "N: 64, 96, 128, 192 or 256");
  static_assert(std::is_same_v<In, __half> || std::is_same_v<In, __nv_bfloat16>, "fp16 or bf16");
  // scale-d is a predicate: true, d accumulates. imm-scale-a/b 1; imm-trans-b 1 (MN-major).
  constexpr int kAccumulate = 1;
#define GKS_WGMMA_RS_INS "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(kAccumulate)
#define GKS_WGMMA_RS_TYPED(N, REGS, AB, PRED, DN)                                              \
  if constexpr (std::is_same_v<In, __half>)                                                    \
    GKS_WGMMA_ASM("m64n" N "k16.f32.f16.f16", REGS, AB, PRED, ", 1, 1, 1;", DN("+f"),           \
                  GKS_WGMMA_RS_INS);                                                           \
  else                                                                                         \
    GKS_WGMMA_ASM("m64n" N "k16.f32.bf16.bf16", REGS, AB, PRED, ", 1, 1, 1;", DN("+f"),         \
                  GKS_WGMMA_RS_INS)
  if constexpr (kN == 64) {
    GKS_WGMMA_RS_TYPED("64", GKS_WGMMA_REGS32, "{%32, %33, %34, %35}, %36", "%37", GKS_WGMMA_D32);
  } else if constexpr (kN == 96) {
    GKS_WGMMA_RS_TYPED("96", GKS_WGMMA_REGS48, "{%48, %49, %50, %51}, %52", "%53", GKS_WGMMA_D48);
  } else if constexpr (kN == 128) {
    GKS_WGMMA_RS_TYPED("128", GKS_WGMMA_REGS64, "{%64, %65, %66, %67}, %68", "%69", GKS_WGMMA_D64);
  } else if constexpr (kN == 192) {
    GKS_WGMMA_RS_TYPED("192", GKS_WGMMA_REGS96, "{%96, %97, %98, %99}, %100", "%101",
                       GKS_WGMMA_D96);
  } else {
    GKS_WGMMA_RS_TYPED("256", GKS_WGMMA_REGS128, "{%128, %129, %130, %131}, %132", "%133",
                       GKS_WGMMA_D128);
  }
#undef GKS_WGMMA_RS_TYPED
#undef GKS_WGMMA_RS_INS
}

#undef GKS_WGMMA_SS_INS
#undef GKS_WGMMA_SS_N
#undef GKS_WGMMA_SS_TYPED
#undef GKS_WGMMA_ASM
#undef GKS_WGMMA_D128
#undef GKS_WGMMA_D96
#undef GKS_WGMMA_D64
#undef GKS_WGMMA_D48
#undef GKS_WGMMA_D32
#undef GKS_WGMMA_D8
#undef GKS_WGMMA_REGS128
#undef GKS_WGMMA_REGS96
#undef GKS_WGMMA_REGS64
#undef GKS_WGMMA_REGS48
#undef GKS_WGMMA_REGS32

}  // namespace gks::ptx
