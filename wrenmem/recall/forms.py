"""What a team's own pairs say about the form of SQL a question asks for.

Every stored pair ties the words of its question to the form of its SQL: "how many" to
``COUNT``, "each" to ``GROUP BY``, "the most" to ``ORDER BY … DESC LIMIT``, in whatever
language the team writes. The *form reader* learns those ties from the pairs a search sees,
at recall, with no word list: a pair's SQL has *labels* (:data:`LABELS`: each SQL keyword,
aggregate and comparison it uses, and how many ``SELECT``\\ s, ``JOIN``\\ s and ``AND``\\ s);
for each of the asked question's search terms, the pairs whose terms hold it are counted
per label, and naive Bayes turns the counts into the log-odds of each label for this
question (:func:`label_weights`). A candidate's *form fit* is the sum of the log-odds of
the labels its SQL has (:func:`fit`): how well its form matches what the team's questions
with these words were answered with. The ranking model reads its gap to the best
candidate's (:mod:`wrenmem.recall.model`).

A new question with no stored answer still has words the memory has seen answered: the
form reader is what ranks the pairs of the structure it asks for above those that merely
share its topic.

The labels come from a keyword lexer over the SQL text (:mod:`wrenmem.sql.labels`: string
literals and quoted names skipped), about 20 times cheaper than sqlglot's tokenizer, because
every pair a search sees is read, not only the candidates; a saved recall copy holds them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from wrenmem.sql.labels import LABELS, label_matrix, labels
from wrenmem.textsearch import is_cjk_term

__all__ = ["AGGREGATES", "LABELS", "Tally", "aggregate_fit", "fit", "label_matrix",
           "label_weights", "labels", "tally_of"]

SMOOTH = 0.5  # added to every count (and twice to every total)
KEPT_TERMS = 4_096  # terms whose counts a tally keeps (a warm process meets them again)
_NOT_KEPT = object()
# the labels of the aggregate a query answers with: what a count, a total or an extreme asks
# for and a list does not (the decisive word of "How many X" against "What X")
AGGREGATES = frozenset(n for n, label in enumerate(LABELS)
                       if label in ("count", "sum", "avg", "min", "max"))
CLIP = 1e-4  # a label's probability is kept within [CLIP, 1 - CLIP]: log-odds within ±9.2


class Tally:
    """The pairs a search sees, as the form reader counts them.

    ``matrix``: :func:`label_matrix` of every row; ``allowed``: a bool mask of the rows the
    search sees (None: all); ``rows_with``: a term's rows (numbers into ``matrix``, any
    order, dead or filtered rows included: the mask drops them), or None."""

    def __init__(self, matrix: Any, allowed: Any, rows_with: Callable[[str], Any]):
        import numpy as np

        self.matrix = matrix
        self.allowed = None if allowed is None else np.asarray(allowed, dtype=bool)
        self._rows_with = rows_with
        seen = matrix if self.allowed is None else matrix[self.allowed]
        self.count = len(seen)
        self.totals = seen.sum(axis=0, dtype=np.int64)
        self._terms: dict[str, Any] = {}  # each term's counts, as a warm process meets it

    def term(self, term: str) -> tuple[int, Any] | None:
        """(how many pairs the search sees hold ``term``, how many of them have each label),
        or None when none does."""
        import numpy as np

        kept = self._terms.get(term, _NOT_KEPT)  # (one get: another thread may clear)
        if kept is not _NOT_KEPT:
            return kept
        found: tuple[int, Any] | None = None
        rows = self._rows_with(term)
        if rows is not None and len(rows):
            rows = np.asarray(rows, dtype=np.int64)
            if self.allowed is not None:
                rows = rows[self.allowed[rows]]
            if len(rows):
                found = (len(rows), self.matrix[rows].sum(axis=0, dtype=np.int64))
        if len(self._terms) >= KEPT_TERMS:
            self._terms.clear()
        self._terms[term] = found
        return found


def tally_of(rows: Sequence[tuple[str, str]]) -> Tally:
    """The tally of pairs given as (search terms, space-separated; SQL): what the index
    holds per pair (:func:`wrenmem.index.table.lexical_terms`)."""
    postings: dict[str, list[int]] = {}
    for n, (terms, _sql) in enumerate(rows):
        for term in set((terms or "").split()):
            postings.setdefault(term, []).append(n)
    return Tally(label_matrix(sql for _terms, sql in rows), None, postings.get)


def label_weights(tally: Tally, terms: Iterable[str], *, exponent: float = 0.5,
                  pairs_only: bool = True) -> Any:
    """The log-odds of each label for a question with these search terms (naive Bayes
    over the terms the tally holds, their sum scaled by one over their number to the power
    ``exponent``, the square root, as the terms of one question are far from independent).
    A Chinese, Japanese or Korean run is searched as its characters and its character
    pairs: where the question has pairs, its single characters are not counted again
    (unless not ``pairs_only``). The two keywords are for the studies in ``bench/suite``."""
    import numpy as np

    terms = sorted(set(terms))
    if pairs_only and any(len(t) == 2 and is_cjk_term(t) for t in terms):
        # its characters are in its pairs
        terms = [t for t in terms if not (len(t) == 1 and is_cjk_term(t))]
    n = tally.count
    have = tally.totals.astype(np.float64)
    lack = n - have
    prior = (have + SMOOTH) / (n + 2 * SMOOTH)
    z = np.log(prior) - np.log1p(-prior)
    evidence = np.zeros(len(LABELS))
    used = 0
    for term in terms:
        found = tally.term(term)
        if found is None:
            continue
        holding, with_label = found
        without = holding - with_label
        evidence += (np.log((with_label + SMOOTH) / (have + 2 * SMOOTH))
                     - np.log((without + SMOOTH) / (lack + 2 * SMOOTH)))
        used += 1
    if used:  # math.sqrt for the shipped exponent: exact, where ** 0.5 may miss a bit
        z = z + evidence / (math.sqrt(used) if exponent == 0.5 else used ** exponent)
    p = np.clip(1.0 / (1.0 + np.exp(-z)), CLIP, 1.0 - CLIP)
    return np.log(p) - np.log1p(-p)


def fit(weights: Any, sql: str) -> float:
    """The form fit of a candidate's SQL: the sum of its labels' log-odds (``weights``:
    :func:`label_weights`' array, or its ``tolist()``, the same floats read faster)."""
    return math.fsum(float(weights[n]) for n in labels(sql))


def aggregate_fit(weights: Any, sql: str) -> float:
    """The form fit of a candidate's aggregates alone (:data:`AGGREGATES`): whether the
    team's pairs with the question's words were answered with the aggregates this SQL has
    (a count for "how many", none for a list), without the other labels' noise."""
    return math.fsum(float(weights[n]) for n in labels(sql) if n in AGGREGATES)
