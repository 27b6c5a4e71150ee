"""What the hand parser of ``wrenmem/__main__.py`` (the fast path before click) saves.

Runs each command as a fresh process, in turn with and without ``WRENMEM_NO_FAST_PATH=1``
(which sends every call to click), on a copy of the bundled example synced once, and prints
the median CPU and wall time of each and their ratio, pair by pair.

    .venv/bin/python bench/fast_path.py [--runs 9] [--project DIR]

The design rule: a mechanism that does what a dependency already does (here click's
parsing) stays only where it pays at least 2x on a figure users feel.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMANDS = {
    "recall (hybrid)": ["recall", "-q", "What was our revenue per month?", "--backend",
                        "hybrid"],
    "recall (grep)": ["recall", "-q", "What was our revenue per month?", "--backend", "grep"],
    "fetch": ["fetch", "-q", "What was our revenue per month?"],
    "sync (no-op)": ["sync", "--json"],
}


def run(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "wrenmem", *args], cwd=cwd, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--project", type=Path, help="an indexed project (default: a copy "
                        "of the bundled example, synced here)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory() as tmp:
        root = args.project
        if root is None:
            root = Path(tmp) / "example"
            shutil.copytree(REPO / "knowledge", root / "knowledge")
            shutil.copytree(REPO / "target", root / "target")
            subprocess.run([sys.executable, "-m", "wrenmem", "sync"], cwd=root, env=env,
                           check=True, stdout=subprocess.DEVNULL)
        slow_env = {**env, "WRENMEM_NO_FAST_PATH": "1"}
        print(f"{'command':<18} {'fast cpu':>9} {'click cpu':>9} {'cpu ratio':>9} "
              f"{'wall ratio':>10}  (medians of {args.runs}, click / fast)")
        for name, command in COMMANDS.items():
            run(command, root, env)
            run(command, root, slow_env)  # warm the page cache for both
            fast, slow = [], []
            for _ in range(args.runs):
                fast.append(run(command, root, env))
                slow.append(run(command, root, slow_env))
            cpu = statistics.median(s[0] / f[0] for f, s in zip(fast, slow, strict=True))
            wall = statistics.median(s[1] / f[1] for f, s in zip(fast, slow, strict=True))
            print(f"{name:<18} {statistics.median(f[0] for f in fast):>8.3f}s "
                  f"{statistics.median(s[0] for s in slow):>8.3f}s {cpu:>8.2f}x {wall:>9.2f}x")


if __name__ == "__main__":
    main()
