# SPDX-License-Identifier: Apache-2.0
"""Reference implementations in plain PyTorch: the meaning every backend must match.

Each takes torch tensors. By default it computes in fp32 and returns the op's output dtype
(the same contract as the kernels); ``precise=True`` computes and returns float64, the
yardstick the tests measure every backend (and the fp32 reference itself) against.
"""

from gks.reference.rmsnorm import rmsnorm

__all__ = ["rmsnorm"]
