# SPDX-License-Identifier: Apache-2.0
"""JAX/Pallas backend: the same ops and meaning as gks.<op>, on JAX arrays.

On a GPU the kernels lower through Pallas's Triton backend; on a CPU-only machine they run
in Pallas interpret mode (chosen automatically, or forced with interpret=True).
"""


from gks.pallas.flash_attention_fwd import config_names as flash_attention_fwd_config_names
from gks.pallas.flash_attention_fwd import flash_attention_fwd
from gks.pallas.quantize_int8 import dequantize_int8, quantize_int8
from gks.pallas.rmsnorm import rmsnorm
from gks.pallas.sgemm import config_names as sgemm_config_names
from gks.pallas.sgemm import sgemm
from gks.pallas.softmax import softmax, softmax_rmsnorm

__all__ = [
    "rmsnorm",
    "softmax",
    "softmax_rmsnorm",
    "quantize_int8",
    "dequantize_int8",
    "sgemm",
    "sgemm_config_names",
    "flash_attention_fwd",
    "flash_attention_fwd_config_names",
]
