"""Round 12 of the ranking model (issue 19): more long questions to fit on. BIRD dev's
questions that mini-dev did not take, on the seven databases of ``bird``'s TUNING part (the
``bird-dev`` set, TUNING only; its other four databases are ``bird-fresh``, HELD-OUT only),
studied on the suite's TUNING part, out of fold over five folds by database, over the
evidence ``bench/fit_model.py`` gathered (run it first with the same workdir and a suite
built with ``bird-dev``). Nothing here looks at HELD-OUT.

Round 11's look found the form reader's cost on BIRD's long answered-before questions real
(pooled 0.975 against grep's 0.991), with only ``bird``'s 368 TUNING answered questions to
fit on. The variants, each scored on every TUNING case (``bird-dev``'s included) and
summarised over the cases of the earlier rounds (``old``, round 8's 40) and over all:

- the shipped 17 features fitted without ``bird-dev`` (round 8's model, out of fold);
- the same features fitted with it;
- with it, round 10's variants that gave ``bird/answered`` back: the form gap at exponent
  0.75 beside the shipped one or instead of the second form feature, and the form gap where
  both backends agree on one first answer.

The rule, fixed before the study ran: a refitted model is kept only if its ``all`` mean
R@1 out of fold is at least 0.001 above the shipped model's (fitted without ``bird-dev``)
and its ``old`` new-question mean no more than 0.002 below it; of those, the highest
``all`` mean. Otherwise the shipped weights stay, and HELD-OUT is not looked at.

Usage: python bench/suite/study_round12.py --suite DIR --workdir W
"""

from __future__ import annotations

import sys

import numpy as np
import studylib

study = studylib.Study.from_command_line(__doc__)
if not any(a.set == "bird-dev" for a in study.tuning):
    sys.exit("no bird-dev case in this suite: build it with bench/suite/build.py first")

GAPS = studylib.form_gaps(study, (0.5, 0.75))
AGREED = {id(a): studylib.agreement(a)[2] for a in study.tuning}
GATED = {n: [g * q for g, q in zip(GAPS[0.5][n], AGREED[n], strict=True)] for n in AGREED}
SHIPPED = study.shipped()
BASE = study.shipped(16)  # without the second form feature


def line(name: str, res: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    big = {c: m["R@1"] for c, m in res.items() if m["n"] >= 20}
    old = {c: r for c, r in big.items() if not c.startswith("bird-dev/")}
    new = [r for c, r in old.items() if c.split("/")[1].startswith("new")]
    dev = [r for c, r in big.items() if c.startswith("bird-dev/")]
    print(f"{name:24s} old {np.mean(list(old.values())):.4f}  all {np.mean(list(big.values())):.4f}"
          f"  new {np.mean(new):.4f}  bird-dev {np.mean(dev):.4f}"
          f"  bird/answered {res['bird/answered/tuning']['R@1']:.3f}"
          f"  bird-dev/answered {res['bird-dev/answered/tuning']['R@1']:.3f}", flush=True)
    return res


def without_dev(a: object) -> bool:
    return getattr(a, "set", "") != "bird-dev"


results = {
    "shipped, fit without": line("shipped, without bird-dev", study.oof(SHIPPED, without_dev)),
    "shipped, fit with": line("shipped, with bird-dev", study.oof(SHIPPED)),
    "+ gap a0.75": line("+ gap a0.75", study.oof(studylib.plus(SHIPPED, GAPS[0.75]))),
    "a0.75 for 2nd": line("a0.75 for 2nd", study.oof(studylib.plus(BASE, GAPS[0.75]))),
    "+ gap if agreed": line("+ gap if agreed", study.oof(studylib.plus(SHIPPED, GATED))),
}
studylib.table(results)
