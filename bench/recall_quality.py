"""Recall quality (R@1, R@5, MRR) of every backend, per protocol and sample, through the CLI.

The protocols and the TUNING / HELD-OUT split of databases are those of
``bench/protocols.py`` (read its docstring). For each protocol and sample, the stored pairs
become pair files (``knowledge/sql/<db_id>/<name>.md``, ``datasource: <db_id>``) in a
temporary project; ``wrenmem sync`` builds the index once per embedder, and each backend
answers all asked questions in one ``wrenmem recall --queries FILE --json -k 6`` process.
A question's own file, when stored, is dropped from its hits before scoring the top 5.
For the trap protocols R@1 is the precision at 1 (the pair whose SQL matches comes first),
and ``trap@1`` says how often the near-duplicate trap came first instead.

Usage: python bench/recall_quality.py [--protocols paraphrase,...] [--samples tuning,held-out]
       [--runs grep,vector:usem3,hybrid:usem3] [--max-queries 500] [--workdir DIR]
       [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import REPO  # noqa: E402
from protocols import PROTOCOLS, SAMPLES, Asked, Case, build_case, norm_sql, subsample  # noqa: E402


def write_project(root: Path, case: Case) -> None:
    for pair in case.stored:
        folder = root / "knowledge" / "sql" / pair.db
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{pair.name}.md").write_text(
            f"---\nnl: {json.dumps(pair.question, ensure_ascii=False)}\ndatasource: {pair.db}\n"
            f"source: user\n---\n\n```sql\n{pair.sql}\n```\n", encoding="utf-8")


def wrenmem(args: list[str], root: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "wrenmem", *args], cwd=root, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"wrenmem {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def score(results: list[dict], asked: list[Asked]) -> dict[str, float]:
    r1 = r5 = mrr = trap1 = 0.0
    for result, item in zip(results, asked, strict=True):
        want = norm_sql(item.sql)
        hits = [h for h in result["hits"]
                if not (item.drop and Path(h["path"]).stem == item.drop
                        and h["datasource"] == item.db)][:5]
        if hits and item.trap_sql and norm_sql(hits[0]["sql"]) == norm_sql(item.trap_sql):
            trap1 += 1
        for rank, hit in enumerate(hits, 1):
            if norm_sql(hit["sql"]) == want and hit["datasource"] == item.db:
                r1 += rank == 1
                r5 += 1
                mrr += 1 / rank
                break
    n = max(len(asked), 1)
    return {"R@1": r1 / n, "R@5": r5 / n, "MRR": mrr / n, "trap@1": trap1 / n, "n": len(asked)}


def run_one(root: Path, asked: list[Asked], run: str) -> tuple[dict[str, float], float, float]:
    backend, _, embedder = run.partition(":")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1",
           "LANCEDB_LOG": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
           "WRENMEM_PROJECT": str(root), "WRENMEM_NO_DAEMON": "1"}
    sync_s = 0.0
    if backend != "grep":
        env["WRENMEM_EMBEDDER"] = embedder
        env["WRENMEM_INDEX"] = f".wrenmem/index-{embedder.replace('/', '_')}"
        start = time.perf_counter()
        wrenmem(["sync"], root, env)
        sync_s = time.perf_counter() - start
    queries = root / "queries.json"
    queries.write_text(json.dumps([a.question for a in asked], ensure_ascii=False))
    start = time.perf_counter()
    proc = wrenmem(["recall", "--queries", str(queries), "--json", "-k", "6",
                    "--backend", backend], root, env)
    recall_s = time.perf_counter() - start
    return score(json.loads(proc.stdout), asked), sync_s, recall_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    parser.add_argument("--samples", default=",".join(SAMPLES))
    parser.add_argument("--runs", default="grep,vector:usem3,hybrid:usem3")
    parser.add_argument("--max-queries", type=int, default=500)
    parser.add_argument("--workdir", help="keep the projects here (reused when present)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args(argv)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="wm-quality-"))
    runs = args.runs.split(",")
    rows = []
    for sample in args.samples.split(","):
        for protocol in args.protocols.split(","):
            case = build_case(protocol, sample)
            asked = subsample(case.asked, args.max_queries)
            root = work / f"{protocol}-{sample}"
            if not (root / "knowledge").exists():
                write_project(root, case)
            cells = {}
            for run in runs:
                metrics, sync_s, recall_s = run_one(root, asked, run)
                cells[run] = metrics
                print(f"{protocol:15} {sample:9} stored={len(case.stored):5} "
                      f"asked={metrics['n']:4} {run:13} R@1={metrics['R@1']:.3f} "
                      f"R@5={metrics['R@5']:.3f} MRR={metrics['MRR']:.3f} "
                      f"trap@1={metrics['trap@1']:.3f}  sync {sync_s:.1f}s "
                      f"recall {recall_s:.1f}s", file=sys.stderr, flush=True)
            rows.append((protocol, sample, len(case.stored), len(asked), cells))
    if args.markdown:
        print("| protocol | sample | stored / asked | " + " | ".join(runs)
              + " | default best or tied (R@1, MRR) |")
        print("|---|---|---|" + "---|" * len(runs) + "---|")
        for protocol, sample, n_stored, n_asked, cells in rows:
            default = cells.get(runs[-1])
            singles = [cells[r] for r in runs[:-1]]
            ok = default is not None and all(
                default["R@1"] >= s["R@1"] - 1e-9 and default["MRR"] >= s["MRR"] - 1e-9
                for s in singles)
            mark = "**held-out**" if sample == "held-out" else "tuning"
            print(f"| {protocol} | {mark} | {n_stored} / {n_asked} | "
                  + " | ".join(f"{c['R@1']:.3f} / {c['R@5']:.3f} / {c['MRR']:.3f}"
                               for c in cells.values())
                  + f" | {'yes' if ok else 'no'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
