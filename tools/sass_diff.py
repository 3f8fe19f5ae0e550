# SPDX-License-Identifier: Apache-2.0
"""Compares the SASS of two builds of the gks library, kernel by kernel: the check that a
refactor left the machine code as it was (a kernel whose SASS is identical runs exactly as
before, so it needs no new benchmark).

    python tools/sass_diff.py BEFORE AFTER [--kernel WORD] [--show N]

BEFORE and AFTER are libraries or objects cuobjdump reads (libgks_tvm_ffi.so, libgks.a, a
.o), or the JSON that `--save FILE` wrote of an earlier library (dumping a whole library
takes a minute or two; save the baseline once, then compare each build against it). Each kernel's SASS is normalized: the instruction words and addresses are dropped and
branch labels renumbered in order of appearance, so that only the instructions remain. The
kernels are then matched by that text, per architecture, whatever they are called (a
refactor may rename them or move them to another namespace): the builds agree when every
architecture holds the same multiset of kernel bodies. The matching pairs are listed with
their names, and the kernels left over on either side are reported with the nearest
kernel of the other side (by name) and a short diff.

Exit status: 0 when identical, 1 when not, 2 on a usage error. Runs without a GPU.
"""

from __future__ import annotations

import argparse
import collections
import difflib
import json
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dump_sass import demangle, find_cuobjdump  # noqa: E402

_ADDRESS = re.compile(r"/\*([0-9a-f]{4,})\*/\s*")
_ENCODING = re.compile(r"/\*\s*0x[0-9a-f]+\s*\*/")
_LABEL = re.compile(r"\.L_x_\d+")


FORMAT = 3  # of --save files: bumped whenever normalize() changes
_TARGET = re.compile(r"\b(0x[0-9a-f]+)\b")
_BRANCHES = ("BRA", "BRX", "BSSY", "CALL", "JMP", "JMX", "SSY", "PBK", "PCNT", "BPT", "RET")


def _opcode(text: str) -> str:
    words = text.split(" ")
    return words[1 if words[0].startswith("@") and len(words) > 1 else 0].split(".", 1)[0]


def normalize(lines: list[str]) -> str:
    """A kernel's SASS as instructions alone: no addresses or encodings; the branch targets,
    which cuobjdump prints as addresses, become labels L0, L1, ... in address order, set
    before the instruction they name (so that an instruction more or less does not change
    every later target)."""
    code: list[tuple[int | None, str]] = []
    for line in lines:
        m = _ADDRESS.search(line)
        if not m and not _LABEL.match(line.strip()):
            continue  # encoding continuation lines, headers between ELF blocks
        text = _ENCODING.sub("", _ADDRESS.sub("", line)).strip()
        code.append((int(m.group(1), 16) if m else None, re.sub(r"\s+", " ", text)))
    addresses = {addr for addr, _ in code}
    targets = sorted({int(t, 16) for _, text in code if _opcode(text) in _BRANCHES
                      for t in _TARGET.findall(text) if int(t, 16) in addresses})
    label = {addr: f"L{i}" for i, addr in enumerate(targets)}
    out = []
    for addr, text in code:
        if addr in label:
            out.append(label[addr] + ":")
        if _opcode(text) in _BRANCHES:
            text = _TARGET.sub(lambda t: label.get(int(t.group(1), 16), t.group(1)), text)
        if not _LABEL.match(text):
            out.append(text)
    return "\n".join(out)


def kernels(tool: str, lib: Path) -> dict[tuple[str, str], str]:
    """(arch, mangled name) -> normalized SASS of every kernel in `lib` (or in a --save file)."""
    if lib.suffix == ".json":
        doc = json.loads(lib.read_text())
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            sys.exit(f"sass_diff: {lib} was saved by another version of this tool; save it again")
        return {(arch, func): body for arch, func, body in doc["kernels"]}
    run = subprocess.run([tool, "--dump-sass", str(lib)], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"sass_diff: cuobjdump failed on {lib}: {run.stderr.strip()}")
    found: dict[tuple[str, str], list[str]] = {}
    arch, func = "?", None
    for line in run.stdout.splitlines():
        m = re.search(r"arch = (sm_\w+)", line)
        if m:
            arch, func = m.group(1), None
            continue
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            func = m.group(1)
            found[(arch, func)] = []
            continue
        if func is not None:
            found[(arch, func)].append(line)
    return {key: normalize(body) for key, body in found.items()}


def short(name: str) -> str:
    return re.sub(r"\(.*", "", name).removeprefix("void ")


def compare(before: dict, after: dict, names: dict[str, str], show: int) -> tuple[int, list[str]]:
    """(matched kernel count, report lines)."""
    lines: list[str] = []
    matched = 0
    for arch in sorted({a for a, _ in before} | {a for a, _ in after}):
        old = collections.defaultdict(list)
        for (a, f), body in before.items():
            if a == arch:
                old[body].append(f)
        new = collections.defaultdict(list)
        for (a, f), body in after.items():
            if a == arch:
                new[body].append(f)
        only_old, only_new = [], []
        for body in set(old) | set(new):
            o, n = sorted(old.get(body, [])), sorted(new.get(body, []))
            pairs = min(len(o), len(n))
            matched += pairs
            for f_old, f_new in zip(o, n):
                if names.get(f_old, f_old) != names.get(f_new, f_new):
                    lines.append(f"  {arch}: {short(names.get(f_old, f_old))}\n"
                                 f"       -> {short(names.get(f_new, f_new))}")
            only_old += [(f, body) for f in o[pairs:]]
            only_new += [(f, body) for f in n[pairs:]]
        for label, mine, theirs in (("only in BEFORE", only_old, only_new),
                                    ("only in AFTER", only_new, only_old)):
            for f, body in sorted(mine, key=lambda item: names.get(item[0], item[0])):
                lines.append(f"{label} ({arch}): {short(names.get(f, f))}")
                if not theirs or show <= 0:
                    continue
                other = max(theirs, key=lambda item: difflib.SequenceMatcher(
                    None, names.get(f, f), names.get(item[0], item[0])).ratio())
                diff = list(difflib.unified_diff(
                    body.splitlines() if label == "only in AFTER" else other[1].splitlines(),
                    other[1].splitlines() if label == "only in AFTER" else body.splitlines(),
                    lineterm="", n=1))
                lines.append(f"    nearest: {short(names.get(other[0], other[0]))}; "
                             f"{sum(1 for d in diff if d[:1] in '+-') - 2} lines differ")
                lines += ["    " + d for d in diff[2:2 + show]]
    return matched, lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path)
    p.add_argument("--kernel", help="only kernels whose demangled name contains this word")
    p.add_argument("--show", type=int, default=12, help="diff lines shown per unmatched kernel")
    p.add_argument("--save", type=Path, help="also write AFTER's normalized SASS here (JSON), to "
                   "compare later builds against")
    args = p.parse_args(argv)
    for lib in (args.before, args.after):
        if not lib.is_file():
            p.error(f"no such library: {lib}")
    tool = find_cuobjdump()
    before, after = kernels(tool, args.before), kernels(tool, args.after)
    if args.save:
        args.save.write_text(json.dumps(
            {"format": FORMAT, "kernels": [[a, f, body] for (a, f), body in sorted(after.items())]}))
    names = demangle(sorted({f for _, f in before} | {f for _, f in after}))
    if args.kernel:
        keep = lambda d: {k: v for k, v in d.items() if args.kernel in names.get(k[1], k[1])}  # noqa: E731
        before, after = keep(before), keep(after)
    matched, lines = compare(before, after, names, args.show)
    renamed = [line for line in lines if line.startswith("  ")]
    differ = [line for line in lines if not line.startswith("  ")]
    if renamed:
        print(f"{len(renamed)} kernel(s) identical under another name:")
        print("\n".join(renamed))
    unmatched = sum(1 for line in differ if line.startswith("only in"))
    if unmatched:
        print("\n".join(differ))
        print(f"\nsass_diff: {matched} kernel(s) identical, {unmatched} not matched")
        return 1
    print(f"sass_diff: identical: all {matched} kernel(s) of {len(before)} / {len(after)} "
          "have the same SASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
