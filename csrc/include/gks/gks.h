// SPDX-License-Identifier: Apache-2.0
// The gks C++ API: one header per kernel family, all included here.
#pragma once

#include "gks/activation.h"
#include "gks/attention.h"
#include "gks/error.h"
#include "gks/gemm.h"
#include "gks/loss.h"
#include "gks/norms.h"
#include "gks/quantize.h"
#include "gks/rope.h"
#include "gks/softmax.h"
#include "gks/tensor.h"
#include "gks/topk.h"
#include "gks/version.h"
