# SPDX-License-Identifier: Apache-2.0
"""The shape reads the torch ops make before they call the library: the dims that size an
output and key the tuned tables. Everything else about the arguments the C++ API checks,
naming the argument."""

from __future__ import annotations

import operator


def check_matrix(t, op: str, arg: str) -> None:
    """Raises unless t is a 2-D torch tensor (the C++ API validates everything else and
    names the argument)."""
    import torch

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: argument '{arg}' must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 2:
        raise ValueError(f"{op}: argument '{arg}' must be a 2-D matrix, got {t.dim()} dims "
                         f"(shape {list(t.shape)})")


def gemm_dims(op: str, a, b, a_name: str = "a", b_name: str = "b") -> tuple[int, int, int]:
    """(M, N, K) of a [M, K] @ b [K, N]: the one check the torch ops need before allocating
    the output, that both are 2-D torch tensors (check_matrix's errors otherwise). One read
    of each shape: every .shape builds a torch.Size, which a per-call path notices."""
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        sa, sb = a.shape, b.shape
        if len(sa) == 2 and len(sb) == 2:
            return sa[0], sb[1], sa[1]
    check_matrix(a, op, a_name)
    check_matrix(b, op, b_name)
    raise AssertionError("unreachable: check_matrix raised")


def row_dims(x) -> tuple[int, int]:
    """(M, N) of x [..., N] taken as M rows: the row ops' spec dims, their tables' key."""
    shape = x.shape
    n = shape[-1] if len(shape) else 1
    return (x.numel() // n if n else 0), n


def attention_dims(q, k, causal, v=None) -> tuple[int, ...] | None:
    """(B, Hq, Hkv, Sq, Sk, D, causal) of q [B, Hq, Sq, D] and k [B, Hkv, Sk, D], the
    attention spec's dims, with Dv appended where v [B, Hkv, Sk, Dv] has a head dim other
    than D (the spec's optional last dim: the keys of D = Dv stay 7 dims); None unless they
    are 4-D (the C++ API then says what is wrong). Takes torch tensors or JAX arrays."""
    qs, ks = q.shape, k.shape
    if len(qs) != 4 or len(ks) != 4:
        return None
    dims = (qs[0], qs[1], ks[1], qs[2], ks[2], qs[3], int(bool(causal)))
    if v is None:
        return dims
    vs = v.shape
    if len(vs) != 4:
        return None
    return dims if vs[3] == qs[3] else (*dims, vs[3])


def varlen_attention_dims(q, k, v, cu_seqlens_q, max_seqlen_q, max_seqlen_k, causal,
                          page_table=None) -> tuple[int, ...] | None:
    """(B, Hq, Hkv, Sq, Sk, D, causal, page) of a flash_attention_varlen_fwd call (Sq, Sk:
    max_seqlen_q and max_seqlen_k; page: the paged cache's page size, 0 for packed keys),
    with Dv appended where v's head dim differs from D; None unless the tensors have the
    op's ranks (the C++ API then says what is wrong). Takes torch tensors or JAX arrays."""
    paged = page_table is not None
    if len(q.shape) != 3 or len(k.shape) != (4 if paged else 3) or len(v.shape) != len(k.shape) \
            or len(cu_seqlens_q.shape) != 1:
        return None
    try:  # not ints: the op refuses them, naming the argument
        longest = (operator.index(max_seqlen_q), operator.index(max_seqlen_k))
    except TypeError:
        return None
    dims = (cu_seqlens_q.shape[0] - 1, q.shape[1], k.shape[-2], *longest, q.shape[2], int(bool(causal)),
            k.shape[1] if paged else 0)
    return dims if v.shape[-1] == q.shape[2] else (*dims, v.shape[-1])

