"""Does a warm recall need its catch-up sync? File-system events say, so an unchanged project
is not walked on every call (docs/watcher.md, "fence").

A long-lived process (the MCP server, the watcher's daemon) keeps a watchdog observer on the
knowledge folder, the manifest's folder and the project root, and syncs only when a relevant
event arrived since its last sync, when that sync is older than ``MAX_AGE`` (events can be
lost, e.g. on network mounts), or when no observer could start. "No event yet" is not "no
change": :meth:`Freshness.needs_sync` first puts a fence (:meth:`WatchdogSource.fence`).
Each warm thing (the index, grep's snapshot) is its own ``key``. A key registered with
:meth:`Freshness.keep_fresh` is refreshed in the background shortly before it gets too old
while questions keep coming, so a question never pays for the ``MAX_AGE`` walk.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from wrenmem.settings import Settings
from wrenmem.watch.loop import KNOWLEDGE, WatchdogSource, classify_path

log = logging.getLogger(__name__)
MAX_AGE = 30.0
ACTIVE = 600.0  # seconds after a question during which registered keys are kept fresh
AHEAD = 5.0  # a background refresh runs this long before its key's sync gets too old


class Freshness:
    """``needs_sync(key)`` before a recall; ``synced(since, key)`` after its catch-up sync."""

    def __init__(self, settings: Settings, *, max_age: float = MAX_AGE, poll: bool = False):
        self.settings = settings
        self.max_age = max_age
        self._lock = threading.Lock()
        self._clean: dict[str, float] = {}  # key -> when its last sync began (monotonic)
        self._refresh: dict[str, Callable[[], None]] = {}  # see keep_fresh
        self._asked: float | None = None  # the last question's needs_sync (monotonic)
        self._closed = threading.Event()
        self._wake = threading.Event()
        self._keeper: threading.Thread | None = None
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
        return self.stale(key)[0]

    def stale(self, *keys: str) -> tuple[bool, ...]:
        """:meth:`needs_sync` of each of ``keys``, behind one fence: what one request
        checks (the index, then the vocabulary of its shown scores) is as of one moment."""
        with self._lock:
            if threading.current_thread() is not self._keeper:
                # a question: keep the keys fresh a while. The keeper looks again at every
                # question (waking it only when questions start left it asleep past a
                # key's due time when a sync's own events made the key stale under load)
                self._asked = time.monotonic()
                self._wake.set()
            if self.source is None:
                return (True,) * len(keys)
            fenced = (any(self._clean.get(key) is not None for key in keys)
                      and self.source.fence())
            self._drain()
            now = time.monotonic()
            return tuple(not fenced or (since := self._clean.get(key)) is None
                         or now - since > self.max_age for key in keys)

    def synced(self, started_at: float, key: str = "index") -> None:
        """A sync of ``key`` that began at ``started_at`` (monotonic) finished: changes from
        before it are accounted for; those that arrived during it still count."""
        with self._lock:
            if self.source is not None and self._drain():
                return  # changed meanwhile: still stale
            self._clean[key] = started_at
            if key in self._refresh:
                self._wake.set()  # the keeper's next wait is counted from this sync

    def _drain(self) -> bool:
        """Take the events that arrived; any relevant one makes every key stale."""
        assert self.source is not None
        changes = self.source.get(0) or []
        if any(path and classify_path(self.settings, path, is_dir) not in (None, KNOWLEDGE)
               for path, is_dir in changes):  # knowledge files are read on every call
            self._clean.clear()
            return True
        return False

    def keep_fresh(self, key: str, refresh: Callable[[], None]) -> None:
        """Run ``refresh()`` (the catch-up sync a stale ``key`` needs, which ends with
        :meth:`synced`) in a background thread before ``key`` gets older than ``max_age``,
        while questions come. Without file-system events every question syncs anyway, so
        nothing is kept."""
        with self._lock:
            if self.source is None:
                return
            self._refresh[key] = refresh
            if self._keeper is None:
                self._keeper = threading.Thread(target=self._keep, name="wrenmem-freshness",
                                                daemon=True)
                self._keeper.start()

    def _due(self, now: float) -> tuple[list[str], float]:
        """(the registered keys to refresh now, seconds until the next may be due)."""
        with self._lock:
            if self._asked is None or now - self._asked > ACTIVE:
                return [], self.max_age  # idle: woken by the next question
            lead = max(self.max_age - AHEAD, self.max_age / 2)
            due, wait = [], self.max_age
            for key in self._refresh:
                since = self._clean.get(key)
                if since is None:
                    continue  # never synced, or a change: the next question syncs it
                left = since + lead - now
                if left <= 0:
                    due.append(key)
                else:
                    wait = min(wait, left)
            return due, wait

    def _keep(self) -> None:
        while not self._closed.is_set():
            due, wait = self._due(time.monotonic())
            for key in due:
                try:
                    self._refresh[key]()
                except Exception as e:  # the question that finds it stale syncs itself
                    log.info("background freshness check of %s failed: %s", key, e)
            if due:  # synced, or not (a writer held the lock): look again in a second
                wait = 1.0
            self._wake.wait(max(wait, 0.05))
            self._wake.clear()

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        if self.source is not None:
            self.source.close()
