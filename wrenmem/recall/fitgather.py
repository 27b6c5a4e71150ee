"""The recall fit's probes asked of the hybrid backend itself (:mod:`wrenmem.recall.adapt`
chooses a ranking from what :func:`gather` returns): each probe's candidates, their
evidence under the shipped model and which are right, the table held in memory from the
first search."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wrenmem.recall import evaluate, model, sqlshape
from wrenmem.recall.hits import Filters

if TYPE_CHECKING:
    from wrenmem.embed.embedders import Embedder
    from wrenmem.settings import Settings

FOLDS = 5  # of the adapted ranking's cross-validation: a probe's fold is a hash of its answer


@dataclass(frozen=True)
class Gathered:
    """One question's candidates: their ranking score under the prior, their
    :data:`wrenmem.recall.model.TILT_TERMS` (twins sharing their best), and which are
    right."""

    task: str
    base: tuple[float, ...]
    terms: tuple[tuple[float, ...], ...]
    right: tuple[bool, ...]
    fold: int


def give_back() -> None:
    """Return the memory freed to the C allocator to the system (glibc's ``malloc_trim``;
    nothing elsewhere): a process about to grow again then peaks lower."""
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return
    trim(0)


class _Recorder:
    """A scorer that keeps each question's candidates (the ranking is made afterwards)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, list[Any], float]] = []

    def __call__(self, question: str, signals: Sequence[Any], *, draft_sql: str | None = None,
                 draft_dialect: str | None = None, unknown: float = 0.0) -> list[float]:
        self.seen.append((question, list(signals), unknown))
        return [0.5] * len(signals)


class _Batched:
    """An embedder whose answers for the probe questions were computed in one batch, and
    the share of unknown pieces of ``questions`` too (``share``:
    :func:`wrenmem.embed.embedders.unknown_share`): the embedder's model is not asked again
    for them (a one-shot fit lets it go)."""

    def __init__(self, embedder: Embedder, texts: Sequence[str], questions: Sequence[str] = (),
                 share: Callable[[Any, str], float] | None = None):
        self._embedder = embedder
        self.model_id = embedder.model_id
        self.dim = embedder.dim
        unique = list(dict.fromkeys(texts))
        vectors: Any = embedder.embed(unique) if unique else []
        self._known = {t: v for t, v in zip(unique, vectors, strict=True)}
        self._share = share
        self._shares = ({q: share(embedder, q) for q in dict.fromkeys(questions)}
                        if share is not None else {})

    def unknown_share(self, text: str) -> float:
        found = self._shares.get(text)
        if found is not None:
            return found
        return self._share(self._embedder, text) if self._share is not None else 0.0

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        if all(t in self._known for t in texts):
            return np.stack([self._known[t] for t in texts]) if texts else np.zeros(
                (0, self.dim), dtype=np.float32)
        return self._embedder.embed(list(texts))


def _answer_key(c: Any, by_skeleton: bool) -> tuple[str | None, str]:
    shape = sqlshape.shape(c.sql, c.dialect or None)
    return (c.datasource or None, shape.skeleton if by_skeleton else shape.key)


def gather(settings: Settings, embedder: Embedder, probes: Sequence[evaluate.Probe],
           glossary: Any = None, *, one_shot: bool = False) -> list[Gathered]:
    """Each probe's candidates and evidence, through the hybrid backend itself (its
    left-out phrasings filtered before ranking, as ``eval`` does), which holds the table in
    memory from its first search. ``one_shot`` (a process that ends after the fit): the
    embedder's model let go once the probes are embedded, and the memory freed given back
    to the system then and after the table is read (at 100,000 pairs 100 MB and more)."""
    from wrenmem.recall.vector import HybridBackend, unknown_share

    recorder = _Recorder()
    cap = settings.max_embed_chars
    batched: Any = _Batched(embedder, [p.question[:cap] for p in probes],
                            [p.question for p in probes], unknown_share)
    if one_shot:
        release = getattr(embedder, "release", None)
        if release is not None:
            release()
        give_back()
    backend = HybridBackend(settings, batched, glossary or (lambda: None), recorder)
    backend.many_searches = True
    weights = model.load()
    out = []
    for n, p in enumerate(probes):
        recorder.seen.clear()
        backend.search([p.question], 1, Filters(exclude=p.exclude))
        if one_shot and n == 0:
            give_back()  # what reading the table left in the allocator
        if not recorder.seen:
            continue
        question, signals, unknown = recorder.seen[0]
        if not signals:
            continue
        rows, terms = model.evidence(question, signals, min(
            unknown, float(weights.meta.get("unknown_max", 0.0))))
        learned = weights.models["learned"]
        right = {(ds or None, key) for ds, key in p.right}
        out.append(Gathered(
            p.task, tuple(learned.logit(r) for r in rows), tuple(terms),
            tuple(_answer_key(c, p.by_skeleton) in right for c in signals),
            int(hashlib.sha256(str(sorted(map(str, p.right))).encode()).hexdigest(), 16)
            % FOLDS))
    return out
