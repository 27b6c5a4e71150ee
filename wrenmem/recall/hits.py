"""The vocabulary every recall backend shares: filters in, ranked hits out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from wrenmem.errors import WrenmemError

if TYPE_CHECKING:  # not at run time: the CLI's fast path to the daemon imports this module,
    from wrenmem.pairs.pairfile import Pair  # and the pair-file parser costs tens of ms


@dataclass(frozen=True)
class Filters:
    """Restrictions every backend applies before ranking."""

    datasource: str | None = None
    tags: tuple[str, ...] = ()
    source: str | None = None
    verified: bool = False  # only pairs a person verified
    # phrasings left out, as (path, question): ``wrenmem eval`` asks a stored question
    # with itself left out of the candidates
    exclude: frozenset[tuple[str, str]] = frozenset()

    def excludes(self, path: str, question: str) -> bool:
        return bool(self.exclude) and (path, question) in self.exclude

    def accepts(self, pair: Pair) -> bool:
        return self.accepts_fields(pair.datasource, pair.source, pair.tags,
                                   VERIFIED_META if self.verified and pair.verified else None)

    def accepts_fields(self, datasource: str | None, source: str | None,
                       tags: Sequence[str] | None, meta: str | None = None) -> bool:
        if self.verified and VERIFIED_META not in (meta or ""):  # meta: the index row's
            return False
        if self.datasource is not None and datasource != self.datasource:
            return False
        if self.source is not None and source != self.source:
            return False
        return all(tag in (tags or ()) for tag in self.tags)


# How an index row's ``meta`` JSON says the pair is verified (wrenmem.index.table.pair_row).
VERIFIED_META = '"verified": true'


@dataclass(frozen=True)
class Hit:
    """One recalled pair. The same shape whatever backend produced it.

    ``score`` is in [0, 1] and means the same for every backend: an estimate of the
    probability that the pair's SQL answers the question (:mod:`wrenmem.recall.fusion`).
    ``raw_score`` is the backend's own number (BM25F, cosine, or for hybrid the fused
    logit), comparable only within one backend. ``also`` holds the other phrasings of
    the same answer: the ``also:`` list of the pair file, then the questions of its twins
    (pairs with the same SQL on the same datasource, :func:`sql_key`), which recall folds
    into this one hit; ``also_paths`` are those twins' files.
    """

    question: str
    sql: str
    path: str
    score: float
    source: str
    datasource: str | None = None
    dialect: str | None = None
    tags: tuple[str, ...] = ()
    backend: str = ""
    raw_score: float | None = None
    also: tuple[str, ...] = ()
    also_paths: tuple[str, ...] = ()
    verified: bool = False  # a person verified this pair (``wrenmem verify``), settled
    # ``verified_by`` of a verification the file only claims (not committed, not made here
    # by ``wrenmem verify``: docs/security.md#verification); never ``verified``
    claimed_by: str | None = None
    allows_writes: bool = False  # ``allow-writes: true``: opted out of the read-only rule

    @classmethod
    def from_pair(cls, pair: Pair, score: float, backend: str,
                  raw_score: float | None = None, twins: Sequence[Pair] = ()) -> Hit:
        also = dict.fromkeys(p for p in (*pair.also, *(t.nl for t in twins),
                                         *(a for t in twins for a in t.also))
                             if p != pair.nl)
        return cls(pair.nl, pair.sql, pair.path, round(score, 6), pair.source, pair.datasource,
                   pair.dialect, pair.tags, backend,
                   None if raw_score is None else round(raw_score, 6), tuple(also),
                   tuple(t.path for t in twins), pair.verified, pair.claimed_by,
                   pair.allows_writes)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
                for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Hit:
        """The hit :meth:`to_dict` gave (the daemon's reply); KeyError/TypeError if not."""
        return cls(data["question"], data["sql"], data["path"], data["score"], data["source"],
                   data["datasource"], data["dialect"], tuple(data["tags"]), data["backend"],
                   data.get("raw_score"), tuple(data.get("also") or ()),
                   tuple(data.get("also_paths") or ()), bool(data.get("verified")),
                   data.get("claimed_by"), bool(data.get("allows_writes")))


@dataclass(frozen=True)
class RecallResult:
    query: str
    backend: str
    hits: tuple[Hit, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {"query": self.query, "backend": self.backend,
                "hits": [h.to_dict() for h in self.hits]}


class RecallBackend(Protocol):
    """What every backend provides: a batch of questions in, ranked hits out."""

    name: str
    uses_index: bool  # True: ranks rows of the LanceDB index, which the caller syncs first

    def search(self, queries: Sequence[str], k: int, filters: Filters, *,
               sql: str | None = None) -> list[list[Hit]]:
        """``k`` hits per question, best first. ``sql``: the caller's draft query, for a
        scorer that reads it (``recall --sql``)."""
        ...


# Seeds are generic examples derived from the manifest; a pair someone wrote for a similar
# question is better evidence, so a seed needs a clearly higher score to outrank it.
SEED_WEIGHT = 0.8


def rank(scored: Sequence[tuple[float, Pair, float | None]], k: int, backend: str,
         query: str | None = None) -> list[Hit]:
    """The ``k`` best distinct answers of (score in [0, 1], pair, raw score), best first;
    ties broken by path, so the order never depends on the file system or the index.
    Twins (the same SQL on the same datasource, :func:`sql_key`) are one answer, scored
    as its best scoring twin; the hit shows the phrasing :func:`shown_twin` picks for
    ``query`` (its path and verified status), with the others' questions in its ``also``."""
    ordered = sorted(((s * SEED_WEIGHT if p.source == "seed" else s, p, raw)
                      for s, p, raw in scored), key=lambda spr: (-spr[0], spr[1].path))
    groups: dict[tuple[str, str], list[tuple[float, Pair, float | None]]] = {}
    for entry in ordered:
        pair = entry[1]
        key = (pair.datasource or "", sql_key(pair.sql)) if pair.sql.strip() else ("", pair.path)
        group = groups.setdefault(key, [])
        if group or len(groups) <= k:  # a twin of a kept answer, or a new one still wanted
            group.append(entry)
    best = [g for g in groups.values() if g][:k]
    hits = []
    for group in best:
        shown = shown_twin([p for _s, p, _r in group], query)
        hits.append(Hit.from_pair(group[shown][1], group[0][0], backend, group[0][2],
                                  [p for n, (_s, p, _r) in enumerate(group) if n != shown]))
    return hits


def shown_twin(twins: Sequence[Pair], query: str | None) -> int:
    """Which of an answer's twins (best scoring first) a hit shows for ``query``: the best
    scoring one written in the question's language (Chinese, Japanese or Korean, or not),
    else the best scoring one. A folded English and Chinese pair answers an English
    question with its English phrasing, that file's path and its verified status."""
    if query is None or len(twins) < 2:
        return 0
    from wrenmem.recall.fusion import is_cjk  # small; only when twins are folded

    asked = is_cjk(query)
    return next((n for n, pair in enumerate(twins) if is_cjk(pair.nl) == asked), 0)


@lru_cache(maxsize=65536)  # a warm process meets the same SQL texts call after call
def sql_key(sql: str) -> str:
    """``sql`` up to case outside quotes, spacing and a final semicolon: two pairs whose
    SQL has the same key give the same answer. (Split on quotes, not a regular
    expression: grep folds every candidate, thousands per question.)"""
    text = sql.strip().rstrip(";")
    if "'" not in text and '"' not in text:
        return " ".join(text.lower().split())
    parts = text.split("'")  # even parts are outside string literals ('' splits in two)
    for n in range(0, len(parts), 2):
        names = parts[n].split('"')  # even parts are outside quoted identifiers
        names[::2] = [" ".join(name.lower().split()) for name in names[::2]]
        parts[n] = '"'.join(names)
    return "'".join(parts)


# With the ``prefer_verified`` setting, a verified hit goes ahead of unverified hits that
# score at most this much more (scores are probabilities in [0, 1]); the scores shown stay.
PREFER_MARGIN = 0.05


def prefer_verified(results: Sequence[RecallResult], margin: float = PREFER_MARGIN
                    ) -> list[RecallResult]:
    """Each result's hits re-sorted (stably) so that a verified pair comes before an
    unverified one unless that one scores more than ``margin`` higher."""
    return [RecallResult(r.query, r.backend, tuple(sorted(
        r.hits, key=lambda h: -(h.score + (margin if h.verified else 0.0)))))
        for r in results]


def above(results: Sequence[RecallResult], min_score: float, prefer: bool = False
          ) -> list[RecallResult]:
    """The results without the hits that score below ``min_score`` (with ``prefer``, the
    ``prefer_verified`` setting, re-sorted by :func:`prefer_verified`)."""
    if prefer:
        results = prefer_verified(results)
    if min_score <= 0:
        return list(results)
    return [RecallResult(r.query, r.backend, tuple(h for h in r.hits if h.score >= min_score))
            for r in results]


def require_questions(questions: Sequence[str]) -> None:
    """Refuse an empty question: it matches nothing, so any "hit" would be arbitrary."""
    for n, question in enumerate(questions, 1):
        if not isinstance(question, str) or not question.strip():
            where = f" (#{n})" if len(questions) > 1 else ""
            raise WrenmemError(f"question{where} is empty: there is nothing to recall")
