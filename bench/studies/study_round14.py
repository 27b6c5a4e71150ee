"""Round 14 of the ranking model (issue 19): a ranker that can weigh one piece of evidence
by another, studied on the suite's TUNING part, out of fold over five folds by database,
over the evidence ``bench/fit_model.py`` gathered (run it first with the same workdir and a
suite built with ``bird-dev``). Nothing here looks at HELD-OUT.

Rounds 9 to 13 found that the evidence which would mend ``bird``'s long answered-before
questions (a stored question held in the asked one word for word; the SQL's names stated
in BIRD's notes) costs the follow-ups or new questions about as much as it gains, whenever
it is added to the linear model: a feature there has one weight for every question. The
model's products (``x best coverage``, ``x (1 - best cosine)``, ...) are hand-made
interactions. Round 14 lets the fit find its own: a small network with one hidden layer
beside the linear model,

    score = x . b + v . tanh(W (x - m) / s + c)

(``m``, ``s``: the training rows' means and spreads), fitted with the linear model's loss
(a softmax over each question's candidates, every case weighing the same) by L-BFGS from
the linear fit, the hidden layer's weights L2-penalised (``--l2``, default 1.0). It reads
the same rows, so everything stays a function of the files and the question, and it costs
a few hundred multiplications a candidate. Variants:

- ``linear``: the shipped 17 features, the linear model (the baseline, refitted the same way);
- ``hidden 4``, ``hidden 8``, ``hidden 16``: the shipped 17 features with that many hidden units;
- ``hidden 8 + names, pairs``: with round 13's two strongest columns beside them (the
  names-stated gap of part D and the word-pair containment gap of part B), which a linear
  weight could not use.

The rule, fixed before the study ran (round 12's): a variant is kept only if its mean R@1
out of fold over every TUNING case of 20 questions or more is at least 0.001 above the
linear model's (fitted the same way), and its new-question mean no more than 0.002 below;
of those, the highest mean. A kept variant is then fitted on all of TUNING and shipped, and
HELD-OUT is looked at once, as every round's look. Otherwise the shipped weights stay, and
HELD-OUT is not looked at.

Part A was stopped after ``hidden 8`` (``--part A`` runs all five): both fitted variants fell
0.015 or more below the linear model out of fold, so the larger ones were not run.

Part B, added after part A's first two variants (``hidden 4``: mean 0.6499 against the
linear 0.6650; its rule fixed before it runs, the same rule): containment between
near-duplicates only. Round 13's word-pair containment (the share of a stored question's
word pairs, every word kept and in order, that the asked question holds) wins BIRD's
near-duplicates back and costs the follow-ups, where the quoted earlier question is held
word for word too. But a follow-up's trap and its right answer are two different
questions, while BIRD's misses lose to a *near-duplicate*: a stored question one or two
words away from the right one. So containment can count only between near-duplicates, as
values count only between pairs of one skeleton: a candidate's containment less the best
containment among the candidates whose question shares at least a share ``t`` of its word
pairs with its own (Jaccard; twins are not each other's near-duplicates; 0 where it has
none). Each beside the shipped 17 features (twins share their best):

- ``+ near-duplicate containment gap, t = 0.5``;
- ``+ the same, one-sided``: only its losses (min(0, gap)), so a pair gains nothing from it;
- ``+ near-duplicate containment gap, t = 0.3``.

Part C, added after part B kept nothing (its rule fixed before it runs, the same rule): how
far grep counts. The model weighs a candidate's BM25 (over the best) only through products:
times the best coverage, times one less the best cosine, times the unknown share. A long
question's best coverage is low even when a stored question sits in it whole, so on
BIRD's long questions grep counts for little, and grep is right on all of ``bird``'s
HELD-OUT answered questions. Each beside the shipped 17 features (twins share their best):

- ``+ bm25 / best``: the plain ratio, so that grep can count without the coverage;
- ``+ bm25 / best x length``: the ratio times the asked question's number of distinct
  search terms over 40 (at most 1), so that grep can count more on long questions.

Part D, added after part C kept nothing (its rule fixed before it runs, the same rule):
which sentence is the question, read from its punctuation. The model reads the overlap with
the asked question's *last sentence* (an agent quotes the earlier question first), and in
three of the six TUNING misses read in round 14 that feature favours the wrong pair: BIRD's
last sentence is a note ("X refers to Y;"). A question mark (``?``, ``？``, ``؟``) ends a
question in any script, where no word list could; the *last question* is the last
sentence that ends with one, or the last sentence where none does:

- ``last question for last sentence``: the last sentence's overlap read from the last
  question instead;
- ``+ last question overlap - overlap`` beside the shipped features.

Part E, added after part D kept nothing (its rule fixed before it runs, the same rule).
Part D's swap put every BIRD answered question of ``bird`` first (0.995 -> 1.000) and lost
the follow-ups (0.376 -> 0.204): 289 of their 500 current questions end with a full stop,
so the last question mark is the quoted earlier question's. What follows BIRD's question
is notes that end with ``;`` or with nothing, never a full sentence. So the question is the
last *full sentence*: the last sentence that ends with a full stop, a question mark or an
exclamation mark in any script (``. ? ! \u3002 \uff1f \uff01 \u061f \u0964``), where a
``;``-ended or unended piece after it is a note; else the last sentence. Each in place of
the last sentence (the overlap with the whole question subtracted as before):

- ``last full sentence for last sentence``;
- ``last question unless a full sentence follows, for last sentence``: part D's last
  question, unless a sentence ending with a full stop or a question mark follows it.

Part E's first variant was kept (bench/studies/round-14.md), so from commit ``ab5c3f3`` on
the shipped features this script reads are round 14's; check out ``b3e9c5c`` to reproduce
the figures of its parts against round 12's features.

Usage: python bench/suite/study_round14.py --suite DIR --workdir W [--l2 L] [--part A..E]
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import studylib

from wrenmem.recall import model as rm
from wrenmem.textsearch import tokenize

fm = studylib.fm

L2 = 1.0
PART = "E"
if "--part" in sys.argv:  # parts A to D ran first, each keeping nothing
    at = sys.argv.index("--part")
    PART = sys.argv[at + 1].upper()
    del sys.argv[at:at + 2]
if "--l2" in sys.argv:
    at = sys.argv.index("--l2")
    L2 = float(sys.argv[at + 1])
    del sys.argv[at:at + 2]
study = studylib.Study.from_command_line(__doc__)
SHIPPED = study.shipped()


class Net:
    """The linear weights ``b`` and a hidden layer (``W``, ``c``, ``v``) over scaled rows."""

    def __init__(self, b: np.ndarray, hidden: int, mean: np.ndarray, scale: np.ndarray,
                 seed: int = 0):
        d = len(b)
        rng = np.random.default_rng(seed)
        self.b, self.mean, self.scale, self.hidden = b, mean, scale, hidden
        self.W = rng.normal(0, 0.3, (hidden, d))
        self.c = np.zeros(hidden)
        self.v = rng.normal(0, 0.1, hidden)

    def pack(self) -> np.ndarray:
        return np.concatenate([self.b, self.W.ravel(), self.c, self.v])

    def unpack(self, theta: np.ndarray) -> None:
        d, h = len(self.b), self.hidden
        self.b = theta[:d]
        self.W = theta[d:d + h * d].reshape(h, d)
        self.c = theta[d + h * d:d + h * d + h]
        self.v = theta[d + h * d + h:]

    def score(self, x: np.ndarray) -> np.ndarray:
        if self.hidden == 0:
            return x @ self.b
        u = np.tanh(((x - self.mean) / self.scale) @ self.W.T + self.c)
        return x @ self.b + u @ self.v


def training_rows(asked: list[Any], rows_of: dict[int, list[tuple[float, ...]]]
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every kept candidate's row, its target share, its question's start and weight."""
    per_case = fm._per_case(asked)
    xs, ts, starts, ws = [], [], [], []
    at = 0
    for a in asked:
        kept = [n for n, c in enumerate(a.cands) if not c.excluded]
        every = fm.labels(a)
        lab = np.array([every[n] for n in kept], dtype=float)
        if not kept or lab.sum() == 0:
            continue
        rows = rows_of[id(a)]
        xs.append(np.array([rows[n] for n in kept]))
        ts.append(lab / lab.sum())
        starts.append(at)
        ws.append(100.0 / per_case[a.case])
        at += len(kept)
    return np.vstack(xs), np.concatenate(ts), np.array(starts), np.array(ws)


def fit(asked: list[Any], rows_of: dict[int, list[tuple[float, ...]]], keep: list[int],
        hidden: int) -> Net:
    """The linear fit (fit_model's Newton), then, with ``hidden`` units, L-BFGS over all
    (scipy's, which the ``st`` extra brings; only part A needs it)."""
    from scipy.optimize import minimize

    b = fm.fit_ranking(asked, keep)
    x, t, starts, w = training_rows(asked, rows_of)
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-9
    net = Net(b, hidden, mean, scale)
    if hidden == 0:
        return net
    counts = np.diff(np.append(starts, len(x)))
    wrow = np.repeat(w, counts)
    xs = (x - mean) / scale
    d = x.shape[1]

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        net.unpack(theta)
        u = np.tanh(xs @ net.W.T + net.c)
        z = x @ net.b + u @ net.v
        m = np.maximum.reduceat(z, starts)
        e = np.exp(z - np.repeat(m, counts))
        s = np.add.reduceat(e, starts)
        lse = m + np.log(s)
        value = float(w @ (lse - np.add.reduceat(t * z, starts)))
        g = wrow * (e / np.repeat(s, counts) - t)  # d loss / d z
        gb = x.T @ g
        gv = u.T @ g
        gpre = (g[:, None] * net.v[None, :]) * (1 - u * u)
        gW = gpre.T @ xs
        gc = gpre.sum(axis=0)
        value += 0.5 * 1e-2 * float(net.b @ net.b)
        gb = gb + 1e-2 * net.b
        value += 0.5 * L2 * float((net.W * net.W).sum() + net.v @ net.v)
        gW = gW + L2 * net.W
        gv = gv + L2 * net.v
        return value, np.concatenate([gb, gW.ravel(), gc, gv])

    got = minimize(loss, net.pack(), jac=True, method="L-BFGS-B",
                   options={"maxiter": 400})
    net.unpack(got.x)
    print(f"    fit: hidden {hidden}, {d} features, loss {got.fun:.1f}, {got.nit} steps",
          file=sys.stderr, flush=True)
    return net


def oof(rows_of: dict[int, list[tuple[float, ...]]], hidden: int
        ) -> dict[str, dict[str, float]]:
    """Out-of-fold metrics per case (as studylib's, the fit above in place of the linear)."""
    for a in study.tuning:
        fm._FEATURES[id(a)] = rows_of[id(a)]
    keep = list(range(len(next(r for r in rows_of.values() if r)[0])))
    scored = {}
    for f in range(studylib.FOLDS):
        train = [a for a in study.tuning if study.fold_of[a.db] != f]
        net = fit(train, rows_of, keep, hidden)
        for a in study.tuning:
            if study.fold_of[a.db] == f:
                rows = rows_of[id(a)]
                scored[id(a)] = list(net.score(np.array(rows))) if rows else []
    return {case: fm.metrics(sub, lambda a: scored[id(a)])
            for case, sub in study.by_case.items()}


def part_a() -> dict[str, dict[str, dict[str, float]]]:
    with_cols = studylib.plus(
        SHIPPED,
        studylib.gap({id(a): studylib.names_stated(a) for a in study.tuning}),
        studylib.gap({id(a): studylib.run_containment(a, 2) for a in study.tuning}))
    results = {
        "linear": studylib.line("linear (17)", oof(SHIPPED, 0)),
        "hidden 4": studylib.line("hidden 4", oof(SHIPPED, 4)),
        "hidden 8": studylib.line("hidden 8", oof(SHIPPED, 8)),
        "hidden 16": studylib.line("hidden 16", oof(SHIPPED, 16)),
        "hidden 8 + names, pairs": studylib.line("hidden 8 + names, pairs", oof(with_cols, 8)),
    }
    return results


def near_duplicate_gaps(a: Any, shares: tuple[float, ...]) -> list[list[float]]:
    """Per share ``t``: each candidate's word-pair containment less the best among its
    near-duplicates (candidates, not its twins, whose questions share at least ``t`` of
    their word pairs with its own; 0 where it has none), twins sharing their best."""
    if not a.cands:
        return [[] for _ in shares]
    asked = studylib.runs(a.question, 2)
    own = [studylib.runs(c.question, 2) for c in a.cands]
    cont = [len(asked & r) / len(r) if r else 0.0 for r in own]
    groups = rm.twins(a.cands)
    out = []
    for t in shares:
        gaps = []
        for i, r in enumerate(own):
            near = [cont[j] for j, q in enumerate(own)
                    if groups[j] != groups[i] and r and q
                    and len(r & q) / len(r | q) >= t]
            gaps.append(cont[i] - max(near) if near else 0.0)
        out.append(rm._group_max(gaps, groups))
    return out


def part_b() -> dict[str, dict[str, dict[str, float]]]:
    both = {id(a): near_duplicate_gaps(a, (0.5, 0.3)) for a in study.tuning}
    half = {n: g[0] for n, g in both.items()}
    third = {n: g[1] for n, g in both.items()}
    losses = {n: [min(0.0, v) for v in vs] for n, vs in half.items()}
    plus = studylib.plus
    return {
        "shipped": studylib.line("shipped (17)", study.oof(SHIPPED)),
        "+ near-dup gap 0.5": studylib.line("+ near-dup gap 0.5", study.oof(plus(SHIPPED, half))),
        "+ one-sided 0.5": studylib.line("+ one-sided 0.5", study.oof(plus(SHIPPED, losses))),
        "+ near-dup gap 0.3": studylib.line("+ near-dup gap 0.3",
                                            study.oof(plus(SHIPPED, third))),
    }


def part_c() -> dict[str, dict[str, dict[str, float]]]:
    ratio, long = {}, {}
    for a in study.tuning:
        if not a.cands:
            ratio[id(a)] = long[id(a)] = []
            continue
        lexical = rm._group_max([c.lexical or 0.0 for c in a.cands], rm.twins(a.cands))
        best = max(lexical)
        ratio[id(a)] = [v / best if best > 0 else 0.0 for v in lexical]
        length = min(len(set(tokenize(a.question))) / 40.0, 1.0)
        long[id(a)] = [v * length for v in ratio[id(a)]]
    plus = studylib.plus
    return {
        "shipped": studylib.line("shipped (17)", study.oof(SHIPPED)),
        "+ bm25 / best": studylib.line("+ bm25 / best", study.oof(plus(SHIPPED, ratio))),
        "+ bm25 / best x length": studylib.line("+ bm25 / best x length",
                                                study.oof(plus(SHIPPED, long))),
    }


_QUESTION_MARKS = ("?", "\uff1f", "\u061f")


def last_sentence(question: str) -> str:
    """The question's last sentence (the whole question when it has one): what round 12's
    shipped feature read."""
    pieces = rm.sentences(question)
    return pieces[-1][0] if len(pieces) > 1 else question


def last_question(question: str) -> str:
    """The last sentence that ends with a question mark; else the last sentence (the whole
    question when it has one)."""
    asked = [text for text, end in rm.sentences(question)
             if any(m in end for m in _QUESTION_MARKS)]
    return asked[-1] if asked else last_sentence(question)


def last_question_overlaps(a: Any) -> list[float]:
    """Per candidate (twins sharing their best): the masked overlap of its question with
    the asked question's last question, less the overlap with the whole question."""
    return sentence_overlaps(a, last_question)


def part_d() -> dict[str, dict[str, dict[str, float]]]:
    moved = sum(last_question(a.question) != last_sentence(a.question) for a in study.tuning)
    print(f"last question is not the last sentence: {moved} of {len(study.tuning)}",
          file=sys.stderr)
    col = {id(a): last_question_overlaps(a) for a in study.tuning}
    return {
        "shipped": studylib.line("shipped (17)", study.oof(SHIPPED)),
        "last question for last sentence": studylib.line(
            "last question for last sentence", study.oof(swapped(col))),
        "+ last question": studylib.line("+ last question overlap - overlap",
                                         study.oof(studylib.plus(SHIPPED, col))),
    }


def last_question_unless_followed(question: str) -> str:
    """Part D's last question, unless a full sentence follows it: then the last sentence."""
    pieces = rm.sentences(question)
    marked = [n for n, (_t, end) in enumerate(pieces)
              if any(m in end for m in _QUESTION_MARKS)]
    if len(pieces) < 2 or not marked:
        return last_sentence(question)
    after = pieces[marked[-1] + 1:]
    if any(any(m in end for m in rm._FULL_STOPS) for _t, end in after):
        return last_sentence(question)
    return pieces[marked[-1]][0]


def sentence_overlaps(a: Any, pick: Any) -> list[float]:
    """Per candidate (twins sharing their best): the masked overlap of its question with
    ``pick(asked question)``, less the overlap with the whole question."""
    if not a.cands:
        return []
    shapes = [rm._shape(c) for c in a.cands]
    values = tuple(sorted({v for sh in shapes for v in sh.values}))
    whole = rm._masked_terms(a.question, values)
    part = rm._masked_terms(pick(a.question), values)
    out = []
    for c, sh in zip(a.cands, shapes, strict=True):
        own = rm._masked_terms(c.question, sh.values)
        out.append(rm.masked_overlap(part, own) - rm.masked_overlap(whole, own))
    return rm._group_max(out, rm.twins(a.cands, shapes))


def swapped(col: dict[int, list[float]]) -> dict[int, list[tuple[float, ...]]]:
    """The shipped rows with the last sentence's column (the 13th) replaced by ``col``."""
    return {n: [r[:12] + (v,) + r[13:] for r, v in zip(rows, col[n], strict=True)]
            for n, rows in SHIPPED.items()}


def part_e() -> dict[str, dict[str, dict[str, float]]]:
    full = {id(a): sentence_overlaps(a, rm.last_full_sentence) for a in study.tuning}
    unless = {id(a): sentence_overlaps(a, last_question_unless_followed) for a in study.tuning}
    return {
        "shipped": studylib.line("shipped (17)", study.oof(SHIPPED)),
        "last full sentence": studylib.line("last full sentence", study.oof(swapped(full))),
        "last question unless followed": studylib.line("last question unless followed",
                                                       study.oof(swapped(unless))),
    }


studylib.table({"A": part_a, "B": part_b, "C": part_c, "D": part_d, "E": part_e}[PART]())
