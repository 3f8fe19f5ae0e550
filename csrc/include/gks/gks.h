// SPDX-License-Identifier: Apache-2.0
// The gks C++ API: one header per op, all included here.
#pragma once

#include "gks/error.h"
#include "gks/rmsnorm.h"
#include "gks/tensor.h"
#include "gks/version.h"
