// SPDX-License-Identifier: Apache-2.0
#include "core/launch.h"

namespace gks::detail {

DeviceLimits device_limits(int device) {
  return once_per_device(device, [](int d) {
    DeviceLimits limits;
    int l2 = 0, major = 0, minor = 0, smem = 0;
    GKS_CHECK(cudaDeviceGetAttribute(&limits.sms, cudaDevAttrMultiProcessorCount, d) == cudaSuccess &&
                  cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, d) == cudaSuccess &&
                  cudaDeviceGetAttribute(&limits.max_threads_per_sm,
                                         cudaDevAttrMaxThreadsPerMultiProcessor, d) == cudaSuccess &&
                  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) == cudaSuccess &&
                  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d) == cudaSuccess &&
                  cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, d) == cudaSuccess,
              kCudaError)
        << "gks: cannot read the properties of CUDA device " << d;
    limits.l2_bytes = l2;
    limits.smem_per_block = smem;
    limits.compute_capability = major * 10 + minor;
    limits.clusters = major >= 9;
    return limits;
  });
}

bool device_is_sm90(int device) { return device_limits(device).compute_capability == 90; }

}  // namespace gks::detail
