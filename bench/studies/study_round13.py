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

Part C, added after part B kept nothing (``+ pair containment gap`` gained 0.0004, under
the rule's 0.001; its rule fixed before it ran, the same rule): the misses above lose to a
near-duplicate through the new-question evidence, the form gap and the skeleton support.
Where a stored question is in the asked one nearly word for word, that evidence may count
less. Each variant added to the shipped 17 features (``best pairs``: the best candidate's
share of word pairs):

- ``+ support x best pairs``;
- ``+ form gap x best pairs``;
- both;
- ``+ pair containment gap, form gap x best pairs``.

Part D, added after part C kept nothing (its rule fixed before it ran, the same rule): the
misses' evidence names the right SQL's columns and values ("drivers who finished the race
refers to time>0"), which is how grep gets them, and a near-duplicate's SQL reads other
columns or tables. *Names stated* is the share of the words of a candidate's SQL's column
and table names (read by sqlglot, split at underscores, as search terms) that the asked
question holds: schema linking, from the parsed SQL, in any language whose questions name
the schema's words (zero for all where none does). Each added to the shipped 17 features:

- ``+ names stated gap``: the share less the best candidate's;
- ``+ names stated``: the share itself;
- ``+ names stated gap, x best coverage``.

Part E, added after part D kept nothing (names stated gained 0.005 on answered-before
questions and lost 0.006 on new ones, where a pair naming the asked columns in another
structure competes; its rule fixed before it ran, the same rule): the names-stated gap
weighed by how likely the question was answered before, read from the evidence the model
already has, each beside the names-stated gap:

- ``x best cosine``: times the best candidate's cosine;
- ``x best overlap``: times the best candidate's masked question overlap;
- ``x both``: with both products.

Part F, added after part E kept nothing (its rule fixed before it ran, the same rule): names
stated costs new questions when a pair of another form names the asked columns. Values
count only between pairs of one skeleton for the same reason; names can count only between
pairs of one *frame* (the skeleton with identifiers masked too: one SQL form over any
columns), so that among pairs of the asked form the one over the asked columns comes first,
and a pair of another form gains nothing for naming them:

- ``+ names stated - best of its frame``;
- that, and the names-stated gap beside it.

Part G, a diagnostic after part F (an upper bound, nothing to keep: no product can know the
task): names stated helps answered-before questions and costs new ones. With the task known,
one model fitted on each task's questions (out of fold as above) and each case scored by its
task's model, how much would the shipped features gain, and names stated beside them? A
large gain would make a gate between the tasks worth another study (round 6 found +0.009
for an oracle gate over round 5's features).

Part H, after part G (its rule fixed before it ran, the same rule as parts A to F): which
part of a long question is the question. The model reads the last sentence's overlap (an
agent quotes the earlier question first); BIRD puts the question first and notes after.
Each beside the shipped features (masked overlap, values masked, as the model's):

- ``+ first sentence overlap - overlap``;
- ``+ best sentence overlap - overlap``: the asked question's sentence closest to the
  candidate's question;
- both.

The rule, fixed before the study ran (as round 12's, for each part A to F and H): a variant is kept
only if its mean R@1 out of fold over every TUNING case of 20 questions or more is at least
0.001 above the shipped features' (fitted the same way), and its new-question mean no more
than 0.002 below; of those, the highest mean. Otherwise the shipped weights stay, and
HELD-OUT is not looked at.

Usage: python bench/suite/study_round13.py --suite DIR --workdir W [--part A|B|C|D|E|F|G|H]
"""

from __future__ import annotations

import sys
from typing import Any

import studylib
from studylib import gap, line, names_stated, run_containment

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


PART = "H"
if "--part" in sys.argv:  # parts A to F ran first, each keeping nothing; G is a diagnostic
    at = sys.argv.index("--part")
    PART = sys.argv[at + 1].upper()
    del sys.argv[at:at + 2]
study = studylib.Study.from_command_line(__doc__)
if not any(a.set == "bird-dev" for a in study.tuning):
    sys.exit("no bird-dev case in this suite: build it with bench/suite/build.py first")
SHIPPED = study.shipped()
FORM_GAP = {n: [r[15] for r in rows] for n, rows in SHIPPED.items()}
SUPPORT = {n: [r[2] for r in rows] for n, rows in SHIPPED.items()}
OVERLAP = {n: [r[6] for r in rows] for n, rows in SHIPPED.items()}
COVERAGE = {id(a): [c.coverage for c in a.cands] for a in study.tuning}
plus = studylib.plus


def times_best(col: dict[int, list[float]], by: dict[int, list[float]]
               ) -> dict[int, list[float]]:
    return {n: [v * max(by[n], default=0.0) for v in vs] for n, vs in col.items()}


def part_a() -> dict[str, dict[str, dict[str, float]]]:
    cont = {id(a): containment(a) for a in study.tuning}
    whole = {n: [float(v >= 1.0) for v in vs] for n, vs in cont.items()}
    return {
        "shipped": line("shipped (17)", study.oof(SHIPPED)),
        "+ containment gap": line("+ containment gap", study.oof(plus(SHIPPED, gap(cont)))),
        "+ form gap x best containment": line(
            "+ form gap x best containment",
            study.oof(plus(SHIPPED, times_best(FORM_GAP, cont)))),
        "both": line("+ both", study.oof(plus(SHIPPED, gap(cont),
                                              times_best(FORM_GAP, cont)))),
        "+ whole gap": line("+ whole gap", study.oof(plus(SHIPPED, gap(whole)))),
        "+ whole gap, form gap x any whole": line(
            "+ whole gap, form gap x any whole",
            study.oof(plus(SHIPPED, gap(whole), times_best(FORM_GAP, whole)))),
    }


def word_pairs() -> tuple[dict[int, list[float]], dict[int, list[float]]]:
    """Each candidate's word-pair containment and its gap to the best (parts B and C)."""
    pairs = {id(a): run_containment(a, 2) for a in study.tuning}
    return pairs, gap(pairs)


def part_b() -> dict[str, dict[str, dict[str, float]]]:
    pairs, pair_gap = word_pairs()
    triples = {id(a): run_containment(a, 3) for a in study.tuning}
    return {
        "shipped": line("shipped (17)", study.oof(SHIPPED)),
        "+ pair containment gap": line("+ pair containment gap",
                                       study.oof(plus(SHIPPED, pair_gap))),
        "+ pair containment": line("+ pair containment", study.oof(plus(SHIPPED, pairs))),
        "+ triple containment gap": line("+ triple containment gap",
                                         study.oof(plus(SHIPPED, gap(triples)))),
        "+ pair gap, x best coverage": line(
            "+ pair gap, x best coverage",
            study.oof(plus(SHIPPED, pair_gap, times_best(pair_gap, COVERAGE)))),
    }


def part_c() -> dict[str, dict[str, dict[str, float]]]:
    pairs, pair_gap = word_pairs()
    support = times_best(SUPPORT, pairs)
    form = times_best(FORM_GAP, pairs)
    return {
        "shipped": line("shipped (17)", study.oof(SHIPPED)),
        "+ support x best pairs": line("+ support x best pairs",
                                       study.oof(plus(SHIPPED, support))),
        "+ form gap x best pairs": line("+ form gap x best pairs",
                                        study.oof(plus(SHIPPED, form))),
        "both": line("+ both", study.oof(plus(SHIPPED, support, form))),
        "+ pair gap, form gap x best pairs": line(
            "+ pair gap, form x best pairs", study.oof(plus(SHIPPED, pair_gap, form))),
    }


def part_d() -> dict[str, dict[str, dict[str, float]]]:
    stated = {id(a): names_stated(a) for a in study.tuning}
    stated_gap = gap(stated)
    return {
        "shipped": line("shipped (17)", study.oof(SHIPPED)),
        "+ names stated gap": line("+ names stated gap", study.oof(plus(SHIPPED, stated_gap))),
        "+ names stated": line("+ names stated", study.oof(plus(SHIPPED, stated))),
        "+ names stated gap, x best coverage": line(
            "+ names gap, x best coverage",
            study.oof(plus(SHIPPED, stated_gap, times_best(stated_gap, COVERAGE)))),
    }


def part_e() -> dict[str, dict[str, dict[str, float]]]:
    stated_gap = gap({id(a): names_stated(a) for a in study.tuning})
    cosine = {id(a): [c.dense if c.dense is not None else -1.0 for c in a.cands]
              for a in study.tuning}
    by_cosine, by_overlap = times_best(stated_gap, cosine), times_best(stated_gap, OVERLAP)
    return {
        "shipped": line("shipped (17)", study.oof(SHIPPED)),
        "x best cosine": line("names gap, x best cosine",
                              study.oof(plus(SHIPPED, stated_gap, by_cosine))),
        "x best overlap": line("names gap, x best overlap",
                               study.oof(plus(SHIPPED, stated_gap, by_overlap))),
        "x both": line("names gap, x both", study.oof(
            plus(SHIPPED, stated_gap, by_cosine, by_overlap))),
    }


def part_f() -> dict[str, dict[str, dict[str, float]]]:
    stated = {id(a): names_stated(a) for a in study.tuning}
    by_frame: dict[int, list[float]] = {}
    for a in study.tuning:
        frames = [f"{c.datasource}\0{rm._shape(c).frame}" for c in a.cands]
        best: dict[str, float] = {}
        for f, v in zip(frames, stated[id(a)], strict=True):
            best[f] = max(best.get(f, 0.0), v)
        by_frame[id(a)] = [v - best[f] for f, v in zip(frames, stated[id(a)], strict=True)]
    return {
        "shipped": line("shipped (17)", study.oof(SHIPPED)),
        "+ names - best of frame": line("+ names - best of frame",
                                        study.oof(plus(SHIPPED, by_frame))),
        "+ that, + names gap": line("+ that, + names gap",
                                    study.oof(plus(SHIPPED, by_frame, gap(stated)))),
    }


def part_g() -> dict[str, dict[str, dict[str, float]]]:
    with_names = plus(SHIPPED, gap({id(a): names_stated(a) for a in study.tuning}))

    def oracle(rows: dict[int, list[tuple[float, ...]]]) -> dict[str, dict[str, float]]:
        new = study.oof(rows, lambda a: a.task == "new")
        other = study.oof(rows, lambda a: a.task != "new")
        return {c: (new if study.case_of[c]["task"] == "new" else other)[c] for c in new}

    return {
        "shipped": line("shipped (17)", study.oof(SHIPPED)),
        "+ names gap": line("+ names stated gap", study.oof(with_names)),
        "shipped, oracle": line("shipped, a model per task", oracle(SHIPPED)),
        "+ names gap, oracle": line("+ names gap, a model per task", oracle(with_names)),
    }


def sentence_overlaps(a: Any) -> tuple[list[float], list[float]]:
    """Per candidate (twins sharing their best): the masked overlap of its question with the
    asked question's first sentence, and with its closest sentence, each less the overlap
    with the whole question."""
    if not a.cands:
        return [], []
    shapes = [rm._shape(c) for c in a.cands]
    values = tuple(sorted({v for sh in shapes for v in sh.values}))
    parts = [p for p in rm._SENTENCE_END.split(a.question) if p.strip()] or [a.question]
    whole = rm._masked_terms(a.question, values)
    pieces = [rm._masked_terms(p, values) for p in parts]
    first, best = [], []
    for c, sh in zip(a.cands, shapes, strict=True):
        own = rm._masked_terms(c.question, sh.values)
        base = rm.masked_overlap(whole, own)
        each = [rm.masked_overlap(p, own) for p in pieces]
        first.append(each[0] - base)
        best.append(max(each) - base)
    groups = rm.twins(a.cands, shapes)
    return rm._group_max(first, groups), rm._group_max(best, groups)


def part_h() -> dict[str, dict[str, dict[str, float]]]:
    both = {id(a): sentence_overlaps(a) for a in study.tuning}
    first = {n: f for n, (f, _b) in both.items()}
    best = {n: b for n, (_f, b) in both.items()}
    return {
        "shipped": line("shipped (17)", study.oof(SHIPPED)),
        "+ first sentence": line("+ first sentence", study.oof(plus(SHIPPED, first))),
        "+ best sentence": line("+ best sentence", study.oof(plus(SHIPPED, best))),
        "both": line("+ both", study.oof(plus(SHIPPED, first, best))),
    }


studylib.table({"A": part_a, "B": part_b, "C": part_c, "D": part_d, "E": part_e,
                "F": part_f, "G": part_g, "H": part_h}[PART]())
