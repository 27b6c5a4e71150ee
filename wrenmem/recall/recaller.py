"""The read path of one project: a :class:`Recaller` owns everything recall keeps.

It holds the embedder (the one handed to ``Memory``, else the configured model, looked up on
first need so grep never loads one), the CC-CEDICT glossary (on the first CJK question),
the backends and their warm state. Every door (CLI, daemon, MCP) recalls through it.

- **one-shot** (no ``freshness``): the catch-up sync (a few ms when nothing changed) and a
  fresh backend per call;
- **warm** (a ``freshness``: the MCP server, the daemon): parsed pairs and open backends are
  kept, and the catch-up sync runs only when a file may have changed. Index searches run
  under the index lock: with a writer holding it, the last version seen whole answers (when
  a file was saved since, after waiting up to ``WRITER_WAIT`` for the writer, with a
  "stale" note); with none known yet the call is :class:`Refused` (answered one-shot).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from wrenmem.errors import ExtraMissingError, LockTimeoutError, WrenmemError
from wrenmem.lazy import lazy
from wrenmem.recall.backends import BACKENDS, Scorer, catch_up, choose_backend
from wrenmem.recall.bm25f import WarmGrep
from wrenmem.recall.hits import Filters, Hit, RecallBackend, RecallResult, above, require_questions
from wrenmem.settings import Settings
from wrenmem.storage.lock import index_lock

if TYPE_CHECKING:
    from wrenmem.embed import embedders
    from wrenmem.fs import statedir
    from wrenmem.index.team import replica
    from wrenmem.recall import adapt as rank_adapt
    from wrenmem.recall import answerable, second
    from wrenmem.recall import glossary as recall_glossary
    from wrenmem.recall import model as rank_model
else:  # imported on first use (wrenmem/lazy.py)
    embedders = lazy("wrenmem.embed.embedders")
    recall_glossary = lazy("wrenmem.recall.glossary")
    rank_model = lazy("wrenmem.recall.model")
    rank_adapt = lazy("wrenmem.recall.adapt")
    answerable = lazy("wrenmem.recall.answerable")
    statedir = lazy("wrenmem.fs.statedir")
    second = lazy("wrenmem.recall.second")
    replica = lazy("wrenmem.index.team.replica")

if TYPE_CHECKING:
    from wrenmem.embed.embedders import Embedder
    from wrenmem.recall.glossary import Glossary

log = logging.getLogger(__name__)
BUSY_WAIT = 0.05  # seconds a warm search waits for a writer before using the last whole version
WARM_WAIT = 60.0  # a warm-up's wait for the index lock, a writer or a request holding it
# ... and how long it waits when a file was saved since that version: the writer is most
# likely syncing that very change (the watcher), so its answer is worth the wait
WRITER_WAIT = 5.0
INDEX, GREP, VOCABULARY = "index", "grep", "vocabulary"  # what the freshness tracks
Notify = Callable[[str], None]
_UNLOADED: Any = object()


class Refused(Exception):
    """This call cannot be answered warm without risk (the caller does it the usual way)."""


class Freshness(Protocol):
    """When a warm recaller must sync first (:class:`wrenmem.watch.freshness.Freshness`)."""

    def needs_sync(self, key: str = ...) -> bool: ...

    def stale(self, *keys: str) -> tuple[bool, ...]: ...

    def synced(self, started_at: float, key: str = ...) -> None: ...


class Recaller:
    """Recall for one project's ``settings``. ``embedder``: an object with ``model_id``,
    ``dim`` and ``embed(texts)``, used instead of the configured model. ``freshness``:
    keep warm state between calls (see the module's docstring)."""

    def __init__(self, settings: Settings, *, embedder: Embedder | None = None,
                 freshness: Freshness | None = None):
        self.settings = settings
        self.freshness = freshness
        self._embedder = embedder
        self._injected = embedder
        self._glossary: Glossary | None = _UNLOADED
        self._scorers: dict[str, Scorer] = {}  # by fusion
        self._second: Any = None  # wrenmem.recall.second.SecondReader, made on first use
        self._lock = threading.Lock()  # the lazily built parts
        self._grep: WarmGrep | None = None
        self._vocabulary: dict[Settings, frozenset[str]] = {}  # kept while no file changed
        self._grep_lock = threading.Lock()
        self._complete: dict[tuple[str, Settings], int] = {}  # last index version seen whole
        self._kept: dict[tuple[str, Settings], Any] = {}  # backends open on that version
        self._generation = 0  # how many times the kept backends were dropped
        # a warm reader of a remote index: the copy's version its "behind" note was made
        # against, and the note, kept while no file changed (comparing again costs seconds)
        self._reader_seen: tuple[Any, ...] | None = None
        self._reader_note: str | None = None
        keep_fresh = getattr(freshness, "keep_fresh", None)
        if keep_fresh is not None and not (settings.is_reader or settings.remote_index):
            keep_fresh(INDEX, self._revalidate)  # the age check's walk off the questions

    # -- what it owns ---------------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        """The embedder: the one given, else the ``embedder`` setting's (model not loaded)."""
        with self._lock:
            if self._embedder is None:
                self._embedder = embedders.get_embedder(self.settings.embedder,
                                                        root=self.settings.root)
            return self._embedder

    @property
    def injected_embedder(self) -> Embedder | None:
        """The embedder handed in, if any (the write path must use it too)."""
        return self._injected

    def glossary(self) -> Glossary | None:
        """The CC-CEDICT glossary, read on first use; None without the dictionary."""
        with self._lock:
            if self._glossary is _UNLOADED:
                self._glossary = recall_glossary.load()
            return self._glossary

    def scorer(self, fusion: str | None = None) -> Scorer:
        """The hybrid backend's scorer under ``fusion`` (default: the setting):
        ``scorer(question, signals, draft_sql=None, unknown=0.0)`` gives each candidate's
        calibrated score (:class:`wrenmem.recall.model.Scorer`, the shipped weights read
        once)."""
        name = fusion or self.settings.fusion
        # the project's fit (.wrenmem/recall-fit.json) is used when made for this embedder
        # (its id is known without loading the model)
        model_id = self.embedder.model_id if self.settings.recall_fit else None
        with self._lock:
            found = self._scorers.get(name)
            if found is None:
                tilt = (rank_adapt.TiltFile(self.settings, model_id) if self.settings.recall_fit
                        else None)
                found = self._scorers[name] = rank_model.Scorer(name, tilt=tilt)
            return found

    def vocabulary(self, settings: Settings | None = None,
                   checked: tuple[bool, float] | None = None) -> frozenset[str]:
        """Every stored pair's search terms (:func:`wrenmem.recall.answerable.
        project_vocabulary`), kept by a warm recaller while no file changed. ``checked``:
        its :meth:`_stale` as the request's index search found it (behind the same fence)."""
        settings = settings or self.settings
        stale, started = checked or self._stale(VOCABULARY)
        held = self._vocabulary.get(settings)
        if held is not None and not stale:
            return held
        held = self._vocabulary[settings] = answerable.project_vocabulary(settings)
        self._synced(VOCABULARY, started)
        return held

    def second_reader(self) -> Any:
        """The second reader of questions the embedder cannot read whole
        (:class:`wrenmem.recall.second.SecondReader`; its model loads at its first use, its
        stored questions' vectors stay for the next call)."""
        with self._lock:
            if self._second is None:
                self._second = second.SecondReader(self.settings.state_dir / statedir.SECOND_CACHE)
            return self._second

    def backend(self, name: str, settings: Settings | None = None) -> RecallBackend:
        """A new backend ``name`` over ``settings`` (default: this project's), with this
        recaller's embedder and glossary."""
        if name not in BACKENDS:
            raise ExtraMissingError(f"the {name} backend is not available in this install")
        return BACKENDS[name](settings or self.settings, self)

    # -- recall ---------------------------------------------------------------------
    def recall(self, queries: Sequence[str], k: int, filters: Filters | None = None, *,
               sql: str | None = None, min_score: float = 0.0, sync: bool = True,
               notify: Notify | None = None, settings: Settings | None = None
               ) -> list[RecallResult]:
        """The ``k`` best pairs per question, from the chosen backend, in one batch.

        ``sql`` is a draft query for every question of the batch, handed to the scorer
        (``recall --sql``). ``sync=False`` skips the catch-up sync, for a caller that knows
        no file changed since its last one. Hits scoring below ``min_score`` (in [0, 1],
        one meaning for every backend) are left out. ``settings`` replaces this project's
        for one call (the daemon: a request may choose its backend)."""
        filters = filters or Filters()
        try:
            return self.recall_warm(queries, k, filters, sql=sql, min_score=min_score,
                                    sync=sync, notify=notify, settings=settings)
        except Refused:  # a writer holds the index: the one-shot way waits for it
            return self._recall_once(queries, k, filters, sql=sql, min_score=min_score,
                                     sync=sync, notify=notify, settings=settings)

    def recall_warm(self, queries: Sequence[str], k: int, filters: Filters | None = None, *,
                    sql: str | None = None, min_score: float = 0.0, sync: bool = True,
                    notify: Notify | None = None, settings: Settings | None = None
                    ) -> list[RecallResult]:
        """:meth:`recall`, but :class:`Refused` where answering warm would mean waiting
        for a writer (the daemon then lets its client answer)."""
        filters = filters or Filters()
        if self.freshness is None:
            return self._recall_once(queries, k, filters, sql=sql, min_score=min_score,
                                     sync=sync, notify=notify, settings=settings)
        settings = settings or self.settings
        require_questions(queries)
        say = notify or (lambda _message: None)
        name = choose_backend(settings, say)
        if name not in BACKENDS:
            raise ExtraMissingError(f"the {name} backend is not available in this install")
        checked: dict[str, tuple[bool, float]] = {}  # the vocabulary's, with the index's
        if name == "grep":
            used, hits = self._grep_search(settings, list(queries), k, filters, sql, say)
        else:
            used, hits = self._index_search(name, settings, list(queries), k, filters, sql,
                                            say, sync, checked)
        return self._results(queries, used, hits, min_score, settings,
                             checked.get(VOCABULARY))

    def _recall_once(self, queries: Sequence[str], k: int, filters: Filters, *,
                     sql: str | None, min_score: float, sync: bool, notify: Notify | None,
                     settings: Settings | None) -> list[RecallResult]:
        settings = settings or self.settings
        require_questions(queries)
        backend = self.backend(choose_backend(settings, notify), settings)
        if backend.uses_index and sync:
            note = catch_up(settings, self.injected_embedder)
            if note and notify is not None:
                notify(note)
        hits = backend.search(list(queries), k, filters, sql=sql)
        _say_skipped(backend, notify)
        return self._results(queries, backend.name, hits, min_score, settings)

    def _results(self, queries: Sequence[str], backend: str,
                 hits: Sequence[Sequence[Hit]], min_score: float, settings: Settings,
                 checked: tuple[bool, float] | None = None) -> list[RecallResult]:
        """The results as every door shows them. The hybrid backend's hits (with the
        ``learned`` fusion its calibration was fitted on) get their shown scores here
        (:func:`wrenmem.recall.answerable.calibrate`: the chance the hit answers the
        question, "nothing stored answers it" included; the order is the ranking's);
        then ``min_score`` and ``prefer_verified``."""
        if backend == "hybrid" and settings.fusion == "learned" and any(hits):
            try:
                vocabulary = self.vocabulary(settings, checked)
            except WrenmemError as e:  # no pair files here (a reader of a remote index)
                log.info("the shown scores are the ranking's: %s", e)
                return _results(queries, backend, hits, min_score, settings.prefer_verified)
            hits = [answerable.calibrate(q, h, vocabulary, self.glossary)
                    for q, h in zip(queries, hits, strict=True)]
        return _results(queries, backend, hits, min_score, settings.prefer_verified)

    # -- warm ----------------------------------------------------------------------
    def _stale(self, key: str) -> tuple[bool, float]:
        """(may files have changed since ``key`` was last synced, when this check began)."""
        started = time.monotonic()
        return self.freshness is None or self.freshness.needs_sync(key), started

    def _stale_with_vocabulary(self, name: str, settings: Settings
                               ) -> tuple[bool, float, tuple[bool, float] | None]:
        """:meth:`_stale` of the index and, when the hits' shown scores will need it (the
        hybrid backend's ``learned`` fusion), of the vocabulary, behind one fence."""
        if self.freshness is None or name != "hybrid" or settings.fusion != "learned":
            return (*self._stale(INDEX), None)
        started = time.monotonic()
        index, vocabulary = self.freshness.stale(INDEX, VOCABULARY)
        return index, started, (vocabulary, started)

    def _synced(self, key: str, started: float) -> None:
        if self.freshness is not None:
            self.freshness.synced(started, key)

    def _grep_search(self, settings: Settings, queries: list[str], k: int, filters: Filters,
                     sql: str | None, say: Notify) -> tuple[str, list[list[Hit]]]:
        with self._grep_lock:
            stale, started = self._stale(GREP)
            if stale or self._grep is None or self._grep.settings != settings:
                self._grep = WarmGrep(settings)
                self._grep.index(filters)  # reads the files: a snapshot as of ``started``
                self._synced(GREP, started)
            grep = self._grep
            hits = grep.search(queries, k, filters, sql=sql)  # per-filter indexes shared
        _say_skipped(grep, say)
        return grep.name, hits

    def _index_search(self, name: str, settings: Settings, queries: list[str], k: int,
                      filters: Filters, sql: str | None, say: Notify, sync: bool,
                      checked: dict[str, tuple[bool, float]] | None = None
                      ) -> tuple[str, list[list[Hit]]]:
        """The search under the index lock. The backend (its open table: a sixth of a warm
        search) is kept while no file changed; a catch-up sync, a writer holding the lock,
        a shared or remote index, or an error gets a new one (a kept handle would keep the
        version it first read)."""
        key = (name, settings)
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(index_lock(settings, timeout=BUSY_WAIT))
            except LockTimeoutError:
                version = self._complete.get(key)
                if version is None:
                    raise Refused("the index is being written and no whole version is known "
                                  "yet") from None
                if not (sync and self._stale(INDEX)[0]):  # nothing saved since: it is whole
                    return self._search_pinned(name, settings, version, queries, k, filters,
                                               sql)
                # a file was saved since the last whole version: the writer is most likely
                # syncing it; wait for it, else answer from that version, said stale
                try:
                    stack.enter_context(index_lock(settings, timeout=WRITER_WAIT))
                except LockTimeoutError:
                    say(f"stale: the index is being written (waited {WRITER_WAIT:g} s); this "
                        f"answer is from version {version}, before changes saved since")
                    return self._search_pinned(name, settings, version, queries, k, filters,
                                               sql)
            stale, started, vocabulary = self._stale_with_vocabulary(name, settings)
            if vocabulary is not None and checked is not None:
                checked[VOCABULARY] = vocabulary
            stale = stale and sync
            shared = settings.is_reader or settings.remote_index  # always says how far behind
            copy = self._copy_version(settings) if shared else None
            if not stale and copy is not None and copy == self._reader_seen:
                if self._reader_note:
                    say(self._reader_note)  # no file changed, the same version: the same note
            elif stale or shared:
                self._catch_up(settings, started, say, copy)
            try:
                return self._search_kept(key, settings, queries, k, filters, sql,
                                         keep=not shared)
            except WrenmemError as e:
                if stale or shared:
                    raise
                log.info("warm recall: %s; syncing first", e)  # e.g. another process reset it
                self._catch_up(settings, time.monotonic(), say)
                return self._search_kept(key, settings, queries, k, filters, sql, keep=True)
        raise AssertionError("unreachable")

    def _search_pinned(self, name: str, settings: Settings, version: int,
                       queries: list[str], k: int, filters: Filters, sql: str | None
                       ) -> tuple[str, list[list[Hit]]]:
        """A search of the last version seen whole, while a writer holds the lock: by the
        kept backend when it holds that version in memory (the writer is often this
        process's own background check, which finds nothing to write), else by a backend
        of its own pinned to it."""
        key = (name, settings)
        generation = self._generation
        kept: Any = self._kept.pop(key, None)  # (not shared with another search meanwhile)
        if kept is not None:
            try:
                search = getattr(kept, "search_version", None)
                held = None if search is None else search(version, queries, k, filters,
                                                             sql=sql)
            finally:
                if generation == self._generation:  # no sync dropped the kept ones since
                    self._kept.setdefault(key, kept)
            if held is not None:
                return kept.name, held
        backend: Any = self.backend(name, settings)  # its own: the pin is its handle's
        backend.pin(version)
        return backend.name, backend.search(queries, k, filters, sql=sql)

    def _catch_up(self, settings: Settings, started: float, say: Notify,
                  copy: tuple[Any, ...] | None = None) -> None:
        """The catch-up sync (it re-enters the index lock the caller holds); kept backends
        are dropped, as the sync may have made a new version. ``copy``: the version of a
        reader's local copy this note is made against (see :meth:`_copy_version`)."""
        note = catch_up(settings, self.injected_embedder)
        if note:
            say(note)
        self._reader_seen, self._reader_note = copy, note
        self._synced(INDEX, started)
        self._generation += 1
        self._kept.clear()

    def _revalidate(self) -> None:
        """The catch-up sync a question would run once the last one gets older than the
        freshness's ``max_age``, run by the freshness's thread before a question needs it
        (a writer holding the index lock is left alone: its sync, or the next question's,
        does it)."""
        try:
            with index_lock(self.settings, timeout=BUSY_WAIT):
                self._catch_up(self.settings, time.monotonic(), log.info)
        except LockTimeoutError:
            return

    def index_written(self, started: float | None = None) -> None:
        """A sync in this process wrote the index (the daemon's ``sync`` request; call it
        holding the index lock): kept handles read an older version, so they go.
        ``started`` (monotonic): the sync covered every file as of then."""
        self._generation += 1
        self._kept.clear()
        if started is not None:
            self._synced(INDEX, started)

    def _copy_version(self, settings: Settings) -> tuple[Any, ...] | None:
        """For a reader of a remote index: which version its local copy holds, after the
        refresh that is due (none within ``refresh_seconds``: the state file alone), or
        None (a writer, a local index, or no freshness to say that no file changed)."""
        if self.freshness is None or not (settings.is_reader and settings.remote_index):
            return None

        info = replica.refresh(settings)
        return (settings.index_uri, info.version, info.stale_since, info.error)

    def _search_kept(self, key: tuple[str, Settings], settings: Settings, queries: list[str],
                     k: int, filters: Filters, sql: str | None, *, keep: bool
                     ) -> tuple[str, list[list[Hit]]]:
        backend: Any = self._kept.pop(key, None) or self.backend(key[0], settings)
        latest = getattr(backend, "latest_version", None)  # (without asking LanceDB when it can)
        version = latest() if latest is not None else backend.table().version
        hits = backend.search(queries, k, filters, sql=sql)
        self._complete[key] = version
        if keep:
            self._kept[key] = backend
        return backend.name, hits

    def warm_up(self) -> None:
        """Load the default backend's model (and open its index) before a first request."""
        name = choose_backend(self.settings)
        if name == "grep" or name not in BACKENDS:
            return
        self.embedder.embed(["warm up"])  # the slow part, and needs no lock
        deadline = time.monotonic() + WARM_WAIT
        while True:
            try:
                # twice: a backend's second search starts what only a long-lived process
                # makes (the vector scan's prefix codes, in a thread)
                for _ in range(2):
                    self.recall_warm(["warm up"], 1, Filters())
                break
            except Refused:  # a sync, or a first request's search, holds the index lock
                if time.monotonic() > deadline:
                    return  # the model is loaded; the table opens on first use
                time.sleep(0.2)
        for backend in list(self._kept.values()):
            ready = getattr(backend, "ready", None)
            if ready is not None:
                ready()  # what its searches make in the background, made now


def recall_many(settings: Settings, queries: Sequence[str], k: int, filters: Filters,
                notify: Notify | None = None, *, sql: str | None = None, sync: bool = True,
                min_score: float = 0.0) -> list[RecallResult]:
    """One-shot recall over ``settings`` with a recaller of its own (tests, benchmarks)."""
    return Recaller(settings).recall(queries, k, filters, sql=sql, min_score=min_score,
                                     sync=sync, notify=notify)


def _results(queries: Sequence[str], backend: str, hits: Sequence[Sequence[Hit]],
             min_score: float, prefer_verified: bool) -> list[RecallResult]:
    return above([RecallResult(q, backend, tuple(h))
                  for q, h in zip(queries, hits, strict=True)], min_score, prefer_verified)


def _say_skipped(backend: Any, notify: Notify | None) -> None:
    """The pair files a grep search could not read: it answered without them."""
    if notify is None:
        return
    for error in getattr(backend, "skipped", ()):
        notify(f"{error.location()}: {error.reason} (skipped)")
