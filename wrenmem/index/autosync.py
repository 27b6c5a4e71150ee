"""Keep the index in step after ``store``, ``forget`` and ``import`` write pair files: a
scoped sync of those paths when an index exists; none is built here (a grep-only user never
pays for a model)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from wrenmem.index.report import SyncReport
from wrenmem.index.table import index_exists
from wrenmem.settings import Settings
from wrenmem.storage.lance import index_unavailable

if TYPE_CHECKING:
    from wrenmem.embed.embedders import Embedder

log = logging.getLogger(__name__)
LOCK_TIMEOUT = 30.0


@dataclass(frozen=True)
class IndexUpdate:
    """What a write did to the index (``store --json``'s ``index``): ``status`` is
    ``"updated"``, ``"unchanged"``, ``"none"`` (no index yet), ``"reader"`` or ``"failed"``
    (``error`` says why; a later ``sync`` repairs the index)."""

    status: str
    indexed: int = 0
    embedded: int = 0
    removed: int = 0
    rebuilt: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def note(self) -> str | None:
        """The one line a person reads, or None when there is nothing to say."""
        if self.status == "reader":
            return ("index: not updated (this checkout only reads the shared index; its "
                    "writer syncs)")
        if self.status == "failed":
            return f"index not updated ({self.error}); run `wrenmem sync`"
        parts = []
        if self.indexed:
            parts.append(f"{self.indexed} pair(s) indexed ({self.embedded} embedded)")
        if self.removed:
            parts.append(f"{self.removed} removed")
        if self.rebuilt:
            parts.append(f"index rebuilt: {self.rebuilt}")
        return "index: " + ", ".join(parts) if parts else None


def update_after_write(settings: Settings, paths: Sequence[str],
                       embedder: Embedder | None = None, *,
                       handoff: Callable[[Sequence[str]], SyncReport | None] | None = None
                       ) -> IndexUpdate:
    """Bring the index up to date for ``paths`` (relative pair paths) if an index exists.
    ``handoff``: asked first to run that sync in the running watcher (None: sync here).
    Never raises for index trouble: the files are written and are the truth."""
    if settings.is_reader:
        return IndexUpdate("reader")
    if not paths:
        return IndexUpdate("unchanged")
    try:
        if index_unavailable(settings) is not None or not index_exists(settings):
            return IndexUpdate("none")

        report = handoff(paths) if handoff is not None else None
        if report is None:
            from wrenmem.index.sync import sync_pairs

            report = sync_pairs(settings, paths=list(paths), lock_timeout=LOCK_TIMEOUT,
                                embedder=embedder)
    except Exception as e:  # never fail the write because of the derived index
        log.debug("after_write sync failed", exc_info=True)
        return IndexUpdate("failed", error=str(e))
    return index_update(report)


def index_update(report: SyncReport) -> IndexUpdate:
    """What a sync limited to the written paths did, as :class:`IndexUpdate` says it."""
    if report.noop:
        return IndexUpdate("unchanged")
    touched = len(report.added) + len(report.changed) + len(report.renamed)
    rebuilt = (report.rebuild_reason or "full rebuild") if report.rebuilt else None
    if not (touched or report.removed or rebuilt):
        return IndexUpdate("unchanged")
    return IndexUpdate("updated", indexed=touched, embedded=report.embedded if touched else 0,
                       removed=len(report.removed), rebuilt=rebuilt)
