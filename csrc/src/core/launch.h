// SPDX-License-Identifier: Apache-2.0
// Host-side helpers shared by the .cu files: dtype dispatch and launch checks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "gks/error.h"
#include "gks/device_limits.h"
#include "gks/tensor.h"

namespace gks::detail {

// make(device), computed once per device and kept (thread-safe). Each call site passes its
// own lambda, so each gets its own cache. A make() that throws caches nothing.
template <typename Make>
auto once_per_device(int device, Make make) -> decltype(make(device)) {
  static std::mutex mutex;
  static std::unordered_map<int, decltype(make(device))> cache;
  std::lock_guard<std::mutex> lock(mutex);
  const auto it = cache.find(device);
  if (it != cache.end()) return it->second;
  const auto value = make(device);
  cache.emplace(device, value);
  return value;
}

// Throws gks::Error(kCudaError) if the last launch (or an earlier asynchronous error) failed.
inline void check_launch(const char* op) {
  const cudaError_t err = cudaGetLastError();
  GKS_CHECK(err == cudaSuccess, kCudaError)
      << op << ": kernel launch failed: " << cudaGetErrorString(err);
}

// Makes `device` current for the scope of a launch, restoring the caller's device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : device_(device) {
    GKS_CHECK(cudaGetDevice(&previous_) == cudaSuccess, kCudaError)
        << "gks: cudaGetDevice failed (is a CUDA driver and GPU present?)";
    if (previous_ != device_) cudaSetDevice(device_);
  }
  ~DeviceGuard() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int previous_ = 0;
};

// A launch configuration (for cudaLaunchKernelEx) with 1-D thread block clusters of
// `cluster` CTAs along x (1: plain CTAs) and, with `early_start`, programmatic dependent
// launch (sm_90+): the kernel may be scheduled while the stream's previous kernel is still
// finishing, so its launch and set-up overlap that kernel's tail. Such a kernel must call
// ptx::wait_for_prior_grids (kernels/ptx/sm90.cuh) before it touches global memory.
// Built in place: `config` points at `attrs`, so the object is neither copied nor moved.
struct LaunchConfig {
  LaunchConfig(dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream, unsigned cluster,
               bool early_start) {
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem_bytes;
    config.stream = stream;
    config.attrs = attrs;
    if (cluster > 1) {
      cudaLaunchAttribute& a = attrs[config.numAttrs++];
      a.id = cudaLaunchAttributeClusterDimension;
      a.val.clusterDim.x = cluster;
      a.val.clusterDim.y = 1;
      a.val.clusterDim.z = 1;
    }
    if (early_start) {
      cudaLaunchAttribute& a = attrs[config.numAttrs++];
      a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      a.val.programmaticStreamSerializationAllowed = 1;
    }
  }
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;

  cudaLaunchConfig_t config{};
  cudaLaunchAttribute attrs[2]{};
};

// Raises a kernel's dynamic shared-memory limit (needed above 48 KiB) and, with
// max_carveout, asks for the largest shared-memory carveout (what shared memory leaves of
// the SM's unified L1 / shared memory is L1), once per device.
template <auto kKernel>
void prepare_smem_kernel(int smem_bytes, int device, bool max_carveout = true) {
  static std::atomic<uint64_t> done_devices{0};
  const uint64_t bit = device < 64 ? (uint64_t(1) << device) : 0;
  if (bit != 0 && (done_devices.load(std::memory_order_acquire) & bit)) return;
  if (smem_bytes > 48 * 1024) {
    const cudaError_t err =
        cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
    GKS_CHECK(err == cudaSuccess, kCudaError)
        << "gks: cannot give a kernel " << smem_bytes
        << " bytes of shared memory: " << cudaGetErrorString(err);
  }
  if (max_carveout) {
    cudaFuncSetAttribute(kKernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                         cudaSharedmemCarveoutMaxShared);
    (void)cudaGetLastError();  // the carveout is a hint; a refusal is not an error
  }
  done_devices.fetch_or(bit, std::memory_order_release);
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace gks::detail

// Calls the enclosed code with `scalar_t` bound to the C++ type of a float dtype.
#define GKS_DISPATCH_FLOAT(dtype, ...)                                     \
  switch (dtype) {                                                         \
    case ::gks::DType::kFloat32: {                                         \
      using scalar_t = float;                                              \
      __VA_ARGS__;                                                         \
    } break;                                                               \
    case ::gks::DType::kFloat16: {                                         \
      using scalar_t = __half;                                             \
      __VA_ARGS__;                                                         \
    } break;                                                               \
    case ::gks::DType::kBFloat16: {                                        \
      using scalar_t = __nv_bfloat16;                                      \
      __VA_ARGS__;                                                         \
    } break;                                                               \
    default:                                                               \
      GKS_CHECK(false, kUnsupportedDtype) << "unsupported dtype " << ::gks::dtype_name(dtype); \
  }
