# SPDX-License-Identifier: Apache-2.0
"""Reference implementations in plain PyTorch: the meaning every backend must match.

Each takes torch tensors. By default it computes in fp32 and returns the op's output dtype
(the same contract as the kernels); ``precise=True`` computes and returns float64, the
yardstick the tests measure every backend (and the fp32 reference itself) against.
"""


from gks.reference.flash_attention_fwd import flash_attention_fwd
from gks.reference.gemm import gemm
from gks.reference.int8_gemm import int8_gemm
from gks.reference.quantize_int8 import dequantize_int8, quantize_int8
from gks.reference.rmsnorm import rmsnorm
from gks.reference.sgemm import sgemm
from gks.reference.softmax import softmax
from gks.reference.softmax_rmsnorm import softmax_rmsnorm
from gks.reference.wmma_gemm import wmma_gemm

__all__ = [
    "rmsnorm",
    "softmax",
    "softmax_rmsnorm",
    "quantize_int8",
    "dequantize_int8",
    "sgemm",
    "wmma_gemm",
    "int8_gemm",
    "gemm",
    "flash_attention_fwd",
]
