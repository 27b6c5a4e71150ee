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
                      for q, h in zip(queries, hits, strict=True)], min_score)

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
        hits = grep.search(queries, k, filters)
        for error in grep.skipped:
            say(f"{error.location()}: {error.reason} (skipped)")
        return grep.name, hits

    def _index_search(self, name: str, settings: Settings, queries: list[str], k: int,
                      filters: Filters, say: Callable[[str], None]
                      ) -> tuple[str, list[list[Hit]]]:
        """A new backend object per call, as a CLI process has: what stays warm is the
        process (imports) and the embedder, the expensive part. A LanceDB handle kept
        across calls keeps the full-text index it first read, and would rank ties
        differently from a fresh process."""
        backend: Any = BACKENDS[name](settings)
        key = (name, settings)
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(index_lock(settings, timeout=BUSY_WAIT))
            except LockTimeoutError:
                version = self._complete.get(key)
                if version is None:
                    raise Refused("the index is being written and no whole version is known "
                                  "yet") from None
                backend.table().checkout(version)
                return backend.name, backend.search(queries, k, filters)
            # A reader of a shared index always asks how far it is behind (its note).
            stale, started = self._stale(INDEX)
            if not stale and not (settings.is_reader or settings.remote_index):
                try:
                    self._complete[key] = backend.table().version
                    return backend.name, backend.search(queries, k, filters)
                except WrenmemError as e:  # e.g. the index was reset by another process
                    log.info("warm recall: %s; syncing first", e)
                    backend = BACKENDS[name](settings)
                    started = time.monotonic()
            note = catch_up(settings)  # the sync re-enters the lock we hold
            if note:
                say(note)
            self._synced(INDEX, started)
            self._complete[key] = backend.table().version
            return backend.name, backend.search(queries, k, filters)
        raise AssertionError("unreachable")
