# SPDX-License-Identifier: Apache-2.0
"""PyTorch custom ops over the CUDA backend (``torch.ops.gks.*``), one module per op.

Each op is a ``torch.library.custom_op`` with a fake (meta) kernel, so it traces under
``torch.compile(fullgraph=True)``, passes ``torch.library.opcheck`` and can be captured in
a CUDA graph. Validation happens once, in the C++ API, which raises ValueError/TypeError
naming the bad argument. ``gks.<name>`` re-exports everything in ``__all__``: in plain
eager use it runs the op's body without the dispatcher's ~10 µs (see _eager.py); its
``.op`` is the custom op. The op bodies allocate their outputs with ``torch.empty_like`` or
``Tensor.new_empty``, which parse far fewer arguments than ``torch.empty(shape, dtype=...,
device=...)`` (a few µs a call on the hosts measured; the fake kernels keep the plain form).
"""


from gks._torch_ops.flash_attention_fwd import flash_attention_fwd
from gks._torch_ops.gemm import gemm
from gks._torch_ops.int8_gemm import int8_gemm
from gks._torch_ops.quantize_int8 import dequantize_int8, quantize_int8
from gks._torch_ops.rmsnorm import rmsnorm
from gks._torch_ops.sgemm import sgemm
from gks._torch_ops.softmax import softmax, softmax_rmsnorm
from gks._torch_ops.wmma_gemm import wmma_gemm

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
