"""Fit the ranking model (``wrenmem/recall/weights.json``) on the TUNING part of the suite.

The candidates and their evidence are gathered through the product itself: for each case
of the suite (``bench/suite/build.py``) a project holds the stored items as pair files,
``Memory.sync()`` indexes them, and ``Memory.recall_many`` answers the asked questions with
the hybrid backend while this script records what the backends handed to the scorer
(the same candidates and evidence a user's recall scores). Gathered evidence is cached in
``--workdir``; the fit itself takes seconds.

A candidate is labelled right when the suite lists it as relevant for the asked question
(the asked SQL when a stored pair has it, else, for a *new question*, a pair of its skeleton
or shape); an asked entry's ``exclude`` items are taken out of the candidates before the
features are computed, as ``Filters.exclude`` does in the product. The ranking weights are a
conditional logit over each question's candidates, then a calibration; ``--cv N`` adds an
out-of-fold R@1 over databases within TUNING. No HELD-OUT number is looked at here unless
``--held-out`` is given, and that look is logged in ``bench/suite/HELD-OUT-LOG.md``.

Usage: python bench/fit_model.py --suite DIR [--workdir W] [--write] [--cv 5]
       [--drop FEATURE ...] [--held-out --why TEXT] [--json OUT]
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import pickle
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from wrenmem.recall import evaluate as leave_one_out  # noqa: E402
from wrenmem.recall import model as rank_model  # noqa: E402
from wrenmem.recall import second, sqlshape  # noqa: E402

K_GATHER = 10
TASKS = ("answered", "new", "trap")


@dataclass
class Cand:
    dense: float | None
    lexical: float | None
    coverage: float
    sql: str
    question: str
    datasource: str
    translated: float | None
    structure: float | None = None
    dialect: str | None = None
    item: str = ""  # the suite's item id of this pair
    excluded: bool = False  # stored, but not an answer to count (the case's ``exclude``)
    form: float | None = None  # the form fit (wrenmem.recall.forms) the product computed
    aggregate: float | None = None  # the same for its aggregates alone


@dataclass
class Asked:
    case: str
    set: str
    task: str
    lang: str
    db: str
    question: str
    sql: str
    dialect: str | None
    cands: list[Cand] = field(default_factory=list)
    relevant: frozenset[str] = frozenset()  # the suite's right items
    grep: list[tuple[float, str, str, str]] = field(default_factory=list)  # bm25f, sql, db, id
    grep_best: float = 0.0


# -- the suite ---------------------------------------------------------------------

def read_suite(folder: Path) -> tuple[dict[str, dict], list[dict]]:
    """(items by id, cases) of every set in a built suite."""
    items: dict[str, dict] = {}
    cases: list[dict] = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        if not (sub / "cases.json").exists():
            continue
        with (sub / "items.jsonl").open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    item = json.loads(line)
                    items[item["id"]] = item
        cases += json.loads((sub / "cases.json").read_text(encoding="utf-8"))
    return items, cases


def slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)[:80]


def write_project(root: Path, stored: list[dict]) -> None:
    import shutil

    sql_dir = root / "knowledge" / "sql"
    if sql_dir.exists():
        shutil.rmtree(sql_dir)
    for item in stored:
        folder = sql_dir / slug(item["db"])
        folder.mkdir(parents=True, exist_ok=True)
        dialect = f"dialect: {item['dialect']}\n" if item.get("dialect") else ""
        (folder / f"{slug(item['id'])}.md").write_text(
            f"---\nnl: {json.dumps(item['question'], ensure_ascii=False)}\n"
            f"datasource: {json.dumps(item['db'])}\n{dialect}source: user\n---\n\n"
            f"```sql\n{item['sql'].strip()}\n```\n", encoding="utf-8")


def gather_case(case: dict, items: dict[str, dict], workdir: Path) -> list[Asked]:
    """Every asked question of one case, with the candidates the product scored."""
    from wrenmem import Memory
    from wrenmem.index import embedcache
    from wrenmem.recall import bm25f
    from wrenmem.recall.hits import Filters

    root = workdir / "projects" / slug(case["name"])
    root.mkdir(parents=True, exist_ok=True)
    stored = [items[i] for i in case["stored"]]
    write_project(root, stored)
    memory = Memory(root, backend="hybrid", index_uri=str(workdir / "index" / slug(case["name"])))
    # the cases of one set share most of their stored questions: the embedding cache of the
    # case gathered before seeds this one's (the same vectors, keyed by model and text)
    shared = workdir / "embed-cache.bin"
    own = memory.settings.state_dir / embedcache.FILE_NAME
    if shared.exists() and not own.exists():
        own.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shared, own)
    memory.sync()
    if own.exists():
        shutil.copyfile(own, shared)
    db_dialect = {i["db"]: i.get("dialect") for i in stored}
    asked = []
    for a in case["asked"]:
        source = items.get(a["item"], {})
        asked.append(Asked(case["name"], case["set"], case["task"],
                           a.get("lang", case.get("lang", "")), a["db"], a["question"],
                           a.get("sql") or source.get("sql", ""),
                           source.get("dialect") or db_dialect.get(a["db"]),
                           relevant=frozenset(a["relevant"])))
    captured: list[tuple[str, list]] = []


    def recording(question, signals, *args, **kwargs):
        captured.append((question, list(signals)))
        return [0.5] * len(signals)  # the evidence is what counts here, not the order

    real_score = rank_model.score
    rank_model.score = recording
    try:
        # an asked entry's exclude items are left out of the search (Filters.exclude, as
        # the runner and `wrenmem eval` do): stored, but not there for this question, so
        # they are neither candidates nor counted by the form reader
        plain = [a.question for a, e in zip(asked, case["asked"], strict=True)
                 if not e.get("exclude")]
        if plain:
            memory.recall_many(plain, K_GATHER, sync=False)
        for a, e in zip(asked, case["asked"], strict=True):
            if e.get("exclude"):
                left_out = frozenset(
                    (f"knowledge/sql/{slug(items[i]['db'])}/{slug(i)}.md", items[i]["question"])
                    for i in e["exclude"] if i in items)
                memory.recaller.recall([a.question], K_GATHER, Filters(exclude=left_out),
                                       sync=False)
    finally:
        rank_model.score = real_score
    by_question: dict[str, list] = {}
    for question, signals in captured:
        by_question[question] = signals
    dialects = {(i["db"], i["sql"].strip()): i.get("dialect") for i in stored}
    ids = {(i["db"], i["question"], i["sql"].strip()): i["id"] for i in stored}
    for a, entry in zip(asked, case["asked"], strict=True):
        # an excluded item (the asked question itself, stored) is not a candidate
        exclude = set(entry.get("exclude", ()))
        # an excluded item (the asked question's source) stays a candidate, as it is
        # stored, but is neither right nor wrong: the runner drops it from the results
        a.cands = []
        for s in by_question.get(a.question, []):
            item = ids.get((s.datasource, s.question, s.sql.strip()), "")
            a.cands.append(Cand(s.dense, s.lexical, s.coverage, s.sql, s.question,
                                s.datasource, s.translated, s.structure,
                                s.dialect or dialects.get((s.datasource, s.sql.strip())),
                                item, item in exclude, s.form))
    # the grep backend's evidence, for its calibration
    grep_captured: list[tuple[list[float], float]] = []
    original_lex = bm25f.lexical_score  # imported there by name

    def recording_lex(scores, best_possible, *args, **kwargs):
        grep_captured.append((list(scores), best_possible))
        top = max(scores, default=0.0)  # BM25F's own order, without the shipped weights
        return [v / top if top > 0 else 0.0 for v in scores]

    bm25f.lexical_score = recording_lex
    try:
        results = Memory(root, backend="grep").recall_many([a.question for a in asked],
                                                          K_GATHER, sync=False)
    finally:
        bm25f.lexical_score = original_lex
    for a, entry, result, (scores, best) in zip(asked, case["asked"], results, grep_captured,
                                                strict=False):
        exclude = set(entry.get("exclude", ()))
        del scores  # all found, unordered: the hits carry theirs (raw_score)
        found = [(h.raw_score or 0.0, h.sql, h.datasource or "",
                  ids.get((h.datasource, h.question, h.sql.strip()), "")) for h in result.hits]
        a.grep = [g for g in found if g[3] not in exclude]
        a.grep_best = best
    return asked


def gather_stored(case: dict, items: dict[str, dict], stores: Path) -> list[Asked]:
    """Every asked question of one case with the candidates the product scored, gathered
    through the suite runner's project of the case's store (``bench/suite/run.py
    --workdir``: synced once, a no-op sync after), as that runner asks it. No grep evidence
    (the grep backend's calibration is then kept from the shipped weights)."""
    sys.path.insert(0, str(REPO / "bench" / "suite"))
    import run as suite_run

    stored = [items[i] for i in case["stored"]]
    root = suite_run.project_for(stores, stored)
    captured: list[tuple[str, list, float]] = []

    def recording(question, signals, *args, **kwargs):
        captured.append((question, list(signals), float(kwargs.get("unknown", 0.0))))
        return real_score(question, signals, *args, **kwargs)  # the product's own order

    real_score = rank_model.score
    rank_model.score = recording
    try:
        suite_run.product_search(root, "hybrid", case["asked"], items, suite_run.DEPTH, set())
    finally:
        rank_model.score = real_score
    queue: dict[str, list[list]] = defaultdict(list)
    for question, signals, _unknown in captured:
        queue[question].append(signals)
    ids: dict[tuple[str, str, str], str] = {}
    for i in stored:
        ids.setdefault((i["db"], i["question"], i["sql"].strip()), i["id"])
    out = []
    for a in case["asked"]:
        source = items.get(a["item"], {})
        got = queue[a["question"]].pop(0) if queue[a["question"]] else []
        asked = Asked(case["name"], case["set"], case["task"], a.get("lang", case.get("lang", "")),
                      a["db"], a["question"], a.get("sql") or source.get("sql", ""),
                      source.get("dialect"), relevant=frozenset(a["relevant"]))
        asked.cands = [Cand(s.dense, s.lexical, s.coverage, s.sql, s.question, s.datasource,
                            s.translated, s.structure, s.dialect,
                            ids.get((s.datasource, s.question, s.sql.strip()), ""), False,
                            s.form, s.aggregate) for s in got]
        out.append(asked)
    return out


def gather(items: dict[str, dict], cases: list[dict], workdir: Path, split: str,
           regather: bool, stores: Path | None = None) -> list[Asked]:
    out: list[Asked] = []
    for case in cases:
        if case["split"] != split:
            continue
        cache = workdir / "gathered" / f"{slug(case['name'])}.pkl"
        digest = hashlib.sha256(json.dumps(case, sort_keys=True).encode()).hexdigest()
        if cache.exists() and not regather:
            with cache.open("rb") as f:
                saved_digest, asked = pickle.load(f)
            if saved_digest == digest:
                out += _without_excluded(asked)
                continue
        start = time.perf_counter()
        asked = (gather_stored(case, items, stores) if stores is not None
                 else gather_case(case, items, workdir))
        cache.parent.mkdir(parents=True, exist_ok=True)
        with cache.open("wb") as f:
            pickle.dump((digest, asked), f)
        print(f"  gathered {case['name']}: {len(asked)} asked, {len(case['stored'])} stored, "
              f"{time.perf_counter() - start:.1f} s", file=sys.stderr)
        out += _without_excluded(asked)
    return out


def _without_excluded(asked: list[Asked]) -> list[Asked]:
    """The asked questions with their ``exclude`` items taken out of the candidates, as the
    runner and ``wrenmem eval`` leave them out before scoring (``Filters.exclude``)."""
    for a in asked:
        a.cands = [c for c in a.cands if not c.excluded]
    return asked


# -- labels, features, fit ------------------------------------------------------------

_FEATURES: dict[int, list[tuple[float, ...]]] = {}
_UNKNOWN: dict[str, float] = {}
_EMBEDDER: list = []  # the suite's embedder (the product's default), loaded on first use


def unknown(question: str) -> float:
    """The share of the question's pieces the default embedder does not know, as the
    product computes it at recall (:func:`wrenmem.embed.embedders.unknown_share`)."""
    got = _UNKNOWN.get(question)
    if got is None:
        from wrenmem.embed.embedders import DEFAULT_EMBEDDER, get_embedder, unknown_share

        if not _EMBEDDER:
            _EMBEDDER.append(get_embedder(DEFAULT_EMBEDDER))
        got = _UNKNOWN[question] = unknown_share(_EMBEDDER[0], question)
    return got


class CachedReader(second.SecondReader):
    """The second reader with its vectors kept in the fit's workdir between runs."""

    def __init__(self, path: Path):
        super().__init__()
        self.path = path
        self.cache_max = 10**9
        self.queries: dict[str, np.ndarray] = {}
        if path.exists():
            with path.open("rb") as f:
                self.queries, passages = pickle.load(f)
            self._passages.update(passages)

    def query(self, question: str) -> np.ndarray:
        got = self.queries.get(question)
        if got is None:
            got = self.queries[question] = super().query(question)
        return got

    def save(self) -> None:
        with self.path.open("wb") as f:
            pickle.dump((self.queries, dict(self._passages)), f)


_READER: list[CachedReader] = []


def reader(workdir: Path) -> CachedReader:
    if not _READER:
        _READER.append(CachedReader(workdir / "second-reader.pkl"))
    return _READER[0]


def feats(a: Asked) -> list[tuple[float, ...]]:
    """The model's features of an asked question's candidates, computed once."""
    got = _FEATURES.get(id(a))
    if got is None:
        got = _FEATURES[id(a)] = rank_model.features(a.question, a.cands,
                                                     unknown(a.question))
    return got


def labels(a: Asked) -> list[int]:
    """1 for a candidate the suite lists as right for the asked question."""
    return [int(c.item in a.relevant) for c in a.cands]


def fit_logistic(x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = 1e-2
                 ) -> np.ndarray:
    """Weighted L2-regularised logistic regression by Newton's method; returns
    [intercept, weights...]."""
    xb = np.hstack([np.ones((len(x), 1)), x])
    beta = np.zeros(xb.shape[1])
    reg = np.full(xb.shape[1], l2)
    reg[0] = 0.0
    for _ in range(50):
        z = np.clip(xb @ beta, -30, 30)
        p = 1 / (1 + np.exp(-z))
        grad = xb.T @ (w * (p - y)) + reg * beta
        hess = (xb * (w * p * (1 - p))[:, None]).T @ xb + np.diag(reg)
        step = np.linalg.solve(hess + 1e-9 * np.eye(len(beta)), grad)
        beta -= step
        if np.max(np.abs(step)) < 1e-8:
            break
    return beta


def _per_case(asked: list[Asked]) -> dict[str, int]:
    """How many questions each case asks (every case weighs the same in a fit)."""
    per_case: dict[str, int] = defaultdict(int)
    for a in asked:
        per_case[a.case] += 1
    return per_case


def fit_ranking(asked: list[Asked], keep: list[int], l2: float = 1e-2, iters: int = 40,
                held: dict[int, float] | None = None) -> np.ndarray:
    """A conditional logit (softmax over each question's candidates, the right ones the
    target) by Newton's method with a backtracking line search: the ranking weights.
    Every case weighs the same, and within it every asked question. ``held``: features
    whose weights stay as given (an offset), the others in ``keep`` fitted beside them."""
    held = held or {}
    keep = [i for i in keep if i not in held]
    per_case = _per_case(asked)
    groups = []
    for a in asked:
        kept = [n for n, c in enumerate(a.cands) if not c.excluded]
        every = labels(a)
        lab = np.array([every[n] for n in kept], dtype=float)
        if not kept or lab.sum() == 0:
            continue  # nothing right among the candidates: no ranking to learn from
        rows = feats(a)
        x = np.array([[rows[n][i] for i in keep] for n in kept])
        off = np.array([math.fsum(rows[n][i] * v for i, v in held.items()) for n in kept])
        groups.append((x, lab / lab.sum(), 100.0 / per_case[a.case], off))
    d = len(keep)

    def loss(b: np.ndarray) -> float:
        total = 0.5 * l2 * float(b @ b)
        for x, t, w, off in groups:
            z = x @ b + off
            m = z.max()
            total += w * float(m + np.log(np.exp(z - m).sum()) - t @ z)
        return total

    beta = np.zeros(d)
    current = loss(beta)
    for _ in range(iters):
        grad = l2 * beta
        hess = l2 * np.eye(d)
        for x, t, w, off in groups:
            z = x @ beta + off
            p = np.exp(z - z.max())
            p /= p.sum()
            grad += w * (x.T @ (p - t))
            xp = x.T @ p
            hess += w * ((x * p[:, None]).T @ x - np.outer(xp, xp))
        step = np.linalg.solve(hess + 1e-6 * np.eye(d), grad)
        rate = 1.0
        while rate > 1e-4:
            trial = beta - rate * step
            value = loss(trial)
            if value < current:
                break
            rate /= 2
        if rate <= 1e-4:
            break
        beta, current = trial, value
        if np.max(np.abs(rate * step)) < 1e-6:
            break
    if not held:
        return beta
    out = np.zeros(len(keep) + len(held))
    order = sorted([*keep, *held])
    for j, i in enumerate(order):
        out[j] = held[i] if i in held else beta[keep.index(i)]
    return out


def fit_calibration(asked: list[Asked], ranking: rank_model.Model, top: int = 10
                    ) -> np.ndarray:
    """The logistic from (rank score, its gap to the best, the best one's lead) to "right",
    over each asked question's best ``top`` distinct answers (where a score is read)."""
    rows, ys, ws = [], [], []
    per_case = _per_case(asked)
    for a in asked:
        if not a.cands:
            continue
        r = [ranking.logit(f) for f in feats(a)]
        row_of = dict(zip(r, rank_model.calibration_rows(r), strict=True))
        groups = ranked_groups(a, r)[:top]
        for s, y in groups:
            rows.append(list(row_of[s]))
            ys.append(float(y))
            ws.append(100.0 / per_case[a.case] / len(groups))
    return fit_logistic(np.array(rows), np.array(ys), np.array(ws))


def make_weights(beta: dict[str, np.ndarray], meta: dict) -> dict:
    models = {}
    for name, features in rank_model.EXPECTED.items():
        b = beta[name]
        models[name] = {"features": list(features), "intercept": round(float(b[0]), 6),
                        "weights": [round(float(v), 6) for v in b[1:]]}
    return {"version": rank_model.VERSION, "fingerprint": meta["fingerprint"],
            "meta": meta, "models": models}


# -- evaluation -----------------------------------------------------------------------

def ranked_groups(a: Asked, scores: list[float]) -> list[tuple[float, int]]:
    """(score, label) per distinct answer, best first (ties: by SQL text)."""
    lab = labels(a)
    groups = rank_model.twins(a.cands)
    best: dict[int, tuple[float, int, str]] = {}
    for s, y, g, c in zip(scores, lab, groups, a.cands, strict=True):
        if c.excluded:
            continue
        if g not in best or s > best[g][0]:
            best[g] = (s, y, c.sql)
    return [(s, y) for s, y, _sql in sorted(best.values(), key=lambda t: (-t[0], t[2]))]


def metrics(asked: list[Asked], scorer) -> dict[str, float]:
    r1 = r5 = mrr = 0.0
    for a in asked:
        order = ranked_groups(a, scorer(a)) if a.cands else []
        for rank, (_s, y) in enumerate(order[:5], 1):
            if y:
                r1 += rank == 1
                r5 += 1
                mrr += 1 / rank
                break
    n = max(len(asked), 1)
    return {"R@1": r1 / n, "R@5": r5 / n, "MRR": mrr / n, "n": len(asked)}


def calibration(asked: list[Asked], scorer, bins: int = 10) -> tuple[float, list[tuple]]:
    """Expected calibration error of the top-5 answers' scores, and the curve."""
    pairs = []
    for a in asked:
        if a.cands:
            pairs += ranked_groups(a, scorer(a))[:5]
    return (leave_one_out.expected_calibration_error(pairs, bins),
            leave_one_out.reliability(pairs, bins))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", required=True, type=Path)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/wm-fit"))
    parser.add_argument("--regather", action="store_true")
    parser.add_argument("--write", action="store_true", help="write wrenmem/recall/weights.json")
    parser.add_argument("--write-to", type=Path, help="write the weights to this file instead")
    parser.add_argument("--cv", type=int, default=5, help="folds over databases (TUNING)")
    parser.add_argument("--drop", nargs="*", default=[], help="features left out (set to 0)")
    parser.add_argument("--held-out", action="store_true", help="also report HELD-OUT (logged)")
    parser.add_argument("--why", default="", help="why HELD-OUT is looked at (logged)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--stores", type=Path,
                        help="gather through the suite runner's projects (run.py --workdir)")
    parser.add_argument("--sets", help="comma-separated set names (default: all)")
    parser.add_argument("--hold", nargs="*", default=[],
                        help="features whose weights stay the shipped model's ('old': every "
                             "feature the shipped file has)")
    parser.add_argument("--keep", nargs="*", default=[],
                        help="models taken from the shipped file, not refitted (e.g. grep "
                             "second draft)")
    args = parser.parse_args(argv)
    items, cases = read_suite(args.suite)
    if args.sets:
        cases = [c for c in cases if c["set"] in args.sets.split(",")]
    tuning = gather(items, cases, args.workdir, "tuning", args.regather, args.stores)
    print(f"TUNING: {len(tuning)} asked questions over "
          f"{len({c['name'] for c in cases if c['split'] == 'tuning'})} cases", file=sys.stderr)
    keep = [i for i, f in enumerate(rank_model.FEATURES) if f not in args.drop]
    shipped = shipped_models()
    held = held_weights(shipped, args.hold)
    full = expand(fit_ranking(tuning, keep, held=held), keep)
    ranking = rank_model.Model("learned", rank_model.FEATURES, tuple(full[1:]), 0.0)
    beta = {"learned": full, "learned-calibration": fit_calibration(tuning, ranking)}
    beta.update(fit_side_models(tuning, ranking, beta["learned-calibration"],
                                grep=any(a.grep for a in tuning)
                                and "grep" not in args.keep))
    if "second" not in args.keep:
        beta["second"] = fit_second(tuning, ranking, beta["learned-calibration"],
                                    reader(args.workdir))
    for name in args.keep:
        beta[name] = shipped[name]
    if "grep" not in beta:  # no grep evidence gathered (--stores): the shipped one
        beta["grep"] = shipped["grep"]
    y = [c for a in tuning for c in a.cands]
    fingerprint = hashlib.sha256(json.dumps(
        sorted([(a.case, a.question, a.sql) for a in tuning]), ensure_ascii=False
    ).encode()).hexdigest()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    meta = {"fingerprint": fingerprint, "split": "tuning", "suite": str(args.suite.name),
            "asked": len(tuning), "candidates": len(y), "commit": commit,
            "dropped": args.drop, "held": args.hold, "kept": args.keep,
            "sets": args.sets or "all", "fitted": datetime.date.today().isoformat(),
            # the model is not read beyond the unknown shares it was fitted on
            "unknown_max": max((unknown(a.question) for a in tuning), default=0.0)}
    weights = rank_model.parse_weights(make_weights(beta, meta))
    report = {"tuning": evaluate(tuning, weights)}
    report["tuning-cv"] = cross_validate(tuning, keep, args.cv, held)
    if args.held_out:
        held = gather(items, cases, args.workdir, "held-out", args.regather)
        log_look(args.why or "fit_model --held-out")
        report["held-out"] = evaluate(held, weights)
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if args.write or args.write_to:
        path = args.write_to or REPO / "wrenmem" / "recall" / rank_model.WEIGHTS_FILE
        path.write_text(json.dumps(make_weights(beta, meta), indent=1) + "\n", encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
    return 0


def shipped_models() -> dict[str, np.ndarray]:
    """The shipped file's models as [intercept, weights...], by name (an older file: its
    learned model's weights by feature name, a feature it lacks at 0)."""
    data = json.loads((REPO / "wrenmem" / "recall" / rank_model.WEIGHTS_FILE)
                      .read_text(encoding="utf-8"))
    out = {}
    for name, entry in data["models"].items():
        weights = dict(zip(entry["features"], entry["weights"], strict=True))
        features = rank_model.EXPECTED.get(name, tuple(entry["features"]))
        out[name] = np.array([entry["intercept"], *(weights.get(f, 0.0) for f in features)])
    return out


def held_weights(shipped: dict[str, np.ndarray], hold: list[str]) -> dict[int, float]:
    """The ranking features held at the shipped weights: those named, or for ``old`` every
    feature the shipped file gives a weight other than 0."""
    learned = shipped["learned"][1:]
    return {i: float(learned[i]) for i, f in enumerate(rank_model.FEATURES)
            if f in hold or ("old" in hold and learned[i] != 0.0)}


def expand(beta: np.ndarray, keep: list[int]) -> np.ndarray:
    """[0 intercept, a weight per feature] with the left-out features at 0."""
    full = np.zeros(len(rank_model.FEATURES) + 1)
    for j, i in enumerate(keep):
        full[i + 1] = beta[j]
    return full


def fit_side_models(tuning: list[Asked], ranking: rank_model.Model,
                    calibration: np.ndarray, grep: bool = True) -> dict[str, np.ndarray]:
    """The other fusions' and the single backends' calibrations, on the same labels
    (``grep`` false: not the grep backend's)."""
    out: dict[str, np.ndarray] = {}
    rows: dict[str, list] = defaultdict(list)
    ys: list[float] = []
    ws: list[float] = []
    for a in tuning:
        if not a.cands:
            continue
        lab = labels(a)
        groups = rank_model.twins(a.cands)
        dense_rank = rank_model._ranks([c.dense for c in a.cands], groups)
        lex_rank = rank_model._ranks([c.lexical for c in a.cands], groups)
        best_dense = max((c.dense for c in a.cands if c.dense is not None), default=0.0)
        best_lex = max((c.lexical or 0.0 for c in a.cands), default=0.0)
        for c, yv, d, k in zip(a.cands, lab, dense_rank, lex_rank, strict=True):
            if c.excluded:
                continue
            cos = c.dense if c.dense is not None else -1.0
            lex = (c.lexical or 0.0) / best_lex if best_lex > 0 else 0.0
            rows["rrf"].append([(1 / (60 + d) if d else 0.0) + (1 / (60 + k) if k else 0.0)])
            rows["linear"].append([cos, lex])
            rows["vector"].append([cos, cos - best_dense])
            ys.append(yv)
            ws.append(1.0 / len(a.cands))
    y = np.array(ys, dtype=float)
    w = np.array(ws)
    for name in ("rrf", "linear", "vector"):
        out[name] = fit_logistic(np.array(rows[name]), y, w)
    # linear: the fitted mix is itself a logit; calibrate it as one feature (identity)
    out["linear-calibration"] = np.array([0.0, 1.0])
    if grep:
        out["grep"] = fit_grep(tuning)
    out["draft"] = fit_draft(tuning, ranking, calibration)
    return out


def fit_grep(tuning: list[Asked]) -> np.ndarray:
    """The grep backend's calibration: BM25F of its top hits."""
    g_rows, g_y, g_w = [], [], []
    for a in tuning:
        if not a.grep:
            continue
        best = max(g[0] for g in a.grep)
        for s, _sql, _db, item in a.grep:
            right = item in a.relevant
            g_rows.append([s / best if best > 0 else 0.0,
                           s / a.grep_best if a.grep_best > 0 else 0.0])
            g_y.append(float(right))
            g_w.append(1.0 / len(a.grep))
    return fit_logistic(np.array(g_rows), np.array(g_y), np.array(g_w))


def fit_draft(tuning: list[Asked], ranking: rank_model.Model, calibration: np.ndarray
              ) -> np.ndarray:
    """The draft model."""
    # draft: the learned logit plus the draft's structural agreement, over the three kinds
    # of draft an agent brings (drafts_of), weighed by DRAFT_PRIOR: the scores stay
    # probabilities whether the draft is right, nearly right or wrong
    d_rows, d_y, d_w = [], [], []
    for a in tuning:
        if not a.cands:
            continue
        bases = learned_logits(a, ranking, calibration)
        shapes = [sqlshape.shape(c.sql, c.dialect) for c in a.cands]
        for kind, sql in drafts_of(a).items():
            draft = sqlshape.shape(sql, a.dialect)
            for base, c, shp, yv in zip(bases, a.cands, shapes, labels(a), strict=True):
                if c.excluded:
                    continue
                d_rows.append(list(rank_model.draft_features(base, draft, shp)))
                d_y.append(yv)
                d_w.append(DRAFT_PRIOR[kind] / len(a.cands))
    return fit_logistic(np.array(d_rows), np.array(d_y), np.array(d_w))


DRAFT_KINDS = ("right", "near", "wrong")
# how often an agent's draft is of each kind, as the draft model is fitted: right half the
# time (a text-to-SQL model's execution accuracy on hard sets), else one mistake or wrong
DRAFT_PRIOR = {"right": 0.5, "near": 0.25, "wrong": 0.25}


def drafts_of(a: Asked) -> dict[str, str]:
    """The drafts the draft model is fitted and measured with, by kind: ``right`` the asked
    SQL; ``near`` that SQL with one mistake (:func:`near_miss`); ``wrong`` the SQL of the
    best candidate by cosine that is not a right answer with its values changed (the draft
    of an agent that adapted the wrong example). A kind that cannot be made is left out.
    Made once per asked question: the fit and every scorer of the report read them."""
    got = _DRAFTS.get(id(a))
    if got is None:
        got = _DRAFTS[id(a)] = _make_drafts(a)
    return got


_DRAFTS: dict[int, dict[str, str]] = {}


def _make_drafts(a: Asked) -> dict[str, str]:
    out = {"right": a.sql}
    near = near_miss(a.sql, a.dialect, a.question)
    if near:
        out["near"] = near
    wrong = sorted((c for c in a.cands if not c.excluded and c.item not in a.relevant),
                   key=lambda c: -(c.dense if c.dense is not None else -1.0))
    if wrong:
        out["wrong"] = other_values(wrong[0].sql, a.dialect)
    return out


def other_values(sql: str, dialect: str | None) -> str:
    """``sql`` with every literal changed (a number plus one, a string with a letter more):
    the same form, not the same query. Unparsable SQL is returned as it is."""
    from sqlglot import exp

    read = _sqlglot_dialect(dialect)
    tree = _parsed(sql, read)
    if tree is None:  # kept as it is
        return sql

    def change(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Literal):
            if node.is_string:
                return exp.Literal.string(node.this + "x")
            try:
                return exp.Literal.number(int(node.this) + 1)
            except ValueError:
                return exp.Literal.number(float(node.this) + 1)
        return node

    return tree.transform(change).sql(dialect=read)


def _sqlglot_dialect(dialect: str | None) -> str | None:
    """sqlglot's name for a suite item's dialect (``postgresql`` is its ``postgres``)."""
    return {"postgresql": "postgres"}.get(dialect or "", dialect or None)


def _parsed(sql: str, read: str | None) -> Any:
    """``sql``'s sqlglot tree, or None when it does not parse."""
    import sqlglot

    try:
        return sqlglot.parse_one(sql, read=read)
    except Exception:  # noqa: BLE001 - sqlglot raises several error types
        return None


def near_miss(sql: str, dialect: str | None, seed: str) -> str | None:
    """``sql`` with one of the mistakes a first attempt makes, picked by ``seed``: the last
    filter left out (the whole WHERE if it has one condition), the ORDER BY and LIMIT left
    out, an aggregate changed (MAX/MIN, SUM/AVG, COUNT to SUM), or a selected column left
    out; the first that applies, from the seed's pick on. None if none applies."""
    from sqlglot import exp

    read = _sqlglot_dialect(dialect)
    tree = _parsed(sql, read)
    if not isinstance(tree, exp.Select):  # (None: an unparsable SQL gets no near miss)
        return None

    def drop_filter(t: exp.Select) -> bool:
        where = t.args.get("where")
        if where is None:
            return False
        cond = where.this
        if isinstance(cond, exp.And):
            cond.replace(cond.left)
        else:
            where.pop()
        return True

    def drop_order(t: exp.Select) -> bool:
        if t.args.get("order") is None and t.args.get("limit") is None:
            return False
        t.set("order", None)
        t.set("limit", None)
        return True

    swaps = {exp.Max: exp.Min, exp.Min: exp.Max, exp.Sum: exp.Avg, exp.Avg: exp.Sum,
             exp.Count: exp.Sum}

    def change_aggregate(t: exp.Select) -> bool:
        for node in t.find_all(*swaps):
            if isinstance(node.this, exp.Star):  # COUNT(*) has no other aggregate
                continue
            node.replace(swaps[type(node)](this=node.this.copy()))
            return True
        return False

    def drop_column(t: exp.Select) -> bool:
        if len(t.expressions) < 2:
            return False
        t.expressions[-1].pop()
        return True

    mistakes = (drop_filter, drop_order, change_aggregate, drop_column)
    start = int(hashlib.sha256(seed.encode()).hexdigest(), 16) % len(mistakes)
    for n in range(len(mistakes)):
        t = tree.copy()
        if mistakes[(start + n) % len(mistakes)](t):
            return t.sql(dialect=read)
    return None


def learned_logits(a: Asked, ranking: rank_model.Model, calibration: np.ndarray
                   ) -> list[float]:
    """The learned fusion's calibrated log-odds of an asked question's candidates."""
    calib = rank_model.Model("calibration", rank_model.CALIBRATION_FEATURES,
                             tuple(calibration[1:]), calibration[0])
    r = [ranking.logit(f) for f in feats(a)]
    return [calib.logit(row) for row in rank_model.calibration_rows(r)]


def learned_scores(a: Asked, ranking: rank_model.Model, calibration: np.ndarray
                   ) -> list[float]:
    """The learned fusion's calibrated scores in [0, 1] of an asked question's candidates."""
    return [rank_model.sigmoid(v) for v in learned_logits(a, ranking, calibration)]


def gated(a: Asked) -> bool:
    """Whether the product asks the second reader for this question."""
    return bool(a.cands) and unknown(a.question) > 0


SECOND_RATIOS = tuple(range(0, 201, 5))


def second_rows(tuning: list[Asked], ranking: rank_model.Model, calibration: np.ndarray,
                read: CachedReader) -> list[tuple[Asked, np.ndarray, np.ndarray]]:
    """Per question the embedder cannot read whole: its asked question, the
    :data:`~wrenmem.recall.model.SECOND_FEATURES` of its candidates and their labels."""
    out = []
    asked = [a for a in tuning if gated(a)]
    start = time.perf_counter()
    for n, a in enumerate(asked):
        got = second.rows(read, a.question, a.cands, learned_scores(a, ranking, calibration))
        out.append((a, np.array(got, dtype=float), np.array(labels(a), dtype=float)))
        if n % 500 == 499:
            read.save()
            print(f"  second reader: {n + 1} of {len(asked)} questions, "
                  f"{time.perf_counter() - start:.0f} s", file=sys.stderr)
    read.save()
    print(f"  second reader: {len(asked)} questions the embedder cannot read whole",
          file=sys.stderr)
    return out


def second_ratio(rows: list[tuple[Asked, np.ndarray, np.ndarray]]) -> float:
    """The weight of the second cosine's gap against the first log-odds that puts the right
    answers first most likely: the conditional log-likelihood (a softmax over each
    question's candidates, every case weighing the same) over :data:`SECOND_RATIOS`."""
    per_case = _per_case([a for a, _x, _y in rows])
    best, chosen = -np.inf, 0.0
    for r in SECOND_RATIOS:
        total = 0.0
        for a, x, y in rows:
            if not y.any():
                continue
            z = x[:, 0] + r * x[:, 1]
            z = z - z.max()
            total += (np.log(np.exp(z[y > 0]).sum()) - np.log(np.exp(z).sum())) / per_case[a.case]
        if total > best:
            best, chosen = total, float(r)
    return chosen


def fit_second(tuning: list[Asked], ranking: rank_model.Model, calibration: np.ndarray,
               read: CachedReader) -> np.ndarray:
    """The second reader's model (wrenmem.recall.second) over the questions the embedder
    cannot read whole: the ranking by the first log-odds plus a ratio times the second
    cosine's gap (:func:`second_ratio`), then a logistic of that to "right" (a probability,
    as the first model's score is)."""
    rows = second_rows(tuning, ranking, calibration, read)
    ratio = second_ratio(rows)
    # out of fold (five folds by database): the ratio chosen without the fold's databases
    fold_of = {db: int(hashlib.sha256(db.encode()).hexdigest(), 16) % 5
               for db in {a.db for a, _x, _y in rows}}
    hits: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for f in range(5):
        r = second_ratio([t for t in rows if fold_of[t[0].db] != f])
        for a, x, _y in rows:
            if fold_of[a.db] == f:
                first = ranked_groups(a, list(x[:, 0]))
                again = ranked_groups(a, list(x[:, 0] + r * x[:, 1]))
                hits[a.case].append((first[0][1] if first else 0, again[0][1] if again else 0))
    for case, got in sorted(hits.items()):
        print(f"  second reader, out of fold: {case:36s} n={len(got):4d} R@1 of these "
              f"{np.mean([g[0] for g in got]):.3f} -> {np.mean([g[1] for g in got]):.3f}",
              file=sys.stderr)
    z = np.concatenate([x[:, 0] + ratio * x[:, 1] for _a, x, _y in rows])[:, None]
    y = np.concatenate([y for _a, _x, y in rows])
    w = np.concatenate([np.full(len(y), 1.0 / len(y)) for _a, _x, y in rows])
    a, b = fit_logistic(z, y, w)
    print(f"  second reader: ratio {ratio:g}, calibration {b:.4f} x + {a:.4f}", file=sys.stderr)
    return np.array([a, b, b * ratio])


def cross_validate(tuning: list[Asked], keep: list[int], folds: int,
                   held: dict[int, float] | None = None) -> dict:
    """Out-of-fold learned R@1 per case, databases split into folds."""
    if folds < 2:
        return {}
    fold_of = {db: int(hashlib.sha256(db.encode()).hexdigest(), 16) % folds
               for db in {a.db for a in tuning}}
    scored: dict[int, list[float]] = {}
    for f in range(folds):
        train = [a for a in tuning if fold_of[a.db] != f]
        test_ids = [n for n, a in enumerate(tuning) if fold_of[a.db] == f]
        full = expand(fit_ranking(train, keep, held=held), keep)
        m = rank_model.Model("learned", rank_model.FEATURES, tuple(full[1:]), 0.0)
        for n in test_ids:
            scored[n] = [m.logit(r) for r in feats(tuning[n])]
    by_case: dict[str, list[int]] = defaultdict(list)
    for n, a in enumerate(tuning):
        by_case[a.case].append(n)
    out = {}
    for case, ns in sorted(by_case.items()):
        sub = [tuning[n] for n in ns]
        lookup = {id(tuning[n]): scored.get(n, [0.0] * len(tuning[n].cands)) for n in ns}
        out[case] = metrics(sub, lambda a, lookup=lookup: lookup[id(a)])
    return out


def scorers(weights: rank_model.Weights) -> dict:
    def fused(name: str):
        return lambda a: rank_model.score(a.question, a.cands, fusion=name, weights=weights,
                                          unknown=unknown(a.question))

    learned_model = weights.models["learned"]

    def learned(a: Asked) -> list[float]:
        return [rank_model.sigmoid(v) for v in rank_model.calibrated(
            weights, [learned_model.logit(r) for r in feats(a)])]

    def dense(a: Asked) -> list[float]:
        return [c.dense if c.dense is not None else -1.0 for c in a.cands]

    def keyword(a: Asked) -> list[float]:
        return [c.lexical or 0.0 for c in a.cands]

    def with_draft(kind: str):
        def draft(a: Asked) -> list[float]:
            sql = drafts_of(a).get(kind)
            if sql is None:  # no such draft: the question alone
                return learned(a)
            return rank_model.score(a.question, a.cands, weights=weights, draft_sql=sql,
                                    draft_dialect=a.dialect, unknown=unknown(a.question))
        return draft

    def with_second(a: Asked) -> list[float]:
        first = learned(a)
        if not gated(a) or not _READER:
            return first
        return second.rescore(_READER[0], a.question, a.cands, first, weights)

    return {"vector": dense, "keyword": keyword, "rrf": fused("rrf"),
            "linear": fused("linear"), "learned": learned,
            **{f"draft {kind}": with_draft(kind) for kind in DRAFT_KINDS},
            "learned+second": with_second}


def evaluate(asked: list[Asked], weights: rank_model.Weights) -> dict:
    by_case: dict[str, list[Asked]] = defaultdict(list)
    for a in asked:
        by_case[a.case].append(a)
    out: dict[str, dict] = {}
    runs = scorers(weights)
    for case, sub in sorted(by_case.items()):
        out[case] = {name: metrics(sub, fn) for name, fn in runs.items()}
    learned = runs["learned"]
    out["_calibration"] = {}
    for task in TASKS:
        sub = [a for a in asked if a.task == task]
        if sub:
            ece, curve = calibration(sub, learned)
            out["_calibration"][task] = {"ece": ece, "curve": curve}
            for kind in DRAFT_KINDS:
                ece, curve = calibration(sub, runs[f"draft {kind}"])
                out["_calibration"][f"{task}, draft {kind}"] = {"ece": ece, "curve": curve}
    return out


def print_report(report: dict) -> None:
    for part, cases in report.items():
        if part == "tuning-cv":
            print(f"\n## {part} (learned, out of fold)")
            for case, m in cases.items():
                print(f"  {case:40s} R@1 {m['R@1']:.3f}  n={m['n']}")
            continue
        print(f"\n## {part}")
        names = None
        for case, runs in cases.items():
            if case.startswith("_"):
                continue
            if names is None:
                names = list(runs)
                print(f"  {'case':40s} " + " ".join(f"{n:>13s}" for n in names))
            print(f"  {case:40s} " + " ".join(f"{runs[n]['R@1']:.3f}/{runs[n]['MRR']:.3f}"
                                              for n in names) + f"  n={runs[names[0]]['n']}")
        for task, c in cases.get("_calibration", {}).items():
            print(f"  calibration {task}: ECE {c['ece']:.3f}")


def log_look(why: str) -> None:
    log = REPO / "bench" / "suite" / "HELD-OUT-LOG.md"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as f:
        f.write(f"- {datetime.datetime.now().isoformat(timespec='minutes')} {commit} "
                f"fit_model.py: {why}\n")
    print(f"HELD-OUT looked at: logged in {log}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
