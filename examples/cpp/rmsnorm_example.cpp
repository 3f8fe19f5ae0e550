// SPDX-License-Identifier: Apache-2.0
// Calls gks::rmsnorm from plain C++ (no Python, no framework) and checks the result
// against a double-precision loop on the host. Needs a CUDA GPU to run.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "gks/gks.h"

#define CUDA_OK(call)                                                              \
  do {                                                                             \
    cudaError_t err_ = (call);                                                     \
    if (err_ != cudaSuccess) {                                                     \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(err_));    \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

int main() {
  const int64_t rows = 37, cols = 4099;
  std::vector<float> x(rows * cols), w(cols), y(rows * cols);
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(rng);
  for (float& v : w) v = 1.f + 0.1f * normal(rng);

  float *dx, *dw, *dy;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dx), x.size() * sizeof(float)));
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dw), w.size() * sizeof(float)));
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dy), y.size() * sizeof(float)));
  CUDA_OK(cudaMemcpy(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dw, w.data(), w.size() * sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));

  const gks::Device gpu{gks::DeviceType::kCUDA, 0};
  gks::RmsNormArgs args;
  args.x = gks::TensorRef::make(dx, gks::DType::kFloat32, {rows, cols}, gpu);
  args.weight = gks::TensorRef::make(dw, gks::DType::kFloat32, {cols}, gpu);
  args.y = gks::TensorRef::make(dy, gks::DType::kFloat32, {rows, cols}, gpu);
  args.eps = 1e-6f;
  try {
    gks::rmsnorm(args, stream);
  } catch (const gks::Error& e) {
    std::fprintf(stderr, "gks::rmsnorm failed: %s\n", e.what());
    return 1;
  }
  // A bad call throws gks::Error with a message that names the argument.
  gks::RmsNormArgs bad = args;
  bad.weight.shape[0] = cols - 1;
  try {
    gks::rmsnorm(bad, stream);
    std::fprintf(stderr, "a weight of the wrong length was not rejected\n");
    return 1;
  } catch (const gks::Error& e) {
    std::printf("bad call rejected as expected: %s\n", e.what());
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(y.data(), dy, y.size() * sizeof(float), cudaMemcpyDeviceToHost));

  double max_err = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c) ss += double(x[r * cols + c]) * x[r * cols + c];
    const double inv = 1.0 / std::sqrt(ss / cols + 1e-6);
    for (int64_t c = 0; c < cols; ++c)
      max_err = std::fmax(max_err, std::fabs(x[r * cols + c] * inv * w[c] - y[r * cols + c]));
  }
  std::printf("gks::rmsnorm %lldx%lld fp32: max abs error vs fp64 = %.3g\n", (long long)rows,
              (long long)cols, max_err);
  cudaFree(dx);
  cudaFree(dw);
  cudaFree(dy);
  cudaStreamDestroy(stream);
  return max_err < 1e-4 ? 0 : 1;
}
