# SPDX-License-Identifier: Apache-2.0
"""Writes the Triton kernels of an op as TTIR, TTGIR, LLIR, PTX, CUBIN (and SASS where a
cuobjdump is found), for a chosen target, with no GPU needed.

    python tools/dump_triton_ir.py --kernel rmsnorm [--dtype bfloat16] [--shape 4096x4096]
                                   [--arch 90] [--out ir/]
    python tools/dump_triton_ir.py --kernel wmma_gemm --config 14   # a GEMM block shape as
                                   # a GPU runs it (gks.triton.gemm_config_names(op)[14])

How: the op's Triton wrapper runs once on small CPU tensors under the interpreter with the
launch intercepted, which records each kernel's arguments and meta-parameters; a second
process (no interpreter) compiles those kernels for the target. The GEMMs run one small block
shape under the interpreter; with --config they run that config's block sizes, warps,
stages, split-K and TMA choice instead (TMA where the shape's rows are 16-byte multiples).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

_TORCH_TO_TRITON = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "int8": "i8", "int32": "i32",
                    "int64": "i64", "uint8": "u8", "bool": "i1", "float8_e4m3fn": "fp8e4nv",
                    "float8_e5m2": "fp8e5"}


def capture(kernel: str, dtype: str, shape: tuple[int, ...], config: int | None = None) -> list[dict]:
    """Runs the op's Triton backend under the interpreter, recording each launch; `config`
    (the GEMMs) as --config says."""
    os.environ["TRITON_INTERPRET"] = "1"
    # Wrappers that pass the interpreter a variant of their own (gks.triton._common.
    # interpreter_variant: quantize's exact divisions, FlashAttention's bf16 upcast) pass the
    # GPU's instead: the launch is recorded, never run.
    os.environ["GKS_DUMP_GPU_PATH"] = "1"
    import torch
    import triton.runtime.interpreter as interp
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend
    from triton.tools.tensor_descriptor import TensorDescriptor

    from gks import registry

    call_args, block_options = {}, {}
    if config is not None:
        _gemm = importlib.import_module("gks.triton.gemm")

        if kernel not in _gemm.MODE_OF:
            raise SystemExit(f"dump_triton_ir.py: --config applies to the Triton GEMMs "
                             f"({', '.join(_gemm.MODE_OF)}), not {kernel}")
        names = _gemm.config_names(kernel)
        if not 0 <= config < len(names):
            raise SystemExit(f"dump_triton_ir.py: --config must be below {len(names)} for {kernel} "
                             f"({', '.join(names)}), got {config}")
        block = _gemm.CONFIGS[_gemm.MODE_OF[kernel]][config]
        _gemm.INTERPRETER_BLOCK = _gemm._block(block)  # the interpreter runs this block instead
        call_args = {"config": config}
        block_options = {"num_warps": block.warps, "num_stages": block.stages}

    launches = []

    def record(self, *args, grid, warmup=False, **kwargs):
        fn = self.fn
        names = list(fn.__code__.co_varnames[: fn.__code__.co_argcount])
        # The specializations the JIT makes on a GPU: pointers 16-byte aligned and integers
        # that are multiples of 16 carry tt.divisibility 16 (what lets loads vectorize), and
        # integers equal to 1 become constants.
        sig, consts, attrs = {}, {}, {}
        for i, (name, a) in enumerate(zip(names, args)):
            if isinstance(a, torch.Tensor):
                sig[name] = "*" + _TORCH_TO_TRITON[str(a.dtype).removeprefix("torch.")]
                if a.data_ptr() % 16 == 0:
                    attrs[i] = [["tt.divisibility", 16]]
            elif isinstance(a, TensorDescriptor):  # as the JIT names it, e.g. tensordesc<fp16[64, 64]>
                sig[name] = native_specialize_impl(BaseBackend, a, False, True, True)[0]
            elif isinstance(a, bool):
                sig[name] = "i1"
            elif isinstance(a, int) and a == 1:
                sig[name], consts[name] = "constexpr", 1
            elif isinstance(a, int):
                sig[name] = "i64" if abs(a) >= 2**31 else "i32"
                if a % 16 == 0:
                    attrs[i] = [["tt.divisibility", 16]]
            elif isinstance(a, float):
                sig[name] = "fp32"
            elif a is None:
                sig[name], consts[name] = "constexpr", None
        for name, v in kwargs.items():
            if name in names:
                sig[name], consts[name] = "constexpr", v
        # Meta-parameters the call left at their defaults (e.g. SPLIT_K=1) are constexprs too.
        for name, param in inspect.signature(fn).parameters.items():
            if name not in sig and param.default is not inspect.Parameter.empty:
                sig[name], consts[name] = "constexpr", param.default
        options = {**block_options, **{k: v for k, v in kwargs.items() if k not in names}}
        launches.append({"module": fn.__module__, "name": fn.__name__, "signature": sig,
                         "constexprs": consts, "attrs": attrs, "options": options})

    interp.InterpretedFunction.run = record
    spec = registry.get(kernel)
    inputs = spec.make_inputs(shape, dtype, "cpu", 0)
    try:
        spec.backend("triton").load()(**inputs, **call_args)
    except Exception:  # noqa: BLE001 - the wrapper may touch the (absent) outputs afterwards
        if not launches:
            raise
    return launches


def compile_and_write(launches: list[dict], arch: int, out: Path) -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    out.mkdir(parents=True, exist_ok=True)
    cuobjdump = shutil.which("cuobjdump") or next(
        (str(p) for p in Path(triton.__file__).parent.glob("backends/nvidia/bin/cuobjdump")), None)
    for i, launch in enumerate(launches):
        obj = getattr(importlib.import_module(launch["module"]), launch["name"])
        while not isinstance(obj, triton.runtime.jit.JITFunction):
            obj = obj.fn  # unwrap autotuners / heuristics
        attrs = {(int(i),): a for i, a in launch["attrs"].items()}  # JSON keys are strings
        src = ASTSource(obj, launch["signature"], launch["constexprs"], attrs)
        compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=launch["options"])
        stem = out / f"{launch['name']}_{i}_sm{arch}"
        for ext, text in compiled.asm.items():
            path = stem.with_suffix(f".{ext}")
            path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
        line = (f"{launch['name']}: num_warps={compiled.metadata.num_warps} "
                f"shared={compiled.metadata.shared} B, files {stem}.*")
        if cuobjdump and "cubin" in compiled.asm:
            sass = subprocess.run([cuobjdump, "--dump-sass", str(stem.with_suffix(".cubin"))],
                                  capture_output=True, text=True)
            if sass.returncode == 0:
                stem.with_suffix(".sass").write_text(sass.stdout)
                line += " (+ .sass)"
        print(line)


def resolve(p: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, tuple[int, ...]]:
    """The dtype and shape to run the op with, the arguments checked against the op's spec
    first: a wrong one ends in argparse's error (status 2) naming it, before anything runs."""
    from gks import registry

    triton_ops = ", ".join(s.name for s in registry.ops() if any(b.name == "triton" for b in s.backends))
    try:
        spec = registry.get(args.kernel)
    except KeyError:
        p.error(f"argument --kernel: unknown op '{args.kernel}' (ops with a Triton backend: {triton_ops})")
    if not any(b.name == "triton" for b in spec.backends):
        have = ", ".join(b.name for b in spec.backends)
        p.error(f"argument --kernel: op '{spec.name}' has no Triton backend (it has: {have}); "
                f"ops with one: {triton_ops}")
    dtype = args.dtype or ("float16" if "float16" in spec.dtypes else spec.dtypes[0])
    if dtype not in spec.dtypes:
        p.error(f"argument --dtype: {spec.name} takes {', '.join(spec.dtypes)}, not '{dtype}'")
    # Small enough for the interpreter's CPU run, and no size 0 (which launches nothing).
    default = next((s for s in reversed(spec.test_shapes) if all(s) and max(s) <= 4096), None)
    if not args.shape:
        if default is None:
            p.error(f"argument --shape: {spec.name} has no test shape to default to; give one "
                    f"({spec.dims_text()})")
        return dtype, default
    try:
        shape = tuple(int(d) for d in args.shape.split("x"))
    except ValueError:
        shape = ()
    if not shape or not spec.fits_shape(shape) or min(shape) < 0:
        example = f", e.g. {'x'.join(map(str, default))}" if default else ""
        counts = " or ".join(map(str, spec.shape_lengths()))
        p.error(f"argument --shape: {spec.name} takes {counts} sizes, "
                f"{spec.dims_text()}{example}; got '{args.shape}'")
    return dtype, shape


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernel", required=True, help="a registry op with a Triton backend, e.g. rmsnorm")
    p.add_argument("--dtype", help="one of the op's dtypes (default: float16 where the op takes it, "
                                   "else its first: sgemm float32)")
    p.add_argument("--shape", help="e.g. 1024x4096, the op's shape_names in order (default: the spec's "
                                   "last test shape with no size 0 and none above 4096)")
    p.add_argument("--arch", type=int, default=90, help="compute capability x10 (80, 90, ...)")
    p.add_argument("--out", type=Path, default=Path("ir"))
    p.add_argument("--config", type=int,
                   help="the Triton GEMMs: dump block shape N of gks.triton.gemm_config_names(op) "
                        "as a GPU runs it (default: the interpreter's one small block shape)")
    p.add_argument("--capture-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    dtype, shape = resolve(p, args)
    if args.capture_only:
        print(json.dumps(capture(args.kernel, dtype, shape, args.config)))
        return 0
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    cmd = [sys.executable, __file__, "--capture-only", "--kernel", args.kernel, "--dtype", dtype,
           "--shape", "x".join(map(str, shape))]
    if args.config is not None:
        cmd += ["--config", str(args.config)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return done.returncode
    launches = json.loads(done.stdout.strip().splitlines()[-1])
    os.environ.pop("TRITON_INTERPRET", None)
    compile_and_write(launches, args.arch, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
