# SPDX-License-Identifier: Apache-2.0
"""The remote benchmark server and its client.

``python -m gks serve`` (gks.serve.app) runs on the GPU host: an HTTP API (FastAPI, served
by uvicorn) that takes bench and test jobs, keeps them in SQLite (gks.serve.store), and runs
them one at a time in a subprocess each (gks.serve.worker), so a job that crashes or hangs
is marked so and the server goes on. ``python -m gks bench-suite`` (gks.serve.suite)
submits the pre-commit sweep to it, or runs it ``--local``, and compares the results with
the pinned baseline (results/baseline.json).
"""
