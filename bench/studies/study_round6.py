"""Round 6 of the ranking model (issue 19): two studies on the suite's TUNING part, out of
fold over five folds by database, over the evidence ``bench/fit_model.py`` gathered (run it
first with the same ``--workdir``). Nothing here looks at HELD-OUT.

``gate``: a gate between the two tasks. ``base`` is the shipped model; ``gated-x`` fits the
15 features times g and times 1 - g in one conditional logit, g = P(answered before) from
the question's evidence (:data:`wrenmem.recall.model.GATE_FEATURES`-like: best cosine, its
lead, best coverage, best masked overlap, unknown share, best cosine x best coverage), a
logistic fitted on the training folds; ``mix`` mixes two experts' probabilities (one fitted
on the answered and trap cases, one on the new-question cases) by g; ``oracle`` is gated-x
with the true task (a bound, not a product).

``masked``: the cosine of the questions with the values the candidates' SQL states masked
(DAIL-SQL's masked question similarity), embedded with the product's default embedder,
added to the 15 features (alone, times the uncovered share, times 1 - best cosine).

Usage: python bench/suite/study_round6.py --suite DIR --workdir W gate|masked
"""

import argparse
import hashlib
import math
import pickle
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))
import fit_model as fm  # noqa: E402

import __main__  # noqa: E402
from wrenmem.recall import model as rm  # noqa: E402
from wrenmem.recall import sqlshape  # noqa: E402

__main__.Asked = fm.Asked
__main__.Cand = fm.Cand  # the gathered pickles name fit_model's __main__

_p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
_p.add_argument("--suite", type=Path, required=True)
_p.add_argument("--workdir", type=Path, required=True)
_p.add_argument("what", choices=("gate", "masked"))
ARGS = _p.parse_args()
items, cases = fm.read_suite(ARGS.suite)
tuning = fm.gather(items, cases, ARGS.workdir, "tuning", False)
print("asked", len(tuning), file=sys.stderr)
F = len(rm.FEATURES)


def per_case(scored):
    """Out-of-fold metrics per case from each asked question's scores."""
    by_case = defaultdict(list)
    for a in tuning:
        by_case[a.case].append(a)
    return {case: fm.metrics(sub, lambda a: scored[id(a)]) for case, sub in sorted(by_case.items())}


def summary(name, res):
    """One line: mean R@1 over the cases of 20 questions or more, their new-question mean,
    and the three new-question cases the rounds watch."""
    big = {c: m for c, m in res.items() if m["n"] >= 20}
    mean = np.mean([m["R@1"] for m in big.values()])
    new = [m["R@1"] for c, m in big.items() if c.split("/")[1].startswith("new")]
    print(
        f"{name:10s} mean {mean:.4f}  new {np.mean(new):.4f} ({len(new)})  "
        f"syn/new-tables {res['spider-syn/new-tables/tuning']['R@1']:.3f}  "
        f"ko/new {res['ko-wikisql/new/tuning']['R@1']:.3f}  "
        f"en/new-tables {res['spider-en/new-tables/tuning']['R@1']:.3f}",
        flush=True,
    )
    return res


def table(results):
    """R@1 per case (20 questions or more), a column per variant."""
    names = list(results)
    first = results[names[0]]
    for case in sorted(first):
        if first[case]["n"] >= 20:
            print(
                f"  {case:40s} "
                + " ".join(f"{results[n][case]['R@1']:.3f}" for n in names)
                + f" n={first[case]['n']}"
            )


def study_gate():
    def qfeats(a):
        """question-level evidence the product has at recall (model.evidence)"""
        rows = fm.feats(a)
        if not a.cands:
            return np.zeros(6)
        groups = rm.twins(a.cands)
        dense = rm._group_max([c.dense if c.dense is not None else -1.0 for c in a.cands], groups)
        best_dense = max(dense)
        lead = max(rm._lead(dense, groups))
        best_cov = max(c.coverage for c in a.cands)
        best_overlap = max(r[6] for r in rows)  # masked question overlap
        return np.array(
            [
                best_dense,
                lead,
                best_cov,
                best_overlap,
                fm.unknown(a.question),
                best_dense * best_cov,
            ]
        )

    def is_answered(a):
        return a.task in ("answered", "trap")

    QF = {id(a): qfeats(a) for a in tuning}

    def fit_gate(train):
        per = fm._per_case(train)
        x = np.array([QF[id(a)] for a in train])
        y = np.array([float(is_answered(a)) for a in train])
        w = np.array([100.0 / per[a.case] for a in train])
        return fm.fit_logistic(x, y, w, 1e-2)

    def gate(beta, a):
        z = beta[0] + QF[id(a)] @ beta[1:]
        return 1 / (1 + math.exp(-max(min(z, 30), -30)))

    # expanded features for gated-x: stored per question in fm._FEATURES under a different key
    EXP = {}

    def set_expanded(asked, gfun):
        for a in asked:
            g = gfun(a)
            rows = fm.feats(a)
            EXP[id(a)] = [tuple(g * v for v in r) + tuple((1 - g) * v for v in r) for r in rows]

    def fit_expanded(train):
        saved = dict(fm._FEATURES)
        try:
            for a in train:
                fm._FEATURES[id(a)] = EXP[id(a)]
            keep = list(range(2 * F))
            return fm.fit_ranking(train, keep)
        finally:
            fm._FEATURES.clear()
            fm._FEATURES.update(saved)

    fold_of = {
        db: int(hashlib.sha256(db.encode()).hexdigest(), 16) % 5 for db in {a.db for a in tuning}
    }

    def oof(variant):
        scored = {}
        for f in range(5):
            train = [a for a in tuning if fold_of[a.db] != f]
            test = [a for a in tuning if fold_of[a.db] == f]
            if variant == "base":
                b = fm.fit_ranking(train, list(range(F)))
                for a in test:
                    scored[id(a)] = [float(np.dot(b, r)) for r in fm.feats(a)]
            elif variant in ("gated-x", "oracle"):
                if variant == "oracle":

                    def gf(a):
                        return float(is_answered(a))
                else:
                    gb = fit_gate(train)

                    def gf(a, gb=gb):
                        return gate(gb, a)

                set_expanded(train + test, gf)
                b = fit_expanded(train)
                for a in test:
                    scored[id(a)] = [float(np.dot(b, r)) for r in EXP[id(a)]]
            elif variant == "mix":
                gb = fit_gate(train)
                ba = fm.fit_ranking([a for a in train if is_answered(a)], list(range(F)))
                bn = fm.fit_ranking([a for a in train if not is_answered(a)], list(range(F)))
                for a in test:
                    g = gate(gb, a)
                    x = np.array(fm.feats(a)) if a.cands else np.zeros((0, F))

                    def sm(z):
                        z = z - z.max()
                        e = np.exp(z)
                        return e / e.sum()

                    if len(x):
                        p = g * sm(x @ ba) + (1 - g) * sm(x @ bn)
                        scored[id(a)] = list(np.log(p + 1e-300))
                    else:
                        scored[id(a)] = []
        return per_case(scored)

    def vector(a):
        return [c.dense if c.dense is not None else -1.0 for c in a.cands]

    by_case = defaultdict(list)
    for a in tuning:
        by_case[a.case].append(a)
    vec = {case: fm.metrics(sub, vector) for case, sub in by_case.items()}
    results = {"vector": summary("vector", vec)}
    for v in ["base", "gated-x", "mix", "oracle"]:
        results[v] = summary(v, oof(v))
    table(results)


def study_masked():
    def mask(text, values):
        low = text.lower()
        spans = []
        for v in values:
            w = v.strip("%").strip()
            if not w:
                continue
            at = low.find(w)
            while at >= 0:
                b = low[at - 1] if at > 0 else " "
                e = low[at + len(w)] if at + len(w) < len(low) else " "
                if not w.isascii() or not (rm._latin(b) or rm._latin(e)):
                    spans.append((at, at + len(w)))
                at = low.find(w, at + 1)
        if not spans:
            return text
        spans.sort()
        out = []
        pos = 0
        for s, e in spans:
            if s < pos:
                continue
            out.append(text[pos:s])
            out.append("value")
            pos = e
        out.append(text[pos:])
        return "".join(out)

    texts = {}
    per_q = []
    for a in tuning:
        shapes = [sqlshape.shape(c.sql, c.dialect) for c in a.cands]
        allv = tuple(sorted({v for s in shapes for v in s.values}))
        qa = mask(a.question, allv)
        qc = [mask(c.question, s.values) for c, s in zip(a.cands, shapes, strict=False)]
        texts[qa] = None
        for t in qc:
            texts[t] = None
        per_q.append((qa, qc))
    cache = ARGS.workdir / "masked-vectors.pkl"
    vec = pickle.load(open(cache, "rb")) if cache.exists() else {}
    todo = [t for t in texts if t not in vec]
    print("texts", len(texts), "to embed", len(todo), file=sys.stderr, flush=True)
    fm.unknown("x")
    emb = fm._EMBEDDER[0]
    t0 = time.time()
    for i in range(0, len(todo), 512):
        chunk = todo[i : i + 512]
        for t, v in zip(chunk, emb.embed(chunk), strict=False):
            vec[t] = np.asarray(v, dtype=np.float32)
    pickle.dump(vec, open(cache, "wb"))
    print("embedded in", round(time.time() - t0, 1), "s", file=sys.stderr, flush=True)

    EXT = {}
    for a, (qa, qc) in zip(tuning, per_q, strict=False):
        rows = fm.feats(a)
        if not a.cands:
            EXT[id(a)] = []
            continue
        qv = vec[qa]
        cos = [float(qv @ vec[t]) for t in qc]
        groups = rm.twins(a.cands)
        cos = rm._group_max(cos, groups)
        best = max(cos)
        bc = max(c.coverage for c in a.cands)
        bd = max(c.dense if c.dense is not None else -1 for c in a.cands)
        EXT[id(a)] = [
            tuple(r) + (m - best, (m - best) * (1 - bc), (m - best) * (1 - bd))
            for r, m in zip(rows, cos, strict=False)
        ]

    fold_of = {
        db: int(hashlib.sha256(db.encode()).hexdigest(), 16) % 5 for db in {a.db for a in tuning}
    }
    dict(fm._FEATURES)
    for a in tuning:
        fm._FEATURES[id(a)] = EXT[id(a)]

    def oof(keep):
        scored = {}
        for f in range(5):
            train = [a for a in tuning if fold_of[a.db] != f]
            b = fm.fit_ranking(train, keep)
            for a in tuning:
                if fold_of[a.db] == f:
                    scored[id(a)] = [float(np.dot(b, [r[i] for i in keep])) for r in EXT[id(a)]]
        return per_case(scored)

    base = list(range(F))
    results = {}
    for name, keep in [
        ("base", base),
        ("+masked", base + [F]),
        ("+masked+unc", base + [F, F + 1]),
        ("+masked+cos", base + [F, F + 2]),
        ("masked only", [F]),
    ]:
        results[name] = oof(keep)
        summary(name, results[name])
    table(results)


study_gate() if ARGS.what == "gate" else study_masked()
