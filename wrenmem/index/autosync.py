"""Keep the derived index in step after the CLI writes or deletes pair files.

``store``, ``forget`` and ``import`` call :func:`after_write` with the paths they touched.
When the project already has an index, those pairs are synced at once (a scoped sync:
only they are planned, embedded and written). When it has none, nothing is built here: a
grep-only user never pays for a model, and the first vector/hybrid recall or
``wrenmem sync`` builds the index from the files anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from wrenmem.index.sync import sync_pairs
from wrenmem.index.table import index_exists
from wrenmem.lance import index_unavailable
from wrenmem.settings import Settings

if TYPE_CHECKING:
    from wrenmem.embedders import Embedder

log = logging.getLogger(__name__)
LOCK_TIMEOUT = 30.0


def after_write(settings: Settings, paths: Sequence[str], embedder: Embedder | None = None
                ) -> str | None:
    """Bring the index up to date for ``paths`` (relative pair paths) if an index exists
    (with ``embedder`` instead of the setting's when given).

    Returns a short note for the user, or None. Never raises for index trouble: the files
    are already written and are the truth; a later ``sync`` repairs the index.
    """
    if not paths:
        return None

    if settings.is_reader:
        return "index: not updated (this checkout only reads the shared index; its writer syncs)"
    try:
        if index_unavailable(settings) is not None or not index_exists(settings):
            return None

        report = sync_pairs(settings, paths=list(paths), lock_timeout=LOCK_TIMEOUT,
                            embedder=embedder)
    except Exception as e:  # never fail the write because of the derived index
        log.debug("after_write sync failed", exc_info=True)
        return f"index not updated ({e}); run `wrenmem sync`"
    if report.noop:
        return None
    touched = len(report.added) + len(report.changed) + len(report.renamed)
    parts = []
    if touched:
        parts.append(f"{touched} pair(s) indexed ({report.embedded} embedded)")
    if report.removed:
        parts.append(f"{len(report.removed)} removed")
    if report.rebuilt:
        parts.append(f"index rebuilt: {report.rebuild_reason}")
    return "index: " + ", ".join(parts) if parts else None
