# SPDX-License-Identifier: Apache-2.0
"""Row views for the Triton backend: a tensor [..., N] as rows of a contiguous last dim.

Mirrors the C++ RowLayout: leading dims that are contiguous with each other merge, and up
to two strided levels remain (row -> (row // inner) * outer_stride + (row % inner) *
inner_stride), which covers a strided row view and a [B, S, H, N] tensor sliced in S.
"""

from __future__ import annotations

from typing import NamedTuple


class Rows(NamedTuple):
    rows: int
    cols: int
    inner: int  # size of the inner leading level (1 when there is one level)
    outer_stride: int
    inner_stride: int


def row_layout(x, op: str, arg: str) -> Rows:
    if x.dim() < 1:
        raise ValueError(f"{op}: argument '{arg}' must have at least 1 dim, got a scalar")
    cols = x.shape[-1]
    if cols > 1 and x.stride(-1) != 1:
        raise ValueError(
            f"{op}: argument '{arg}' must be contiguous in its last dim (stride 1), "
            f"got stride {x.stride(-1)}"
        )
    levels: list[list[int]] = []  # [size, stride], outermost first
    for size, stride in zip(x.shape[:-1], x.stride()[:-1]):
        if size == 1:
            continue
        if levels and levels[-1][1] == stride * size:
            levels[-1] = [levels[-1][0] * size, stride]
        else:
            levels.append([size, stride])
    rows = 1
    for size in x.shape[:-1]:
        rows *= size
    if len(levels) > 2:
        raise ValueError(
            f"{op}: argument '{arg}' has {len(levels)} non-mergeable strided leading dims; "
            "this backend takes at most 2 (the CUDA backend takes any)"
        )
    if not levels:
        return Rows(rows, cols, 1, 0, 0)
    if len(levels) == 1:
        return Rows(rows, cols, 1, levels[0][1], 0)
    return Rows(rows, cols, levels[1][0], levels[0][1], levels[1][1])
