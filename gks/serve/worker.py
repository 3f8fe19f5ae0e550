# SPDX-License-Identifier: Apache-2.0
"""Runs the queued jobs one at a time, each in a subprocess of its own: the GPU belongs to
one job at a time, and a job that crashes, hangs or takes the process down with it is marked
failed or timeout while the server goes on.

A bench job runs ``python -m gks bench --kernel OP ... --json OUT`` and keeps OUT as its
result; a test job runs the op's contract tests (``pytest tests/contract -k OP``). A job for
a git revision runs in a worktree of that revision, one for an uploaded source archive
(gks.serve.archives) in a folder it is extracted into: their Python code, against the
server's own CUDA build (GKS_LIBRARY)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from gks.serve.archives import Archives, BadArchive
from gks.serve.store import JobStore

LOG_LIMIT = 64 * 1024  # the last bytes of a job's output that are kept


class CommandExecutor:
    """Turns a job's request into a command and runs it under a time limit."""

    def __init__(self, root: Path, timeout_s: float = 3600.0, python: str = sys.executable,
                 archives: Archives | None = None):
        self.root = Path(root)
        self.archives = archives
        self.timeout_s = timeout_s
        self.python = python
        self._proc: subprocess.Popen | None = None
        self.cancelled = False

    def cancel(self) -> None:
        """Kills the running job's process group (the server is stopping)."""
        self.cancelled = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)

    def command(self, request: dict[str, Any], out_json: Path) -> list[str]:
        if request["kind"] == "test":
            return [self.python, "-m", "pytest", "tests/contract", "-q", "-p", "no:cacheprovider",
                    "-k", request["op"]]
        cmd = [self.python, "-m", "gks", "bench", "--kernel", request["op"], "--json", str(out_json),
               "--reps", str(request.get("reps", 15))]
        for flag in ("backends", "dtypes", "shapes"):
            if request.get(flag):
                cmd += [f"--{flag}", ",".join(request[flag])]
        if request.get("with_references"):
            cmd.append("--with-references")
        return cmd

    def run(self, request: dict[str, Any]) -> tuple[str, Any, str, str]:
        """(state, result, log, reason) of one job."""
        with tempfile.TemporaryDirectory(prefix="gks-job-") as tmp:
            tmp = Path(tmp)
            cwd = self.root
            if request.get("archive"):
                cwd = tmp / "src"
                try:
                    self.archives.extract(request["archive"], cwd)
                except (BadArchive, AttributeError, OSError) as e:
                    return "failed", None, "", f"archive {request['archive']}: {e}"
            elif request.get("revision"):
                cwd = tmp / "src"
                made = subprocess.run(["git", "-C", str(self.root), "worktree", "add", "--detach", str(cwd),
                                       request["revision"]], capture_output=True, text=True)
                if made.returncode != 0:
                    return "failed", None, made.stderr[-LOG_LIMIT:], f"no revision {request['revision']!r}"
            try:
                return self._run_in(cwd, request, tmp / "result.json")
            finally:
                if request.get("revision"):
                    subprocess.run(["git", "-C", str(self.root), "worktree", "remove", "--force", str(cwd)],
                                   capture_output=True)
                    shutil.rmtree(cwd, ignore_errors=True)

    def _run_in(self, cwd: Path, request: dict[str, Any], out_json: Path) -> tuple[str, Any, str, str]:
        env = {**os.environ, "PYTHONPATH": str(cwd) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        proc = subprocess.Popen(self.command(request, out_json), cwd=cwd, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        self._proc = proc
        try:
            output, _ = proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the job's whole process group
            output, _ = proc.communicate()
            return "timeout", None, output[-LOG_LIMIT:], f"ran past its {self.timeout_s:g} s limit"
        finally:
            self._proc = None
        log = output[-LOG_LIMIT:]
        if proc.returncode != 0:
            return "failed", None, log, f"exit status {proc.returncode}"
        if out_json.is_file():
            return "done", json.loads(out_json.read_text()), log, ""
        return "done", {"returncode": 0, "summary": log.strip().splitlines()[-1:] or [""]}, log, ""


class Worker:
    """The thread that takes the queue's jobs one by one."""

    def __init__(self, store: JobStore, executor: CommandExecutor, poll_s: float = 0.2):
        self.store, self.executor, self.poll_s = store, executor, poll_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gks-serve-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def notify(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stops taking jobs and kills the one running, which stays marked running: the next
        server to open the store marks it interrupted (JobStore.recover)."""
        self._stop.set()
        self._wake.set()
        if hasattr(self.executor, "cancel"):
            self.executor.cancel()
        self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            job = self.store.claim()
            if job is None:
                self._wake.wait(self.poll_s)
                self._wake.clear()
                continue
            try:
                state, result, log, reason = self.executor.run(job["request"])
            except Exception as e:  # noqa: BLE001 - an executor bug fails the job, not the server
                state, result, log, reason = "failed", None, "", f"{type(e).__name__}: {e}"
            if self._stop.is_set() and getattr(self.executor, "cancelled", False):
                return  # killed by the stop: left running, for recover() to mark
            self.store.finish(job["id"], state, result, log, reason)
