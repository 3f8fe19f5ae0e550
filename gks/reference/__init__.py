# SPDX-License-Identifier: Apache-2.0
"""Reference implementations in plain PyTorch: the meaning every backend must match.

Each takes torch tensors. By default it computes in fp32 and returns the op's output dtype
(the same contract as the kernels); ``precise=True`` computes and returns float64, the
yardstick the tests measure every backend (and the fp32 reference itself) against. The
functions live beside their specs, in the family's module (gks/specs/<family>.py, its
``__all__``), so that an op's meaning is in one place.
"""

from gks import registry

__all__ = registry.export_families("gks.specs", globals())
