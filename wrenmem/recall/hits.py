"""The vocabulary every recall backend shares: filters in, ranked hits out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from wrenmem.pairs.pairfile import Pair


@dataclass(frozen=True)
class Filters:
    """Restrictions every backend applies before ranking."""

    datasource: str | None = None
    tags: tuple[str, ...] = ()
    source: str | None = None

    def accepts(self, pair: Pair) -> bool:
        if self.datasource is not None and pair.datasource != self.datasource:
            return False
        if self.source is not None and pair.source != self.source:
            return False
        return all(tag in pair.tags for tag in self.tags)


@dataclass(frozen=True)
class Hit:
    """One recalled pair. The same shape whatever backend produced it."""

    question: str
    sql: str
    path: str
    score: float
    source: str
    datasource: str | None = None
    dialect: str | None = None
    tags: tuple[str, ...] = ()
    backend: str = ""

    @classmethod
    def from_pair(cls, pair: Pair, score: float, backend: str) -> Hit:
        return cls(pair.nl, pair.sql, pair.path, round(score, 6), pair.source, pair.datasource,
                   pair.dialect, pair.tags, backend)

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "sql": self.sql,
            "path": self.path,
            "score": self.score,
            "source": self.source,
            "datasource": self.datasource,
            "dialect": self.dialect,
            "tags": list(self.tags),
            "backend": self.backend,
        }


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

    def search(self, queries: Sequence[str], k: int, filters: Filters) -> list[list[Hit]]: ...


# Seeds are generic examples derived from the manifest; a pair someone wrote for a similar
# question is better evidence, so a seed needs a clearly higher score to outrank it.
SEED_WEIGHT = 0.8


def rank(scored: list[tuple[float, Pair]], k: int, backend: str) -> list[Hit]:
    """Best first; ties broken by path so the order never depends on the file system."""
    scored = [(s * SEED_WEIGHT if p.source == "seed" else s, p) for s, p in scored]
    scored.sort(key=lambda sp: (-sp[0], sp[1].path))
    return [Hit.from_pair(pair, score, backend) for score, pair in scored[:k]]
