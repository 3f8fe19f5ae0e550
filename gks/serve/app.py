# SPDX-License-Identifier: Apache-2.0
"""The HTTP API of the benchmark server (``python -m gks serve``).

  POST /archives     a source archive (.tar.gz of a checkout, the raw body) -> 201 {"archive": sha256}
  POST /jobs         a job (JobRequest as JSON) -> 201 {"id": ...}
  GET  /jobs/{id}    its state, request, result (the bench JSON) and log
  GET  /jobs         the latest jobs (?state=queued|running|done|failed|timeout)
  GET  /health       {"ok": true, "queued": n}

Every request but /health carries ``Authorization: Bearer TOKEN`` (401 otherwise). A body
larger than max_body bytes (an archive: max_archive) gets 413, a request that names no op, backend, dtype or shape the
registry knows 422 with the reason, a full queue 429.
"""

from __future__ import annotations

import argparse
import hmac
import os
import re
import sys
from pathlib import Path
from typing import Literal

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, field_validator, model_validator

from gks import registry
from gks.serve.archives import Archives, BadArchive
from gks.serve.store import STATES, JobStore
from gks.serve.worker import CommandExecutor, Worker

_SHAPE = re.compile(r"^\d+(x\d+)*$")
_REVISION = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._/-]{0,99}$")


class JobRequest(BaseModel):
    kind: Literal["bench", "test"] = "bench"
    op: str
    backends: list[str] | None = Field(default=None, max_length=8)
    dtypes: list[str] | None = Field(default=None, max_length=8)
    shapes: list[str] | None = Field(default=None, max_length=64)
    with_references: bool = False
    reps: int = Field(default=15, ge=1, le=1000)
    revision: str | None = None
    archive: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")

    @field_validator("op")
    @classmethod
    def _known_op(cls, op: str) -> str:
        if op not in {s.name for s in registry.ops()}:
            raise ValueError(f"'{op}' is not an op (see `gks list`)")
        return op

    @field_validator("shapes")
    @classmethod
    def _shapes(cls, shapes):
        for s in shapes or ():
            if not _SHAPE.match(s):
                raise ValueError(f"shape '{s}' is not of the form 4096x4096")
        return shapes

    @field_validator("revision")
    @classmethod
    def _revision(cls, rev):
        if rev is not None and not _REVISION.match(rev):
            raise ValueError(f"revision '{rev}' is not a git revision name")
        return rev

    @model_validator(mode="after")
    def _of_the_op(self):
        if self.revision and self.archive:
            raise ValueError("give a revision or an archive, not both")
        spec = registry.get(self.op)
        for b in self.backends or ():
            if not spec.has_backend(b):
                raise ValueError(f"'{b}' is not a backend of {self.op} ({', '.join(x.name for x in spec.backends)})")
        for d in self.dtypes or ():
            if d not in spec.dtypes:
                raise ValueError(f"'{d}' is not a dtype of {self.op} ({', '.join(spec.dtypes)})")
        return self


def create_app(store: JobStore, worker: Worker | None, token: str, *, max_body: int = 64 * 1024,
               max_queued: int = 1000, archives: Archives | None = None,
               max_archive: int = 32 * 2**20) -> FastAPI:
    app = FastAPI(title="gks benchmark server")

    @app.middleware("http")
    async def limit_body(request: Request, call_next):
        limit = max_archive if request.url.path == "/archives" else max_body
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            return JSONResponse({"detail": f"request body over {limit} bytes"}, status_code=413)
        if length is None and request.method in ("POST", "PUT"):
            body = await request.body()  # chunked: read, then measure
            if len(body) > limit:
                return JSONResponse({"detail": f"request body over {limit} bytes"}, status_code=413)
        return await call_next(request)

    def authorized(request: Request) -> None:
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            raise HTTPException(status_code=401, detail="a valid 'Authorization: Bearer TOKEN' header is needed")

    @app.get("/health")
    def health():
        return {"ok": True, "queued": len(store.list("queued", limit=1_000_000))}

    @app.post("/archives", status_code=201, dependencies=[Depends(authorized)])
    async def upload(request: Request):
        if archives is None:
            raise HTTPException(status_code=404, detail="this server takes no archives")
        try:
            return {"archive": archives.add(await request.body())}
        except BadArchive as e:
            raise HTTPException(status_code=422, detail=f"archive: {e}") from None

    @app.post("/jobs", status_code=201, dependencies=[Depends(authorized)])
    def submit(job: JobRequest):
        if job.archive and (archives is None or archives.path(job.archive) is None):
            raise HTTPException(status_code=422, detail=f"archive {job.archive} was not uploaded (POST /archives)")
        job_id = store.add(job.model_dump(), max_queued)
        if job_id is None:
            raise HTTPException(status_code=429, detail=f"the queue is full ({max_queued} jobs wait)")
        if worker is not None:
            worker.notify()
        return {"id": job_id}

    @app.get("/jobs/{job_id}", dependencies=[Depends(authorized)])
    def fetch(job_id: int):
        job = store.get(job_id)
        if job is None:
            raise HTTPException(status_code=404, detail=f"no job {job_id}")
        return job

    @app.get("/jobs", dependencies=[Depends(authorized)])
    def jobs(state: str | None = None, limit: int = 100):
        if state is not None and state not in STATES:
            raise HTTPException(status_code=422, detail=f"state must be one of {', '.join(STATES)}")
        return store.list(state, min(max(limit, 1), 1000))

    return app


def run(args: argparse.Namespace) -> int:
    import uvicorn

    token = args.token or os.environ.get("GKS_SERVE_TOKEN")
    if not token:
        print("gks serve: give --token or set GKS_SERVE_TOKEN (the clients send it)", file=sys.stderr)
        return 2
    store = JobStore(args.db)
    cut = store.recover()
    if cut:
        print(f"gks serve: {cut} job(s) the previous server left running are marked failed (interrupted)")
    root = Path(__file__).resolve().parent.parent.parent
    archives = Archives(args.db.with_name(args.db.name + ".archives"))
    worker = Worker(store, CommandExecutor(root, timeout_s=args.job_timeout, archives=archives))
    worker.start()
    try:
        uvicorn.run(create_app(store, worker, token, max_queued=args.max_queued, archives=archives),
                    host=args.host, port=args.port)
    finally:
        worker.stop()
        store.close()
    return 0
