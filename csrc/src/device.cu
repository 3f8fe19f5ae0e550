// SPDX-License-Identifier: Apache-2.0
#include <mutex>
#include <vector>

#include "launch.h"

namespace gks::detail {

DeviceLimits device_limits(int device) {
  static std::mutex mutex;
  static std::vector<DeviceLimits> cache;
  static std::vector<bool> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (device >= int(cache.size())) {
    cache.resize(device + 1);
    known.resize(device + 1, false);
  }
  if (!known[device]) {
    DeviceLimits limits;
    int l2 = 0, major = 0, smem = 0;
    GKS_CHECK(cudaDeviceGetAttribute(&limits.sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess &&
                  cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) == cudaSuccess &&
                  cudaDeviceGetAttribute(&limits.max_threads_per_sm,
                                         cudaDevAttrMaxThreadsPerMultiProcessor, device) == cudaSuccess &&
                  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                  cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess,
              kCudaError)
        << "gks: cannot read the properties of CUDA device " << device;
    limits.l2_bytes = l2;
    limits.smem_per_block = smem;
    limits.clusters = major >= 9;
    cache[device] = limits;
    known[device] = true;
  }
  return cache[device];
}

}  // namespace gks::detail
