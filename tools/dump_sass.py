# SPDX-License-Identifier: Apache-2.0
"""Summarises the CUDA kernels in the built gks library from their SASS: per kernel and
architecture, registers, shared memory, stack and local memory (spills), and counts of the
instructions that matter (HMMA/HGMMA/IMMA/IGMMA, LDGSTS, UTMALDG/UTMASTG (TMA loads and
stores), LDSM/STSM, LDS/STS and LDG/STG by width, generic LD/ST (LDST_GENERIC), SHFL).
GMMA_BATCHED counts the wgmmas (HGMMA/IGMMA) issued without a scoreboard of their own, i.e.
straight after one another; a kernel with wgmmas but none batched has had them serialized
by ptxas (every one waits for the last: ptxas info C7520 or C7515), which costs the Hopper
GEMM about a tenth of its speed, and is reported last.

    python tools/dump_sass.py [--lib build/libgks_tvm_ffi.so] [--kernel rmsnorm] [--sass-out DIR]

--kernel takes a registry op (rmsnorm, softmax_rmsnorm, int8_gemm, ...: exactly the CUDA
kernels that op launches, as its spec's sass_kernels say) or, for any other word, a
substring of the demangled kernel names (e.g. split_k, ByteOperands, RmsNormRow).

Runs without a GPU (cuobjdump from the CUDA toolkit, or the one Triton ships).
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

COUNTED = ("HGMMA", "IGMMA", "HMMA", "IMMA", "LDGSTS", "UTMALDG", "UTMASTG", "LDSM", "STSM", "SHFL", "BAR",
           "FFMA", "MUFU")
WIDTHS = ("LDS", "STS", "LDG", "STG")


def _op_patterns() -> dict[str, tuple[re.Pattern, ...]]:
    """The CUDA kernels each registry op launches, as its spec says (OpSpec.sass_kernels:
    patterns over the demangled names), for `--kernel OP`. Every kernel of the library
    belongs to one op (tests/harness/test_ir_tools.py checks that on the built library). Patterns,
    not names alone: the row-op skeleton's kernels serve every row op (the functor tells
    which), and the Hopper GEMM serves gemm and int8_gemm (the operand type tells which)."""
    from gks import registry

    return {s.name: tuple(re.compile(p) for p in s.sass_kernels) for s in registry.ops() if s.sass_kernels}


def parse_kernel(demangled: str) -> tuple[str, tuple[str, ...]]:
    """'void ns::f<ns::A<x>, 1, true>(ns::P)' -> ('f', ('A<x>', '1', 'true')): the function's
    unqualified name and its top-level template arguments, namespaces dropped."""
    text = demangled.removeprefix("void ")
    end = next((i for i, ch in enumerate(text) if ch in "<("), len(text))
    name = text[:end].rsplit("::", 1)[-1]
    args, depth, start = [], 0, end + 1
    if end < len(text) and text[end] == "<":
        for i in range(end, len(text)):
            ch = text[i]
            if ch in "<(":
                depth += 1
            elif ch in ">)":
                depth -= 1
            if (ch == "," and depth == 1) or depth == 0:
                args.append(re.sub(r"\b\w+::|\(anonymous namespace\)::", "", text[start:i]).strip())
                start = i + 1
            if depth == 0:
                break
    return name, tuple(args)


def ops_of(demangled: str) -> list[str]:
    """The registry ops whose spec claims this kernel (exactly one, for every kernel of the
    library: tests/harness/test_ir_tools.py)."""
    return [op for op, patterns in _op_patterns().items() if any(p.search(demangled) for p in patterns)]


def op_of(demangled: str) -> str | None:
    """The registry op whose kernel this is, or None (none, or more than one, claims it)."""
    ops = ops_of(demangled)
    return ops[0] if len(ops) == 1 else None


def select_kernels(kernel: str, names: Iterable[str]) -> list[str]:
    """The demangled names `--kernel kernel` selects: an op's kernels (its spec's
    sass_kernels) where `kernel` is an op, else those that contain it."""
    if kernel in _op_patterns():
        return [n for n in names if op_of(n) == kernel]
    return [n for n in names if kernel in n]


def find_cuobjdump() -> str:
    found = shutil.which("cuobjdump") or (Path("/usr/local/cuda/bin/cuobjdump").is_file() and "/usr/local/cuda/bin/cuobjdump")
    if found:
        return str(found)
    try:
        import triton

        p = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        if p.is_file():
            return str(p)
    except ImportError:
        pass
    sys.exit("dump_sass: cuobjdump not found (install the CUDA toolkit, or triton)")


def find_library() -> Path:
    for candidate in [Path("build/libgks_tvm_ffi.so"), Path("build-gpu/libgks_tvm_ffi.so"), Path("build/libgks.a")]:
        if candidate.is_file():
            return candidate
    from gks import _native

    path = _native.library_path()
    if path is None:
        sys.exit("dump_sass: no built gks library found; pass --lib")
    return path


def demangle(names: list[str]) -> dict[str, str]:
    if not names or not shutil.which("c++filt"):
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out))


def parse_sass(text: str) -> dict[tuple[str, str], collections.Counter]:
    """(arch, mangled function) -> instruction counts."""
    counts: dict[tuple[str, str], collections.Counter] = {}
    arch, func = "?", None
    for line in text.splitlines():
        m = re.search(r"arch = (sm_\w+)", line)
        if m:
            arch = m.group(1)
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            func = m.group(1)
            counts[(arch, func)] = collections.Counter()
            continue
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]+)?", line)
        if m and func:
            op, mods = m.group(1), m.group(2) or ""
            c = counts[(arch, func)]
            if op in COUNTED:
                c[op] += 1
            if op in ("HGMMA", "IGMMA") and "gsb0" not in line:
                c["GMMA_BATCHED"] += 1
            if op in ("LD", "ST"):  # generic: the compiler could not tell shared from global
                c["LDST_GENERIC"] += 1
            if op in WIDTHS:
                width = next((w for w in ("128", "64", "U16", "16", "U8", "8") if f".{w}" in mods), "32")
                c[f"{op}.{width}"] += 1
    return counts


def generic_accesses(counts: collections.Counter) -> int:
    """Generic LD / ST: through a pointer whose address space the compiler lost (shared memory
    aligned through an integer, say); to shared memory they are slower than LDS / STS."""
    return counts["LDST_GENERIC"]


def serialized_wgmma(counts: collections.Counter) -> bool:
    """True when a kernel has wgmmas and ptxas made each wait for the one before."""
    return counts["HGMMA"] + counts["IGMMA"] > 0 and counts["GMMA_BATCHED"] == 0


def parse_resources(text: str) -> dict[tuple[str, str], dict[str, int]]:
    """(arch, mangled function) -> REG/STACK/SHARED/LOCAL, from `cuobjdump --dump-resource-usage`
    (the figures follow the function's name, on the same line or the next)."""
    res, arch, func = {}, "?", None
    for line in text.splitlines():
        m = re.search(r"arch = (sm_\w+)", line)
        if m:
            arch = m.group(1)
        m = re.match(r"\s*Function (\S+?):?\s*$", line) or re.match(r"\s*Function (\S+?):\s*(.*)", line)
        if m:
            func = m.group(1)
        fields = dict(re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", line))
        if fields and func:
            res[(arch, func)] = {k: int(v) for k, v in fields.items()}
    return res


def list_kernels(tool: str, lib: Path) -> tuple[dict[tuple[str, str], dict[str, int]], dict[str, str]]:
    """The library's kernels: (arch, mangled name) -> resources, and mangled -> demangled name.
    From the resource usage, which cuobjdump prints in a second, so that --kernel and --arch
    are checked before the SASS is dumped (about a minute for the whole library)."""
    usage = subprocess.run([tool, "--dump-resource-usage", str(lib)], capture_output=True, text=True)
    if usage.returncode != 0:
        sys.exit(f"dump_sass: cuobjdump failed on {lib}: {usage.stderr.strip()}")
    resources = parse_resources(usage.stdout)
    return resources, demangle(sorted({f for _, f in resources}))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", type=Path, help="library or object to read (default: the built gks library)")
    p.add_argument("--kernel", help="a registry op: the CUDA kernels it launches (" + ", ".join(_op_patterns())
                   + "); any other word: the kernels whose demangled name contains it")
    p.add_argument("--arch", help="only this architecture, e.g. sm_90a")
    p.add_argument("--sass-out", type=Path,
                   help="also write the SASS here (with --kernel: at least the selected kernels')")
    args = p.parse_args(argv)
    lib = args.lib or find_library()
    tool = find_cuobjdump()
    resources, names = list_kernels(tool, lib)
    selected = set(names)  # mangled
    if args.kernel:
        if args.kernel in _op_patterns() and not shutil.which("c++filt"):
            sys.exit(f"dump_sass: --kernel {args.kernel} needs c++filt (binutils) to read the kernels' "
                     "template arguments; a substring of the mangled names works without it")
        chosen = set(select_kernels(args.kernel, names.values()))
        selected = {f for f, name in names.items() if name in chosen}
        patterns = _op_patterns()
        if not selected and args.kernel in patterns:
            kernels = ", ".join(p.pattern for p in patterns[args.kernel])
            p.error(f"argument --kernel: op '{args.kernel}' has no kernels in {lib} "
                    f"(its kernels match: {kernels})")
        if not selected:
            p.error(f"argument --kernel: '{args.kernel}' is not a registry op ({', '.join(patterns)}) "
                    f"and no kernel name in {lib} contains it")
    if args.arch and not any(arch == args.arch for arch, f in resources if f in selected):
        archs = sorted({arch for arch, f in resources if f in selected})
        p.error(f"argument --arch: no selected kernel is built for {args.arch} "
                f"(they are for: {', '.join(archs)})")
    cmd = [tool, "--dump-sass", str(lib)]
    # cuobjdump takes about half a second a listed function (gemm's 26: 15 s), so a large
    # selection is faster from the whole library's SASS, filtered below.
    if args.kernel and len(selected) <= 64:
        cmd[2:2] = ["--function", ",".join(sorted(selected))]
    sass = subprocess.run(cmd, capture_output=True, text=True)
    if sass.returncode != 0:
        sys.exit(f"dump_sass: cuobjdump failed on {lib}: {sass.stderr.strip()}")
    if args.sass_out:
        args.sass_out.mkdir(parents=True, exist_ok=True)
        (args.sass_out / (lib.name + ".sass")).write_text(sass.stdout)
    counts = parse_sass(sass.stdout)

    def order(item):  # by name, then arch; "void " is only on templates' names
        (arch, func), _ = item
        return names.get(func, func).removeprefix("void "), arch

    rows, serialized, generic = [], [], []
    for (arch, func), c in sorted(counts.items(), key=order):
        if (args.kernel and func not in selected) or (args.arch and arch != args.arch):
            continue
        name = names.get(func, func)
        r = resources.get((arch, func), {})
        short = re.sub(r"\(.*", "", name).replace("void ", "").replace("gks::kernels::", "")
        instr = " ".join(f"{k}={v}" for k, v in sorted(c.items()))
        if serialized_wgmma(c):
            serialized.append(short)
        if generic_accesses(c):
            generic.append(short)
        rows.append(f"{arch:<8} REG={r.get('REG', '?'):<4} SMEM={r.get('SHARED', '?'):<6} "
                    f"STACK={r.get('STACK', '?'):<4} LOCAL={r.get('LOCAL', '?'):<4} {short}\n          {instr}")
    print("\n".join(rows) if rows else "dump_sass: no kernels matched")
    spills = [row for row in rows if "LOCAL=0 " not in row and "LOCAL=? " not in row]
    if spills:
        print(f"\n{len(spills)} kernel(s) use local memory (spills or local arrays): see LOCAL= above")
    if generic:
        print(f"\n{len(generic)} kernel(s) with generic loads / stores (LDST_GENERIC: pointers whose "
              "address space the compiler lost; to shared memory slower than LDS / STS, see "
              "ptx::align_smem)")
    if serialized:
        print(f"\n{len(serialized)} kernel(s) with serialized wgmmas (none issued back to back; "
              "ptxas -v says why, C7520/C7515):\n  " + "\n  ".join(serialized))
    return 0


if __name__ == "__main__":
    sys.exit(main())
