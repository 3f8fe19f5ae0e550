// SPDX-License-Identifier: Apache-2.0
// What the GoogleTest files share: device descriptors and a check that a call throws the
// gks::Error a user should see.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "gks/gks.h"

namespace gks_test {

inline const gks::Device kGpu{gks::DeviceType::kCUDA, 0};
inline const gks::Device kCpu{gks::DeviceType::kCPU, 0};

// A distinct, aligned address per slot, for the tensors of host-side checks that no kernel
// touches: an op's tensors must not share memory (it refuses outputs that do).
inline void* fake_address(int slot) { return reinterpret_cast<void*>(uintptr_t(slot) << 36); }

// Runs `call` and expects a gks::Error of `kind` whose message contains `needle`.
template <typename F>
void expect_error(F&& call, gks::ErrorKind kind, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "expected gks::Error containing '" << needle << "'";
  } catch (const gks::Error& e) {
    EXPECT_EQ(int(e.kind()), int(kind)) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace gks_test
