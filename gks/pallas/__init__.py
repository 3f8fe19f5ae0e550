# SPDX-License-Identifier: Apache-2.0
"""JAX/Pallas backend: the same ops and meaning as gks.<op>, on JAX arrays.

On a GPU the kernels lower through Pallas's Triton backend; on a CPU-only machine they run
in Pallas interpret mode (chosen automatically, or forced with interpret=True).
"""

from gks import registry

__all__ = registry.export_families(__name__, globals())
