"""Does a recall need its catch-up sync? File-system events say, so an unchanged project is
not walked on every call.

A catch-up sync that finds nothing to do still stats every pair file: at 10,000 files that is
most of a recall's time. The server keeps a watchdog observer (the watcher's event source)
on the knowledge folder, the manifest's folder and the project root, and syncs only when a
relevant event arrived since the last sync, when the last sync is older than ``MAX_AGE``
(events can be lost, e.g. on network mounts), or when no observer could start.
"""

from __future__ import annotations

import logging
import threading
import time

from wrenmem.settings import Settings
from wrenmem.watch.loop import WatchdogSource, classify_path

log = logging.getLogger(__name__)
MAX_AGE = 30.0


class Freshness:
    """``needs_sync()`` before a recall; ``synced(since)`` after its catch-up sync."""

    def __init__(self, settings: Settings, *, max_age: float = MAX_AGE):
        self.settings = settings
        self.max_age = max_age
        self._lock = threading.Lock()
        self._dirty = True
        self._synced_at: float | None = None
        self.source: WatchdogSource | None = WatchdogSource(settings, notify=log.info)
        try:
            self.source.start()
        except Exception as e:  # no inotify and no polling: sync before every recall
            log.info("mcp: no file-system events (%s); syncing before every recall", e)
            self.source = None

    def needs_sync(self) -> bool:
        """True when files may have changed since the last catch-up sync."""
        with self._lock:
            if self.source is None:
                return True
            changes = self.source.get(0) or []
            if any(path and classify_path(self.settings, path, is_dir)
                   for path, is_dir in changes):
                self._dirty = True
            age = None if self._synced_at is None else time.monotonic() - self._synced_at
            return self._dirty or age is None or age > self.max_age

    def synced(self, started_at: float) -> None:
        """A catch-up sync that began at ``started_at`` (monotonic) finished: events from
        before it are accounted for; those that arrived during it still count."""
        with self._lock:
            changes = self.source.get(0) if self.source is not None else None
            self._dirty = any(path and classify_path(self.settings, path, is_dir)
                              for path, is_dir in changes or ())
            self._synced_at = started_at

    def close(self) -> None:
        if self.source is not None:
            self.source.close()
