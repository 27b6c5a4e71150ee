"""The recall backends by name, the choice among them, and the catch-up sync before an index
search (:class:`wrenmem.recall.recaller.Recaller` runs them)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from wrenmem.errors import DiskFullError, LockTimeoutError
from wrenmem.lazy import lazy
from wrenmem.recall.bm25f import GrepBackend
from wrenmem.recall.hits import RecallBackend, require_questions
from wrenmem.settings import Settings
from wrenmem.storage.lance import index_unavailable

if TYPE_CHECKING:
    from wrenmem.index import sync as index_sync
    from wrenmem.index.team import reader, replica
    from wrenmem.recall import vector
else:  # imported on first use (wrenmem/lazy.py)
    vector = lazy("wrenmem.recall.vector")
    index_sync = lazy("wrenmem.index.sync")
    reader = lazy("wrenmem.index.team.reader")
    replica = lazy("wrenmem.index.team.replica")

if TYPE_CHECKING:
    from wrenmem.embed.embedders import Embedder
    from wrenmem.recall.glossary import Glossary

# The hybrid fusion: (question, the candidates' signals, draft_sql=None, unknown=0.0) -> their
# scores (unknown: the share of the question's pieces the embedder does not know).
Scorer = Callable[..., list[float]]

log = logging.getLogger(__name__)
__all__ = ["BACKENDS", "Scorer", "catch_up", "choose_backend", "require_questions"]
SYNC_LOCK_TIMEOUT = 10.0

# The index backends and the sync (LanceDB, the model) are imported only when an index
# backend answers, so grep recall starts as fast as a scan (tests/test_api.py pins it).


class Owner(Protocol):
    """What a backend takes from its :class:`~wrenmem.recall.recaller.Recaller`."""

    @property
    def embedder(self) -> Embedder: ...

    def glossary(self) -> Glossary | None: ...

    def scorer(self, fusion: str | None = None) -> Scorer: ...

    def second_reader(self) -> Any: ...


# Backend name -> factory(settings, the recaller that owns the backend).
BACKENDS: dict[str, Callable[[Settings, Owner], RecallBackend]] = {
    "grep": lambda settings, _owner: GrepBackend(settings),
    "vector": lambda settings, owner: vector.VectorBackend(settings, owner.embedder),
    "hybrid": lambda settings, owner: vector.HybridBackend(
        settings, owner.embedder, owner.glossary, owner.scorer(settings.fusion),
        owner.second_reader()),
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


def catch_up(settings: Settings, embedder: Embedder | None = None) -> str | None:
    """Bring the index up to date with the files before a search (a no-op sync costs a few
    milliseconds). With another writer holding the lock, answer from the last committed
    version rather than wait. A reader of a shared index never writes: it answers from the
    last committed version and returns a note saying how far that is behind its files.
    ``embedder``: the one the recaller holds, when it was handed one (else the setting's)."""
    if settings.is_reader:
        return reader.behind_note(settings)

    try:
        report = index_sync.sync_pairs(settings, lock_timeout=SYNC_LOCK_TIMEOUT, embedder=embedder)
    except LockTimeoutError:
        log.warning("recall: another process is updating the index; answering from the "
                    "last committed version")
        return None
    except DiskFullError as e:  # the files are the truth; the last version still answers
        return (f"recall: {e.short}; answering from the index's last complete version, "
                "which may miss recent edits (free some space and run `wrenmem sync`)")
    if report.embedded:
        log.info("recall: indexed %d new or changed pair(s) first", report.embedded)
    if settings.remote_index and not report.noop:
        replica.refresh(settings, max_age=0)  # search what was just written
    return None
