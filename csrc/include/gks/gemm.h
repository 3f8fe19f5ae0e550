// SPDX-License-Identifier: Apache-2.0
// The GEMM family: sgemm (fp32 FFMA), wmma_gemm (fp16/bf16 Tensor Cores), int8_gemm.
#pragma once

#include "gks/gemm_common.h"
#include "gks/int8_gemm.h"
#include "gks/sgemm.h"
#include "gks/wmma_gemm.h"
