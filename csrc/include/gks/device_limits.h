// SPDX-License-Identifier: Apache-2.0
// What launch plans need to know of a GPU. Plans take it as an argument (so host tests can
// check them for any device); the library reads it once per device (device_limits()).
#pragma once

#include <cstdint>

namespace gks::detail {

struct DeviceLimits {
  int sms = 132;
  int64_t l2_bytes = 50 << 20;
  int max_threads_per_sm = 2048;
  bool clusters = true;  // thread block clusters (compute capability 9.0 and later)
  int64_t smem_per_block = 227 << 10;  // the most shared memory a block may opt in to
  int compute_capability = 90;  // major * 10 + minor
};

// The limits of CUDA device `device`, read on first use and cached. Throws gks::Error.
DeviceLimits device_limits(int device);

// True for a compute-capability 9.0 device (sm_90a code runs on no other); from
// device_limits().
bool device_is_sm90(int device);

}  // namespace gks::detail
