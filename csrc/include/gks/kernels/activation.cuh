// SPDX-License-Identifier: Apache-2.0
// The activations of the gated units, by gks::Activation's order (kSilu, kGelu,
// kGeluTanh): act_and_mul's (rows/act.cuh) and the GEMMs' gated epilogue's
// (gemm/epilogue_terms.cuh). fp32 in and out.
#pragma once

namespace gks::kernels {

template <int kAct>
__device__ __forceinline__ float activation(float g) {
  if constexpr (kAct == 0) {
    return g / (1.f + __expf(-g));
  } else if constexpr (kAct == 1) {
    return 0.5f * g * (1.f + erff(g * 0.70710678118654752f));
  } else {
    const float inner = 0.79788456080286536f * (g + 0.044715f * g * g * g);  // sqrt(2 / pi)
    return 0.5f * g * (1.f + tanhf(inner));
  }
}

// activation<act>(g) for an activation known at run time (uniform across the caller's warp).
__device__ __forceinline__ float activation_at(int act, float g) {
  return act == 0 ? activation<0>(g) : act == 1 ? activation<1>(g) : activation<2>(g);
}

}  // namespace gks::kernels
