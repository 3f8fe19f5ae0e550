# SPDX-License-Identifier: Apache-2.0
"""Triton backend: the same ops and meaning as gks.<op>, on torch tensors.

On a machine without a GPU, set TRITON_INTERPRET=1 before importing triton and pass CPU
tensors: the kernels then run in Triton's interpreter (that is how CI covers them).
"""

from gks import registry

__all__ = registry.export_families(__name__, globals())
