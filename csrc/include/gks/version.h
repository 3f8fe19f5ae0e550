// SPDX-License-Identifier: Apache-2.0
#pragma once

#define GKS_VERSION_MAJOR 0
#define GKS_VERSION_MINOR 1
#define GKS_VERSION_PATCH 0

namespace gks {
constexpr const char* kVersion = "0.1.0";
}  // namespace gks
