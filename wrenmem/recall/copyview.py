"""What the hybrid backend reads from a held recall copy (:mod:`wrenmem.index.readcopy.held`):
the copy through recall filters (:class:`_CopyView`), what is derived once per row
(:class:`_Derived`), the hits of scored rows (:func:`rank_rows`) and the extra terms a
question brings (:func:`value_terms`, :func:`english_words`)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from wrenmem.index.readcopy import vectorscan
from wrenmem.index.readcopy.held import POSITION, RecallCopy
from wrenmem.index.table import query_terms, row_pair
from wrenmem.recall import forms, glossary, sqlshape
from wrenmem.recall import model as rank_model
from wrenmem.recall.fusion import is_cjk
from wrenmem.recall.hits import SEED_WEIGHT, Filters, Hit, rank, sql_key

if TYPE_CHECKING:
    from wrenmem.recall.glossary import Glossary


def rank_rows(scored: Sequence[tuple[float, dict[str, Any], float | None]], k: int,
              backend: str, pair_of: Callable[[dict[str, Any]], Any] | None = None,
              query: str | None = None) -> list[Hit]:
    """:func:`~wrenmem.recall.hits.rank` of the rows' pairs, a Pair made (its ``meta``
    parsed) only for the rows of the ``k`` answers it keeps: the first ``k`` distinct
    answers in its order (score as it weighs it, then path) and their twins. A subset of
    the rows in their order sorts and groups as the whole does, so the hits are the same."""
    def answer(row: dict[str, Any]) -> tuple[str, str]:  # as rank groups a pair
        sql = row["sql"]
        return (row.get("datasource") or "", sql_key(sql)) if sql.strip() else ("", row["path"])

    weighed = [s * SEED_WEIGHT if (row.get("source") or "user") == "seed" else s
               for s, row, _raw in scored]
    kept: set[tuple[str, str]] = set()
    for n in sorted(range(len(scored)), key=lambda n: (-weighed[n], scored[n][1]["path"])):
        if len(kept) >= k:
            break
        kept.add(answer(scored[n][1]))
    make = pair_of or row_pair
    return rank([(s, make(row), raw) for s, row, raw in scored if answer(row) in kept],
                k, backend, query)


class _Derived:
    """What the ranking derives from a held copy's row alone, made once per row and copy
    (a long-lived process meets the same candidates question after question): its terms
    as a set, its Pair (:func:`~wrenmem.index.table.row_pair`, which parses ``meta``).
    Rows are named by their number in the copy (``_row``); up to ``KEEP`` of each."""

    KEEP = 8_192
    KEEP_TALLIES = 8
    _held: weakref.WeakKeyDictionary[Any, _Derived] = weakref.WeakKeyDictionary()
    _lock = threading.Lock()

    def __init__(self, copy: RecallCopy):
        self.copy = copy
        self._terms: dict[int, frozenset[str]] = {}
        self._pairs: dict[int, Any] = {}
        self._tallies: dict[int, tuple[Any, forms.Tally]] = {}  # by the mask's id

    @classmethod
    def of(cls, copy: RecallCopy) -> _Derived:
        with cls._lock:
            found = cls._held.get(copy)
            if found is None:
                found = cls._held[copy] = cls(copy)
            return found

    def tally(self, allowed: Any) -> forms.Tally:
        """The form reader's tally of the copy's rows ``allowed`` sees (the label matrix
        the copy's own, saved with it or made once; the tally once per mask: the last few
        are kept)."""
        with self._lock:
            labels = self.copy.label_matrix()
            key = id(allowed)
            found = self._tallies.get(key)
            if found is not None and found[0] is allowed:
                return found[1]
        copy = self.copy
        tally = forms.Tally(labels, allowed,
                            lambda term: (copy.term_scores(term) or (None,))[0])
        with self._lock:
            if len(self._tallies) >= self.KEEP_TALLIES:
                self._tallies.clear()
            self._tallies[key] = (allowed, tally)
        return tally

    def terms(self, row: dict[str, Any]) -> frozenset[str]:
        return self._kept(self._terms, row,
                          lambda r: frozenset((r.get("terms") or "").split()))

    def pair(self, row: dict[str, Any]) -> Any:
        return self._kept(self._pairs, row, row_pair)

    def _kept(self, store: dict[int, Any], row: dict[str, Any],
              make: Callable[[dict[str, Any]], Any]) -> Any:
        """``make(row)``, kept in ``store`` by the row's number (emptied past ``KEEP``)."""
        n = row["_row"]
        found = store.get(n)
        if found is None:
            if len(store) >= self.KEEP:
                store.clear()
            found = store[n] = make(row)
        return found


def value_terms(question: str, sqls: Sequence[tuple[str, str | None]]) -> set[str]:
    """The search terms of the values that the candidates' SQL compares with and that the
    question states (:mod:`wrenmem.recall.sqlshape`)."""
    found: set[str] = set()
    seen: set[str] = set()
    for sql, dialect in sqls:
        for value in sqlshape.shape(sql, dialect).values:
            if value in seen:
                continue
            seen.add(value)
            if rank_model.stated(question, (value,)):
                found.update(query_terms(value).split())
    return found


def english_words(question: str, load_glossary: Callable[[], Glossary | None]
                  ) -> list[tuple[str, ...]]:
    """Per word of a Chinese (Japanese, Korean) question, its English search terms from
    the glossary (:mod:`wrenmem.recall.glossary`, loaded only for such a question); none
    for other questions or without the dictionary."""
    if not is_cjk(question):
        return []
    found = load_glossary()
    return found.translate(question) if found is not None else []


def _glossary_once() -> Callable[[], Glossary | None]:
    """A loader of the glossary that reads it at most once (a backend made on its own)."""
    held: list[Glossary | None] = []

    def get() -> Glossary | None:
        if not held:
            held.append(glossary.load())
        return held[0]

    return get


class _CopyView:
    """A :class:`~wrenmem.index.readcopy.held.RecallCopy` seen through recall filters: the
    dense and keyword searches of LanceDB (with its prefilter), over the copy's rows."""

    def __init__(self, copy: RecallCopy, filters: Filters):
        self.copy = copy
        self.allowed: Any = copy.live  # the rows the filters accept (None: every row)
        # the left-out phrasings apart: each probe of a fit or eval leaves out its own, so
        # a mask per whole filter would cost a pass over every row per question
        kept = replace(filters, exclude=frozenset())
        if kept != Filters():
            at = [POSITION[c] for c in ("datasource", "source", "tags", "meta")]
            self.allowed = copy.allowed_by(kept, lambda r: kept.accepts_fields(
                r[at[0]], r[at[1]], r[at[2]], r[at[3]]))
        left_out = copy.rows_of(filters.exclude) if filters.exclude else []
        if left_out:
            import numpy as np

            allowed = (np.ones(len(copy.rows), dtype=bool) if self.allowed is None
                       else self.allowed.copy())
            allowed[left_out] = False
            self.allowed = allowed

    def _id(self, n: int) -> str:
        return str(self.copy.rows[n][POSITION["id"]])

    def nearest(self, vector: Any, depth: int, columns: Sequence[str]
                ) -> list[dict[str, Any]]:
        """The ``depth`` rows of highest cosine to ``vector``, best first, as LanceDB's
        exact search returns them (``_distance`` = 1 - cosine; ties in order of id, not
        of where a row happens to sit in the index)."""
        numbers, cosines = self.copy.scan().nearest(vector, depth, self.allowed, self._id)
        wanted = [c for c in columns if c != "vector"]
        rows = []
        for n, cosine in zip(numbers.tolist(), cosines.tolist(), strict=True):
            row = self.copy.row(n, wanted)
            row["_distance"] = 1.0 - float(cosine)
            row["_row"] = n  # (the row's number in the copy: what is derived from it once)
            rows.append(row)
        return rows

    def keyword(self, terms: Sequence[str], depth: int) -> list[dict[str, Any]]:
        """The ``depth`` best rows by BM25 over their terms, as ids with a ``_score``."""
        numbers, scores = self.copy.bm25_arrays(terms, self.allowed)
        order = vectorscan.best(scores, numbers, depth, self._id)
        return [{**self.copy.row(int(numbers[i]), ["id"]), "_score": float(scores[i]),
                 "_row": int(numbers[i])} for i in order.tolist()]

    def rows_of(self, found: Sequence[dict[str, Any]], columns: Sequence[str], vector: Any
                ) -> list[dict[str, Any]]:
        """The rows :meth:`keyword` found, with ``columns`` and their ``vector``, keeping
        each one's other keys."""
        rows = []
        for original in found:
            n = original["_row"]
            row = self.copy.row(n, columns)
            row.update(original)
            row["vector"] = self.copy.matrix[n]
            rows.append(row)
        return rows
