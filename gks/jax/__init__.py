# SPDX-License-Identifier: Apache-2.0
"""The CUDA kernels as JAX ops: ``gks.jax.<op>`` for every op with a CUDA backend, the same
meaning and arguments as ``gks.<op>``, on JAX arrays, usable inside ``jax.jit``.

Each op is an XLA FFI custom call (registered through jax-tvm-ffi) into the same library
gks.<op> calls: it runs on XLA's stream, its shapes and dtypes are known at trace time, and
a bad input raises at trace time with the library's own message (the library checks the
abstract values in its validate-only mode). Ops that neither allocate nor synchronize are
marked compatible with XLA's command buffers (CUDA graphs); gks.jax._ffi.NO_CUDA_GRAPH lists
the others and why. The kernels run on NVIDIA GPUs only; ``gks.pallas.<op>`` is the portable
JAX backend.

Needs: the built gks library (pip install -e .) and jax-tvm-ffi (pip install jax-tvm-ffi);
each missing piece raises at the first call, naming what to install. ``config=-1`` takes
what gks.<op> takes: the tuned table's entry for JAX's default GPU, else the library's
heuristic.

Example::

    import jax, jax.numpy as jnp, gks.jax
    x = jnp.ones((8, 4096), jnp.bfloat16); w = jnp.ones((4096,), jnp.bfloat16)
    y = jax.jit(gks.jax.rmsnorm)(x, w)
"""

from gks import registry
from gks.jax._ffi import JaxFfiUnavailable

# The ops live in the family modules (gks/jax/<family>.py, each module's __all__).
__all__ = ["JaxFfiUnavailable", *registry.export_families(__name__, globals())]
