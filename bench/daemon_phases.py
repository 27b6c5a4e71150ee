"""Where a warm daemon's hybrid recall spends its CPU, per part, in one process.

The daemon's request handler (:class:`wrenmem.watch.daemon.DaemonServer`, with its
file-system events) answers the questions of ``bench/scale.py --daemon`` (5 stored, 5 new)
in this process, after its warm-up, with a timer around each part of the request; no
socket round trip, so the parts add up to the request. Then, with ``--check N``, the 10
and 50 nearest rows of those questions and N more (public questions, half with a qualifier
no pair has) from the in-memory scan (int8 or prefix codes) against the full float32 scan
of every row: same rows, same order, same cosines.

    python bench/daemon_phases.py --project DIR [--rounds 4] [--check N] [--prefix-dims D]
                                  [--profile FILE]

``--profile FILE`` writes a cProfile of the measured requests (``python -m pstats FILE``).

Run it with ``PYTHONPATH=<checkout>`` to measure another checkout's code (parts it does not
have are left out).
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import sys
import time
from pathlib import Path
from typing import Any

STORED = ["How many singers do we have?", "What is the average age of all students?",
          "List the names of all airports.", "How many employees are there?",
          "每个国家有多少歌手？"]
NEW = [q.rstrip("?？. ") + " for the year 2031?" for q in STORED]
CPU: dict[str, float] = collections.defaultdict(float)
WALL: dict[str, float] = collections.defaultdict(float)


def timed(owner: Any, name: str, label: str) -> None:
    """Time every call of ``owner.name`` under ``label`` (nothing if it has no such part)."""
    fn = getattr(owner, name, None)
    if fn is None:
        return

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            CPU[label] += time.process_time() - cpu
            WALL[label] += time.perf_counter() - wall

    setattr(owner, name, wrapper)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--check", type=int, default=-1, metavar="N",
                        help="check the bench's questions and N more of the public sets "
                             "(WRENMEM_BENCH_DATA), half of them new")
    parser.add_argument("--prefix-dims", type=int, help="vectorscan.PREFIX_DIMS to try")
    parser.add_argument("--profile", type=Path, help="cProfile the measured requests here")
    args = parser.parse_args()

    from wrenmem.embed import embedders
    from wrenmem.index import table as index
    from wrenmem.index.readcopy import vectorscan
    from wrenmem.index.readcopy.held import RecallCopy
    from wrenmem.recall import model, vector
    from wrenmem.recall.daemon_client import PROTOCOL, settings_payload
    from wrenmem.settings import load_settings
    from wrenmem.watch import loop
    from wrenmem.watch.daemon import DaemonServer
    from wrenmem.watch.freshness import Freshness

    if args.prefix_dims:
        vectorscan.PREFIX_DIMS = args.prefix_dims
    settings = load_settings(args.project.resolve())
    server = DaemonServer(settings)
    server.freshness = Freshness(settings)  # what start() makes, without the socket
    server.memory.keep_warm(server.freshness)
    for owner, name, label in [
            (DaemonServer, "handle", "request"), (vector.HybridBackend, "search", "search"),
            (vector.HybridBackend, "_one", "ranking one question"),
            (vectorscan.VectorScan, "nearest", "  dense scan"),
            (vector._CopyView, "keyword", "  keyword (BM25) searches"),
            (model.Scorer, "__call__", "  ranking model"),
            (embedders.Usem3Embedder, "embed", "embedding the question"),
            (loop.WatchdogSource, "fence", "freshness fence"),
            (index, "disk_listing", "listing the table's files")]:
        timed(owner, name, label)

    def message(question: str) -> bytes:
        return json.dumps({"v": PROTOCOL, "op": "recall", "settings": settings_payload(settings),
                           "args": {"queries": [question], "k": 5, "sql": None,
                                    "filters": {"datasource": None, "tags": [],
                                                "source": None, "verified": False}}}).encode()

    start = time.perf_counter()
    server.warm()
    print(f"warm-up {time.perf_counter() - start:.2f} s", file=sys.stderr)
    for question in STORED + NEW:  # as the daemon bench's warm-up pass
        assert server.handle_line(message(question))["ok"]
    CPU.clear()
    WALL.clear()
    import cProfile

    profile = cProfile.Profile() if args.profile else None
    if profile:
        profile.enable()
    count, cpu, wall = 0, time.process_time(), time.perf_counter()
    for _ in range(args.rounds):
        for question in STORED + NEW:
            reply = server.handle_line(message(question))
            assert reply["ok"], reply
            json.dumps(reply, ensure_ascii=False)
            count += 1
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if profile:
        profile.disable()
        profile.dump_stats(args.profile)
    print(f"{count} requests: {wall / count * 1000:.2f} ms wall, {cpu / count * 1000:.2f} ms "
          f"CPU per request")
    for label in sorted(CPU, key=lambda k: -CPU[k]):
        print(f"  {label:28} {CPU[label] / count * 1000:6.2f} ms CPU  "
              f"{WALL[label] / count * 1000:6.2f} ms wall")
    import gc

    for copy in [o for o in gc.get_objects() if isinstance(o, RecallCopy)]:
        scan = copy.scan()
        print(f"scan of {len(copy.matrix):,} rows: {scan.proved} proved by a bound "
              f"({getattr(scan, 'prefixed', 0)} by the prefix codes), {scan.rescanned} "
              "scanned whole")
        if args.check >= 0:
            more: list[str] = []
            if args.check:
                sys.path.insert(0, str(Path(__file__).resolve().parent))
                from recall_memory import bench_questions

                more = bench_questions(args.check)
            check(scan, server.recaller.embedder, STORED + NEW + more)
    return 0


def check(scan: Any, embedder: Any, questions: list[str]) -> None:
    """The scan's answers against the float32 scan of every row."""
    import numpy as np

    from wrenmem.index.readcopy.vectorscan import best, exact_cosines

    same = 0
    before = (scan.proved, getattr(scan, "prefixed", 0), scan.rescanned)
    for vector in embedder.embed(questions):
        raw = np.asarray(vector, dtype=np.float32)
        query = raw / float(np.linalg.norm(raw))  # as the scan makes it (once)
        for depth in (10, 50):
            rows, cosines = scan.nearest(raw, depth)
            every = exact_cosines(scan.matrix, query)
            want = best(every, np.arange(len(every)), depth, None)
            same += rows.tolist() == want.tolist() and cosines.tolist() == every[want].tolist()
    print(f"  same rows, order and cosines as the float32 scan: {same}/{2 * len(questions)} "
          f"({scan.proved - before[0]} proved by a bound, "
          f"{getattr(scan, 'prefixed', 0) - before[1]} by the prefix codes, "
          f"{scan.rescanned - before[2]} scanned whole)")


if __name__ == "__main__":
    raise SystemExit(main())
