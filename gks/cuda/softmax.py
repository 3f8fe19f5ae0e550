# SPDX-License-Identifier: Apache-2.0
"""The softmax family's DLPack entry point. See gks.cuda."""

from __future__ import annotations

from gks import _native

__all__ = ["softmax_out"]


def softmax_out(x, y, config: int = -1) -> None:
    """y = softmax(x) over the last dim, written into y (same shape and dtype as x;
    y may be x itself, in place, and may share no memory with x otherwise).

    config: -1 picks the kernel shape by heuristic, else an index into the library's table
    (gks.registry.get("softmax").configs: "registers" holds rows in registers where they
    fit, "looped" walks them in a loop, "registers-wide" is "registers" with twice the values
    a thread, "looped-smem" is "looped" with the row kept in shared memory between its two
    walks where it fits (one read of global memory); csrc/include/gks/softmax.h says more)."""
    _native.module().softmax(x, y, int(config))
