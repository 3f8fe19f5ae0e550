# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np

FLOAT_DTYPES = (jnp.float32, jnp.float16, jnp.bfloat16)


def device_of(x) -> jax.Device:
    """The device x lives on. A traced value (inside jax.jit, vmap, grad) has none to ask: its
    computation runs where jit places it, on the default backend's first device unless the
    caller says otherwise, so the choice is made from the backend, never from the value."""
    if isinstance(x, jax.core.Tracer) or not hasattr(x, "devices"):
        return jax.devices()[0]
    return next(iter(x.devices()))


def default_interpret(x: jax.Array) -> bool:
    """Interpret mode unless the array lives (or, traced, will run) on a GPU."""
    return device_of(x).platform != "gpu"


def takes_arrays(*names: str):
    """Decorates a public op: its arguments `names` must be JAX (or NumPy) arrays. Anything
    else, a torch tensor above all, is refused naming the argument before the op reads a
    dtype (which would otherwise say "must be float32, got torch.float32")."""

    def wrap(fn):
        params = list(inspect.signature(fn).parameters)
        where = [(name, params.index(name)) for name in names]
        op = f"gks.pallas.{fn.__name__}"

        @functools.wraps(fn)
        def checked(*args, **kwargs):
            for name, i in where:
                value = args[i] if i < len(args) else kwargs.get(name)
                if not isinstance(value, (jax.Array, np.ndarray)):
                    kind = type(value)
                    raise TypeError(f"{op}: argument '{name}' must be a JAX array, got "
                                    f"{kind.__module__}.{kind.__qualname__}")
            return fn(*args, **kwargs)

        return checked

    return wrap


def check_float(x, op: str, arg: str) -> None:
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op}: argument '{arg}' must be float32, float16 or bfloat16, got {x.dtype}")


def check_int8_offsets(size: int, op: str, arg: str) -> None:
    """JAX's Pallas Triton lowering indexes an array with 32-bit offsets unless it holds more
    than 2^32 bytes; for 1-byte elements, offsets from 2^31 to 2^32 elements then wrap (a
    fault, or a wrong read). An int8 array of that size is refused instead."""
    if 2**31 <= size <= 2**32:
        raise ValueError(
            f"{op}: argument '{arg}' has {size} elements, whose int8 array the Pallas Triton "
            "lowering would index with 32-bit offsets that wrap past 2^31 (it takes 64-bit "
            "offsets above 2^32 bytes only); use gks.triton or gks.cuda for int8 arrays of "
            "2^31 to 2^32 elements"
        )


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def tuned_config(x: jax.Array, kernel: str, dtype: str, shape: tuple[int, ...]) -> int | None:
    """The autotuned config of `kernel` (e.g. "pallas.sgemm") for the GPU x lives on, this
    dtype and shape's bucket, else None (gks.runtime.tables.lookup_for, keyed without torch)."""
    from gks.runtime import tables

    device = device_of(x)
    cc = str(getattr(device, "compute_capability", "?"))
    identity = tables.make_identity(device.device_kind, cc)
    return tables.lookup_for(identity, kernel, dtype, shape)
