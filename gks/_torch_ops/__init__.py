# SPDX-License-Identifier: Apache-2.0
"""PyTorch custom ops over the CUDA backend (``torch.ops.gks.*``), one module per op.

Each op is a ``torch.library.custom_op`` with a fake (meta) kernel, so it traces under
``torch.compile(fullgraph=True)``, passes ``torch.library.opcheck`` and can be captured in
a CUDA graph. Validation happens once, in the C++ API, which raises ValueError/TypeError
naming the bad argument. ``gks.<name>`` re-exports everything in ``__all__``.
"""

from gks._torch_ops.rmsnorm import rmsnorm

__all__ = ["rmsnorm"]
