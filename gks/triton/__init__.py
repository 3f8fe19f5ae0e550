# SPDX-License-Identifier: Apache-2.0
"""Triton backend: the same ops and meaning as gks.<op>, on torch tensors.

On a machine without a GPU, set TRITON_INTERPRET=1 before importing triton and pass CPU
tensors: the kernels then run in Triton's interpreter (that is how CI covers them).
"""


from gks.triton._gemm import config_names as gemm_config_names
from gks.triton.flash_attention_fwd import config_names as flash_attention_fwd_config_names
from gks.triton.flash_attention_fwd import flash_attention_fwd
from gks.triton.int8_gemm import int8_gemm
from gks.triton.quantize_int8 import dequantize_int8, quantize_int8
from gks.triton.rmsnorm import rmsnorm
from gks.triton.sgemm import sgemm
from gks.triton.softmax import softmax, softmax_rmsnorm
from gks.triton.wmma_gemm import wmma_gemm

__all__ = [
    "rmsnorm",
    "softmax",
    "softmax_rmsnorm",
    "quantize_int8",
    "dequantize_int8",
    "sgemm",
    "wmma_gemm",
    "int8_gemm",
    "flash_attention_fwd",
    "gemm_config_names",
    "flash_attention_fwd_config_names",
]
