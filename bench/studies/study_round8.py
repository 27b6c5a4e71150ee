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
best coverage), as the shipped model reads it. (Shipped since: the ``a0.5 pairs`` row.)

Usage: python bench/suite/study_round8.py --suite DIR --workdir W
"""

from __future__ import annotations

import sys

import studylib

from wrenmem.recall import forms
from wrenmem.textsearch import tokenize

study = studylib.Study.from_command_line(__doc__)


VARIANTS = {"a0.5": (0.5, False), "a0.75": (0.75, False), "a1": (1.0, False),
            "a0.5 pairs": (0.5, True), "a0.75 pairs": (0.75, True), "a1 pairs": (1.0, True)}
SCORES: dict[str, dict[int, list[float]]] = {v: {} for v in VARIANTS}
for a, tally in study.tallies():
    terms = tokenize(a.question)
    for v, (alpha, pairs_only) in VARIANTS.items():
        w = forms.label_weights(tally, terms, exponent=alpha, pairs_only=pairs_only)
        SCORES[v][id(a)] = [forms.fit(w, c.sql) for c in a.cands]
print("scored", file=sys.stderr, flush=True)

BASE = study.shipped(15)
results = {"base": studylib.summary("base (15)", study.oof(BASE)),
           "shipped": studylib.summary("shipped (17)", study.oof(study.shipped()))}
for v in VARIANTS:
    results[v] = studylib.summary(v, study.oof(study.with_form(BASE, SCORES[v])))
studylib.table(results)
