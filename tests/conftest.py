# SPDX-License-Identifier: Apache-2.0
"""Test set-up shared by every test file.

Without a CUDA GPU, Triton runs in its interpreter (TRITON_INTERPRET=1 must be set before
triton is imported, hence here) and Pallas in interpret mode; GPU-only tests skip with the
reason stated.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import sys
from pathlib import Path

import pytest
import torch

HAS_GPU = torch.cuda.is_available()
if not HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

from gks import _native  # noqa: E402

HAS_NATIVE = _native.available()
DEVICE = "cuda" if HAS_GPU else "cpu"

TOOLS = Path(__file__).resolve().parent.parent / "tools"


def import_tool(name: str):
    """The module tools/<name>.py (the tools are scripts, not a package)."""
    sys.path.insert(0, str(TOOLS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


requires_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU; this machine has none")
requires_native = pytest.mark.skipif(
    not HAS_NATIVE, reason="the gks CUDA library is not built (GKS_SKIP_CUDA_BUILD=1?)"
)


def backend_params(spec) -> list:
    """The spec's backends as pytest params of their names: each runs on a GPU, and
    without one only where it has an interpreter (the others marked skipped, saying so)."""
    return [pytest.param(b.name, id=b.name,
                         marks=() if HAS_GPU or b.interpreted else pytest.mark.skip(reason=f"{b.name} has no interpreter"))
            for b in spec.backends]


def public_op(name: str, backend: str):
    """gks.<name> as users call it in `backend` (cuda: the torch op gks.<name>; triton,
    pallas: gks.<backend>.<name>), skipping the test where the CUDA backend cannot run."""
    from gks import registry

    if backend == "cuda":
        if not HAS_GPU:
            pytest.skip("CUDA backend needs a GPU; this machine has none")
        if not HAS_NATIVE:
            pytest.skip("the gks CUDA library is not built")
    return registry.get(name).public(backend)


def capture(op, inputs: dict):
    """op(**inputs) captured in a CUDA graph on a side stream, after a warm-up call there (so
    compiling and the allocator's first blocks stay off the capture): (graph, the captured
    call's outputs, the warm-up's outputs)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        eager = op(**inputs)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            captured = op(**inputs)
    torch.cuda.current_stream().wait_stream(stream)
    return graph, captured, eager


def refill(inputs: dict, fresh: dict) -> None:
    """Copies fresh's tensors into inputs' (a captured graph reads them at its next replay)."""
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor):
            value.copy_(fresh[name])


def seed_for(*parts) -> int:
    """A fresh, reproducible seed per test case (stable across runs and machines)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:4], "little")


def poison_allocator(nbytes: int, device: str) -> None:
    """Fill the next allocation of about `nbytes` with NaN bytes (0xFF) by allocating,
    filling and freeing a block of that size: torch's caching allocator hands the same
    block to the op's next output allocation, so an element the kernel never writes
    shows up as NaN instead of a plausible stale value."""
    if device == "cuda" and nbytes > 0:
        block = torch.empty(nbytes, dtype=torch.uint8, device=device)
        block.fill_(0xFF)
        del block


@contextlib.contextmanager
def poisoned_host_outputs(dtypes=(torch.float16, torch.bfloat16)):
    """Within it, on the host (no GPU), torch.empty fills the tensors of `dtypes` it makes
    with NaN: the host's stand-in for poison_allocator, so that an output element an
    interpreted kernel never writes fails the check. On a GPU it does nothing (the caller
    poisons the allocator)."""
    if HAS_GPU:
        yield
        return
    real_empty = torch.empty

    def nan_empty(*size, dtype=None, **kw):
        t = real_empty(*size, dtype=dtype, **kw)
        if dtype in dtypes:
            t.fill_(float("nan"))
        return t

    torch.empty = nan_empty
    try:
        yield
    finally:
        torch.empty = real_empty


@pytest.fixture
def device() -> str:
    return DEVICE


def pytest_terminal_summary(terminalreporter):
    """Why tests skipped, reason by reason with a count (a run without a GPU skips thousands,
    and should say why in a few lines)."""
    import collections

    reasons = collections.Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    if reasons:
        terminalreporter.section("why tests skipped")
        for reason, count in reasons.most_common():
            terminalreporter.write_line(f"{count:7d}  {reason}")
