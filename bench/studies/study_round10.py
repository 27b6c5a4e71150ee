"""Round 10 of the ranking model (issue 19): two more ways to keep the form reader from
overruling both backends, studied on the suite's TUNING part, out of fold over five folds by
database, over the evidence ``bench/fit_model.py`` gathered (run it first with the same
workdir). Nothing here looks at HELD-OUT.

Round 9's misses on ``bird/answered``: the pair with the asked SQL ahead on both backends,
another form first by a form fit 8 to 9 higher. A long question (BIRD's question and
evidence) has many terms, and the form fit's evidence grows with the square root of their
number. Variants, each added to the shipped 17 features (or replacing the second form
feature, so the model keeps 17):

- the form fit's gap at a scaling exponent of 0.75 or 1 as well (the model mixes the
  exponents, so a long question's evidence can grow more slowly than the square root);
- the backends' agreement: whether the candidate is first on both the vector and the
  keyword search (twins share their best), and the worse of its two gaps to the best
  (cosine − best, BM25 / best − 1);
- the form fit's gap where the two backends agree on one first answer (zero elsewhere), so
  the model can trust the form reader less where both backends point at one pair.

Usage: python bench/suite/study_round10.py --suite DIR --workdir W
"""

from __future__ import annotations

import sys

import studylib

study = studylib.Study.from_command_line(__doc__)

ALPHAS = (0.5, 0.75, 1.0)
GAPS = studylib.form_gaps(study, ALPHAS)
print("scored", file=sys.stderr, flush=True)
EVIDENCE = {id(a): studylib.agreement(a) for a in study.tuning}
plus = studylib.plus

BOTH = {n: e[0] for n, e in EVIDENCE.items()}
WORSE = {n: e[1] for n, e in EVIDENCE.items()}
GATED = {n: [g * q for g, q in zip(GAPS[0.5][n], EVIDENCE[n][2], strict=True)] for n in EVIDENCE}

SHIPPED = study.shipped()
worst = max((abs(r[15] - g) for n, rows in SHIPPED.items()
             for r, g in zip(rows, GAPS[0.5][n], strict=True)), default=0.0)
print(f"the shipped form gap recomputed: largest difference {worst:.2e}", file=sys.stderr)
BASE = study.shipped(16)  # without the second form feature
results = {"shipped": studylib.summary("shipped (17)", study.oof(SHIPPED))}
for alpha in (0.75, 1.0):
    name = f"+ gap a{alpha}"
    results[name] = studylib.summary(name, study.oof(plus(SHIPPED, GAPS[alpha])))
    name = f"a{alpha} for 2nd"
    results[name] = studylib.summary(name, study.oof(plus(BASE, GAPS[alpha])))
results["+ both first"] = studylib.summary("+ both first", study.oof(plus(SHIPPED, BOTH)))
results["+ worse gap"] = studylib.summary("+ worse gap", study.oof(plus(SHIPPED, WORSE)))
results["+ gap if agreed"] = studylib.summary("+ gap if agreed",
                                              study.oof(plus(SHIPPED, GATED)))
results["gap if agreed for 2nd"] = studylib.summary("gap if agreed 2nd",
                                                    study.oof(plus(BASE, GATED)))
studylib.table(results)
