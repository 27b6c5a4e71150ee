"""Recall in a long-lived process: the MCP server and the watcher's daemon share this.

:func:`wrenmem.recall.backends.recall_many` is right for a CLI process: it syncs the index
with the files (a stat of every pair file) before an index search, and grep reads its caches
and builds its BM25F index, on every call. A process that answers many calls keeps instead:

- grep's parsed pairs and built indexes (:class:`~wrenmem.recall.bm25f.WarmGrep`), made
  again only when a file may have changed;
- the catch-up sync of the index, run only when a file may have changed;

both decided by :class:`~wrenmem.watch.freshness.Freshness` (file-system events and a
fence, so a change made just before a call is seen by that call). The embedding model stays
loaded by ``get_embedder``. The answers are ``recall_many``'s (tests compare them).

Index searches run under the index lock, so no answer comes from a half-applied sync: with
a writer holding it, the search uses the last version seen whole, and with none known yet
the call is :class:`Refused` (the caller answers the ordinary way).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from wrenmem.errors import ExtraMissingError, LockTimeoutError, WrenmemError
from wrenmem.lock import index_lock
from wrenmem.recall.backends import BACKENDS, catch_up, choose_backend, require_questions
from wrenmem.recall.bm25f import WarmGrep
from wrenmem.recall.hits import Filters, Hit, RecallResult, above
from wrenmem.settings import Settings
from wrenmem.watch.freshness import Freshness

log = logging.getLogger(__name__)
BUSY_WAIT = 0.05  # seconds a search waits for a writer before using the last whole version
INDEX, GREP = "index", "grep"  # what Freshness tracks for us


class Refused(Exception):
    """This call cannot be answered warm without risk (the caller does it the usual way)."""


class WarmRecall:
    """``recall_many`` for a long-lived process. ``freshness`` None: sync on every call."""

    def __init__(self, freshness: Freshness | None = None):
        self.freshness = freshness
        self._grep: WarmGrep | None = None
        self._grep_lock = threading.Lock()
        self._complete: dict[tuple[str, Settings], int] = {}  # last index version seen whole
        self._kept: dict[tuple[str, Settings], Any] = {}  # backends open on that version

    def recall(self, settings: Settings, queries: Sequence[str], k: int, filters: Filters,
               notify: Callable[[str], None] | None = None, *, min_score: float = 0.0
               ) -> list[RecallResult]:
        """What ``recall_many(settings, queries, k, filters, notify, min_score=…)``
        returns, notes included; Refused while a writer holds a fresh index."""
        require_questions(queries)
        say = notify or (lambda _message: None)
        name = choose_backend(settings, say)
        if name not in BACKENDS:
            raise ExtraMissingError(f"the {name} backend is not available in this install")
        if name == "grep":
            backend, hits = self._grep_search(settings, list(queries), k, filters, say)
        else:
            backend, hits = self._index_search(name, settings, list(queries), k, filters, say)
        return above([RecallResult(q, backend, tuple(h))
                      for q, h in zip(queries, hits, strict=True)], min_score,
                     settings.prefer_verified)

    def _stale(self, key: str) -> tuple[bool, float]:
        """(may files have changed since ``key`` was last synced, when this check began)."""
        started = time.monotonic()
        return self.freshness is None or self.freshness.needs_sync(key), started

    def _synced(self, key: str, started: float) -> None:
        if self.freshness is not None:
            self.freshness.synced(started, key)

    def _grep_search(self, settings: Settings, queries: list[str], k: int, filters: Filters,
                     say: Callable[[str], None]) -> tuple[str, list[list[Hit]]]:
        with self._grep_lock:
            stale, started = self._stale(GREP)
            if stale or self._grep is None or self._grep.settings != settings:
                self._grep = WarmGrep(settings)
                self._grep.index(filters)  # reads the files: a snapshot as of ``started``
                self._synced(GREP, started)
            grep = self._grep
            hits = grep.search(queries, k, filters)  # its per-filter indexes are shared
        for error in grep.skipped:
            say(f"{error.location()}: {error.reason} (skipped)")
        return grep.name, hits

    def _index_search(self, name: str, settings: Settings, queries: list[str], k: int,
                      filters: Filters, say: Callable[[str], None]
                      ) -> tuple[str, list[list[Hit]]]:
        """The search ``recall_many`` does, under the index lock.

        The backend object (its open table) is kept between calls while no file changed
        (opening the table is about a sixth of a warm search); a catch-up sync, a writer
        holding the lock, a shared or remote index, or an error gets a new one, as a CLI
        process would have. A handle kept across a sync would keep the version (and the
        full-text index) it first read."""
        key = (name, settings)
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(index_lock(settings, timeout=BUSY_WAIT))
            except LockTimeoutError:
                version = self._complete.get(key)
                if version is None:
                    raise Refused("the index is being written and no whole version is known "
                                  "yet") from None
                backend: Any = BACKENDS[name](settings)  # its own: the pin is its handle's
                backend.pin(version)
                return backend.name, backend.search(queries, k, filters)
            stale, started = self._stale(INDEX)
            shared = settings.is_reader or settings.remote_index  # always says how far behind
            if stale or shared:
                self._catch_up(settings, started, say)
            try:
                return self._search_kept(key, settings, queries, k, filters, keep=not shared)
            except WrenmemError as e:
                if stale or shared:
                    raise
                log.info("warm recall: %s; syncing first", e)  # e.g. another process reset it
                self._catch_up(settings, time.monotonic(), say)
                return self._search_kept(key, settings, queries, k, filters, keep=True)
        raise AssertionError("unreachable")

    def _catch_up(self, settings: Settings, started: float, say: Callable[[str], None]
                  ) -> None:
        """The catch-up sync (it re-enters the index lock the caller holds); kept backends
        are dropped, as the sync may have made a new version."""
        note = catch_up(settings)
        if note:
            say(note)
        self._synced(INDEX, started)
        self._kept.clear()

    def _search_kept(self, key: tuple[str, Settings], settings: Settings, queries: list[str],
                     k: int, filters: Filters, *, keep: bool) -> tuple[str, list[list[Hit]]]:
        backend: Any = self._kept.pop(key, None) or BACKENDS[key[0]](settings)
        version = backend.table().version
        hits = backend.search(queries, k, filters)
        self._complete[key] = version
        if keep:
            self._kept[key] = backend
        return backend.name, hits
