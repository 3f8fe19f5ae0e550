# SPDX-License-Identifier: Apache-2.0
"""The topk family's DLPack entry point: top_k. See gks.cuda."""

from __future__ import annotations

from gks import _native

__all__ = ["top_k_out"]


def top_k_out(x, values, indices, k: int, sorted: bool = True, config: int = -1) -> None:
    """values, indices = the k largest values of each row of x [..., N] and their int64
    indices (gks.reference.top_k's order: NaN above +inf, -0.0 equal to 0.0, ties by lower
    index; sorted descending, or unsorted: those above the k-th value in index order, then
    those equal to it). values [..., k] in x's dtype and indices [..., k] int64, apart from x
    and from each other. 0 <= k <= min(N, 2048).

    config: -1 picks the launch shape by heuristic, else an index into the library's table
    (gks.registry.get("top_k").configs: one CTA a row of 256 or 1024 threads, or a thread
    block cluster of 2, 4 or 8 CTAs a row, which runs one CTA a row where clusters do not
    exist, before sm_90)."""
    _native.module().top_k(x, values, indices, int(k), bool(sorted), int(config))
