"""Round 9 of the ranking model (issue 19): how far the form reader's evidence is trusted,
studied on the suite's TUNING part, out of fold over five folds by database, over the
evidence ``bench/fit_model.py`` gathered (run it first with the same workdir). Nothing here
looks at HELD-OUT.

Round 8 left ``bird/answered`` below its level without the form reader: a stored pair with
the asked SQL, ahead on both backends, put second by a pair whose form fit was 8 to 9
log-odds higher (the form fit is a sum over a SQL's labels of log-odds that may reach ±9.2
each). Variants, each computed with the product's own :func:`forms.label_weights` and
:func:`forms.fit` (its ``CLIP`` and ``SMOOTH`` set per variant): a label's probability
kept within [c, 1 - c] for a larger c; more smoothing of the counts; the gap to the best
form fit compressed (``-log1p(-gap)``) so a large gap is not trusted in proportion; the
*lift*: the form fit less what the labels' base rates alone give the same SQL (the sum of
the labels' log-odds for this question less their log-odds for no question), so a SQL of
many common labels does not gain for being common; the base rates' part alone, and both
parts as features of their own (the model weighs them apart); and the second form
feature's factor taken from the candidate's own evidence (one minus its coverage, or its
BM25 over the best) instead of one minus the best coverage.

Usage: python bench/suite/study_round9.py --suite DIR --workdir W
"""

from __future__ import annotations

import math
import sys

import studylib

from wrenmem.recall import forms
from wrenmem.recall import model as rm
from wrenmem.textsearch import tokenize

study = studylib.Study.from_command_line(__doc__)


def compressed(gap: float) -> float:
    return -math.log1p(-gap)


def own_coverage(a, groups):
    """One minus each candidate's own coverage (twins share their best)."""
    return [1 - v for v in rm._group_max([c.coverage for c in a.cands], groups)]


def own_bm25(a, groups):
    """Each candidate's own BM25 over the best (twins share their best)."""
    top = max((c.lexical or 0.0) for c in a.cands) or 1.0
    return rm._group_max([(c.lexical or 0.0) / top for c in a.cands], groups)


LAWS = {"shipped": (forms.CLIP, forms.SMOOTH), "clip 0.01": (0.01, forms.SMOOTH),
        "clip 0.05": (0.05, forms.SMOOTH), "smooth 2": (forms.CLIP, 2.0)}
SHIPPED = (forms.CLIP, forms.SMOOTH)
FITS: dict[str, dict[int, list[float]]] = {law: {} for law in LAWS}
LIFT: dict[int, list[float]] = {}
PRIOR: dict[int, list[float]] = {}  # the form fit of the labels' base rates alone
for a, tally in study.tallies():
    terms = tokenize(a.question)
    for law, (clip, smooth) in LAWS.items():
        forms.CLIP, forms.SMOOTH = clip, smooth
        w = forms.label_weights(tally, terms)
        FITS[law][id(a)] = [forms.fit(w, c.sql) for c in a.cands]
        if law == "shipped":  # the lift: what the words add to the labels' base rates
            prior = forms.label_weights(tally, ())
            PRIOR[id(a)] = [forms.fit(prior, c.sql) for c in a.cands]
            LIFT[id(a)] = [forms.fit(w - prior, c.sql) for c in a.cands]
forms.CLIP, forms.SMOOTH = SHIPPED
print("scored", file=sys.stderr, flush=True)

BASE = study.shipped(15)
SHIPPED_ROWS = study.shipped()
again = study.with_form(BASE, FITS["shipped"])
worst = max((abs(x - y) for a in study.tuning
             for r, s in zip(again[id(a)], SHIPPED_ROWS[id(a)], strict=True)
             for x, y in zip(r, s, strict=True)), default=0.0)
print(f"the shipped form features recomputed: largest difference {worst:.2e}",
      file=sys.stderr)

results = {"base (15)": studylib.summary("base (15)", study.oof(BASE)),
           "shipped": studylib.summary("shipped (17)", study.oof(SHIPPED_ROWS))}
for law in LAWS:
    if law != "shipped":
        results[law] = studylib.summary(law, study.oof(study.with_form(BASE, FITS[law])))
results["lift"] = studylib.summary("lift", study.oof(study.with_form(BASE, LIFT)))
results["lift, compressed"] = studylib.summary(
    "lift, compressed", study.oof(study.with_form(BASE, LIFT, compressed)))

results["x (1 - own coverage)"] = studylib.summary("x (1 - own coverage)", study.oof(
    study.with_form(BASE, FITS["shipped"], times=own_coverage)))
results["x own bm25 / best"] = studylib.summary("x own bm25 / best", study.oof(
    study.with_form(BASE, FITS["shipped"], times=own_bm25)))
results["base rates only"] = studylib.summary(
    "base rates only", study.oof(study.with_form(BASE, PRIOR)))
results["base rates + lift"] = studylib.summary(
    "base rates + lift", study.oof(study.with_form(study.with_form(BASE, PRIOR), LIFT)))
for law in ("shipped", "clip 0.01"):
    name = f"{law}, compressed"
    results[name] = studylib.summary(
        name, study.oof(study.with_form(BASE, FITS[law], compressed)))
studylib.table(results)
