# SPDX-License-Identifier: Apache-2.0
"""The Triton GEMM kernel behind gks.triton.sgemm, .wmma_gemm and .int8_gemm: one tiled
kernel (grouped tile order for L2 reuse, masked edges, int64 offsets, any strides) with a
compile-time arithmetic mode:

  "ieee"  fp32 inputs, tl.dot with input_precision="ieee": FP32 FMA, never TF32.
  "mma"   fp16/bf16 inputs on Tensor Cores, fp32 accumulation.
  "int8"  int8 inputs on Tensor Cores, int32 accumulation; the epilogue multiplies by the
          per-row scale of a and the per-column scale of b.

On a GPU each mode runs one of a few block shapes (CONFIGS): the one `python -m gks
autotune --backend triton --kernel OP` stored for the device, dtype and shape bucket if
any (see gks.profile.autotune), else the one Triton's own autotuner picks (timed in-process
on the first call of each M, N, K, unchecked); `config=i` forces the i-th. Some block
shapes split K among several programs per output tile (split-K, for outputs of few tiles);
see CONFIGS. A call like an earlier one in everything Triton specializes on relaunches the
kernel compiled then without Triton's per-call dispatch (see _launch). Under the interpreter
(TRITON_INTERPRET=1) one small block shape is used, with the split of the config asked for.
"""

from __future__ import annotations

import inspect
import os

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_kernel(
    a_ptr, b_ptr, c_ptr, sa_ptr, sb_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_sa, stride_sb,
    MODE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr = 1,
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_in_group
    pid_n = (pid % per_group) // rows_in_group

    # Split-K: program (tile, s) takes k-tiles [s * per_split, (s + 1) * per_split). Without
    # it the bounds stay compile-time simple (a loop from 0 pipelines best).
    tiles_k = tl.cdiv(K, BLOCK_K)
    if SPLIT_K == 1:
        kt_begin = 0
        kt_end = tiles_k
    else:
        per_split = tl.cdiv(tiles_k, SPLIT_K)
        kt_begin = tl.program_id(1) * per_split
        kt_end = tl.minimum(kt_begin + per_split, tiles_k)

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k_first = kt_begin * BLOCK_K + tl.arange(0, BLOCK_K)  # the k of this program's first tile
    a_ptrs = a_ptr + rm[:, None].to(tl.int64) * stride_am + k_first[None, :].to(tl.int64) * stride_ak
    b_ptrs = b_ptr + k_first[:, None].to(tl.int64) * stride_bk + rn[None, :].to(tl.int64) * stride_bn
    rk = tl.arange(0, BLOCK_K)  # offsets within a tile, for the masks
    if MODE == "int8":
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(kt_begin, kt_end):
        k_left = K - kt * BLOCK_K
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < k_left), other=0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & (rn[None, :] < N), other=0)
        if MODE == "ieee":
            acc = tl.dot(a, b, acc, input_precision="ieee")
        elif MODE == "int8":
            acc = tl.dot(a, b, acc, out_dtype=tl.int32)
        else:
            acc = tl.dot(a, b, acc, out_dtype=tl.float32)
        a_ptrs += tl.cast(stride_ak, tl.int64) * BLOCK_K  # a stride of 1 arrives as a plain int
        b_ptrs += tl.cast(stride_bk, tl.int64) * BLOCK_K

    if MODE == "int8":
        sa = tl.load(sa_ptr + rm.to(tl.int64) * stride_sa, mask=rm < M, other=0.0)
        sb = tl.load(sb_ptr + rn.to(tl.int64) * stride_sb, mask=rn < N, other=0.0)
        out = acc.to(tl.float32) * sa[:, None] * sb[None, :]
    else:
        out = acc
    c_ptrs = c_ptr + rm[:, None].to(tl.int64) * stride_cm + rn[None, :].to(tl.int64) * stride_cn
    c_mask = (rm[:, None] < M) & (rn[None, :] < N)
    if SPLIT_K == 1:
        tl.store(c_ptrs, out.to(c_ptr.dtype.element_ty), mask=c_mask)
    else:  # c is fp32 and zeroed; the splits add their partial sums (in no fixed order)
        tl.atomic_add(c_ptrs, out, mask=c_mask, sem="relaxed")


# (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages[, split-K]) per mode: what a GPU chooses among.
# Split-K (fp32 FMA and fp16/bf16 modes) is for outputs of few tiles and long K (M of 16 or
# 128 with N = 4096): the splits add their sums atomically into a zeroed fp32 output, in
# no fixed order (see tuned_config for deterministic mode). The last three "mma" blocks
# fill the GPU at M = 16 or 128 without split-K, so a call needs no zeroed output first (a
# second launch: host time, which decides the speed of GEMMs that small).
CONFIGS = {
    "ieee": [(128, 128, 16, 8, 3), (128, 128, 32, 8, 2), (128, 64, 32, 4, 3),
             (64, 128, 32, 4, 3), (64, 64, 32, 4, 4), (32, 64, 32, 4, 4),
             (64, 128, 32, 4, 3, 4), (64, 64, 32, 4, 4, 4), (32, 64, 32, 4, 4, 8)],
    "mma": [(128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 4, 4),
            (128, 128, 64, 8, 4), (64, 128, 64, 4, 4), (64, 64, 64, 4, 4),
            (16, 128, 128, 4, 4), (128, 128, 64, 4, 4, 2), (64, 128, 64, 4, 4, 4),
            (64, 64, 64, 4, 4, 4), (16, 64, 128, 4, 4, 8), (16, 64, 128, 4, 4), (16, 32, 128, 4, 6),
            (64, 32, 128, 4, 4)],
    "int8": [(128, 256, 128, 8, 3), (256, 128, 128, 8, 3), (128, 128, 128, 4, 4),
             (128, 128, 128, 8, 4), (64, 128, 128, 4, 4), (64, 64, 128, 4, 4),
             (16, 128, 256, 4, 4)],
}
# The op each mode serves (the autotune cache's kernel name is "triton." + op).
MODE_OF = {"sgemm": "ieee", "wmma_gemm": "mma", "int8_gemm": "int8"}


def _split_k(spec) -> int:
    return spec[5] if len(spec) > 5 else 1


def config_names(op: str) -> list[str]:
    """Names of the block shapes gks.triton.<op> runs, in the order `config` indexes."""
    return [f"{s[0]}x{s[1]}x{s[2]}_w{s[3]}_s{s[4]}" + (f"_k{_split_k(s)}" if _split_k(s) > 1 else "")
            for s in CONFIGS[MODE_OF[op]]]


def _block(spec) -> dict:
    bm, bn, bk = spec[:3]
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}


# Triton's own autotuner (no tuned entry) chooses among the configs without split-K, whose
# output needs zeroing first.
GPU_CONFIGS = {
    mode: [triton.Config(_block(spec), num_warps=spec[3], num_stages=spec[4])
           for spec in specs if _split_k(spec) == 1]
    for mode, specs in CONFIGS.items()
}
# One shape under the interpreter (power-of-two blocks keep tl.dot's shape rules happy).
INTERPRETER_BLOCK = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8}

_tuned = {
    mode: triton.autotune(configs=cfgs, key=["M", "N", "K"])(_gemm_kernel)
    for mode, cfgs in GPU_CONFIGS.items()
}


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def check_operand(t: torch.Tensor, op: str, arg: str, dtypes: tuple, what: str) -> None:
    if t.dtype not in dtypes:
        raise TypeError(f"{op}: argument '{arg}' must be {what}, got {t.dtype}")
    if t.dim() != 2:
        raise ValueError(f"{op}: argument '{arg}' must be a 2-D matrix, got {t.dim()} dims "
                         f"(shape {list(t.shape)})")


def check_pair(a: torch.Tensor, b: torch.Tensor, op: str, a_name: str = "a", b_name: str = "b") -> None:
    if b.device != a.device:
        raise ValueError(f"{op}: argument '{b_name}' must be on the device of '{a_name}' "
                         f"({a.device}), got {b.device}")
    if b.shape[0] != a.shape[1]:
        raise ValueError(f"{op}: argument '{b_name}' must have shape [K, N] with K = "
                         f"{a.shape[1]} (the columns of '{a_name}', {list(a.shape)}), got "
                         f"{list(b.shape)}")


def check_config(op: str, config: int) -> None:
    count = len(CONFIGS[MODE_OF[op]])
    if not isinstance(config, int) or not -1 <= config < count:
        raise ValueError(f"gks.triton.{op}: argument 'config' must be -1 (the tuned entry, else "
                         f"Triton's autotuner) or an index below {count} into "
                         f"gks.triton.gemm_config_names('{op}'), got {config!r}")


def launch(op: str, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
           a_scale: torch.Tensor | None = None, b_scale: torch.Tensor | None = None, *,
           config: int = -1, mode: str | None = None, plan: tuple | None = None) -> None:
    """c = a @ b (sgemm, wmma_gemm), or c = (a @ b) * a_scale * b_scale (int8_gemm), with
    op's arithmetic mode unless `mode` overrides it; `config` as check_config says. With
    `plan` (plan_key's answer for this call) a direct launch is kept for run_plan."""
    check_config(op, config)
    mode = mode or MODE_OF[op]
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return
    if k == 0:
        c.zero_()
        return
    if interpreting():  # one block shape; a config's split-K still applies
        split = _split_k(CONFIGS[MODE_OF[op]][config]) if config >= 0 else 1
        _launch_split(a, b, c, a_scale, b_scale, mode, INTERPRETER_BLOCK, split, {})
        return
    if config == -1:
        config = tuned_config(op, a, c, m, n, k)
    if config >= 0:
        spec = CONFIGS[MODE_OF[op]][config]
        launched = _launch_split(a, b, c, a_scale, b_scale, mode, _block(spec), _split_k(spec),
                                 {"num_warps": spec[3], "num_stages": spec[4]})
        if plan is not None and launched is not None:
            if len(_PLANS) >= _COMPILED_MAX:
                _PLANS.clear()
            _PLANS[plan] = (*launched, _split_k(spec), tuple(c.shape), c.dtype, c.device, c.device.index)
        return

    def autotuned_grid(meta):
        return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)

    _tuned[mode][autotuned_grid](*_kernel_args(a, b, c, a_scale, b_scale), MODE=mode)


def tuned_config(op: str, a: torch.Tensor, c: torch.Tensor, m: int, n: int, k: int) -> int:
    """The autotuned config of this call, or -1 (none: Triton's autotuner chooses). Split-K
    adds its parts in no fixed order, so its results can differ in the last bits from run
    to run: under torch.use_deterministic_algorithms(True) a split-K entry gives way."""
    from gks.profile import autotune

    # The autotune key's dtype: the output's for int8 (as the CUDA op), else the inputs'.
    key_dtype = c.dtype if op == "int8_gemm" else a.dtype
    config = autotune.resolve_config(f"triton.{op}", a, m, n, k, -1, dtype=key_dtype)
    if config >= 0 and _split_k(CONFIGS[MODE_OF[op]][config]) > 1 and \
            torch.are_deterministic_algorithms_enabled():
        return -1
    return config


def _kernel_args(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                 a_scale: torch.Tensor | None, b_scale: torch.Tensor | None) -> tuple:
    """_gemm_kernel's arguments before its meta-parameters (absent scales: c, stride 0)."""
    m, k = a.shape
    return (a, b, c, c if a_scale is None else a_scale, c if b_scale is None else b_scale,
            m, b.shape[1], k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
            c.stride(0), c.stride(1), 0 if a_scale is None else a_scale.stride(0),
            0 if b_scale is None else b_scale.stride(-1))


def _launch_split(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                  a_scale: torch.Tensor | None, b_scale: torch.Tensor | None, mode: str,
                  block: dict, split: int, compile_opts: dict) -> tuple | None:
    """One launch of block shape `block` over k in `split` parts. With split > 1 the parts add
    into a zeroed fp32 output: c itself when it is fp32, else a scratch copied into c.
    Returns _launch's answer."""
    grid = (triton.cdiv(a.shape[0], block["BLOCK_M"]) * triton.cdiv(b.shape[1], block["BLOCK_N"]), split)
    meta = {"MODE": mode, **block, "SPLIT_K": split}
    acc = c
    if split > 1:
        assert mode != "int8", "split-K applies to the fp32 and fp16/bf16 modes"
        acc = c.zero_() if c.dtype == torch.float32 else torch.zeros(c.shape, dtype=torch.float32, device=c.device)
    launched = _launch(grid, a, b, acc, a_scale, b_scale, meta, compile_opts)
    if acc is not c:
        c.copy_(acc)
    return launched


# Kernels already compiled, launched straight through their launcher. Triton's own call
# path (JITFunction.run) re-derives the specialization, reads its settings and builds launch
# metadata on every call: 20-30 us of host time per GEMM on the H200 machine, against 10 us
# for the launcher itself, which made small GEMMs host-bound. The key holds all that Triton
# specializes a compiled kernel on: the meta-parameters and compile options, the dtypes, the
# exact shapes and strides (the integer arguments), and whether each tensor's address is
# 16-byte aligned (tests/test_gemm.py checks that last assumption against Triton). Triton's
# launch hooks (e.g. the Proton profiler's) are not called on this path. It uses Triton's
# CompiledKernel internals (run, function, packed_metadata, _init_handles), so it is taken
# only with the Triton versions it was checked on; any other goes through Triton's own call.
DIRECT_LAUNCH_TRITON = ("3.6.",)
_DIRECT_LAUNCH = triton.__version__.startswith(DIRECT_LAUNCH_TRITON)
_COMPILED: dict[tuple, tuple] = {}
_COMPILED_MAX = 1024
_current_stream = None  # Triton's own raw-stream getter, bound on first use


def _launch(grid: tuple, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
            a_scale: torch.Tensor | None, b_scale: torch.Tensor | None, meta: dict,
            compile_opts: dict) -> tuple | None:
    """Launches the kernel; returns (kernel, the launcher's arguments past the five tensors,
    grid) when it is one the direct relaunch takes, else None."""
    global _current_stream
    if interpreting():
        _gemm_kernel[grid](*_kernel_args(a, b, c, a_scale, b_scale), **meta, **compile_opts)
        return None
    if _current_stream is None:
        _current_stream = triton.runtime.driver.active.get_current_stream
    sa = c if a_scale is None else a_scale
    sb = c if b_scale is None else b_scale
    device = a.device.index
    key = (device, *meta.values(), *compile_opts.values(), a.dtype, b.dtype, c.dtype, sa.dtype,
           sb.dtype, a.shape, b.shape, a.stride(), b.stride(), c.stride(), sa.stride(), sb.stride(),
           a.data_ptr() % 16 == 0, b.data_ptr() % 16 == 0, c.data_ptr() % 16 == 0,
           sa.data_ptr() % 16 == 0, sb.data_ptr() % 16 == 0)
    found = _COMPILED.get(key)
    if found is None or device != torch.cuda.current_device():
        args = _kernel_args(a, b, c, a_scale, b_scale)
        kernel = _gemm_kernel[grid](*args, **meta, **compile_opts)  # compiles on first use
        if _DIRECT_LAUNCH and device == torch.cuda.current_device():
            if len(_COMPILED) >= _COMPILED_MAX:
                _COMPILED.clear()
            kernel._init_handles()
            # The launcher takes every parameter in signature order, constexprs included;
            # past the five tensors they are fixed by the key.
            rest = args[5:] + tuple(meta[name] for name in _KERNEL_PARAMS[len(args):])
            _COMPILED[key] = (kernel, rest)
            return kernel, rest, grid
        return None
    kernel, rest = found
    kernel.run(grid[0], grid[1], 1, _current_stream(device), kernel.function, kernel.packed_metadata,
               None, None, None, a, b, c, sa, sb, *rest)
    return kernel, rest, grid


_KERNEL_PARAMS = list(inspect.signature(_gemm_kernel.fn).parameters)


# Plans: the launch of an earlier call, kept for calls like it. A gks.triton GEMM call first
# asks run_plan for its plan_key; a call like an earlier one in everything that decides what
# is launched (the op, config and output dtype; the operands' dtypes, shapes, strides,
# devices and 16-byte alignment; the tuned table in force and the deterministic mode) passed
# the same checks and resolves to the same config and kernel, so it skips them and repeats
# that launch into a fresh output. On the H200 machine that halves the host time of a small
# GEMM (about 30 of which 15 us are checks, config lookup and key builds), which is what
# decides its speed when its GPU time is 10-20 us.
_PLANS: dict[tuple, tuple] = {}
_autotune = None  # gks.profile.autotune, bound on first use


def _tensor_key(t: torch.Tensor) -> tuple:
    return t.dtype, t.shape, t.stride(), t.get_device(), t.data_ptr() % 16 == 0


def plan_key(op: str, a, b, out_dtype, config, a_scale=None, b_scale=None) -> tuple | None:
    """The key of a call's plan; None where there is none to find (an argument that is not
    a tensor: the checks of the full path then say what is wrong)."""
    global _autotune
    if _autotune is None:
        from gks.profile import autotune as _autotune
    try:
        key = (op, out_dtype, config, _tensor_key(a), _tensor_key(b), _autotune.table_generation(),
               torch.are_deterministic_algorithms_enabled())
        if a_scale is not None:
            key += (_tensor_key(a_scale), _tensor_key(b_scale))
    except (AttributeError, TypeError):
        return None
    return key


def run_plan(key: tuple | None, a: torch.Tensor, b: torch.Tensor, a_scale=None, b_scale=None):
    """The output of the call `key` stands for, computed by repeating its launch; None when
    there is no plan for it (the caller then takes the full path, which makes one)."""
    plan = _PLANS.get(key) if key is not None else None
    if plan is None:
        return None
    kernel, rest, grid, split, shape, out_dtype, device, index = plan
    if index != torch.cuda.current_device():
        return None
    if split == 1:
        c = acc = torch.empty(shape, dtype=out_dtype, device=device)
    else:  # as _launch_split: the parts add into a zeroed fp32 output
        acc = torch.zeros(shape, dtype=torch.float32, device=device)
        c = acc if out_dtype == torch.float32 else None
    kernel.run(grid[0], grid[1], 1, _current_stream(index), kernel.function, kernel.packed_metadata,
               None, None, None, a, b, acc, acc if a_scale is None else a_scale,
               acc if b_scale is None else b_scale, *rest)
    return acc.to(out_dtype) if c is None else c
