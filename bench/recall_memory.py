"""Recall held in memory against LanceDB's own searches, on a project indexed before.

For ``--questions`` bench questions (half the public sets' questions as stored: a question
answered before; half the same with a qualifier no pair has: a new question), in one
process over the project's index (``bench/scale.py --keep DIR`` builds one):

- dense: the in-memory scan's 50 best (ids, cosines) against LanceDB's exact flat search;
- keywords: the copy's BM25 50 best against LanceDB's full-text search;
- hybrid: the top 10 of a warm backend holding the table against the LanceDB backend's
  (its IVF index searched in every partition, so exact too), and both timed per question
  (median wall and CPU milliseconds, in this process: no daemon round trip);
- with ``--edit``: one pair file changed and synced, then the warm backend's next search,
  which brings its copy up to date by reading the changed rows only.

    python bench/recall_memory.py --project /tmp/reads-100k [--questions 300] [--edit]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale  # noqa: E402

from wrenmem.index import table as index  # noqa: E402
from wrenmem.index.readcopy import held as recallcopy  # noqa: E402
from wrenmem.index.readcopy import vectorscan  # noqa: E402
from wrenmem.recall import vector  # noqa: E402
from wrenmem.recall.hits import Filters  # noqa: E402
from wrenmem.recall.vector import HybridBackend  # noqa: E402
from wrenmem.settings import load_settings  # noqa: E402
from wrenmem.storage import lance  # noqa: E402


def bench_questions(n: int) -> list[str]:
    rng = random.Random(20261201)
    stored = [p["nl"] for p in rng.sample(scale.public_pairs(), n - n // 2)]
    new = [f"{p['nl'].rstrip('?. ')} for the year {2000 + i % 25}?"
           for i, p in enumerate(rng.sample(scale.public_pairs(), n // 2))]
    return stored + new


def timed(fn):  # type: ignore[no-untyped-def]
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, required=True)
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--edit", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("WRENMEM_NO_DAEMON", "1")
    settings = load_settings(args.project)
    questions = bench_questions(args.questions)
    table = index.open_table(index.connect(settings))
    copy, ms, cpu = timed(lambda: recallcopy.RecallCopy.from_table(table))
    print(f"{len(copy):,} rows read whole into memory: {ms / 1000:.1f} s (cpu {cpu / 1000:.1f})"
          f"; load {os.getloadavg()[0]:.1f}")
    warm = HybridBackend(settings)
    vectors = warm.embedder.embed(questions)
    ids = [r[recallcopy.POSITION["id"]] for r in copy.rows]
    scan = copy.scan()
    dense_same = dense_set = 0
    dense_diff = 0.0
    for v in vectors:
        rows, cosines = scan.nearest(v, 50, None, ids.__getitem__)
        theirs = (table.search(v).distance_type("cosine").bypass_vector_index().limit(50)
                  .select(["id", "_distance"]).to_list())
        dense_same += [ids[r] for r in rows] == [r["id"] for r in theirs]
        dense_set += {ids[r] for r in rows} == {r["id"] for r in theirs}
        dense_diff = max(dense_diff, max(abs(c - (1 - r["_distance"]))
                                         for c, r in zip(cosines, theirs, strict=True)))
    print(f"dense, 50 best: same order {dense_same}/{len(questions)}, same rows {dense_set}, "
          f"largest cosine difference {dense_diff:.2e}; int8 proved {scan.proved}, "
          f"rescanned {scan.rescanned}")
    bm_set = 0
    bm_diff = 0.0
    for q in questions:
        terms = index.query_terms(q)
        numbers, scores = copy.bm25_arrays(terms.split())
        order = vectorscan.best(scores, numbers, 50, ids.__getitem__)
        ours = {ids[int(numbers[i])]: float(scores[i]) for i in order}
        theirs = {r["id"]: r["_score"] for r in
                  table.search(terms, query_type="fts", fts_columns="terms").limit(50)
                  .select(["id", "_score"]).to_list()}
        cut = min(theirs.values(), default=0.0)  # rows tied at the 50th score: either may
        bm_set += ({k for k, v in ours.items() if v > cut * (1 + 1e-6)}
                   == {k for k, v in theirs.items() if v > cut * (1 + 1e-6)})
        bm_diff = max([bm_diff] + [abs(ours[k] - s) / s for k, s in theirs.items()
                                   if k in ours])
    print(f"keywords, 50 best: same rows (but ties at the 50th) {bm_set}/{len(questions)}, "
          "largest relative score "
          f"difference {bm_diff:.2e}")
    del copy, scan
    for _ in range(2):  # the second search holds the table
        warm.search(questions[:1], 10, Filters())
    full = HybridBackend(settings, warm.embedder)
    for q in questions:  # as a long-lived process after a while: the candidates' SQL
        warm.search([q], 10, Filters())  # shapes parsed once (both backends share them)
    ours_top, ours_ms, ours_cpu = [], [], []
    for q in questions:
        hits, ms, cpu = timed(lambda q=q: warm.search([q], 10, Filters())[0])
        ours_top.append([h.path for h in hits])
        ours_ms.append(ms)
        ours_cpu.append(cpu)
    vector.IN_MEMORY_MAX_ROWS = 0
    lance.ANN_NPROBES = 1_000_000  # every partition: the IVF search is exact
    for q in questions:  # its own warm pass
        full.search([q], 10, Filters())
    full_ms, full_cpu, same = [], [], 0
    for q, mine in zip(questions, ours_top, strict=True):
        hits, ms, cpu = timed(lambda q=q: full.search([q], 10, Filters())[0])
        same += [h.path for h in hits] == mine
        full_ms.append(ms)
        full_cpu.append(cpu)
    half = len(questions) - len(questions) // 2
    for name, part in (("asked before", slice(0, half)), ("new", slice(half, None))):
        print(f"hybrid, {name}: in memory {statistics.median(ours_ms[part]):.1f} ms "
              f"(cpu {statistics.median(ours_cpu[part]):.1f}), LanceDB "
              f"{statistics.median(full_ms[part]):.1f} ms (cpu "
              f"{statistics.median(full_cpu[part]):.1f}), ratio "
              f"{statistics.median(full_ms[part]) / statistics.median(ours_ms[part]):.1f}x")
    print(f"hybrid top 10: the same {same}/{len(questions)}; load {os.getloadavg()[0]:.1f}")
    if args.edit:
        vector.IN_MEMORY_MAX_ROWS = 200_000
        from wrenmem.index.sync import sync_pairs

        target = sorted((args.project / "knowledge" / "sql").rglob("*.md"))[7]
        target.write_text(target.read_text().replace('nl: "', 'nl: "Edited again: ', 1))
        sync_pairs(settings)
        _hits, ms, cpu = timed(lambda: warm.search(questions[:1], 10, Filters()))
        print(f"after one edit, the warm backend's next search: {ms:.0f} ms (cpu {cpu:.0f}), "
              f"its copy brought up to date; live rows "
              f"{len(warm._memory[2]) if warm._memory else 0:,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
