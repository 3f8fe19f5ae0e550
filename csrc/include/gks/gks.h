// SPDX-License-Identifier: Apache-2.0
// The gks C++ API: one header per op, all included here.
#pragma once

#include "gks/error.h"
#include "gks/flash_attention_fwd.h"
#include "gks/gemm.h"
#include "gks/hopper_gemm.h"
#include "gks/quantize_int8.h"
#include "gks/rmsnorm.h"
#include "gks/softmax.h"
#include "gks/tensor.h"
#include "gks/version.h"
