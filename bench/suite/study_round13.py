"""Round 13 of the ranking model (issue 19): a question that holds a stored one whole,
studied on the suite's TUNING part, out of fold over five folds by database, over the
evidence ``bench/fit_model.py`` gathered (run it first with the same workdir and a suite
built with ``bird-dev``). Nothing here looks at HELD-OUT.

Round 12 left ``bird``'s long answered-before questions (the question and its evidence)
behind grep on HELD-OUT: a pair both backends put first loses to a pair of another form.
The model tells how far to trust the form reader by the best pair's *coverage* (the share
of the asked question's terms a pair holds), and a long question's best coverage is low
even when a stored question sits in it whole. The evidence the model lacks is the other
direction: the *containment* of a candidate, the share of its own question's search terms
(values masked, as the masked overlap masks them) that the asked question holds. It needs
no word list and reads any language. Twins share their best. Variants, each added to the
shipped 17 features:

- ``+ containment gap``: the candidate's containment less the best candidate's;
- ``+ form gap x best containment``: the form gap times the best containment, so the model
  can trust the form reader less where some stored question is in the asked one whole;
- both;
- ``+ whole gap``: 1 where the candidate's question is wholly in the asked one, less the
  best candidate's (so 0 where no candidate is whole);
- ``+ whole gap, form gap x any whole``: with the form gap where some candidate is whole.

Part B, added after part A kept nothing (its rule fixed before it ran, the same rule):
the TUNING misses of the shipped model on ``bird``'s and ``bird-dev``'s answered questions
are near-duplicates whose stored question differs from the right one by a word or two
("happened in" against "happened on", "food" against "advertisement"), while the right one
is the asked question's first words verbatim. Search terms are a bag without stop words and
values are masked, so neither containment nor overlap sees word order or function words.
Part B's evidence is the *word-run containment*: the share of a candidate's question's word
pairs (or triples), every word kept and in order (a Chinese or Japanese run read as its
characters, Korean by its spaced words), that the asked question holds; twins share their
best. Variants, each added to the shipped 17 features:

- ``+ pair containment gap``: a candidate's share of word pairs less the best candidate's;
- ``+ pair containment``: the share itself;
- ``+ triple containment gap``: with word triples;
- ``+ pair containment gap x best coverage`` beside the gap.

The rule, fixed before the study ran (as round 12's, for each part): a variant is kept
only if its mean R@1 out of fold over every TUNING case of 20 questions or more is at least
0.001 above the shipped features' (fitted the same way), and its new-question mean no more
than 0.002 below; of those, the highest mean. Otherwise the shipped weights stay, and
HELD-OUT is not looked at.

Usage: python bench/suite/study_round13.py --suite DIR --workdir W
"""

from __future__ import annotations

import re
import sys
import unicodedata
from typing import Any

import numpy as np
import studylib

from wrenmem.recall import model as rm


def containment(a: Any) -> list[float]:
    """Per candidate (twins sharing their best): the share of its question's masked search
    terms that the asked question holds (0 for a question without terms)."""
    if not a.cands:
        return []
    shapes = [rm._shape(c) for c in a.cands]
    groups = rm.twins(a.cands, shapes)
    values = tuple(sorted({v for sh in shapes for v in sh.values}))
    asked = rm._masked_terms(a.question, values)
    out = []
    for c, sh in zip(a.cands, shapes, strict=True):
        own = rm._masked_terms(c.question, sh.values)
        out.append(len(asked & own) / len(own) if own else 0.0)
    return rm._group_max(out, groups)


_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]|\w+")  # Korean has spaces


def runs(text: str, n: int) -> set[tuple[str, ...]]:
    """The word runs of ``n`` words of a text (case folded; a CJK character is a word)."""
    words = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
    if len(words) < n:
        return {tuple(words)} if words else set()
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def run_containment(a: Any, n: int) -> list[float]:
    """Per candidate (twins sharing their best): the share of its question's word runs of
    ``n`` words that the asked question holds."""
    if not a.cands:
        return []
    asked = runs(a.question, n)
    out = []
    for c in a.cands:
        own = runs(c.question, n)
        out.append(len(asked & own) / len(own) if own else 0.0)
    return rm._group_max(out, rm.twins(a.cands))


def line(name: str, res: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    big = {c: m["R@1"] for c, m in res.items() if m["n"] >= 20}
    new = [r for c, r in big.items() if c.split("/")[1].startswith("new")]
    answered = [r for c, r in big.items() if c.split("/")[1].startswith("answered")]
    print(f"{name:34s} all {np.mean(list(big.values())):.4f}  new {np.mean(new):.4f}"
          f"  answered {np.mean(answered):.4f}"
          f"  bird/answered {res['bird/answered/tuning']['R@1']:.3f}"
          f"  bird-dev/answered {res['bird-dev/answered/tuning']['R@1']:.3f}"
          f"  spider-followup {res['spider-followup/answered-all/tuning']['R@1']:.3f}",
          flush=True)
    return res


study = studylib.Study.from_command_line(__doc__)
PART = "B"  # part A's variants (run first, nothing kept) are kept in the code below
if not any(a.set == "bird-dev" for a in study.tuning):
    sys.exit("no bird-dev case in this suite: build it with bench/suite/build.py first")

CONT = {id(a): containment(a) for a in study.tuning}
print("contained", file=sys.stderr, flush=True)
SHIPPED = study.shipped()
FORM_GAP = {n: [r[15] for r in rows] for n, rows in SHIPPED.items()}


def gap(col: dict[int, list[float]]) -> dict[int, list[float]]:
    return {n: [v - max(vs) for v in vs] for n, vs in col.items()}


def times_best(col: dict[int, list[float]], by: dict[int, list[float]]
               ) -> dict[int, list[float]]:
    return {n: [v * max(by[n], default=0.0) for v in vs] for n, vs in col.items()}


WHOLE = {n: [float(v >= 1.0) for v in vs] for n, vs in CONT.items()}
plus = studylib.plus
PAIRS = {id(a): run_containment(a, 2) for a in study.tuning}
TRIPLES = {id(a): run_containment(a, 3) for a in study.tuning}
PAIR_GAP = gap(PAIRS)
COVER = {id(a): [max((c.coverage for c in a.cands), default=0.0)] * len(a.cands)
         for a in study.tuning}
part_b = {
    "shipped": line("shipped (17)", study.oof(SHIPPED)),
    "+ pair containment gap": line("+ pair containment gap",
                                   study.oof(plus(SHIPPED, gap(PAIRS)))),
    "+ pair containment": line("+ pair containment", study.oof(plus(SHIPPED, PAIRS))),
    "+ triple containment gap": line("+ triple containment gap",
                                     study.oof(plus(SHIPPED, gap(TRIPLES)))),
    "+ pair gap, x best coverage": line(
        "+ pair gap, x best coverage",
        study.oof(plus(SHIPPED, PAIR_GAP, {n: [g * c for g, c in zip(
            PAIR_GAP[n], COVER[n], strict=True)] for n in PAIRS}))),
}
studylib.table(part_b)
if PART == "B":
    sys.exit(0)
results = {
    "shipped": line("shipped (17)", study.oof(SHIPPED)),
    "+ containment gap": line("+ containment gap", study.oof(plus(SHIPPED, gap(CONT)))),
    "+ form gap x best containment": line(
        "+ form gap x best containment", study.oof(plus(SHIPPED, times_best(FORM_GAP, CONT)))),
    "both": line("+ both", study.oof(plus(SHIPPED, gap(CONT), times_best(FORM_GAP, CONT)))),
    "+ whole gap": line("+ whole gap", study.oof(plus(SHIPPED, gap(WHOLE)))),
    "+ whole gap, form gap x any whole": line(
        "+ whole gap, form gap x any whole",
        study.oof(plus(SHIPPED, gap(WHOLE), times_best(FORM_GAP, WHOLE)))),
}
studylib.table(results)
