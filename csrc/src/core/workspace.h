// SPDX-License-Identifier: Apache-2.0
// Temporary device memory for the ops that need some (a transposed operand, split-K
// partial sums): allocated and freed in the order of the caller's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gks/error.h"
#include "core/launch.h"

namespace gks::detail {

// The stream-ordered pool temporaries come from, one per device, created on first use.
// It keeps freed memory for the next call (release threshold: unlimited) rather than
// hand it back to the driver at every synchronization, which costs tens of microseconds
// a call at the sizes gks uses.
inline cudaMemPool_t temporary_pool(int device) {
  return once_per_device(device, [](int d) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = d;
    cudaMemPool_t pool = nullptr;
    cudaError_t err = cudaMemPoolCreate(&pool, &props);
    GKS_CHECK(err == cudaSuccess, kCudaError)
        << "gks: cannot create a memory pool on cuda:" << d << ": " << cudaGetErrorString(err);
    uint64_t keep_all = UINT64_MAX;
    err = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all);
    GKS_CHECK(err == cudaSuccess, kCudaError)
        << "gks: cannot configure the memory pool on cuda:" << d << ": " << cudaGetErrorString(err);
    return pool;
  });
}

// A temporary device buffer, allocated and freed in the order of `stream`: from
// temporary_pool, or, while the stream is being captured into a graph, as a graph
// allocation node (the graph owns that memory).
class StreamBuffer {
 public:
  StreamBuffer(size_t bytes, int device, cudaStream_t stream, const char* op, const char* what)
      : stream_(stream) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    cudaError_t err = cudaStreamIsCapturing(stream, &capture);
    if (err == cudaSuccess) {
      err = capture == cudaStreamCaptureStatusNone
                ? cudaMallocFromPoolAsync(&ptr_, bytes, temporary_pool(device), stream)
                : cudaMallocAsync(&ptr_, bytes, stream);
    }
    GKS_CHECK(err == cudaSuccess, kCudaError)
        << op << ": cannot allocate " << bytes << " bytes for " << what << ": "
        << cudaGetErrorString(err);
  }
  ~StreamBuffer() { (void)cudaFreeAsync(ptr_, stream_); }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  template <typename T>
  T* get() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace gks::detail
