# SPDX-License-Identifier: Apache-2.0
"""Every op x backend x dtype x bench shape in the registry, beside each op's peers.

    python benchmarks/run_all.py [--json]          # --json writes results/bench.json

The same as `python -m gks bench --all --with-references`; per-op runs are
`python -m gks bench --kernel OP ...`. The JSON schema is in gks/profile/bench.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout
from gks.__main__ import main  # noqa: E402

if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--json"]
    if "--json" in sys.argv[1:]:
        args += ["--json", str(Path(__file__).resolve().parent.parent / "results" / "bench.json")]
    sys.exit(main(["bench", "--all", "--with-references", *args]))
