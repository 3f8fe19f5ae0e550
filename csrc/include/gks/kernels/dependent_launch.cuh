// SPDX-License-Identifier: Apache-2.0
// Programmatic dependent launch, the device side (sm_90+; the host asks for it with
// LaunchConfig's early_start, see csrc/src/launch.h): a kernel so launched may be scheduled
// while the stream's previous kernel is finishing, so its launch and set-up overlap that
// kernel's tail. Both are no-ops in a kernel launched without it, and compile to nothing
// below sm_90.
#pragma once

namespace gks::kernels {

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

}  // namespace gks::kernels
