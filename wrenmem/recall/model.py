"""The ranking model: one calibrated score in [0, 1] per candidate pair.

A score estimates the probability that the pair is a right example for the question: the
same SQL when a stored pair answers it (*answered before*), else a pair of the same
structure (*a new question*: the same skeleton, other values). Both tasks are in the data
the model is fitted on, so ``min_score = 0.5`` keeps pairs more likely right than wrong in
either (docs/recall.md has the reliability curve).

Every feature is computed from the two backends' evidence and from the parsed SQL
(:mod:`wrenmem.recall.sqlshape`); none depends on a list of words of one language. Values
count only as agreement: a pair whose values the question states gains, and a pair loses
only to the extent that *another* candidate states the asked values better, so when no
stored pair states them (the usual new question) differing values cost nothing.
Structure counts through agreement among the candidates: a skeleton shared by several of
the closest pairs is more likely the one asked for. Pairs with the same SQL on the same
datasource (twins) are one answer: they share their best evidence and one score.
The SQL form a question asks for is read from the team's own pairs: how well a candidate's
form fits what the pairs with the question's words were answered with
(:mod:`wrenmem.recall.forms`), as a gap to the best candidate's.

The fitted numbers live in ``weights.json`` beside this module, written by
``bench/fit_model.py`` with the feature names, a version and a fingerprint of the fitting
data; :func:`load` refuses a file whose features are not this module's.

``fusion`` (the setting) picks the model: ``learned`` (this), ``rrf`` (reciprocal rank
fusion) or ``linear`` (a weighted sum of the cosine and BM25), each mapped through a
logistic fitted on the same data, so every fusion's score means the same.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Protocol

from wrenmem.recall import sqlshape
from wrenmem.recall.sqltree import name_agreement, tree_terms
from wrenmem.textsearch import tokenize

WEIGHTS_FILE = "weights.json"
VERSION = 8
FUSIONS = ("learned", "rrf", "linear")
RRF_K = 60
SUPPORT_TOP = 10  # the closest distinct answers whose skeletons vote
AGGREGATE_SCALE = 2.0  # log-odds: an aggregate fit this far from 0 is mostly saturated
SUPPORT_SCALE = 0.05  # cosine units: a vote weighs exp((cosine - best) / SUPPORT_SCALE)
# where a sentence ends: a run of terminal punctuation followed by a space or the end (so
# 3.5 is not cut), a full-width terminator (no space follows in CJK text), or a line break
_SENTENCE_END = re.compile(r"[.?!;\u061f\u0964]+(?=\s|$)|[\u3002\uff1f\uff01\uff1b]+|\n+")
# a sentence with the marks that end it ('' for the last one when nothing does)
_PIECE = re.compile(rf"(.*?)({_SENTENCE_END.pattern}|$)", re.S)
# marks that end a full sentence (a statement, a question, an exclamation), in any script;
# `;` and a line break end a piece that may be a note ("X refers to Y;")
_FULL_STOPS = frozenset(".?!\u3002\uff1f\uff01\u061f\u0964")

FEATURES = (
    "translated bm25 / best",
    "values stated - best of its skeleton",
    "skeleton support",
    "(cosine - best) x uncovered",
    "bm25 / best x best coverage",
    "structure bm25 / best",
    "masked question overlap",
    "bm25 / best x (1 - best cosine)",
    "skeleton support x (1 - best overlap)",
    "(cosine - best) x best coverage",
    "dense lead x best coverage",
    "structure bm25 / best x best coverage",
    "last full sentence overlap - overlap",
    "(cosine - best) x unknown pieces",
    "bm25 / best x unknown pieces",
    "form fit - best",
    "form fit - best x (1 - best coverage)",
    "names asked in sql - best",
    "-(names not asked - least)",
    "aggregate fit - best",
    "names asked in sql - best x best overlap",
    "aggregate fit - best x best overlap",
    "count asked, sql lists - best",
    "count not asked, sql only counts - best",
    "order asked - best",
    "or asked - best",
)
DRAFT_FEATURES = ("base logit", "draft same skeleton", "draft similarity", "draft same sql")
# the second reader (wrenmem.recall.second): a question the embedder cannot read whole
SECOND_FEATURES = ("base logit", "second cosine - best")


class Evidence(Protocol):
    """What the backends know about one candidate (:class:`wrenmem.recall.fusion.Signals`)."""

    @property
    def dense(self) -> float | None: ...
    @property
    def lexical(self) -> float | None: ...
    @property
    def coverage(self) -> float: ...
    @property
    def sql(self) -> str: ...
    @property
    def question(self) -> str: ...
    @property
    def datasource(self) -> str: ...
    @property
    def translated(self) -> float | None: ...
    @property
    def structure(self) -> float | None: ...
    @property
    def form(self) -> float | None: ...
    @property
    def aggregate(self) -> float | None: ...


@dataclass(frozen=True)
class Model:
    """One fitted scorer: an intercept and a weight per feature."""

    name: str
    features: tuple[str, ...]
    weights: tuple[float, ...]
    intercept: float

    def logit(self, row: Sequence[float]) -> float:
        if len(row) != len(self.weights):
            raise ValueError(f"{self.name}: {len(row)} features for {len(self.weights)} "
                             "weights")
        return self.intercept + math.fsum(map(operator.mul, self.weights, row))


@dataclass(frozen=True)
class Weights:
    """The contents of ``weights.json``."""

    version: int
    fingerprint: str
    models: dict[str, Model]
    meta: dict[str, Any]


@dataclass(frozen=True)
class Tilt:
    """A project's own fit of the learned ranking (:mod:`wrenmem.recall.adapt`): added to
    each candidate's ranking score, the weight of each of its :data:`TILT_TERMS` times the
    term (all zero: the shipped model alone)."""

    keyword: float = 0.0
    dense: float = 0.0
    structure: float = 0.0
    names: float = 0.0
    extra: float = 0.0
    form: float = 0.0

    def __bool__(self) -> bool:
        return any(self.weights())

    def weights(self) -> tuple[float, float, float, float, float, float]:
        return (self.keyword, self.dense, self.structure, self.names, self.extra, self.form)


# what a project's fit weighs (Tilt's fields, in order): the BM25 and the cosine against the
# best, the value-free BM25 against the best, the two terms of :func:`name_agreement`, and
# the SQL form read against the question (:data:`FORM_FEATURES`' part of the shipped score:
# a weight of -1 takes it out, -0.5 halves it)
TILT_TERMS = ("bm25 / best", "cosine - best", "structure bm25 / best",
              "names asked in sql - best", "-(names not asked - least)", "sql form")
FORM_FEATURES = FEATURES[-4:]  # recall/sqltree.py's terms (weights version 8)


CALIBRATION_FEATURES = ("rank score", "rank score - best", "lead of the best")
LEAD_CAP = 5.0  # log-odds: a best answer this far ahead of the next (or alone) is far ahead
EXPECTED = {
    "learned": FEATURES,
    "learned-calibration": CALIBRATION_FEATURES,
    "draft": DRAFT_FEATURES,
    "second": SECOND_FEATURES,
    "rrf": ("rrf",),
    "linear": ("cosine", "bm25 / best"),
    "linear-calibration": ("linear",),
    "vector": ("cosine", "cosine - best"),
    "grep": ("bm25 / best", "bm25 / best possible"),
}


def parse_weights(data: dict[str, Any]) -> Weights:
    """Check and read a weights document: every model this code uses, with exactly the
    features this code computes, in order."""
    if data.get("version") != VERSION:
        raise ValueError(f"weights version {data.get('version')!r}, the code reads {VERSION}")
    models = {}
    for name, features in EXPECTED.items():
        entry = data.get("models", {}).get(name)
        if entry is None:
            raise ValueError(f"weights: no model {name!r}")
        if tuple(entry["features"]) != features:
            raise ValueError(f"weights: model {name!r} has features {entry['features']}, "
                             f"the code computes {list(features)}")
        models[name] = Model(name, features, tuple(float(w) for w in entry["weights"]),
                             float(entry["intercept"]))
    return Weights(VERSION, str(data.get("fingerprint", "")), models,
                   dict(data.get("meta", {})))


@lru_cache(maxsize=1)
def load() -> Weights:
    """The shipped weights (``wrenmem/recall/weights.json``)."""
    text = resources.files("wrenmem.recall").joinpath(WEIGHTS_FILE).read_text("utf-8")
    return parse_weights(json.loads(text))


def sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def logit(p: float) -> float:
    """The log-odds of a probability (the raw form of a fused score)."""
    p = min(max(p, 1e-12), 1 - 1e-12)
    return math.log(p / (1 - p))


# -- evidence per answer --------------------------------------------------------------

def twins(candidates: Sequence[Evidence], shapes: Sequence[sqlshape.Shape] | None = None
          ) -> list[int]:
    """Per candidate, a group number shared with its twins (the same SQL up to formatting
    on the same datasource); a candidate without SQL is its own group. ``shapes``: the
    candidates' shapes, when the caller has them."""
    groups: dict[tuple[str, str], int] = {}
    out = []
    for n, c in enumerate(candidates):
        key = ((c.datasource, (shapes[n] if shapes is not None else _shape(c)).key)
               if c.sql.strip() else ("", f"\0{n}"))
        out.append(groups.setdefault(key, len(groups)))
    return out


def _shape(c: Evidence) -> sqlshape.Shape:
    return sqlshape.shape(c.sql, getattr(c, "dialect", None) or None)


def _group_max(values: Sequence[float], group: Sequence[int]) -> list[float]:
    best: dict[int, float] = {}
    for v, g in zip(values, group, strict=True):
        best[g] = v if g not in best or v > best[g] else best[g]  # (max(): 3.5x the time)
    return [best[g] for g in group]


def _ranks(values: Sequence[float | None], group: Sequence[int]) -> list[int]:
    """1-based rank of each candidate's answer by its best value (0: no value); ties share
    the better rank."""
    best: dict[int, float] = {}
    for v, g in zip(values, group, strict=True):
        if v is not None:
            best[g] = max(best.get(g, -math.inf), v)
    ordered = sorted(best.values(), reverse=True)
    out = []
    for g in group:
        if g not in best:
            out.append(0)
            continue
        out.append(1 + sum(1 for v in ordered if v > best[g]))
    return out


def _lead(values: Sequence[float], group: Sequence[int]) -> list[float]:
    """For the best answer's members: how far it leads the next answer (0 for others)."""
    best: dict[int, float] = {}
    for v, g in zip(values, group, strict=True):
        best[g] = max(best.get(g, -math.inf), v)
    ordered = sorted(best.values(), reverse=True)
    if not ordered:
        return [0.0] * len(values)
    top, second = ordered[0], (ordered[1] if len(ordered) > 1 else ordered[0])
    return [top - second if best[g] == top else 0.0 for g in group]


@lru_cache(maxsize=65536)
def _question_terms(text: str) -> frozenset[str]:
    return frozenset(tokenize(text))


@lru_cache(maxsize=65536)
def _masked_terms(text: str, values: tuple[str, ...]) -> frozenset[str]:
    """A question's search terms without those of the values it states."""
    terms = _question_terms(text)
    drop: set[str] = set()
    for v in values:
        if _states(text.lower(), v):
            drop |= _question_terms(v)
    return terms - drop


def masked_overlap(asked: frozenset[str], stored: frozenset[str]) -> float:
    """Jaccard overlap of two questions' terms, their values masked."""
    union = asked | stored
    return len(asked & stored) / len(union) if union else 0.0


def stated(question: str, values: Sequence[str]) -> float:
    """The share of ``values`` the (lower-cased) question states, as whole words or
    numbers; 0 for a query without values."""
    if not values:
        return 0.0
    text = question.lower()
    hits = sum(1 for v in values if _states(text, v))
    return hits / len(values)


def _states(text: str, value: str) -> bool:
    word = value.strip("%").strip()
    if not word:
        return False
    at = text.find(word)
    while at >= 0:
        before = text[at - 1] if at > 0 else " "
        after = text[at + len(word)] if at + len(word) < len(text) else " "
        # a word boundary for Latin letters and digits; CJK text has no spaces to look for
        if not word.isascii() or not (_latin(before) or _latin(after)):
            return True
        at = text.find(word, at + 1)
    return False


def _latin(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def _support(dense: Sequence[float], group: Sequence[int], keys: Sequence[str]) -> list[float]:
    """Per candidate, the weight of the other closest answers whose skeleton is its own,
    as a share of all their weight: the structure the neighbourhood agrees on."""
    best_of: dict[int, tuple[float, str]] = {}
    for d, g, k in zip(dense, group, keys, strict=True):
        if g not in best_of or d > best_of[g][0]:
            best_of[g] = (d, k)
    top = sorted(best_of.items(), key=lambda item: (-item[1][0], item[0]))[:SUPPORT_TOP]
    if not top:
        return [0.0] * len(dense)
    lead = top[0][1][0]
    weight = {g: math.exp((d - lead) / SUPPORT_SCALE) for g, (d, _k) in top}
    total = sum(weight.values())
    by_key: dict[str, float] = {}
    for g, (_d, k) in top:
        by_key[k] = by_key.get(k, 0.0) + weight[g]
    return [(by_key.get(k, 0.0) - weight.get(g, 0.0)) / total
            for g, k in zip(group, keys, strict=True)]


def sentences(question: str) -> list[tuple[str, str]]:
    """The question's sentences, each with the marks that end it ('' for none)."""
    return [(text, end) for text, end in _PIECE.findall(question) if text.strip()]


def last_full_sentence(question: str) -> str:
    """The sentence that asks the question: the last one ending with a full stop, a question
    mark or an exclamation mark (:data:`_FULL_STOPS`, any script), as an agent quotes the
    earlier questions first and notes end with `;` or nothing ("X refers to Y; Z means W");
    else the last sentence; the whole question when it has one."""
    pieces = sentences(question)
    if len(pieces) < 2:
        return question
    full = [text for text, end in pieces if any(ch in _FULL_STOPS for ch in end)]
    return full[-1] if full else pieces[-1][0]


def features(question: str, candidates: Sequence[Evidence], unknown: float = 0.0
             ) -> list[tuple[float, ...]]:
    """The :data:`FEATURES` of each candidate for ``question``; ``unknown``: the share of
    the question's pieces the embedder does not know
    (:func:`wrenmem.embed.embedders.unknown_share`), how far its cosines are to be trusted."""
    return evidence(question, candidates, unknown, terms=False)[0]


def evidence(question: str, candidates: Sequence[Evidence], unknown: float = 0.0,
             terms: bool = True) -> tuple[list[tuple[float, ...]], list[tuple[float, ...]]]:
    """(:func:`features`, each candidate's :data:`TILT_TERMS`), twins sharing their best:
    the terms are what a project's fit tilts the ranking by (:class:`Tilt`); ``terms``
    false: not computed (an empty list)."""
    if not candidates:
        return [], []
    shapes = [_shape(c) for c in candidates]
    group = twins(candidates, shapes)
    dense = _group_max([c.dense if c.dense is not None else -1.0 for c in candidates], group)
    lexical = _group_max([c.lexical or 0.0 for c in candidates], group)
    coverage = _group_max([c.coverage for c in candidates], group)
    translated = _group_max([c.translated or 0.0 for c in candidates], group)
    structure = _group_max([c.structure or 0.0 for c in candidates], group)
    form = _group_max([c.form or 0.0 for c in candidates], group)
    best_form = max(form)
    # saturated: whether the aggregates agree with the question's words, not by how much
    aggregate = _group_max([math.tanh((c.aggregate or 0.0) / AGGREGATE_SCALE)
                            for c in candidates], group)
    best_aggregate = max(aggregate)
    asked, extra = name_agreement(question, shapes)
    asked = _group_max(asked, group)
    extra = [-e for e in _group_max([-e for e in extra], group)]
    best_asked, least_extra = max(asked), min(extra)
    best_structure = max(structure)
    values = [stated(question, s.values) for s in shapes]
    tree = _tree_gaps(tree_terms(question, shapes), group)
    best_dense = max(dense)
    best_lex = max(lexical)
    best_translated = max(translated)
    skeletons = [f"{c.datasource}\0{s.skeleton}" for c, s in zip(candidates, shapes,
                                                                  strict=True)]
    # values decide between pairs of one structure, never between structures
    best_values: dict[str, float] = {}
    for key, v in zip(skeletons, values, strict=True):
        best_values[key] = max(best_values.get(key, 0.0), v)
    support = _support(dense, group, skeletons)
    best_cov = max(coverage)
    relative = [v / best_lex if best_lex > 0 else 0.0 for v in lexical]
    dense_lead = _lead(dense, group)
    all_values = tuple(sorted({v for sh in shapes for v in sh.values}))
    asked_masked = _masked_terms(question, all_values)
    stored_masked = [_masked_terms(c.question, sh.values)
                     for c, sh in zip(candidates, shapes, strict=True)]
    own_overlap = [masked_overlap(asked_masked, t) for t in stored_masked]
    overlap = _group_max(own_overlap, group)
    last = last_full_sentence(question)
    if last is question:
        last_gain = [0.0] * len(candidates)
    else:  # each pair's own gain (twins share their best), not a gap between two bests
        last_masked = _masked_terms(last, all_values)
        last_gain = _group_max([masked_overlap(last_masked, t) - o
                                for t, o in zip(stored_masked, own_overlap, strict=True)],
                               group)
    best_overlap = max(overlap)
    rows: list[tuple[float, ...]] = []
    for n in range(len(candidates)):
        lex = relative[n]
        gap = dense[n] - best_dense
        shaped = structure[n] / best_structure if best_structure > 0 else 0.0
        form_gap = form[n] - best_form
        rows.append((
            translated[n] / best_translated if best_translated > 0 else 0.0,
            values[n] - best_values[skeletons[n]], support[n], gap * (1.0 - best_cov),
            lex * best_cov, shaped, overlap[n], lex * (1.0 - best_dense),
            support[n] * (1.0 - best_overlap), gap * best_cov, dense_lead[n] * best_cov,
            shaped * best_cov, last_gain[n], gap * unknown, lex * unknown,
            form_gap, form_gap * (1.0 - best_cov), asked[n] - best_asked,
            least_extra - extra[n], aggregate[n] - best_aggregate,
            (asked[n] - best_asked) * best_overlap,
            (aggregate[n] - best_aggregate) * best_overlap, *tree[n]))
    if not terms:
        return rows, []
    form_weights = load().models["learned"].weights[-len(FORM_FEATURES):]
    return rows, [(relative[n], dense[n] - best_dense,
                   structure[n] / best_structure if best_structure > 0 else 0.0,
                   asked[n] - best_asked, least_extra - extra[n],
                   math.fsum(map(operator.mul, form_weights, tree[n])))
                  for n in range(len(candidates))]


def _tree_gaps(rows: Sequence[tuple[float, ...]], group: Sequence[int]
               ) -> list[tuple[float, ...]]:
    """:func:`sqltree.tree_terms` with twins sharing their best, as gaps to the best
    candidate's."""
    cols = [_group_max(col, group) for col in zip(*rows, strict=True)]
    out = [[c - max(col) for c in col] for col in cols]
    return [tuple(r) for r in zip(*out, strict=True)]


def draft_features(base: float, draft: sqlshape.Shape, candidate: sqlshape.Shape
                   ) -> tuple[float, ...]:
    return (base, float(draft.skeleton == candidate.skeleton),
            sqlshape.similarity(draft, candidate), float(draft.key == candidate.key))


def raw_scores(fusion: str, question: str, candidates: Sequence[Evidence],
               weights: Weights | None = None, unknown: float = 0.0,
               tilt: Tilt | None = None) -> list[float]:
    """Each candidate's log-odds under ``fusion`` (before any draft); ``tilt``: the
    project's fit of the learned ranking (:class:`Tilt`)."""
    w = weights or load()
    if fusion == "learned":
        return calibrated(w, ranking(question, candidates, w, unknown, tilt))
    group = twins(candidates)
    if fusion == "rrf":
        dense_rank = _ranks([c.dense for c in candidates], group)
        lex_rank = _ranks([c.lexical for c in candidates], group)
        model = w.models["rrf"]
        return [model.logit(((1 / (RRF_K + d) if d else 0.0) + (1 / (RRF_K + k) if k else 0.0),))
                for d, k in zip(dense_rank, lex_rank, strict=True)]
    if fusion == "linear":
        dense = _group_max([c.dense if c.dense is not None else -1.0 for c in candidates],
                           group)
        lexical = _group_max([c.lexical or 0.0 for c in candidates], group)
        best_lex = max(lexical, default=0.0)
        mix = w.models["linear"]
        calibration = w.models["linear-calibration"]
        return [calibration.logit((mix.logit((d, lx / best_lex if best_lex > 0 else 0.0)),))
                for d, lx in zip(dense, lexical, strict=True)]
    raise ValueError(f"unknown fusion {fusion!r}: one of {', '.join(FUSIONS)}")


def ranking(question: str, candidates: Sequence[Evidence], weights: Weights | None = None,
            unknown: float = 0.0, tilt: Tilt | None = None) -> list[float]:
    """The learned ranking score of each candidate (before the calibration), tilted by a
    project's fit."""
    w = weights or load()
    # beyond the largest share of the fitting data the weights would extrapolate
    unknown = min(unknown, float(w.meta.get("unknown_max", 0.0)))
    model = w.models["learned"]
    if not tilt:
        return [model.logit(row) for row in features(question, candidates, unknown)]
    rows, terms = evidence(question, candidates, unknown)
    tilted = tilt.weights()
    return [model.logit(row) + math.fsum(map(operator.mul, tilted, t))
            for row, t in zip(rows, terms, strict=True)]


def calibration_rows(ranking: Sequence[float]) -> list[tuple[float, float, float]]:
    """The :data:`CALIBRATION_FEATURES` of each ranking score: the score, its gap to the
    best, and for the best answer (and its twins) its lead on the next, capped; 0 else."""
    best = max(ranking, default=0.0)
    below = [r for r in ranking if r < best]
    lead = min(best - max(below), LEAD_CAP) if below else LEAD_CAP
    return [(r, r - best, lead if r == best else 0.0) for r in ranking]


def calibrated(weights: Weights, ranking: Sequence[float]) -> list[float]:
    """Log-odds of being right from the ranking model's scores: the ranking (a conditional
    logit, fitted to put the right answer first) says which candidate leads, the
    calibration (a logistic over the score, its gap to the best and the best one's lead)
    how likely it is."""
    model = weights.models["learned-calibration"]
    return [model.logit(row) for row in calibration_rows(ranking)]


def score(question: str, candidates: Sequence[Evidence], *, fusion: str = "learned",
          draft_sql: str | None = None, draft_dialect: str | None = None,
          weights: Weights | None = None, unknown: float = 0.0,
          tilt: Tilt | None = None) -> list[float]:
    """The score of each candidate in [0, 1]; with ``draft_sql`` (an agent's draft) the pairs
    closest to it in structure gain (:data:`DRAFT_FEATURES`); ``unknown``, ``tilt``: above."""
    if not candidates:
        return []
    w = weights or load()
    raw = raw_scores(fusion, question, candidates, w, unknown, tilt)
    if draft_sql and draft_sql.strip():
        draft = sqlshape.shape(draft_sql, draft_dialect)
        model = w.models["draft"]
        raw = [model.logit(draft_features(r, draft, _shape(c)))
               for r, c in zip(raw, candidates, strict=True)]
    return [sigmoid(r) for r in raw]


class Scorer:
    """The scorer a hybrid backend calls: :func:`score` under one ``fusion``, its weights
    read on first use and kept. ``tilt``: gives the project's fit of the learned ranking
    (:func:`wrenmem.recall.adapt.tilt_of`, which reads it again only when its file
    changed), asked at each call."""

    def __init__(self, fusion: str = "learned", weights: Weights | None = None,
                 tilt: Callable[[], Tilt | None] | None = None):
        if fusion not in FUSIONS:
            raise ValueError(f"unknown fusion {fusion!r}: one of {', '.join(FUSIONS)}")
        self.fusion = fusion
        self._weights = weights
        self._tilt = tilt if fusion == "learned" else None

    def __call__(self, question: str, candidates: Sequence[Evidence], *,
                 draft_sql: str | None = None, draft_dialect: str | None = None,
                 unknown: float = 0.0) -> list[float]:
        return score(question, candidates, fusion=self.fusion, draft_sql=draft_sql,
                     draft_dialect=draft_dialect, weights=self._weights, unknown=unknown,
                     tilt=self._tilt() if self._tilt is not None else None)


def dense_score(cosines: Sequence[float], weights: Weights | None = None) -> list[float]:
    """The vector backend's cosines as calibrated scores, in the same order."""
    model = (weights or load()).models["vector"]
    best = max(cosines, default=0.0)
    return [sigmoid(model.logit((c, c - best))) for c in cosines]


def lexical_score(bm25: Sequence[float], best_possible: float,
                  weights: Weights | None = None) -> list[float]:
    """The grep backend's BM25F scores as calibrated scores, in the same order
    (``best_possible``: :meth:`wrenmem.textsearch.Bm25Index.best_possible`)."""
    model = (weights or load()).models["grep"]
    best = max(bm25, default=0.0)
    return [sigmoid(model.logit((s / best if best > 0 else 0.0,
                                 s / best_possible if best_possible > 0 else 0.0)))
            for s in bm25]
