# SPDX-License-Identifier: Apache-2.0
"""The pre-commit sweep (``python -m gks bench-suite``): every op x backend x bench shape,
run on the benchmark server (``--server URL``) or here (``--local``), compared with the
pinned baseline (results/baseline.json): a table of new / baseline times, the rows slower
than the op's noise band listed, exit status 1 when any regress (2 when a job fails or
nothing could be compared)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from gks import registry

ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_BASELINE = ROOT / "results" / "baseline.json"
DEFAULT_TOLERANCE = 0.03  # run-to-run noise of a median on the H200, as a fraction


class ServerError(RuntimeError):
    pass


class Client:
    """The server's API over urllib (no dependency beyond the standard library)."""

    def __init__(self, url: str, token: str, timeout_s: float = 30.0):
        self.url, self.token, self.timeout_s = url.rstrip("/"), token, timeout_s

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")
            raise ServerError(f"{method} {path}: HTTP {e.code}: {detail}") from None

    def submit(self, request: dict[str, Any]) -> int:
        return int(self._call("POST", "/jobs", request)["id"])

    def job(self, job_id: int) -> dict[str, Any]:
        return self._call("GET", f"/jobs/{job_id}")


def sweep(ops: list[str] | None = None, with_references: bool = False,
          reps: int | None = None) -> list[dict[str, Any]]:
    """One bench job per op: all its backends, dtypes and bench shapes (`reps` timed
    repetitions per variant; the bench's default when None)."""
    specs = [registry.get(o) for o in ops] if ops else list(registry.ops())
    extra = {} if reps is None else {"reps": reps}
    return [{"kind": "bench", "op": s.name, "with_references": with_references, **extra} for s in specs]


def timed_rows(doc: dict[str, Any]) -> dict[tuple, float]:
    """(op, backend, shape, dtype) -> median µs of gks's rows in a bench JSON document."""
    out = {}
    for r in doc.get("rows", ()):
        if r.get("kind") == "gks" and "median_us" in r:
            out.setdefault((r["op"], r["variant"].removeprefix("gks."), tuple(r["shape"]), r["dtype"]),
                           r["median_us"])
    return out


def compare(new: dict[tuple, float], baseline: list[dict[str, Any]], tolerance: dict[str, float],
            default: float = DEFAULT_TOLERANCE) -> tuple[list[tuple], list[tuple]]:
    """(table, regressions): rows (op, backend, shape, dtype, base µs, new µs, new/base) of the
    keys both measured, and those slower than 1 + the op's tolerance."""
    base = {(b["op"], b["backend"], tuple(b["shape"]), b["dtype"]): b["ours_us"] for b in baseline}
    table = []
    for key in sorted(set(base) & set(new), key=str):
        table.append((*key, base[key], new[key], new[key] / base[key]))
    regressions = [row for row in table if row[6] > 1 + tolerance.get(row[0], default)]
    return table, regressions


def _print_table(table: list[tuple], regressions: list[tuple]) -> None:
    print(f"{'op':<18} {'backend':<7} {'shape':<22} {'dtype':<9} {'base µs':>10} {'new µs':>10} {'new/base':>8}")
    slow = set(regressions)
    for op, backend, shape, dtype, b, n, ratio in table:
        mark = "  REGRESSED" if (op, backend, shape, dtype, b, n, ratio) in slow else ""
        print(f"{op:<18} {backend:<7} {'x'.join(map(str, shape)):<22} {dtype:<9} {b:>10.2f} {n:>10.2f} "
              f"{ratio:>8.3f}{mark}")


def _wait(client: Client, ids: list[int], poll_s: float) -> list[dict[str, Any]]:
    try:
        from tqdm import tqdm

        bar = tqdm(total=len(ids), desc="bench-suite", file=sys.stderr)
    except ImportError:
        bar = None
    done: dict[int, dict[str, Any]] = {}
    while len(done) < len(ids):
        for job_id in ids:
            if job_id not in done:
                job = client.job(job_id)
                if job["state"] not in ("queued", "running"):
                    done[job_id] = job
                    if bar is not None:
                        bar.update(1)
        if len(done) < len(ids):
            time.sleep(poll_s)
    if bar is not None:
        bar.close()
    return [done[i] for i in ids]


def add_arguments(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--server", help="the benchmark server's URL (python -m gks serve)")
    where.add_argument("--local", action="store_true", help="run the sweep here, without a server")
    p.add_argument("--token", help="the server's bearer token (default: $GKS_SERVE_TOKEN)")
    p.add_argument("--kernel", action="append", help="only these ops (repeatable; default every op)")
    p.add_argument("--with-references", action="store_true", help="also time the peers")
    p.add_argument("--reps", type=int, help="timed repetitions per variant (default: the bench's, 15)")
    p.add_argument("--baseline", type=Path, default=DEFAULT_BASELINE)
    p.add_argument("--tolerance", action="append", default=[], metavar="OP=FRACTION",
                   help=f"an op's noise band (default {DEFAULT_TOLERANCE} for every op), e.g. gemm=0.05")
    p.add_argument("--poll", type=float, default=2.0, help="seconds between status requests")
    p.add_argument("--json", type=Path, help="write the jobs' results here")


def run(args: argparse.Namespace) -> int:
    tolerance = {}
    for item in args.tolerance:
        op, _, frac = item.partition("=")
        try:
            tolerance[op] = float(frac)
        except ValueError:
            print(f"gks bench-suite: --tolerance {item!r} is not OP=FRACTION", file=sys.stderr)
            return 2
    try:
        if args.reps is not None and args.reps < 1:
            print(f"gks bench-suite: --reps must be >= 1, got {args.reps}", file=sys.stderr)
            return 2
        requests = sweep(args.kernel, args.with_references, args.reps)
    except KeyError as e:
        print(f"gks bench-suite: {e.args[0]}", file=sys.stderr)
        return 2
    if args.local:
        from gks.serve.worker import CommandExecutor

        executor = CommandExecutor(ROOT)
        jobs = []
        for i, request in enumerate(requests, 1):
            print(f"bench-suite: {request['op']} ({i}/{len(requests)})", file=sys.stderr)
            state, result, log, reason = executor.run(request)
            jobs.append({"request": request, "state": state, "result": result, "reason": reason, "log": log})
    else:
        token = args.token or os.environ.get("GKS_SERVE_TOKEN")
        if not token:
            print("gks bench-suite: give --token or set GKS_SERVE_TOKEN", file=sys.stderr)
            return 2
        client = Client(args.server, token)
        try:
            ids = [client.submit(r) for r in requests]
            jobs = _wait(client, ids, args.poll)
        except (ServerError, OSError) as e:
            print(f"gks bench-suite: {e}", file=sys.stderr)
            return 2
    if args.json:
        args.json.write_text(json.dumps(jobs, indent=1))
    failed = [j for j in jobs if j["state"] != "done"]
    for j in failed:
        print(f"gks bench-suite: {j['request']['op']}: {j['state']}: {j.get('reason', '')}", file=sys.stderr)
    new = {}
    for j in jobs:
        if j["state"] == "done" and isinstance(j["result"], dict):
            new.update(timed_rows(j["result"]))
    baseline = json.loads(args.baseline.read_text())["rows"]
    table, regressions = compare(new, baseline, tolerance)
    if not table:
        print("gks bench-suite: nothing timed to compare with the baseline (no GPU here? the "
              "interpreter sweep checks correctness only)", file=sys.stderr)
        return 2
    _print_table(table, regressions)
    print(f"\n{len(table)} rows compared, {len(regressions)} slower than the noise band"
          + (f", {len(failed)} job(s) not done" if failed else ""))
    if regressions:
        return 1
    return 2 if failed else 0
