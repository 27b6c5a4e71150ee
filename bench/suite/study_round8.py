"""Round 8 of the ranking model (issue 19): how the form reader weighs a question's terms,
studied on the suite's TUNING part, out of fold over five folds by database, over the
evidence ``bench/fit_model.py`` gathered (run it first with the same workdir). Nothing here
looks at HELD-OUT.

The form reader (:mod:`wrenmem.recall.forms`) sums each term's naive-Bayes evidence and
scales the sum by one over the square root of the number of terms. A Chinese question's
terms are its characters and its character pairs, far from independent; variants: the
exponent of the scaling, and a CJK run counted by its character pairs only. Each variant's
form fit is computed here with the product's labels and tally (the stored items' search
terms: their question's and SQL's), the asked question's excluded items left out, and
added to the 15 features of round 6 (its gap to the best, and that times one minus the
best coverage), as the shipped model reads it.

Usage: python bench/suite/study_round8.py --suite DIR --workdir W
"""

import argparse
import hashlib
import math
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))
import fit_model as fm  # noqa: E402

import __main__  # noqa: E402
from wrenmem.recall import forms  # noqa: E402
from wrenmem.recall import model as rm  # noqa: E402
from wrenmem.textsearch import tokenize  # noqa: E402

__main__.Asked = fm.Asked
__main__.Cand = fm.Cand  # the gathered pickles name fit_model's __main__

_p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
_p.add_argument("--suite", type=Path, required=True)
_p.add_argument("--workdir", type=Path, required=True)
ARGS = _p.parse_args()
items, cases = fm.read_suite(ARGS.suite)
tuning = fm.gather(items, cases, ARGS.workdir, "tuning", False)
print("asked", len(tuning), file=sys.stderr)
F0 = 15  # round 6's features: the first 15 of rm.FEATURES
_CJK = re.compile(r"^[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+$")


def weights(tally, terms, alpha, pairs_only):
    """forms.label_weights with the scaling exponent ``alpha``; ``pairs_only``: a single
    CJK character is not counted where the question has CJK character pairs."""
    terms = sorted(set(terms))
    if pairs_only and any(_CJK.match(t) and len(t) == 2 for t in terms):
        terms = [t for t in terms if not (_CJK.match(t) and len(t) == 1)]
    n = tally.count
    have = tally.totals.astype(np.float64)
    lack = n - have
    prior = (have + forms.SMOOTH) / (n + 2 * forms.SMOOTH)
    z = np.log(prior) - np.log1p(-prior)
    evidence = np.zeros(len(forms.LABELS))
    used = 0
    for term in terms:
        found = tally.term(term)
        if found is None:
            continue
        holding, with_label = found
        without = holding - with_label
        evidence += (np.log((with_label + forms.SMOOTH) / (have + 2 * forms.SMOOTH))
                     - np.log((without + forms.SMOOTH) / (lack + 2 * forms.SMOOTH)))
        used += 1
    if used:
        z = z + evidence / used ** alpha
    p = np.clip(1.0 / (1.0 + np.exp(-z)), forms.CLIP, 1.0 - forms.CLIP)
    return np.log(p) - np.log1p(-p)


by_case = defaultdict(list)
for a in tuning:
    by_case[a.case].append(a)
case_of = {c["name"]: c for c in cases if c["split"] == "tuning"}

VARIANTS = {"a0.5": (0.5, False), "a0.75": (0.75, False), "a1": (1.0, False),
            "a0.5 pairs": (0.5, True), "a0.75 pairs": (0.75, True), "a1 pairs": (1.0, True)}
SCORES = {v: {} for v in VARIANTS}
for name, asked in by_case.items():
    case = case_of[name]
    stored = [items[i] for i in case["stored"]]
    at = {it["id"]: n for n, it in enumerate(stored)}
    rows = [(" ".join(set(tokenize(it["question"])) | set(tokenize(it["sql"], sql=True))),
             it["sql"]) for it in stored]
    whole = forms.tally_of(rows)
    for a, entry in zip(asked, case["asked"], strict=True):
        gone = [at[i] for i in entry.get("exclude", ()) if i in at]
        if gone:
            allowed = np.ones(len(rows), dtype=bool)
            allowed[gone] = False
            tally = forms.Tally(whole.matrix, allowed, whole._rows_with)
        else:
            tally = whole
        terms = tokenize(a.question)
        for v, (alpha, pairs_only) in VARIANTS.items():
            w = weights(tally, terms, alpha, pairs_only)
            SCORES[v][id(a)] = [forms.fit(w, c.sql) for c in a.cands]
print("scored", file=sys.stderr, flush=True)

fold_of = {db: int(hashlib.sha256(db.encode()).hexdigest(), 16) % 5
           for db in {a.db for a in tuning}}
BASE = {id(a): [tuple(r[:F0]) for r in fm.feats(a)] for a in tuning}
SHIPPED = {id(a): [tuple(r) for r in fm.feats(a)] for a in tuning}


def with_form(scores):
    out = {}
    for a in tuning:
        s = scores[id(a)]
        if not s:
            out[id(a)] = []
            continue
        s = rm._group_max(s, rm.twins(a.cands))
        best = max(s)
        bc = max(c.coverage for c in a.cands)
        out[id(a)] = [r + (v - best, (v - best) * (1 - bc)) for r, v in zip(BASE[id(a)], s,
                                                                            strict=True)]
    return out


def oof(rows_of):
    for a in tuning:
        fm._FEATURES[id(a)] = rows_of[id(a)]
    keep = list(range(len(next(r for r in rows_of.values() if r)[0])))
    scored = {}
    for f in range(5):
        train = [a for a in tuning if fold_of[a.db] != f]
        b = fm.fit_ranking(train, keep)
        for a in tuning:
            if fold_of[a.db] == f:
                scored[id(a)] = [float(np.dot(b, r)) for r in rows_of[id(a)]]
    return {case: fm.metrics(sub, lambda a: scored[id(a)]) for case, sub in by_case.items()}


def summary(name, res):
    big = {c: m for c, m in res.items() if m["n"] >= 20}
    mean = np.mean([m["R@1"] for m in big.values()])
    new = [m["R@1"] for c, m in big.items() if c.split("/")[1].startswith("new")]
    zh = [m["R@1"] for c, m in big.items() if c.startswith("mspider-zh/")]
    ko = [m["R@1"] for c, m in big.items() if c.startswith("ko-wikisql/")]
    en = [m["R@1"] for c, m in big.items()
          if c.split("/")[0] in ("spider-en", "spider-syn", "spider-keyword", "bird",
                                 "mspider-en", "spider-followup", "kaggledbqa")]
    print(f"{name:14s} mean {mean:.4f}  new {np.mean(new):.4f}  en {np.mean(en):.4f}  "
          f"zh {np.mean(zh):.4f}  ko {np.mean(ko):.4f}  "
          f"bird/answered {res['bird/answered/tuning']['R@1']:.3f}", flush=True)
    return res


results = {"base": summary("base (15)", oof(BASE)),
           "shipped": summary("shipped (17)", oof(SHIPPED))}
for v in VARIANTS:
    results[v] = summary(v, oof(with_form(SCORES[v])))
names = list(results)
print("columns:", names)
for case in sorted(results["base"]):
    if results["base"][case]["n"] >= 20:
        print(f"  {case:40s} " + " ".join(f"{results[n][case]['R@1']:.3f}" for n in names)
              + f" n={results['base'][case]['n']}")
del math
