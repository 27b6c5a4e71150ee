"""Schema memory at scale: first schema index, no-op re-index, one changed column, fetch.

Builds a large manifest with ``bench/gen_manifest.py`` (2,529 models, 51,273 columns by
default) in a temporary project and times whole ``wrenmem`` CLI processes, as an agent
calls them:

1. first ``fetch --threshold 0`` (parses the manifest, embeds every schema item);
2. the same again (no-op re-index: nothing opened, nothing embedded);
3. after changing one column's description (counts what was re-embedded);
4. fetch latency over several questions, each a new process, and in-process (warm daemon);
5. relevance: Spider questions whose gold tables (read from their SQL with sqlglot) should
   appear among the top ``-k`` items.

    python bench/schema_bench.py [--copies 3] [--databases N] [--questions 40] [-k 10]
                                 [--keep DIR]

``--copies 1 --databases 80`` makes the 9,929-item manifest of the "schema search at 10,000
items" target (its relevance line is low: most questions are about the databases left out).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _data import DATA  # noqa: E402
from gen_manifest import DEFAULT_TABLES, build, snake  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "LANCEDB_LOG": "error",
       "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def cli(root: Path, *args: str) -> tuple[float, dict]:
    """Run ``wrenmem --json`` as a new process; returns (seconds, parsed JSON)."""
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "wrenmem", "--project", str(root), *args,
                          "--json"], env=ENV, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"wrenmem {' '.join(args)} failed:\n{out.stderr}")
    return seconds, json.loads(out.stdout)


def gold_questions(n: int, seed: int = 7) -> list[tuple[str, str, set[str]]]:
    """(question, db_id, gold table names) for ``n`` Spider-Syn questions with one db each."""
    import sqlglot
    from sqlglot import exp

    items = json.loads((DATA / "spider-syn-train" / "questions.json").read_text())
    rng = random.Random(seed)
    rng.shuffle(items)
    out = []
    for item in items:
        try:
            tree = sqlglot.parse_one(item["query"], read="sqlite")
        except Exception:  # noqa: BLE001 - a few Spider queries are not valid SQL
            continue
        tables = {t.name.lower() for t in tree.find_all(exp.Table)}
        if tables:
            out.append((item["SpiderQuestion"], item["db_id"], tables))
        if len(out) == n:
            break
    return out


def relevance(root: Path, questions: list[tuple[str, str, set[str]]], k: int
              ) -> tuple[float, float, list[float]]:
    """Share of questions with every / at least one gold table among the top-k items."""
    from wrenmem.schema.fetch import fetch
    from wrenmem.settings import load_settings

    settings = load_settings(root)
    all_hit = any_hit = 0
    latencies = []
    for question, db, tables in questions:
        started = time.perf_counter()
        result = fetch(settings, question, k=k, threshold=0)
        latencies.append(time.perf_counter() - started)
        found = set()
        for r in result.results:
            for name in (r.item.model, r.item.related):
                base = name.split("__")
                if len(base) >= 2 and base[-2] == snake(db):
                    found.add(base[-1])
        gold = {snake(t) for t in tables}
        all_hit += gold <= found
        any_hit += bool(gold & found)
    return all_hit / len(questions), any_hit / len(questions), latencies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=3)
    parser.add_argument("--databases", type=int, help="keep the first N Spider databases")
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--keep", type=Path, help="Project folder to use and keep.")
    args = parser.parse_args(argv)
    root = args.keep or Path(tempfile.mkdtemp(prefix="wrenmem-schema-bench-"))
    manifest_path = root / "target" / "mdl.json"
    manifest_path.parent.mkdir(parents=True, exist_ok=True)
    (root / "knowledge" / "sql").mkdir(parents=True, exist_ok=True)
    doc = build(DEFAULT_TABLES, args.copies, args.databases)
    manifest_path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    old = time.time() - 10  # a settled file, as a manifest normally is
    os.utime(manifest_path, (old, old))
    columns = sum(len(m["columns"]) for m in doc["models"])
    print(f"manifest: {len(doc['models'])} models, {columns} columns, "
          f"{len(doc['relationships'])} relationships, "
          f"{manifest_path.stat().st_size / 1e6:.1f} MB; project {root}")

    question = "How many heads of the departments are older than 56?"
    rows = []
    seconds, first = cli(root, "fetch", "-q", question, "--threshold", "0")
    built = first["index"].get("written", first["index"]["embedded"]) == first["index"]["items"]
    rows.append(("first schema index (fetch, cold)" if built else
                 "first fetch (--keep: index reused)", seconds, first["index"]))
    seconds, again = cli(root, "fetch", "-q", question, "--threshold", "0")
    rows.append(("no-op re-index (fetch)", seconds, again["index"]))

    doc["models"][len(doc["models"]) // 2]["columns"][1]["properties"]["description"] = \
        "Edited by the benchmark: one changed column."
    manifest_path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    os.utime(manifest_path, (old + 1, old + 1))
    seconds, changed = cli(root, "fetch", "-q", question, "--threshold", "0")
    rows.append(("re-index after one changed column (fetch)", seconds, changed["index"]))

    for label, secs, index in rows:
        print(f"{label:45s} {secs:7.2f} s  (sync {index['seconds']:.2f} s) "
              f"items={index['items']} written={index.get('written')} "
              f"embedded={index['embedded']} "
              f"deleted={index['deleted']} noop={index['noop']}")

    grep = [cli(root, "fetch", "-q", question, "--threshold", "0", "-b", "grep")[0]
            for _ in range(5)]
    print(f"fetch, keyword only (-b grep), new process:  median {statistics.median(grep):.2f} s")
    questions = gold_questions(args.questions)
    cold = [cli(root, "fetch", "-q", q, "--threshold", "0", "-k", str(args.k))[0]
            for q, _db, _t in questions[:8]]
    print(f"fetch, new process each (8 questions):      median {statistics.median(cold):.2f} s"
          f", max {max(cold):.2f} s")
    every, some, warm = relevance(root, questions, args.k)
    print(f"fetch, in-process warm ({len(questions)} questions):     median "
          f"{statistics.median(warm[1:]) * 1000:.0f} ms (first {warm[0]:.2f} s)")
    print(f"relevance, top-{args.k} items: all gold tables {every:.0%}, at least one "
          f"{some:.0%} of {len(questions)} Spider questions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
