# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

import jax
import jax.numpy as jnp

FLOAT_DTYPES = (jnp.float32, jnp.float16, jnp.bfloat16)


def default_interpret(x: jax.Array) -> bool:
    """Interpret mode unless the array lives on a GPU."""
    devices = getattr(x, "devices", lambda: set())()
    return not any(d.platform == "gpu" for d in devices)


def check_float(x, op: str, arg: str) -> None:
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op}: argument '{arg}' must be float32, float16 or bfloat16, got {x.dtype}")


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def tuned_config(x: jax.Array, kernel: str, dtype: str, shape: tuple[int, ...]) -> int | None:
    """The autotuned config of `kernel` (e.g. "pallas.sgemm") for the GPU x lives on, this
    dtype and shape's bucket, else None (gks.runtime.tables.lookup_for, keyed without torch)."""
    from gks.runtime import tables

    device = next(iter(x.devices()))
    cc = str(getattr(device, "compute_capability", "?"))
    identity = tables.make_identity(device.device_kind, cc)
    return tables.lookup_for(identity, kernel, dtype, shape)
