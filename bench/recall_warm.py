"""Warm recall latency: per question, in a process that already holds the model and index.

Builds N pair files (``sync_bench.make_project``: Spider-Syn and mSpider, English and
Chinese), syncs them, then asks ``--questions`` questions one at a time through one backend
object per backend (as the watcher's daemon does), after one warm-up question. Prints the
median and 95th percentile milliseconds per question, the median CPU time (user + sys of the
process, all its threads) per question, and the load average.

Usage: python bench/recall_warm.py [--pairs 10000] [--questions 200] [--workdir DIR]
       [--backends grep,vector,hybrid] [--warm-passes N]

``--warm-passes N`` asks every question N times before the measured pass, so the measured
pass sees what a long-lived process holds after a while (the candidates' SQL shapes parsed
once; without it, each question still parses the shapes of the candidates it meets first).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sync_bench import make_project, questions  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10000)
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--workdir")
    parser.add_argument("--backends", default="grep,vector,hybrid")
    parser.add_argument("--warm-passes", type=int, default=0)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("LANCEDB_LOG", "error")
    root = Path(args.workdir or tempfile.mkdtemp(prefix="wm-warm-"))
    if not (root / "knowledge").exists():
        make_project(root, args.pairs)
    from wrenmem.index.sync import sync_pairs
    from wrenmem.recall.hits import Filters
    from wrenmem.recall.recaller import Recaller
    from wrenmem.settings import load_settings

    settings = load_settings(root)
    start = time.perf_counter()
    sync_pairs(settings)
    print(f"sync: {time.perf_counter() - start:.1f}s", file=sys.stderr)
    asked = [q for q, _sql in questions(args.pairs)][::max(1, args.pairs // args.questions)]
    asked = [f"{q} please" for q in asked[:args.questions]]  # not stored verbatim
    import wrenmem

    print(f"code: {Path(wrenmem.__file__).parent}", file=sys.stderr)
    print("| backend | pairs | questions | median ms / question | p95 ms | median CPU ms "
          "| load average |")
    print("|---|---|---|---|---|---|---|")
    for name in args.backends.split(","):
        backend = Recaller(settings).backend(name)
        backend.search([asked[0]], 5, Filters())
        for _ in range(args.warm_passes):
            for question in asked:
                backend.search([question], 5, Filters())
        times, cpu = [], []
        for question in asked:
            t, c = time.perf_counter(), time.process_time()
            backend.search([question], 5, Filters())
            times.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
        times.sort()
        print(f"| {name} | {args.pairs} | {len(times)} | {statistics.median(times):.1f} | "
              f"{times[int(0.95 * (len(times) - 1))]:.1f} | {statistics.median(cpu):.1f} | "
              f"{os.getloadavg()[0]:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
