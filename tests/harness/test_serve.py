# SPDX-License-Identifier: Apache-2.0
"""The benchmark server and its client end to end on this machine: a real uvicorn server on
localhost, real HTTP requests (urllib), the SQLite store and the worker's subprocesses.
Most jobs run a small script in place of `gks bench` (it records each run, so a job run twice
or lost shows), one runs the real command on the interpreter backends."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

from gks.serve import suite  # noqa: E402
from gks.serve.app import create_app  # noqa: E402
from gks.serve.store import JobStore  # noqa: E402
from gks.serve.worker import CommandExecutor, Worker  # noqa: E402

TOKEN = "s3cret"

# What a scripted job does, chosen by its request's `reps`: 1 writes a bench-like result,
# 2 crashes, 3 hangs, 4 works for 0.3 s first. Its one shape is a unique marker it records.
SCRIPT = r"""
import json, sys, time
marker, reps, out, runs, median = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5])
with open(runs, "a") as f:
    f.write(marker + "\n")
if reps == 2:
    print("boom"); sys.exit(3)
if reps == 3:
    time.sleep(60)
if reps == 4:
    time.sleep(0.3)
shape = [int(v) for v in marker.split("x")]
json.dump({"rows": [{"kind": "gks", "op": "softmax", "variant": "gks.triton", "shape": shape,
                     "dtype": "float16", "median_us": median}]}, open(out, "w"))
"""


class ScriptExecutor(CommandExecutor):
    def __init__(self, root, runs, timeout_s=20.0, median_us=10.0):
        super().__init__(root, timeout_s=timeout_s)
        self.runs, self.median_us = runs, median_us

    def command(self, request, out_json):
        return [sys.executable, "-c", SCRIPT, request["shapes"][0], str(request["reps"]), str(out_json),
                str(self.runs), str(self.median_us)]


class Server:
    """The app on a free localhost port, with its worker."""

    def __init__(self, db, executor, worker=True, **limits):
        self.store = JobStore(db)
        self.store.recover()
        self.worker = Worker(self.store, executor, poll_s=0.05) if worker else None
        if self.worker:
            self.worker.start()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(create_app(self.store, self.worker, TOKEN, **limits), log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            assert time.time() < deadline, "the server did not start"
            time.sleep(0.02)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(10)
        if self.worker:
            self.worker.stop()
        self.store.close()


def _request(server, method, path, body=None, token=TOKEN, raw=None, headers=()):
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    hdrs = {"Content-Type": "application/json", **dict(headers)}
    if token is not None:
        hdrs["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(server.url + path, data=data, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def _job(marker, reps=1):
    return {"kind": "bench", "op": "softmax", "backends": ["triton"], "shapes": [marker], "reps": reps}


def _wait(client, ids, timeout=60):
    deadline = time.time() + timeout
    jobs = {}
    while len(jobs) < len(ids):
        assert time.time() < deadline, f"{len(ids) - len(jobs)} jobs not finished"
        for i in ids:
            if i not in jobs:
                job = client.job(i)
                if job["state"] not in ("queued", "running"):
                    jobs[i] = job
        time.sleep(0.05)
    return [jobs[i] for i in ids]


@pytest.fixture
def runs(tmp_path):
    return tmp_path / "runs.txt"


@pytest.fixture
def server(tmp_path, runs):
    s = Server(tmp_path / "jobs.db", ScriptExecutor(tmp_path, runs))
    yield s
    s.stop()


def test_a_request_without_the_token_is_refused(server):
    assert _request(server, "GET", "/health", token=None)[0] == 200
    for token in (None, "wrong", TOKEN + "x"):
        status, body = _request(server, "POST", "/jobs", _job("1x1"), token=token)
        assert status == 401 and "Bearer" in body["detail"]
        assert _request(server, "GET", "/jobs/1", token=token)[0] == 401
    assert _request(server, "GET", "/jobs")[1] == []  # nothing was queued


@pytest.mark.parametrize("body, status, says", [
    ({"op": "nope"}, 422, "'nope' is not an op"),
    ({"op": "softmax", "backends": ["foo"]}, 422, "'foo' is not a backend of softmax"),
    ({"op": "softmax", "dtypes": ["int8"]}, 422, "'int8' is not a dtype of softmax"),
    ({"op": "softmax", "shapes": ["4096*4096"]}, 422, "is not of the form 4096x4096"),
    ({"op": "softmax", "reps": 0}, 422, "greater than or equal to 1"),
    ({"op": "softmax", "revision": "; rm -rf /"}, 422, "is not a git revision name"),
    ({"op": "softmax", "kind": "shell"}, 422, "'bench' or 'test'"),
])
def test_a_malformed_request_gets_422_with_the_reason(server, body, status, says):
    code, reply = _request(server, "POST", "/jobs", body)
    assert code == status and says in json.dumps(reply), reply


def test_oversized_unparseable_and_unknown(server):
    code, reply = _request(server, "POST", "/jobs", raw=b"{" + b" " * (70 * 1024) + b"}")
    assert code == 413 and "over" in reply["detail"]
    assert _request(server, "POST", "/jobs", raw=b"not json")[0] == 422
    assert _request(server, "GET", "/jobs/999")[0] == 404
    assert _request(server, "GET", "/jobs?state=lost")[0] == 422


def test_a_full_queue_gets_429(tmp_path, runs):
    s = Server(tmp_path / "jobs.db", ScriptExecutor(tmp_path, runs), worker=False, max_queued=2)
    try:
        assert [_request(s, "POST", "/jobs", _job(f"{i}x1"))[0] for i in range(3)] == [201, 201, 429]
    finally:
        s.stop()


def test_concurrent_clients_lose_no_job_and_run_none_twice(server, runs):
    client = suite.Client(server.url, TOKEN)
    ids, lock = [], threading.Lock()

    def submit(c):
        mine = [client.submit(_job(f"{c}x{j}")) for j in range(20)]
        with lock:
            ids.extend(mine)

    threads = [threading.Thread(target=submit, args=(c,)) for c in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 160
    jobs = _wait(client, ids, timeout=300)
    assert {j["state"] for j in jobs} == {"done"}
    ran = runs.read_text().split()
    assert sorted(ran) == sorted(f"{c}x{j}" for c in range(8) for j in range(20))  # each once
    assert all(j["result"]["rows"][0]["shape"] == [int(v) for v in j["request"]["shapes"][0].split("x")]
               for j in jobs)


def test_a_crash_and_a_hang_are_marked_and_the_server_goes_on(tmp_path, runs):
    s = Server(tmp_path / "jobs.db", ScriptExecutor(tmp_path, runs, timeout_s=1.0))
    try:
        client = suite.Client(s.url, TOKEN)
        crash, hang, fine = (client.submit(_job(m, reps)) for m, reps in (("1x1", 2), ("2x1", 3), ("3x1", 1)))
        jobs = _wait(client, [crash, hang, fine])
        assert [j["state"] for j in jobs] == ["failed", "timeout", "done"]
        assert jobs[0]["reason"] == "exit status 3" and "boom" in jobs[0]["log"]
        assert "limit" in jobs[1]["reason"]
    finally:
        s.stop()


def test_a_restart_in_the_middle_of_the_queue_loses_nothing(tmp_path, runs):
    db = tmp_path / "jobs.db"
    s = Server(db, ScriptExecutor(tmp_path, runs))
    client = suite.Client(s.url, TOKEN)
    ids = [client.submit(_job(f"{i}x1", reps=4)) for i in range(10)]
    deadline = time.time() + 60
    while sum(client.job(i)["state"] == "done" for i in ids) < 2:
        assert time.time() < deadline
        time.sleep(0.05)
    s.stop()  # a job is running or about to: it is killed, left for recover() to mark
    s = Server(db, ScriptExecutor(tmp_path, runs))
    try:
        client = suite.Client(s.url, TOKEN)
        jobs = _wait(client, ids)
    finally:
        s.stop()
    states = [j["state"] for j in jobs]
    interrupted = [j for j in jobs if j["state"] == "failed"]
    assert states.count("done") + len(interrupted) == 10 and states.count("done") >= 8, states
    assert all("interrupted" in j["reason"] for j in interrupted)
    ran = runs.read_text().split()
    assert len(ran) == len(set(ran)), "a job ran twice"
    assert {j["request"]["shapes"][0] for j in jobs if j["state"] == "done"} <= set(ran)


def test_a_real_bench_job_on_the_interpreter_backends(tmp_path):
    from gks.serve.suite import ROOT

    s = Server(tmp_path / "jobs.db", CommandExecutor(ROOT, timeout_s=600))
    try:
        client = suite.Client(s.url, TOKEN)
        job_id = client.submit({"kind": "bench", "op": "softmax", "backends": ["triton"],
                                "dtypes": ["float16"], "shapes": ["3x40"], "reps": 3})
        (job,) = _wait(client, [job_id], timeout=600)
        assert job["state"] == "done", job["log"][-2000:]
    finally:
        s.stop()


def test_compare_lists_what_regressed_beyond_the_band():
    baseline = [{"op": "softmax", "backend": "cuda", "shape": [8, 8], "dtype": "float16", "ours_us": 10.0},
                {"op": "gemm", "backend": "cuda", "shape": [8, 8, 8], "dtype": "float16", "ours_us": 20.0}]
    new = {("softmax", "cuda", (8, 8), "float16"): 10.2, ("gemm", "cuda", (8, 8, 8), "float16"): 21.5,
           ("rmsnorm", "cuda", (8, 8), "float16"): 5.0}
    table, slow = suite.compare(new, baseline, {})
    assert len(table) == 2 and [r[0] for r in slow] == ["gemm"]  # 7.5% > 3%; 2% within
    assert suite.compare(new, baseline, {"gemm": 0.1})[1] == []


def test_bench_suite_exits_1_on_a_regression_and_0_within_the_band(tmp_path, runs, capsys):
    baseline = tmp_path / "baseline.json"
    rows = [{"op": "softmax", "backend": "triton", "shape": [1, 1], "dtype": "float16", "ours_us": 10.0}]
    baseline.write_text(json.dumps({"rows": rows}))
    for median, status in ((10.1, 0), (12.0, 1)):
        s = Server(tmp_path / f"jobs-{median}.db", ScriptExecutor(tmp_path, runs, median_us=median))
        try:
            # The sweep's one job: its scripted result is the row [1, 1] above.
            original = suite.sweep
            suite.sweep = lambda ops, refs, reps: [_job("1x1")]
            try:
                args = ["bench-suite", "--server", s.url, "--token", TOKEN, "--baseline", str(baseline),
                        "--poll", "0.05"]
                from gks.__main__ import main

                assert main(args) == status
            finally:
                suite.sweep = original
        finally:
            s.stop()
        out = capsys.readouterr().out
        assert ("REGRESSED" in out) == (status == 1), out


def test_the_sweep_asks_for_the_reps_given():
    assert all("reps" not in r for r in suite.sweep(["softmax", "rmsnorm"]))
    assert [r["reps"] for r in suite.sweep(["softmax"], reps=5)] == [5]


def test_bench_suite_refuses_reps_below_1(capsys):
    from gks.__main__ import main

    assert main(["bench-suite", "--local", "--reps", "0"]) == 2
    assert "--reps must be >= 1, got 0" in capsys.readouterr().err


def _tar_gz(files: dict[str, bytes], evil: str | None = None) -> bytes:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if evil:
            info = tarfile.TarInfo(evil)
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            tar.addfile(info)
    return buf.getvalue()


class CwdExecutor(ScriptExecutor):
    """Records the job's working folder's marker file instead of the request's shape."""

    def command(self, request, out_json):
        script = ("import pathlib, sys; open(sys.argv[1], 'a').write(pathlib.Path('MARKER').read_text() + '\\n')")
        return [sys.executable, "-c", script, str(self.runs)]


def test_a_job_runs_in_its_uploaded_archive(tmp_path, runs):
    from gks.serve.archives import Archives

    archives = Archives(tmp_path / "archives")
    s = Server(tmp_path / "jobs.db", None, worker=False, archives=archives, max_archive=4096)
    executor = CwdExecutor(tmp_path, runs)
    executor.archives = archives
    s.worker = Worker(s.store, executor, poll_s=0.05)
    s.worker.start()
    try:
        client = suite.Client(s.url, TOKEN)
        good = _tar_gz({"MARKER": b"from-the-archive"})
        code, reply = _request(s, "POST", "/archives", raw=good, headers={"Content-Type": "application/gzip"})
        assert code == 201 and len(reply["archive"]) == 64
        job_id = client.submit({"op": "softmax", "archive": reply["archive"]})
        assert _wait(client, [job_id])[0]["state"] == "done"
        assert runs.read_text().split() == ["from-the-archive"]
        # Refused: not a tar, a link out of it, too large, unknown, or with a revision too.
        assert _request(s, "POST", "/archives", raw=b"plain bytes")[0] == 422
        code, reply = _request(s, "POST", "/archives", raw=_tar_gz({"a": b"x"}, evil="link"))
        assert code == 422 and "'link' is not a plain file" in reply["detail"]
        assert _request(s, "POST", "/archives", raw=_tar_gz({"big": bytes(range(256)) * 64}) + b"\0" * 4096)[0] == 413
        code, reply = _request(s, "POST", "/jobs", {"op": "softmax", "archive": "0" * 64})
        assert code == 422 and "was not uploaded" in reply["detail"]
        code, reply = _request(s, "POST", "/jobs", {"op": "softmax", "archive": "0" * 64, "revision": "main"})
        assert code == 422 and "not both" in json.dumps(reply)
        assert _request(s, "POST", "/archives", raw=good, token="wrong")[0] == 401
    finally:
        s.stop()
