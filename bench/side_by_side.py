"""The figures users feel, this checkout against an older one, interleaved in one run.

Generates one project of N pair files (``sync_bench.make_project``, as ``mcp_latency.py`` and
``recall_warm.py`` build theirs) plus the example manifest, copies it once per checkout (the
on-disk index may differ between versions, so each code builds and reads its own copy), and
then, for each figure, runs the old code and this code in turn, ``--rounds`` times (old, new,
old, new, ...). Every figure is a whole process (CPU = user + sys of it and its children)
except the warm ones, which time requests to a long-lived process and read its CPU from /proc:

- ``first index``: ``wrenmem sync --json`` with ``.wrenmem/`` removed (wall, CPU, peak RSS
  of the process tree); the first round builds the index the other figures read;
- ``no-op sync``: ``wrenmem sync --json`` with nothing changed (no watcher);
- ``recall, in-process``: ``wrenmem recall -b hybrid`` with ``WRENMEM_NO_DAEMON=1``;
- ``warm recall, vector`` / ``hybrid``: each checkout's ``bench/recall_warm.py --workdir``
  on its copy (one process holding the backend; median ms and CPU ms a question);
- ``mcp, warm``: a long-lived ``wrenmem mcp`` answering ``recall_queries`` itself;
- ``daemon, warm``: ``remote_recall`` requests to ``wrenmem watch --detach`` (CPU the
  daemon's);
- ``recall via daemon``: a whole ``wrenmem recall -b hybrid`` process the daemon answers
  (CPU: the process's and the daemon's while it ran; a code that hands the daemon its whole
  command line moves the click work there, so the process's own is printed apart);
- ``fetch via daemon``: a whole ``wrenmem fetch --threshold 0 --json`` process (the example
  manifest) the daemon answers (CPU as for recall);
- ``example, first sync``: this checkout's example project (``knowledge/``, ``target/``)
  copied, its first ``sync``.

Prints each run as it ends, then a table of medians, old / new / new÷old, with the load
average before and after each figure. Schema search in a new process has its own
side-by-side: ``bench/scale.py --schema-search --keep DIR --baseline OLD``.

    WRENMEM_BENCH_DATA=DATA python bench/side_by_side.py --old OLD_CHECKOUT
        [--pairs 10000] [--rounds 5] [--questions 20] [--workdir DIR] [--only index,noop,...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mcp_latency import ask  # noqa: E402
from scale100k import env_for, first_index, mcp_times  # noqa: E402
from sync_bench import REPO, make_project  # noqa: E402

sys.path.insert(0, str(REPO))
from wrenmem.recall.daemon_client import ping  # noqa: E402

FIGURES = ("first index", "no-op sync", "recall, in-process", "warm recall, vector",
           "warm recall, hybrid", "mcp, warm", "daemon, warm", "recall via daemon",
           "fetch via daemon", "example, first sync")
KEYS = ("index", "noop", "inproc", "vector", "hybrid", "mcp", "daemon", "viadaemon", "fetch",
        "example")


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def process(code: Path, root: Path, args: list[str], daemon: bool = False
            ) -> tuple[float, float]:
    """(wall, CPU) of one whole ``python -m wrenmem ARGS`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "wrenmem", *args], cwd=root,
                          env=env_for(code, root, daemon=daemon), capture_output=True,
                          text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"wrenmem {' '.join(args)} ({code}) failed:\n{proc.stderr}")
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def daemon_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def via_daemon(code: Path, root: Path, args: list[str], pid: int) -> tuple[float, ...]:
    """(wall, CPU of the process and the daemon, CPU of the process alone)."""
    before = daemon_cpu(pid)
    wall, cpu = process(code, root, args, daemon=True)
    return wall, cpu + daemon_cpu(pid) - before, cpu


def recall_warm(code: Path, root: Path, pairs: int, questions: int
                ) -> dict[str, tuple[float, float]]:
    """{backend: (median ms, median CPU ms)} from ``code``'s own bench/recall_warm.py."""
    env = env_for(code, root, daemon=False)
    proc = subprocess.run([sys.executable, str(code / "bench" / "recall_warm.py"),
                           "--workdir", str(root), "--pairs", str(pairs), "--questions",
                           str(questions), "--backends", "vector,hybrid", "--warm-passes", "1"],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"recall_warm.py ({code}) failed:\n{proc.stderr}")
    got = {}
    for line in proc.stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells and cells[0] in ("vector", "hybrid"):
            got[cells[0]] = (float(cells[3]) / 1000, float(cells[5]) / 1000)
    return got


def start_watcher(code: Path, root: Path) -> int:
    subprocess.run([sys.executable, "-m", "wrenmem", "watch", "--detach"], cwd=root,
                   env={**env_for(code, root, daemon=True), "WRENMEM_BACKEND": "hybrid"},
                   check=True, capture_output=True)
    deadline = time.monotonic() + 600
    while True:
        state = ping(root)
        if state is not None and state.get("warm", True):  # older daemons say no "warm"
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"the watcher of {code} did not warm up")
        time.sleep(0.3)
    return int((root / ".wrenmem" / "watch.pid").read_text().strip())


def stop_watcher(code: Path, root: Path) -> None:
    subprocess.run([sys.executable, "-m", "wrenmem", "watch", "--stop"], cwd=root,
                   env=env_for(code, root, daemon=True), capture_output=True)


DAEMON_CLIENT = """
import json, os, statistics, sys, time  # noqa: E401
from pathlib import Path
try:
    from wrenmem.recall.daemon_client import remote_recall
except ImportError:  # older layouts
    from wrenmem.watch.client import remote_recall
from wrenmem.recall.hits import Filters
from wrenmem.settings import load_settings
root, pid, qs = Path(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
tick = os.sysconf("SC_CLK_TCK")
def cpu():
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick
settings = load_settings(root, {"backend": "hybrid"})
deadline = time.monotonic() + 120  # the first request may outlast the client's timeout
while remote_recall(settings, [qs[0]], 3, Filters()) is None:
    if time.monotonic() > deadline:
        raise SystemExit("the daemon did not answer")
    time.sleep(0.5)
times, cpus = [], []
for i, q in enumerate([qs[0], *qs]):
    c, start = cpu(), time.perf_counter()
    if remote_recall(settings, [q], 3, Filters()) is None:
        raise SystemExit("the daemon did not answer")
    if i:
        times.append(time.perf_counter() - start)
        cpus.append(cpu() - c)
print(json.dumps([statistics.median(times), statistics.fmean(cpus)]))
"""


def daemon_warm(code: Path, root: Path, pid: int, qs: list[str]) -> tuple[float, float]:
    """Median wall and mean daemon CPU a request, sent by ``code``'s own client."""
    proc = subprocess.run([sys.executable, "-c", DAEMON_CLIENT, str(root), str(pid),
                           json.dumps(qs)], cwd=root, env=env_for(code, root, daemon=True),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"daemon requests ({code}) failed:\n{proc.stderr}")
    wall, cpu = json.loads(proc.stdout)
    return wall, cpu


class Table:
    def __init__(self) -> None:
        self.runs: dict[tuple[str, str], list[tuple[float, ...]]] = {}
        self.loads: dict[str, list[str]] = {}

    def add(self, figure: str, label: str, values: tuple[float, ...]) -> None:
        self.runs.setdefault((figure, label), []).append(values)
        print(f"{figure:22} {label}: " + " / ".join(f"{v:.4g}" for v in values)
              + f"   (load {loadavg()})", file=sys.stderr, flush=True)

    def median(self, figure: str, label: str, k: int) -> float:
        return statistics.median(v[k] for v in self.runs[figure, label])

    def print(self) -> None:
        print("| figure | runs | old: wall / CPU | new: wall / CPU | new ÷ old: wall / CPU"
              " | load (before → after) |")
        print("|---|---|---|---|---|---|")
        for figure in FIGURES:
            if (figure, "old") not in self.runs:
                continue
            n = len(self.runs[figure, "old"])
            o = [self.median(figure, "old", k) for k in range(2)]
            w = [self.median(figure, "new", k) for k in range(2)]
            unit, scale = ("ms", 1000) if o[0] < 1 else ("s", 1)
            print(f"| {figure} | {n} | {o[0] * scale:.3g} / {o[1] * scale:.3g} {unit} | "
                  f"{w[0] * scale:.3g} / {w[1] * scale:.3g} {unit} | {w[0] / o[0]:.2f} / "
                  f"{w[1] / o[1] if o[1] else float('nan'):.2f} | "
                  f"{' → '.join(self.loads.get(figure, []))} |")
        if ("first index", "old") in self.runs:
            o, w = (self.median("first index", lab, 2) for lab in ("old", "new"))
            print(f"\nfirst index, peak RSS of the process tree: old {o:.0f} MB, new {w:.0f} MB"
                  f" ({w / o:.2f})")
        for figure in ("recall via daemon", "fetch via daemon"):
            if (figure, "old") in self.runs:
                o, w = (self.median(figure, lab, 2) for lab in ("old", "new"))
                print(f"{figure}, CPU of the process alone: old {o * 1000:.0f} ms, new "
                      f"{w * 1000:.0f} ms ({w / o:.2f})")
        if ("example, first sync", "old") in self.runs:
            o, w = (self.median("example, first sync", lab, 2) for lab in ("old", "new"))
            print(f"example's first sync, peak RSS: old {o:.0f} MB, new {w:.0f} MB ({w / o:.2f})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="the older checkout")
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--questions", type=int, default=20,
                        help="requests per warm figure and round")
    parser.add_argument("--workdir", type=Path,
                        default=Path(tempfile.gettempdir()) / "wrenmem-side-by-side")
    parser.add_argument("--only", help=f"comma-separated, of {','.join(KEYS)} (default: all)")
    args = parser.parse_args(argv)
    only = {FIGURES[KEYS.index(k)] for k in args.only.split(",")} if args.only else set(FIGURES)
    codes = {"old": args.old.resolve(), "new": REPO}
    base = args.workdir / f"pairs-{args.pairs}"
    if not (base / "generated").exists():
        shutil.rmtree(base, ignore_errors=True)
        make_project(base, args.pairs)
        (base / "target").mkdir()
        shutil.copy(REPO / "target" / "mdl.json", base / "target" / "mdl.json")
        (base / "generated").write_text(f"{args.pairs}\n")
    roots = {}
    for label in codes:
        roots[label] = args.workdir / f"{label}-{args.pairs}"
        if not roots[label].exists():
            shutil.copytree(base, roots[label], ignore=shutil.ignore_patterns(".wrenmem"))
    table = Table()
    print(f"old {codes['old']}, new {REPO}; {args.pairs:,} pairs; load {loadavg()}",
          file=sys.stderr, flush=True)

    def rounds(figure: str, fn, n: int | None = None) -> None:
        if figure not in only:
            return
        table.loads.setdefault(figure, []).append(loadavg())
        for _ in range(args.rounds if n is None else n):
            for label in ("old", "new"):
                for name, values in fn(label):
                    table.add(name, label, values)
        table.loads[figure].append(loadavg())

    def index(label: str):
        got = first_index(roots[label], codes[label])
        return [("first index", (got["wall"], got["cpu"], got["rss"]))]

    if not all((roots[lab] / ".wrenmem").exists() for lab in codes) or "first index" in only:
        rounds("first index", index, 1)
    rounds("no-op sync", lambda lab: [("no-op sync", process(codes[lab], roots[lab],
                                                             ["sync", "--json"]))])
    q = ask(1)[0]
    rounds("recall, in-process", lambda lab: [("recall, in-process", process(
        codes[lab], roots[lab], ["recall", "-q", q, "-b", "hybrid"]))])

    def warm(label: str):
        got = recall_warm(codes[label], roots[label], args.pairs, max(args.questions, 50))
        return [(f"warm recall, {b}", got[b]) for b in ("vector", "hybrid")]

    if only & {"warm recall, vector", "warm recall, hybrid"}:
        only.add("warm recall, vector")
        rounds("warm recall, vector", warm)
        table.loads["warm recall, hybrid"] = table.loads["warm recall, vector"]
    qs = ask(args.questions)

    def mcp(label: str):
        times, cpus = asyncio.run(mcp_times(roots[label], env_for(
            codes[label], roots[label], daemon=False), qs))
        return [("mcp, warm", (statistics.median(times), statistics.fmean(cpus)))]

    rounds("mcp, warm", mcp)
    if only & {"daemon, warm", "recall via daemon", "fetch via daemon"}:
        pids = {lab: start_watcher(codes[lab], roots[lab]) for lab in codes}
        try:
            rounds("daemon, warm", lambda lab: [("daemon, warm", daemon_warm(
                codes[lab], roots[lab], pids[lab], qs))])
            rounds("recall via daemon", lambda lab: [("recall via daemon", via_daemon(
                codes[lab], roots[lab], ["recall", "-q", q, "-b", "hybrid"], pids[lab]))])
            rounds("fetch via daemon", lambda lab: [("fetch via daemon", via_daemon(
                codes[lab], roots[lab], ["fetch", "--threshold", "0", "--json", "-q", q],
                pids[lab]))])
        finally:
            for lab in codes:
                stop_watcher(codes[lab], roots[lab])
    examples = {}
    for label in codes:
        examples[label] = args.workdir / f"example-{label}"
        if not examples[label].exists():
            for part in ("knowledge", "target"):
                shutil.copytree(REPO / part, examples[label] / part)

    def example(label: str):
        got = first_index(examples[label], codes[label])
        return [("example, first sync", (got["wall"], got["cpu"], got["rss"]))]

    rounds("example, first sync", example)
    if "first index" in only and args.rounds > 1:
        rounds("first index", index, args.rounds - 1)
    print(f"\n{args.pairs:,} pairs, old = {codes['old']}, new = {REPO}; "
          f"load at the end {loadavg()}\n")
    table.print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
