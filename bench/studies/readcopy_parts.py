"""The in-memory read copy's two searches against LanceDB's, one part at a time, in one process.

For an indexed project (``bench/scale100k.py`` builds one), per question: the 50 nearest rows
by LanceDB (its own index as built: a flat scan below 50,000 rows, IVF_FLAT with 64 probes
from there; a flat scan asked for with ``bypass_vector_index``; IVF_HNSW_SQ, built on a
scratch copy of the table with ``--hnsw``) and by the copy's scan (int8 with its prefix
codes, proved exact); the 50 best rows by BM25 through LanceDB's full-text index and through
the copy's postings. A hybrid recall makes one dense and three keyword searches. Each
variant's searches alternate question by question; CPU (``time.process_time``, every thread
of this process) and wall, medians; ``os.getloadavg()`` before and after.

    python bench/studies/readcopy_parts.py PROJECT [--questions 40] [--hnsw SCRATCH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scale100k import questions  # noqa: E402

from wrenmem.embed.embedders import get_embedder  # noqa: E402
from wrenmem.index import table as index  # noqa: E402
from wrenmem.index.readcopy.held import RecallCopy  # noqa: E402
from wrenmem.index.table import query_terms  # noqa: E402
from wrenmem.recall.copyview import _CopyView  # noqa: E402
from wrenmem.recall.hits import Filters  # noqa: E402
from wrenmem.recall.vector import COLUMNS  # noqa: E402
from wrenmem.settings import load_settings  # noqa: E402
from wrenmem.storage import lance  # noqa: E402

DEPTH = 50


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def timed(fn) -> tuple[float, float, object]:
    cpu, wall = time.process_time(), time.perf_counter()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("project", type=Path)
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--hnsw", type=Path, help="a scratch folder for an IVF_HNSW_SQ copy")
    args = parser.parse_args()
    settings = load_settings(args.project.resolve())
    table = index.open_table(lance.connect(settings.index_uri))
    rows = table.count_rows()
    embedder = get_embedder(settings.embedder, root=settings.root)
    qs = questions(args.questions)
    vectors = embedder.embed(qs)
    terms = [query_terms(q).split() for q in qs]
    start = time.perf_counter()
    copy = RecallCopy.from_table(table)
    copy.scan().make_prefix(wait=True)
    print(f"{rows:,} rows, vector index {lance.vector_index_kind(table)}; the copy read and "
          f"its scan made in {time.perf_counter() - start:.1f} s", flush=True)
    view = _CopyView(copy, Filters())
    hnsw = None
    if args.hnsw:
        shutil.rmtree(args.hnsw, ignore_errors=True)
        shutil.copytree(Path(settings.index_uri) / f"{index.TABLE}.lance",
                        args.hnsw / f"{index.TABLE}.lance")
        hnsw = lance.connect(str(args.hnsw)).open_table(index.TABLE)
        from lancedb.index import HnswSq

        built = time.perf_counter()
        hnsw.create_index("vector", config=HnswSq(distance_type="cosine",
                                                  num_partitions=max(1, rows // 100_000)),
                          replace=True)
        print(f"IVF_HNSW_SQ built in {time.perf_counter() - built:.1f} s", flush=True)
    columns = [*COLUMNS, "terms", "_distance"]
    variants = {
        "dense: LanceDB as built": lambda v, t: lance.nearest(table, v).limit(DEPTH)
        .select(columns).to_list(),
        "dense: LanceDB flat": lambda v, t: table.search(v).distance_type("cosine")
        .bypass_vector_index().limit(DEPTH).select(columns).to_list(),
        "dense: the copy": lambda v, t: view.nearest(v, DEPTH, [*COLUMNS, "terms"]),
        "keyword: LanceDB FTS": lambda v, t: table.search(" ".join(t), query_type="fts",
                                                          fts_columns="terms")
        .limit(DEPTH).select(["id", "_score"]).to_list(),
        "keyword: the copy": lambda v, t: view.keyword(t, DEPTH),
    }
    if hnsw is not None:
        variants["dense: LanceDB IVF_HNSW_SQ"] = lambda v, t: hnsw.search(v).distance_type(
            "cosine").limit(DEPTH).select(columns).to_list()
    exact = [[r["id"] for r in view.nearest(v, DEPTH, ["id"])] for v in vectors]
    for fn in variants.values():  # one warm-up question each
        fn(vectors[0], terms[0])
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    overlap: dict[str, list[float]] = {name: [] for name in variants if "dense" in name}
    before = load()
    for n, (vector, words) in enumerate(zip(vectors, terms, strict=True)):
        for name, fn in variants.items():
            wall, cpu, out = timed(lambda fn=fn, v=vector, t=words: fn(v, t))
            times[name].append((wall, cpu))
            if name in overlap:
                got = {r["id"] for r in out[:10]}
                overlap[name].append(len(got & set(exact[n][:10])) / 10)
    print(f"\n{len(qs)} questions, load {before} -> {load()}\n")
    print("| search (50 rows) | wall median | CPU median | top-10 overlap with the exact scan |")
    print("|---|---|---|---|")
    for name, got in times.items():
        share = (f"{statistics.fmean(overlap[name]):.3f}" if name in overlap else "")
        print(f"| {name} | {statistics.median(w for w, _c in got) * 1000:.1f} ms | "
              f"{statistics.median(c for _w, c in got) * 1000:.1f} ms | {share} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
