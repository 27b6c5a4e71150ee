"""Recall: the stored pairs most similar to a question, from whichever backend answers."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from wrenmem.errors import ExtraMissingError, LockTimeoutError, WrenmemError
from wrenmem.lance import index_unavailable
from wrenmem.recall.bm25f import GrepBackend
from wrenmem.recall.hits import Filters, RecallBackend, RecallResult, above
from wrenmem.settings import Settings

log = logging.getLogger(__name__)
SYNC_LOCK_TIMEOUT = 10.0

# The index backends and the sync are the way into LanceDB and the model: they are imported
# when an index backend answers, so grep recall (and an agent's CLI call) starts as fast as
# a scan of the files. bench/grep_speed.py measures it; tests/test_api.py pins it.


def _vector(settings: Settings) -> RecallBackend:
    from wrenmem.recall.vector import VectorBackend

    return VectorBackend(settings)


def _hybrid(settings: Settings) -> RecallBackend:
    from wrenmem.recall.vector import HybridBackend

    return HybridBackend(settings)


# Backend name -> factory.
BACKENDS: dict[str, Callable[[Settings], RecallBackend]] = {
    "grep": GrepBackend, "vector": _vector, "hybrid": _hybrid,
}


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


def require_questions(questions: Sequence[str]) -> None:
    """Refuse an empty question: it matches nothing, so any "hit" would be arbitrary."""
    for n, question in enumerate(questions, 1):
        if not isinstance(question, str) or not question.strip():
            where = f" (#{n})" if len(questions) > 1 else ""
            raise WrenmemError(f"question{where} is empty: there is nothing to recall")


def recall_many(settings: Settings, queries: Sequence[str], k: int, filters: Filters,
                notify: Callable[[str], None] | None = None, *, sync: bool = True,
                min_score: float = 0.0) -> list[RecallResult]:
    """Recall for each question, from the chosen backend, in one batch. ``sync=False``
    skips the catch-up sync, for a caller that knows no file changed since its last one.
    Hits scoring below ``min_score`` (in [0, 1], one meaning for every backend) are left
    out."""
    require_questions(queries)
    name = choose_backend(settings, notify)
    if name not in BACKENDS:
        raise ExtraMissingError(f"the {name} backend is not available in this install")
    backend = BACKENDS[name](settings)
    if backend.uses_index and sync:
        note = catch_up(settings)
        if note and notify is not None:
            notify(note)
    hits = backend.search(list(queries), k, filters)
    skipped = getattr(backend, "skipped", ())
    if skipped and notify is not None:
        for error in skipped:
            notify(f"{error.location()}: {error.reason} (skipped)")
    return above([RecallResult(q, backend.name, tuple(h))
                  for q, h in zip(queries, hits, strict=True)], min_score,
                 settings.prefer_verified)


def catch_up(settings: Settings) -> str | None:
    """Bring the index up to date with the files before a search (a no-op sync costs a few
    milliseconds). With another writer holding the lock, answer from the last committed
    version rather than wait. A reader of a shared index never writes: it answers from the
    last committed version and returns a note saying how far that is behind its files."""
    if settings.is_reader:
        from wrenmem.index.reader import behind_note  # see BACKENDS

        return behind_note(settings)
    from wrenmem.index.sync import sync_pairs  # see BACKENDS

    try:
        report = sync_pairs(settings, lock_timeout=SYNC_LOCK_TIMEOUT)
    except LockTimeoutError:
        log.warning("recall: another process is updating the index; answering from the "
                    "last committed version")
        return None
    if report.embedded:
        log.info("recall: indexed %d new or changed pair(s) first", report.embedded)
    if settings.remote_index and not report.noop:
        from wrenmem.index import replica

        replica.refresh(settings, max_age=0)  # search what was just written
    return None
