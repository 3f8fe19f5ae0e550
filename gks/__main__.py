# SPDX-License-Identifier: Apache-2.0
"""The gks command line: `python -m gks {list,bench,test,autotune,roofline,profile,serve,bench-suite} ...`
(also `gks ...`).

  list      ops x backends x supported architectures (``--format json``: see FORMAT_JSON)
  bench     time backends and peers on the H200 (see gks.profile.bench)
  test      run the test suite (pytest) of a source checkout, optionally for one op
  autotune  measure every config of a kernel and store the winners (see gks.profile.autotune)
  roofline  measured ceilings, and a bench JSON placed on the roofline
  profile   one op under Nsight Compute (see gks.profile.ncu)
  serve     the benchmark server, for a GPU host (see gks.serve)
  bench-suite  the pre-commit sweep, on a server or --local, against the pinned baseline
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gks import registry

FORMAT_JSON = """\
`gks list --format json` prints {"gks_version": str, "ops": [op, ...]}; each op is:
  name          the op's name (gks.<name>, gks.triton.<name>, gks.pallas.<name>, gks.reference.<name>)
  family        its kernel family (the module it lives in, in every layer: norms, gemm, ...)
  summary       one line on what it computes
  signature     arguments and result, with shapes
  shape_names   what each entry of a bench/test shape means, e.g. ["M", "N"]
  optional_dims {name: default}: the last shape_names a shape may leave off, each then taking
                the value of the dim named beside it, e.g. {"Dv": "D"}, or the number
                given, e.g. {"epilogue": 0}
  dtypes        input dtypes the op accepts (torch names)
  backends      [{name, archs (GPU architectures it is built or tuned for), interpreted
                (whether it also runs on a CPU through an interpreter), tunable (whether it
                compiles several configs that gks autotune chooses among)}]
  tolerance     {dtype: [atol, rtol]} against the float64 reference
  bench_shapes  the shapes `gks bench` times by default
  peers         the reference implementations `gks bench --with-references` times beside it
  configs       the CUDA kernel's configs (tiles, or a row op's kernel shapes) that the
                autotuner chooses among ([] if none)
  compute       the unit its FLOPs run on, for the roofline: fp32, tensor or int8"""


def _cmd_list(args: argparse.Namespace) -> int:
    ops = registry.ops()
    if args.format == "json":
        import gks

        print(json.dumps({"gks_version": gks.__version__, "ops": [registry.describe(s) for s in ops]}, indent=1))
        return 0
    if args.format == "markdown":
        print(registry.markdown_table())
        return 0
    names = sorted({b.name for s in ops for b in s.backends})
    rows = [["op"] + names + ["dtypes"]]
    for s in ops:
        have = {b.name: ", ".join(b.archs) + (" +interp" if b.interpreted else "") for b in s.backends}
        rows.append([s.name] + [have.get(n, "-") for n in names] + [", ".join(s.dtypes)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from gks.profile import bench

    return bench.run(args)


def _cmd_test(args: argparse.Namespace) -> int:
    tests = Path(__file__).resolve().parent.parent / "tests"
    if not tests.is_dir():
        print("gks test: the tests live in the source checkout (tests/), which this install lacks",
              file=sys.stderr)
        return 2
    import pytest

    extra = ["-k", args.kernel] if args.kernel else []
    return int(pytest.main([str(tests), "-q", *extra, *args.pytest_args]))


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    # gks.serve.app imports FastAPI; its arguments are declared without it, so `gks --help`
    # works where the server's dependencies are not installed.
    p.add_argument("--db", type=Path, default=Path("gks-serve.db"), help="the SQLite file (default gks-serve.db)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8470)
    p.add_argument("--token", help="the clients' bearer token (default: $GKS_SERVE_TOKEN)")
    p.add_argument("--job-timeout", type=float, default=3600.0, help="seconds a job may run (default 3600)")
    p.add_argument("--max-queued", type=int, default=1000)


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        from gks.serve import app
    except ImportError as e:
        print(f"gks serve: needs FastAPI and uvicorn ({e}); pip install -e '.[serve]'", file=sys.stderr)
        return 2
    return app.run(args)


def _cmd_autotune(args: argparse.Namespace) -> int:
    from gks.profile import autotune

    return autotune.main(args.rest)


def build_parser() -> argparse.ArgumentParser:
    # allow_abbrev=False everywhere: --dtype must not pass for --dtypes.
    p = argparse.ArgumentParser(prog="gks", description=__doc__, allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    lp = sub.add_parser("list", help="ops x backends x archs", epilog=FORMAT_JSON, allow_abbrev=False,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    lp.add_argument("--format", choices=("table", "json", "markdown"), default="table")
    lp.set_defaults(func=_cmd_list)
    from gks.profile import bench

    bp = sub.add_parser("bench", help="time backends and peers", allow_abbrev=False)
    bench.add_arguments(bp)
    bp.set_defaults(func=_cmd_bench)
    tp = sub.add_parser("test", help="run the test suite of a source checkout", allow_abbrev=False)
    tp.add_argument("--kernel", help="only tests whose id mentions this op")
    tp.add_argument("pytest_args", nargs=argparse.REMAINDER, help="passed to pytest")
    tp.set_defaults(func=_cmd_test)
    from gks.profile import roofline

    rp = sub.add_parser("roofline", help="device ceilings and roofline analysis", allow_abbrev=False)
    roofline.add_arguments(rp)
    rp.set_defaults(func=lambda a: roofline.run(a))
    from gks.profile import ncu

    pp = sub.add_parser("profile", help="one op under Nsight Compute", allow_abbrev=False)
    ncu.add_arguments(pp)
    pp.set_defaults(func=lambda a: ncu.run(a))
    from gks.serve import suite

    sp = sub.add_parser("serve", help="the benchmark server for a GPU host (gks.serve.app)", allow_abbrev=False)
    _serve_arguments(sp)
    sp.set_defaults(func=_cmd_serve)
    sup = sub.add_parser("bench-suite", help="the pre-commit sweep against the pinned baseline",
                         allow_abbrev=False)
    suite.add_arguments(sup)
    sup.set_defaults(func=lambda a: suite.run(a))
    ap = sub.add_parser("autotune", help="tune tile configs (see gks.profile.autotune)", add_help=False)
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    ap.set_defaults(func=_cmd_autotune)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # autotune has its own parser; argparse.REMAINDER does not take leading options such as
    # --kernel, so its arguments are handed over before the top-level parser sees them.
    if argv[:1] == ["autotune"]:
        from gks.profile import autotune

        return autotune.main(argv[1:])
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
