// SPDX-License-Identifier: Apache-2.0
// The check of an op's `config` argument against its config table (entries with a `name`),
// the message listing the table: "-1 (heuristic), 0 (registers), 1 (looped) or 2
// (registers-wide)".
#pragma once

#include <cstddef>
#include <sstream>

#include "gks/error.h"

namespace gks::detail {

template <class Config, size_t kCount>
void check_listed_config(int config, const Config (&table)[kCount], const char* op,
                         const char* minus_one = "heuristic") {
  if (config >= -1 && config < int(kCount)) return;
  std::ostringstream listing;
  listing << "-1 (" << minus_one << ")";
  for (size_t i = 0; i < kCount; ++i)
    listing << (i + 1 < kCount ? ", " : " or ") << i << " (" << table[i].name << ")";
  GKS_CHECK(false, kInvalidArgument)
      << op << ": argument 'config' must be " << listing.str() << ", got " << config;
}

}  // namespace gks::detail
