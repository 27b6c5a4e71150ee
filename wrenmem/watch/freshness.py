"""Does a warm recall need its catch-up sync? File-system events say, so an unchanged project
is not walked on every call.

A catch-up sync that finds nothing to do still stats every pair file: at 10,000 files that is
most of a recall's time. A long-lived process (the MCP server, the watcher's daemon) keeps a
watchdog observer (the watcher's event source) on the knowledge folder, the manifest's
folder and the project root, and syncs only when a relevant event arrived since its last
sync, when that sync is older than ``MAX_AGE`` (events can be lost, e.g. on network mounts),
or when no observer could start.

An event reaches the observer's thread a moment after the change, so "no event yet" is not
"no change" by itself. Before answering "nothing changed", :meth:`Freshness.needs_sync`
puts a fence through each watched folder (:meth:`WatchdogSource.fence`): it opens a file
there for reading and waits for that open's own event. inotify delivers one folder's events
in order, so every change made before the call has been seen by then; when the fence cannot
be put (polling, no file to open, a slow observer) the answer is "sync".

Each warm thing (the index, grep's snapshot) is a ``key``: one sync does not make the other
fresh.
"""

from __future__ import annotations

import logging
import threading
import time

from wrenmem.settings import Settings
from wrenmem.watch.loop import KNOWLEDGE, WatchdogSource, classify_path

log = logging.getLogger(__name__)
MAX_AGE = 30.0


class Freshness:
    """``needs_sync(key)`` before a recall; ``synced(since, key)`` after its catch-up sync."""

    def __init__(self, settings: Settings, *, max_age: float = MAX_AGE, poll: bool = False):
        self.settings = settings
        self.max_age = max_age
        self._lock = threading.Lock()
        self._clean: dict[str, float] = {}  # key -> when its last sync began (monotonic)
        # Polling cannot be fenced: with ``poll`` every recall syncs first, as without events.
        self.source: WatchdogSource | None = WatchdogSource(settings, poll=poll,
                                                            notify=log.info)
        try:
            self.source.start()
        except Exception as e:  # no inotify and no polling: sync before every recall
            log.info("no file-system events (%s); syncing before every recall", e)
            self.source = None

    def needs_sync(self, key: str = "index") -> bool:
        """True when files may have changed since the last sync of ``key``."""
        with self._lock:
            if self.source is None:
                return True
            since = self._clean.get(key)
            fenced = since is not None and self.source.fence()
            self._drain()
            since = self._clean.get(key)
            return (not fenced or since is None
                    or time.monotonic() - since > self.max_age)

    def synced(self, started_at: float, key: str = "index") -> None:
        """A sync of ``key`` that began at ``started_at`` (monotonic) finished: changes from
        before it are accounted for; those that arrived during it still count."""
        with self._lock:
            if self.source is not None and self._drain():
                return  # changed meanwhile: still stale
            self._clean[key] = started_at

    def _drain(self) -> bool:
        """Take the events that arrived; any relevant one makes every key stale."""
        assert self.source is not None
        changes = self.source.get(0) or []
        if any(path and classify_path(self.settings, path, is_dir) not in (None, KNOWLEDGE)
               for path, is_dir in changes):  # knowledge files are read on every call
            self._clean.clear()
            return True
        return False

    def close(self) -> None:
        if self.source is not None:
            self.source.close()
