# SPDX-License-Identifier: Apache-2.0
"""PyTorch custom ops over the CUDA backend (``torch.ops.gks.*``), one module per kernel
family (its ``__all__`` lists its ops).

Each op is a ``torch.library.custom_op`` with a fake (meta) kernel, so it traces under
``torch.compile(fullgraph=True)``, passes ``torch.library.opcheck`` and can be captured in
a CUDA graph. Validation happens once, in the C++ API, which raises ValueError/TypeError
naming the bad argument. ``gks.<name>`` re-exports everything in ``__all__``: in plain
eager use it runs the op's body without the dispatcher's per-call cost (see _eager.py); its
``.op`` is the custom op. The op bodies allocate their outputs with ``torch.empty_like`` or
``Tensor.new_empty``, which parse far fewer arguments than ``torch.empty(shape, dtype=...,
device=...)`` (less host time a call: docs/perf/gemm.md; the fake kernels keep the plain
form).
"""


from gks import registry

__all__ = registry.export_families(__name__, globals())
