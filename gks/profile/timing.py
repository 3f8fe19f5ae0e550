# SPDX-License-Identifier: Apache-2.0
"""Timing on the GPU: CUDA events around batches of launches, rotating input sets so the
L2 starts cold, warm-up first, variants interleaved, median and spread over repetitions."""

from __future__ import annotations

import dataclasses
import math
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any


@dataclasses.dataclass
class Variant:
    """One thing to time: `fn(**inputs)` for each input set in turn.

    ``host_sync`` times with the host clock around a batch ended by ``sync()`` (for work
    that is not on torch's stream, e.g. JAX); otherwise CUDA events on torch's stream.
    """

    name: str
    fn: Callable[..., Any]
    input_sets: Sequence[dict]
    host_sync: Callable[[Any], None] | None = None
    samples_ms: list[float] = dataclasses.field(default_factory=list)
    last_output: Any = None  # output of the last timed call ...
    last_set: int = 0  # ... and the index of the input set it was computed from

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    def quantile_ms(self, q: float) -> float:
        xs = sorted(self.samples_ms)
        return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def sets_for_cold_l2(bytes_per_set: float, l2_bytes: int, cap: int = 32) -> int:
    """How many distinct input sets make a rotation at least 3x the L2 size."""
    if bytes_per_set <= 0:
        return 1
    return max(1, min(cap, math.ceil(3 * l2_bytes / bytes_per_set)))


def cold_l2_input_sets(spec, shape, dtype: str, first: dict | None = None) -> list[dict]:
    """The op's input sets for one (shape, dtype), enough of them (sets_for_cold_l2) that a
    rotation starts each call with a cold L2: `first` (else seed 0's), then seeds 1, 2, ..."""
    import torch

    first = first if first is not None else spec.make_inputs(shape, dtype, "cuda", 0)
    nbytes = sum(v.numel() * v.element_size() for v in first.values() if isinstance(v, torch.Tensor))
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
    return [first] + [spec.make_inputs(shape, dtype, "cuda", s)
                      for s in range(1, sets_for_cold_l2(nbytes, l2))]


def _run_batch(v: Variant, calls: int) -> float:
    """ms per call for `calls` calls rotating over v's input sets."""
    import torch

    n = len(v.input_sets)
    if v.host_sync is not None:
        out = None
        v.host_sync(v.fn(**v.input_sets[0]))  # drain before the clock starts
        t0 = time.perf_counter()
        for i in range(calls):
            out = v.fn(**v.input_sets[i % n])
        v.host_sync(out)
        v.last_output, v.last_set = out, (calls - 1) % n
        return (time.perf_counter() - t0) * 1e3 / calls
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(calls):
        out = v.fn(**v.input_sets[i % n])
    end.record()
    end.synchronize()
    v.last_output, v.last_set = out, (calls - 1) % n
    return start.elapsed_time(end) / calls


def time_interleaved(
    variants: Sequence[Variant], reps: int = 15, target_batch_ms: float = 20.0, warmup: int = 3
) -> None:
    """Fills each variant's samples_ms with `reps` samples, variants interleaved so that
    clock and thermal drift hit all of them alike."""
    calls_per_batch = {}
    for v in variants:
        for i in range(warmup):
            _run_batch(v, 1)
        probe = _run_batch(v, max(1, len(v.input_sets)))
        calls_per_batch[v.name] = max(len(v.input_sets), min(2000, int(target_batch_ms / max(probe, 1e-3))))
    for r in range(reps):
        order = variants[r % len(variants):] + variants[: r % len(variants)]
        for v in order:
            v.samples_ms.append(_run_batch(v, calls_per_batch[v.name]))


def copy_bandwidth_gbps(nbytes: int = 1 << 30, reps: int = 20) -> float:
    """Device copy bandwidth, counting bytes read plus bytes written (GB/s, 1e9)."""
    import torch

    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    v = Variant("copy", lambda: dst.copy_(src), [{}])
    time_interleaved([v], reps=reps, target_batch_ms=10.0)
    return 2 * nbytes / (v.median_ms * 1e-3) / 1e9


def gpu_clocks() -> dict[str, Any]:
    """SM and memory clocks as nvidia-smi reads them now (read only; never changed)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw",
             "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip().splitlines()[0]
        sm, mem, temp, power = (s.strip() for s in out.split(","))
        return {"sm_mhz": sm, "mem_mhz": mem, "temp_c": temp, "power_w": power}
    except (OSError, subprocess.SubprocessError, IndexError, ValueError) as e:
        return {"error": f"nvidia-smi unavailable: {e}"}
