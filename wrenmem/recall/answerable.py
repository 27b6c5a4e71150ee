"""The shown score: how likely a recalled pair answers the question, nothing stored included.

The ranking model (:mod:`wrenmem.recall.model`) is fitted on questions that some stored pair
answers: its score says which pair answers best, and how sure it is *given* that one does.
Asked something no pair is about ("How many employees do we have?" of a shop's pairs), it
still finds the closest pair and can score it high. This module maps the ranking's score,
once per question after ranking, to the chance that the hit answers the question, with
evidence the ranking weights do not set: the share of the question's search terms
(:func:`wrenmem.textsearch.tokenize`, its function words dropped) that the best hit's
question, its other phrasings and its SQL's names do not contain; the share no stored pair
contains, and of those the share no stored word even begins like (four letters: a word the
project has nothing like, not an inflection or a typo of one of its words); and whether the
question names nothing that any hit's SQL uses (no table, column or value of the
candidates: a question about the team's data names some of them). A Chinese question's
words also count as covered (and as naming) through their English senses (the CC-CEDICT
glossary, :mod:`wrenmem.recall.glossary`), so a cross-language twin keeps its score. A
question that quotes a conversation first is read by its last full sentence
(:func:`wrenmem.recall.model.last_full_sentence`), as the ranking reads it.

The map is a logistic over :data:`FEATURES`, fitted by ``bench/calibrate.py`` on the public
suite's TUNING cases: answered-before questions (a stored pair has their SQL) and questions
of other databases asked of each store (nothing stored answers them).
Its numbers live in ``answerable.json`` beside this module; refit after the ranking changes.
The features are per question, and the map is increasing in the ranking's score, so the
order of the hits never changes: only what their scores mean.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from wrenmem.recall.glossary import has_han
from wrenmem.recall.hits import Hit
from wrenmem.recall.model import last_full_sentence
from wrenmem.recall.sqltree import sql_names

if TYPE_CHECKING:
    from wrenmem.recall.glossary import Glossary
    from wrenmem.settings import Settings

CONSTANTS_FILE = "answerable.json"
VERSION = 2
FEATURES = ("rank log-odds", "uncovered by the best hit", "unknown to the project",
            "unknown to the project, unlike its words", "in letters the project lacks",
            "names nothing the hits' SQL uses")
PREFIX = 4  # an unknown word whose first letters no project word shares is unlike its words
LOGIT_CAP = 12.0  # log-odds: the ranking's scores are rounded to 6 digits
MIN_SLOPE = 0.05  # the map's least weight of the ranking's log-odds: it keeps the order


@dataclass(frozen=True)
class Calibration:
    """The fitted logistic: an intercept and a weight per :data:`FEATURES` entry."""

    weights: tuple[float, ...]
    intercept: float
    meta: dict[str, Any]

    def logit(self, row: Sequence[float]) -> float:
        return self.intercept + math.fsum(w * x for w, x in zip(self.weights, row, strict=True))


def parse(data: dict[str, Any]) -> Calibration:
    """Check and read a constants document: this code's version and features, in order."""
    if data.get("version") != VERSION:
        raise ValueError(f"{CONSTANTS_FILE}: version {data.get('version')!r}, the code reads "
                         f"{VERSION}")
    if tuple(data.get("features", ())) != FEATURES:
        raise ValueError(f"{CONSTANTS_FILE}: features {data.get('features')}, the code "
                         f"computes {list(FEATURES)}")
    weights = tuple(float(w) for w in data["weights"])
    return Calibration(weights, float(data["intercept"]), dict(data.get("meta", {})))


@lru_cache(maxsize=1)
def load() -> Calibration:
    """The shipped constants (``wrenmem/recall/answerable.json``)."""
    text = resources.files("wrenmem.recall").joinpath(CONSTANTS_FILE).read_text("utf-8")
    return parse(json.loads(text))


# -- evidence ----------------------------------------------------------------------------

@lru_cache(maxsize=8192)
def _terms(text: str, sql: bool = False) -> frozenset[str]:
    from wrenmem.textsearch import tokenize

    return frozenset(tokenize(text, sql=sql))


def pair_terms(question: str, also: Sequence[str], sql: str) -> frozenset[str]:
    """The search terms of a pair: its question, its other phrasings, its SQL's names."""
    terms = _terms(sql, True) | _terms(question)
    for phrasing in also:
        terms |= _terms(phrasing)
    return terms


def hit_terms(hit: Hit) -> frozenset[str]:
    return pair_terms(hit.question, hit.also, hit.sql)


def uncovered(question: str, covered: frozenset[str],
              english: Sequence[frozenset[str]] = ()) -> float:
    """The share of the question's search terms not in ``covered``; with ``english`` (per
    glossary word of a Chinese question, its senses' terms) the lower of that and the
    share of those words no sense of which is in ``covered``. 0 for a question without
    search terms (nothing to judge by)."""
    asked = _terms(question)
    share = len(asked - covered) / len(asked) if asked else 0.0
    if english:
        share = min(share, sum(1 for senses in english if not senses & covered)
                    / len(english))
    return share


def project_vocabulary(settings: Settings) -> frozenset[str]:
    """The search terms of every stored pair of the project (:func:`pair_terms`): read
    from ``.wrenmem/vocabulary.bin`` while the pair files are those it was made from (the
    stat walk of a no-op sync, :func:`wrenmem.recall.grepsnap.listing_key`, says so),
    else made from the files (the catalog's scan) and saved. A walk too recent to vouch
    for the files (a file saved within the last seconds) reads them again."""
    from wrenmem.fs import statedir
    from wrenmem.fs.fsutil import read_marshal, write_marshal
    from wrenmem.pairs.catalog import scan
    from wrenmem.recall.grepsnap import listing_key

    key = listing_key(settings)
    path = settings.state_dir / statedir.VOCABULARY
    if key is not None:
        held = read_marshal(path)
        if (isinstance(held, dict) and held.get("key") == key
                and isinstance(held.get("terms"), list)):
            return frozenset(held["terms"])
    terms: frozenset[str] = frozenset().union(*(pair_terms(p.nl, p.also, p.sql)
                                                for p in scan(settings).pairs))
    if key is not None:
        write_marshal(path, {"key": key, "terms": sorted(terms)})
    return terms


def english_senses(question: str, glossary: Callable[[], Glossary | None] | None
                   ) -> list[frozenset[str]]:
    """Per glossary word of a Chinese (Japanese) question, its English senses' search
    terms; none for other questions, or without a glossary."""
    if glossary is None or not has_han(question):
        return []
    found = glossary()  # read on the first Chinese question only
    if found is None:
        return []
    return [frozenset(t for term in senses for t in _terms(term))
            for senses in found.translate(question)]


_ASCII = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")


@lru_cache(maxsize=8)
def _letters(vocabulary: frozenset[str]) -> frozenset[str]:
    """The characters of a vocabulary's terms (its scripts, its letters with accents); all
    of a-z and the digits once it has one of them (a few pairs need not use every letter)."""
    found = frozenset("".join(vocabulary))
    return found | _ASCII if found & _ASCII else found


@lru_cache(maxsize=8)
def _prefixes(vocabulary: frozenset[str]) -> frozenset[str]:
    """The first :data:`PREFIX` characters of a vocabulary's terms that long (made once per
    vocabulary: about 5 ms at 10,000 pairs)."""
    return frozenset(t[:PREFIX] for t in vocabulary if len(t) >= PREFIX)


def _unlike(term: str, prefixes: frozenset[str]) -> bool:
    """A term no vocabulary term begins like: not an inflection or a typo of one ("citizen"
    of "citizenship", "averge" of "average"), but a word the project has nothing like."""
    return len(term) < PREFIX or term[:PREFIX] not in prefixes


def question_features(question: str, hits: Sequence[Hit], vocabulary: frozenset[str],
                      glossary: Callable[[], Glossary | None] | None = None
                      ) -> tuple[float, float, float, float, float]:
    """The evidence of :data:`FEATURES` after the ranking's score, for ``question``'s hits:
    the share of its search terms the best hit lacks; the share no stored pair has
    (``vocabulary``: the terms of every stored pair, :func:`pair_terms`); of its terms, the
    share no pair has though written in letters the pairs use and that no pair's word
    begins like (a word the project does not know and has nothing like, "employees" asked
    of a shop's pairs; an inflection or a typo of a known word is not counted), and the
    share written with a letter no pair uses (another language, whose words the pairs
    would not have even if they answer it: a Vietnamese question of English pairs); and
    1 when none of its terms (nor, for a Chinese question, their English senses) is a name
    the hits' SQL uses (:func:`wrenmem.recall.sqltree.sql_names`: the tables, columns and
    values the candidates read: a question about data names some of them, unless it asks
    about something none of them has)."""
    if not hits:
        return (1.0, 1.0, 1.0, 0.0, 1.0)
    question = last_full_sentence(question)  # a conversation passed on: what it asks last
    english = english_senses(question, glossary)
    asked = _terms(question)
    letters = _letters(vocabulary)
    prefixes = _prefixes(vocabulary)
    own = [t for t in asked if letters.issuperset(t)]
    n = max(len(asked), 1)
    names = frozenset().union(*(sql_names(h.sql) for h in hits))
    named = bool(asked & names) or any(senses & names for senses in english)
    return (uncovered(question, hit_terms(hits[0]), english),
            uncovered(question, vocabulary, english),
            sum(1 for t in own if t not in vocabulary and _unlike(t, prefixes)) / n,
            (len(asked) - len(own)) / n,
            0.0 if named else 1.0)


def row(score: float, evidence: Sequence[float]) -> tuple[float, ...]:
    """The :data:`FEATURES` of a hit of ranking score ``score``."""
    p = min(max(score, 1e-9), 1 - 1e-9)
    rank = max(-LOGIT_CAP, min(LOGIT_CAP, math.log(p / (1 - p))))
    return (rank, *evidence)


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def shown(calibration: Calibration, score: float, evidence: Sequence[float]) -> float:
    """The shown score of a hit of ranking score ``score``, given its question's evidence."""
    return _sigmoid(calibration.logit(row(score, evidence)))


def calibrate(question: str, hits: Sequence[Hit], vocabulary: frozenset[str],
              glossary: Callable[[], Glossary | None] | None = None,
              calibration: Calibration | None = None) -> tuple[Hit, ...]:
    """``hits`` (best first, as ranked) with their shown scores; the order is kept."""
    if not hits:
        return tuple(hits)
    c = calibration or load()
    evidence = question_features(question, hits, vocabulary, glossary)
    if c.weights[0] < MIN_SLOPE:  # (a fit never gives it; a hand-edited file could)
        raise ValueError(f"{CONSTANTS_FILE}: the map would not keep the ranking's order")
    return tuple(replace(h, score=round(shown(c, h.score, evidence), 6)) for h in hits)
