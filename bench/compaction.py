"""How LanceDB reads of the pairs table age between compactions, and what one costs.

On a copy of a kept project (``bench/scale.py --keep DIR``), with compaction deferred (as
a watcher does), make one-file edits and, at each checkpoint (commits since the last
compaction), time what a recall without a recall copy asks LanceDB for: the vector search
(``lance.nearest``, the ANN index past 50,000 rows) and the full-text search, median of
the queries, with the table's fragments. Then time one compaction
(CPU, wall, bytes written: the growth of the table folder before its prune) and the reads
after it. Answers: whether fewer, larger compactions keep reads as fast.

    python bench/compaction.py --project /tmp/lead4-10k --checkpoints 0,10,30,100
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, required=True,
                        help="a kept project (copied, never changed)")
    parser.add_argument("--checkpoints", default="0,10,30,100",
                        help="commits since the last compaction at which reads are timed")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--keep", type=Path, help="copy here (default: a temp folder)")
    args = parser.parse_args(argv)

    from wrenmem.embed.embedders import get_embedder
    from wrenmem.index import maintenance
    from wrenmem.index import table as index
    from wrenmem.index.sync import sync_pairs
    from wrenmem.index.table import query_terms
    from wrenmem.pairs.catalog import scan
    from wrenmem.settings import load_settings
    from wrenmem.storage import compaction, lance

    work = args.keep or Path(tempfile.mkdtemp(prefix="wm-compaction-"))
    root = work / "project"
    if not root.exists():
        shutil.copytree(args.project, root, symlinks=True)
    settings = load_settings(root)
    embedder = get_embedder(settings.embedder, root=settings.root)
    sync_pairs(settings, embedder=embedder)  # settle the copy (its stats changed)
    maintenance.defer(settings)
    pairs = sorted(scan(settings).pairs, key=lambda p: p.path)
    step = max(1, len(pairs) // args.queries)
    questions = [p.nl for p in pairs[::step]][:args.queries]
    vectors = embedder.embed(questions)
    table_dir = Path(settings.index_uri) / "pairs.lance"

    def reads(label: str) -> None:
        table = index.open_table(index.connect(settings))
        stats = table.stats()
        frags = stats["fragment_stats"]["num_fragments"]
        dense, text = [], []
        for q, v in zip(questions, vectors, strict=True):
            t = time.perf_counter()
            lance.nearest(table, v).limit(30).select(["id", "_distance"]).to_list()
            dense.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            (table.search(query_terms(q), query_type="fts", fts_columns="terms").limit(30)
             .select(["id", "_score"]).to_list())
            text.append((time.perf_counter() - t) * 1000)
        print(f"| {label} | {frags} "
              f"| {statistics.median(dense):.1f} | {statistics.median(text):.1f} "
              f"| {os.getloadavg()[0]:.1f} |", flush=True)

    print(f"{len(pairs):,} pairs, {len(questions)} queries, median ms")
    print("| commits since a compaction | fragments | vector search ms "
          "| full-text search ms | load |")
    print("|---|---|---|---|---|")
    checkpoints = sorted(int(c) for c in args.checkpoints.split(","))
    done = 0
    for target in checkpoints:
        while done < target:
            pair = pairs[(done * 7919) % len(pairs)]
            path = root / pair.path
            path.write_text(path.read_text(encoding="utf-8").replace(
                'nl: "', f'nl: "Aged {done}: ', 1), encoding="utf-8")
            sync_pairs(settings, paths=[pair.path], embedder=embedder)
            done += 1
        reads(str(target))
    before = folder_bytes(table_dir)
    counter = maintenance.counter(settings)
    held = compaction.maintenance_record(counter)
    held["due"] = True
    from wrenmem.fs.fsutil import write_marshal

    write_marshal(counter, held)
    cpu, wall = time.process_time(), time.perf_counter()
    result = maintenance.run(settings)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    written = folder_bytes(table_dir) - before
    reads(f"after the compaction ({result})")
    print(f"compaction after {done} commits: {wall:.2f} s wall, {cpu:.2f} s CPU (this process; "
          f"LanceDB's threads included), {written / 1e6:.0f} MB written "
          f"(table {before / 1e6:.0f} MB before)")
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
