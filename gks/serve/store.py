# SPDX-License-Identifier: Apache-2.0
"""The job queue and results, in one SQLite file: a restart loses no queued or finished job.

A job moves queued -> running -> done | failed | timeout. Claiming the next job is one
UPDATE ... RETURNING, so two workers (or two servers on one file) never take the same job;
a job found running when a server starts was cut off by the previous one's end and is marked
failed ("interrupted"), never run twice.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

STATES = ("queued", "running", "done", "failed", "timeout")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  request TEXT NOT NULL,
  state TEXT NOT NULL,
  created REAL NOT NULL,
  started REAL,
  finished REAL,
  result TEXT,
  log TEXT,
  reason TEXT
)
"""


class JobStore:
    """The jobs table. Each call opens no transaction longer than its own statement."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.row_factory = sqlite3.Row
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def recover(self) -> int:
        """Marks the jobs a previous server left running as failed; returns how many."""
        with self._lock:
            cur = self._db.execute(
                "UPDATE jobs SET state='failed', finished=?, reason=? WHERE state='running'",
                (time.time(), "interrupted: the server stopped while it ran (not run again)"))
            return cur.rowcount

    def add(self, request: dict[str, Any], max_queued: int) -> int | None:
        """Queues a job; None when max_queued jobs are already waiting."""
        with self._lock:
            (waiting,) = self._db.execute("SELECT COUNT(*) FROM jobs WHERE state='queued'").fetchone()
            if waiting >= max_queued:
                return None
            cur = self._db.execute("INSERT INTO jobs (request, state, created) VALUES (?, 'queued', ?)",
                                   (json.dumps(request), time.time()))
            return int(cur.lastrowid)

    def claim(self) -> dict[str, Any] | None:
        """The oldest queued job, now running; None when none waits."""
        with self._lock:
            row = self._db.execute(
                "UPDATE jobs SET state='running', started=? WHERE id = "
                "(SELECT id FROM jobs WHERE state='queued' ORDER BY id LIMIT 1) RETURNING *",
                (time.time(),)).fetchone()
        return None if row is None else _job(row)

    def finish(self, job_id: int, state: str, result: Any = None, log: str = "", reason: str = "") -> None:
        assert state in ("done", "failed", "timeout"), state
        with self._lock:
            self._db.execute(
                "UPDATE jobs SET state=?, finished=?, result=?, log=?, reason=? WHERE id=? AND state='running'",
                (state, time.time(), None if result is None else json.dumps(result), log, reason, job_id))

    def get(self, job_id: int) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        return None if row is None else _job(row)

    def list(self, state: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        query, args = "SELECT * FROM jobs", ()
        if state:
            query, args = query + " WHERE state=?", (state,)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY id DESC LIMIT ?", (*args, limit)).fetchall()
        return [_job(r, with_log=False) for r in rows]


def _job(row: sqlite3.Row, with_log: bool = True) -> dict[str, Any]:
    job = {k: row[k] for k in ("id", "state", "created", "started", "finished", "reason")}
    job["request"] = json.loads(row["request"])
    job["result"] = None if row["result"] is None else json.loads(row["result"])
    if with_log:
        job["log"] = row["log"] or ""
    return job
