"""What the recall backends hand the ranking model, and the rules every backend shares.

:class:`Signals` is one candidate's evidence for one question, which the ranking model
(:mod:`wrenmem.recall.model`) turns into calibrated scores. A stored question identical to
the one asked scores at least :data:`IDENTICAL` whatever the backend.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from wrenmem.textsearch import CJK_CHAR

_WORD = re.compile(r"\w", re.UNICODE)
IDENTICAL = 0.95  # the score of a stored question identical to the one asked, at least


@dataclass(frozen=True)
class Signals:
    """What the backends know about one candidate pair for one question."""

    dense: float | None = None  # cosine to the question; None: not among the dense hits
    lexical: float | None = None  # raw BM25 score; None: not among the keyword hits
    coverage: float = 0.0  # share of the question's search terms the pair contains
    sql: str = ""  # the pair's SQL (its values and ordering are compared with the question)
    question: str = ""  # the pair's stored question (an identical one scores IDENTICAL)
    datasource: str = ""  # pairs with the same SQL on the same datasource are twins
    # A Chinese (Japanese, Korean) question's words in English (wrenmem.recall.glossary):
    translated: float | None = None  # raw BM25 score of the English words; None: no hit
    # raw BM25 of the question without the values the candidates' SQL compares with
    structure: float | None = None
    dialect: str | None = None  # the pair's SQL dialect (how its SQL is parsed)
    # how well the pair's SQL form fits what the pairs searched say questions with these
    # words ask for (wrenmem.recall.forms.fit); None: not read
    form: float | None = None
    # the same for its aggregates alone (wrenmem.recall.forms.aggregate_fit)
    aggregate: float | None = None


def same_question(a: str, b: str) -> bool:
    """The same question up to case, width, spaces and punctuation."""
    return bool(a) and _normal(a) == _normal(b)


@lru_cache(maxsize=65536)  # a warm process compares every matching pair's question
def _normal(text: str) -> str:
    import unicodedata

    return "".join(_WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


def at_least_a_phrasing(score: float, asked: str, pair: Any) -> float:
    """``score``, raised when the question is one of the pair's phrasings (``nl`` or
    ``also``), as the index backends do for each phrasing's row."""
    for phrasing in (pair.nl, *pair.also):
        score = at_least_identical(score, asked, phrasing)
    return score


def at_least_identical(score: float, asked: str, stored: str) -> float:
    """``score``, raised to IDENTICAL when the stored question is the one asked.

    The tuning protocols never ask a stored question verbatim (its own file is dropped), so
    the fitted weights know nothing of that case; a pair stored for exactly this question
    is right unless someone stored two different SQL texts for it.
    """
    return max(score, IDENTICAL) if same_question(asked, stored) else score


def is_cjk(text: str) -> bool:
    """Mostly Chinese, Japanese or Korean: at least a third of its word characters."""
    words = len(_WORD.findall(text))
    return words > 0 and len(CJK_CHAR.findall(text)) * 3 >= words
