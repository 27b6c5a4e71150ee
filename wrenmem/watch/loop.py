"""The watcher: filesystem events → a debounced sync of pairs and manifest.

Events are only a trigger. Each sync re-reads the file tree and compares content hashes (the
one sync function does that), so the watcher never replays individual events and cannot get
out of step with editors' atomic saves, ``git checkout`` bursts, moves or deleted folders.

The loop (:func:`run_loop`) takes an event source, a clock and a stop event, so tests drive it
without sleeping; :class:`WatchdogSource` is the real source (inotify, polling as a fallback).
"""

from __future__ import annotations

import errno
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from wrenmem.errors import LockTimeoutError, PairError, WrenmemError
from wrenmem.fs import statedir
from wrenmem.knowledge.entries import FOLDERS
from wrenmem.knowledge.files import is_knowledge_path, knowledge_root
from wrenmem.pairs.catalog import is_pair_name, skipped_name
from wrenmem.settings import CONFIG_FILE, Settings

log = logging.getLogger(__name__)

# What changed, as far as the watcher cares.
PAIRS, MANIFEST, SETTINGS, KNOWLEDGE = "pairs", "manifest", "settings", "knowledge"

# A change as an event source reports it: the path and whether it is a folder.
Change = tuple[str, bool]
FENCE_TIMEOUT = 0.5  # seconds to wait for a fence's own event (see WatchdogSource.fence)

def classify_path(settings: Settings, path: str, is_dir: bool) -> str | None:
    """What a change at ``path`` means: PAIRS, MANIFEST, SETTINGS, KNOWLEDGE or None."""
    p = Path(path)
    if p == settings.manifest_path:
        return MANIFEST
    if p == settings.root / CONFIG_FILE:
        return SETTINGS
    try:
        rel = p.relative_to(settings.knowledge_path)
    except ValueError:
        return KNOWLEDGE if is_knowledge_path(settings, p) else None
    parts = rel.parts
    if not parts:  # the knowledge folder itself (created, deleted or moved)
        return PAIRS
    # The catalog's own rules, so the watcher syncs exactly the files a sync reads: editors'
    # scratch files (.q.md.swp, q.md~, #q.md#, 4913, x.md.tmp) are not *.md pair names, and
    # an atomic save's rename onto q.md is a change of q.md itself.
    if any(skipped_name(part) for part in parts[:-1]) or statedir.STATE_DIR in parts:
        return None
    if is_dir:
        return None if skipped_name(parts[-1]) else PAIRS
    return PAIRS if is_pair_name(parts[-1]) else None


def changes_from_event(event: Any) -> list[Change]:
    """Paths a watchdog event touches; both ends of a move (an atomic save is a move)."""
    kind = event.event_type
    if kind in ("opened", "closed_no_write"):
        return []
    if event.is_directory and kind == "modified":
        return []  # a folder's mtime changes whenever a child does: the child's event counts
    out = [(os.fsdecode(event.src_path), event.is_directory)]
    dest = getattr(event, "dest_path", "")
    if dest:
        out.append((os.fsdecode(dest), event.is_directory))
    return out


# --- errors ---------------------------------------------------------------------------------

PERMANENT = "permanent"
TRANSIENT = "transient"
UNKNOWN = "unknown"
_TRANSIENT_ERRNOS = {errno.EAGAIN, errno.EBUSY, errno.EINTR, errno.ENOENT, errno.ETIMEDOUT,
                     errno.ESTALE, errno.EIO, errno.ENOSPC, errno.EMFILE, errno.ENFILE}


def classify_error(exc: BaseException) -> str:
    """PERMANENT (needs the user: settings, manifest, missing extra or model), TRANSIENT
    (retry soon: a busy lock, a file mid-write) or UNKNOWN (retried a few times)."""
    if isinstance(exc, LockTimeoutError | TimeoutError):
        return TRANSIENT
    if isinstance(exc, WrenmemError | ImportError):
        # wrenmem raises on purpose, with a reason for the user (bad settings or manifest,
        # a missing extra, a model that cannot load); only a busy lock is worth a retry
        return PERMANENT
    if getattr(exc, "permanent", False):
        return PERMANENT
    if isinstance(exc, PermissionError):
        return PERMANENT
    if isinstance(exc, OSError):
        return TRANSIENT if exc.errno in _TRANSIENT_ERRNOS else PERMANENT
    return UNKNOWN


@dataclass(frozen=True)
class SyncResult:
    """What one round of syncing did: a line per part, failures per part, bad pair files."""

    summaries: tuple[str, ...] = ()
    failures: tuple[tuple[str, BaseException], ...] = ()
    pair_errors: tuple[PairError, ...] = ()
    changed: bool = False
    pairs_changed: bool = False  # the pair files' index changed (what the recall fit reads)


class RestartRequested(Exception):
    """The settings changed: the watcher must start again with the new ones."""


# --- the loop -------------------------------------------------------------------------------

class EventSource(Protocol):
    def get(self, timeout: float) -> list[Change] | None:
        """Changes seen so far (waiting up to ``timeout`` seconds for the first), or None."""
        ...


@dataclass
class LoopConfig:
    """Timing of the loop. A burst ends after ``debounce`` quiet seconds, or ``max_delay``
    after its first event, so a change is visible quickly even while events keep coming."""

    debounce: float = 0.15
    max_delay: float = 0.8
    idle: float = 1.0
    backoff: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
    unknown_retries: int = 4


@dataclass
class LoopStats:
    """Counters and the last outcome, shown by ``watch --status`` and the daemon's ``ping``."""

    syncs: int = 0
    events: int = 0
    last_sync_at: float | None = None
    last_sync_seconds: float | None = None
    last_summary: str = ""
    last_error: str = ""
    bad_files: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"syncs": self.syncs, "events": self.events, "last_sync_at": self.last_sync_at,
                "last_sync_seconds": self.last_sync_seconds, "last_summary": self.last_summary,
                "last_error": self.last_error, "bad_files": list(self.bad_files)}


def run_loop(settings: Settings, source: EventSource, sync: Callable[[set[str]], SyncResult],
             stop: threading.Event, *, config: LoopConfig | None = None,
             clock: Callable[[], float] = time.monotonic,
             report: Callable[[str, str], None] | None = None,
             stats: LoopStats | None = None,
             initial: Iterable[str] = (PAIRS, MANIFEST, KNOWLEDGE),
             idle: Callable[[], object] | None = None
             ) -> LoopStats:
    """Sync once at start (``initial``), then after every burst of relevant changes;
    ``idle`` is called whenever a wait ends with no change pending (housekeeping).

    Transient failures retry with backoff; permanent ones are reported once (a repeat of the
    same message is not reported again) and wait for the next change. Raises
    RestartRequested when ``sync`` does.
    """
    cfg = config or LoopConfig()
    stats = stats or LoopStats()
    say = report or (lambda level, message: log.log(logging.getLevelName(level), message))
    pending: set[str] = set(initial)
    first_at = last_at = clock() if pending else None
    retry_at: float | None = None
    attempts: dict[str, int] = {}
    shown: dict[str, str] = {}  # part -> last permanent message shown
    while not stop.is_set():
        deadline = _deadline(pending, first_at, last_at, retry_at, cfg)
        now = clock()
        batch = source.get(cfg.idle if deadline is None else max(0.0, deadline - now))
        now = clock()
        for path, is_dir in batch or ():
            kind = classify_path(settings, path, is_dir)
            if kind is None:
                continue
            stats.events += 1
            if not pending:
                first_at = now
            pending.add(kind)
            last_at = now
            retry_at = None  # a new change is worth trying again right away
        deadline = _deadline(pending, first_at, last_at, retry_at, cfg)
        if deadline is None or now < deadline or stop.is_set():
            if not pending and idle is not None and not stop.is_set():
                idle()
            continue
        kinds, pending, retry_at = set(pending), set(), None
        started = clock()
        result = sync(kinds)
        stats.syncs += 1
        stats.last_sync_at = time.time()
        stats.last_sync_seconds = round(clock() - started, 3)
        _report_pair_errors(result, stats, say)
        if result.summaries:
            stats.last_summary = "; ".join(result.summaries)
            if result.changed or stats.syncs == 1:
                say("INFO", f"synced ({stats.last_sync_seconds:.2f} s): {stats.last_summary}")
        failed_parts = {part for part, _ in result.failures}
        for part in kinds - failed_parts:
            attempts.pop(part, None)
            if shown.pop(part, None):
                say("INFO", f"{part}: working again")
        retry_parts: set[str] = set()
        for part, exc in result.failures:
            kind = classify_error(exc)
            n = attempts[part] = attempts.get(part, 0) + 1
            message = f"{part}: {_describe(exc)}"
            stats.last_error = message
            if kind == TRANSIENT or (kind == UNKNOWN and n <= cfg.unknown_retries):
                wait = cfg.backoff[min(n - 1, len(cfg.backoff) - 1)]
                say("WARNING", f"{message} (retrying in {wait:g} s)")
                retry_parts.add(part)
                retry_at = clock() + wait if retry_at is None else min(retry_at, clock() + wait)
            elif shown.get(part) != message:
                shown[part] = message
                hint = "" if kind == PERMANENT else f" (failed {n} times)"
                say("ERROR", f"{message}{hint}; not retrying until something changes")
        if retry_parts:
            pending |= retry_parts
            first_at = last_at = clock()
    return stats


def _deadline(pending: set[str], first_at: float | None, last_at: float | None,
              retry_at: float | None, cfg: LoopConfig) -> float | None:
    if not pending or first_at is None or last_at is None:
        return None
    due = min(last_at + cfg.debounce, first_at + cfg.max_delay)
    return max(due, retry_at) if retry_at is not None else due


def _describe(exc: BaseException) -> str:
    """Our own errors speak for themselves; a foreign one also names its type."""
    text = str(exc).strip() or type(exc).__name__
    return text if type(exc).__module__.startswith("wrenmem") else (
        f"{type(exc).__name__}: {text}")


def _report_pair_errors(result: SyncResult, stats: LoopStats,
                        say: Callable[[str, str], None]) -> None:
    """A bad file is reported when it turns bad, and once more when it is fixed."""
    now_bad = {e.path: e for e in result.pair_errors}
    before = set(stats.bad_files)
    for path in sorted(set(now_bad) - before):
        error = now_bad[path]
        say("WARNING", f"{error.location()}: {error.reason} (skipped; the rest keep syncing)")
    for path in sorted(before - set(now_bad)):
        say("INFO", f"{path}: readable again")
    stats.bad_files = tuple(sorted(now_bad))


# --- the real event source ------------------------------------------------------------------

class WatchdogSource:
    """watchdog events from the knowledge folder (recursive), the manifest's folder and the
    project root (for ``wrenmem.toml``). inotify where it works; polling when inotify fails
    (for example the watch limit is reached) or when ``poll`` is asked for."""

    def __init__(self, settings: Settings, *, poll: bool = False,
                 notify: Callable[[str], None] | None = None,
                 observer_factory: Callable[[], Any] | None = None,
                 recheck: float = 1.0, poll_interval: float = 0.5):
        self.settings = settings
        self.poll_interval = poll_interval  # seconds between two scans when polling
        self.notify = notify or log.warning
        self.queue: queue.SimpleQueue[Change] = queue.SimpleQueue()
        self.mode = "polling" if poll else "inotify"
        self._factory = observer_factory
        self._recheck = recheck
        self._next_check = 0.0
        self._watched: dict[str, tuple[int, int]] = {}
        self.observer: Any = None
        self._opened: dict[str, int] = {}  # fence file -> read-only closes seen (``fence``)
        self._fence_files: dict[Path, str] = {}
        self._fence_seen = threading.Condition()
        # (the probe it was made with, the targets, the folders a fence opens a file in)
        self._plan: tuple[tuple[Any, ...], list[tuple[Path, bool]],
                          list[tuple[Path, bool]]] | None = None
        s = settings
        base = s.root / s.knowledge_root
        self._probed = [os.fspath(p) for p in (
            s.root, s.root / s.knowledge_dir, s.root / s.manifest, (s.root / s.manifest).parent,
            base, *(base / f for f in FOLDERS))]

    # watchdog calls this from its own thread
    def dispatch(self, event: Any) -> None:
        if event.event_type == "closed_no_write" and not event.is_directory:
            path = os.fsdecode(event.src_path)
            with self._fence_seen:
                if path in self._opened:
                    self._opened[path] += 1
                    self._fence_seen.notify_all()
        for change in changes_from_event(event):
            self.queue.put(change)

    def fence(self, timeout: float = FENCE_TIMEOUT) -> bool:
        """True once every event of a change made before this call is in the queue: in each
        fenced folder, open a file for reading, close it and wait for that
        ``closed_no_write`` event (inotify reports one watch's events in order). False when
        it cannot be known: polling, a folder with no file to open, a watched folder
        replaced and not yet watched again, or no event within ``timeout`` seconds. Which
        folders are fenced, and why: docs/watcher.md ("fence") and :meth:`_fence_plan`."""
        if self.mode != "inotify" or self.observer is None:
            return False
        targets, fenced = self._fence_plan()
        if self._signature(targets) != self._watched:
            return False
        waits: list[tuple[str, int]] = []
        for folder, recursive in fenced:
            if self._watched.get(str(folder)) == (0, 0):
                continue  # did not exist at start and still does not: nothing to change
            opened = self._open_fence(folder, recursive)
            if opened is None:
                return False
            waits.append(opened)
        deadline = time.monotonic() + timeout
        with self._fence_seen:
            for path, before in waits:
                while self._opened[path] <= before:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._fence_seen.wait(left):
                        return False
        return True

    def _fence_plan(self) -> tuple[list[tuple[Path, bool]], list[tuple[Path, bool]]]:
        """(the watched targets, the folders among them a fence opens a file in), made
        again only when the paths they are resolved from may resolve otherwise: when the
        stat or the lstat of one of them differs from the plan's (a link replaced, a
        folder created, moved or replaced). Resolving them on every fence was most of its
        own time; a plan that no longer matches what is watched fails the fence (a sync),
        and a change of what is watched (:meth:`_rewatch_if_needed`) drops it."""
        probe = tuple(_stats(path) for path in self._probed)
        plan = self._plan
        if plan is not None and plan[0] == probe:
            return plan[1], plan[2]
        s = self.settings
        targets = self._targets()
        base = knowledge_root(s)
        knowledge = {base, *(base / f for f in FOLDERS)} - {s.knowledge_path, s.root,
                                                              s.manifest_path.parent}
        fenced = [(folder, recursive) for folder, recursive in targets
                  # the root holds only the settings file when the manifest is elsewhere: a
                  # daemon or server keeps its settings; rules and glossary are read from
                  # the files on every call
                  if not (folder == s.root and s.manifest_path.parent != s.root)
                  and folder not in knowledge]
        self._plan = (probe, targets, fenced)
        return targets, fenced

    def _open_fence(self, folder: Path, recursive: bool) -> tuple[str, int] | None:
        """Open the folder's fence file (a regular file in it: the settings file or the
        manifest where they are, else the first one found); (path, opens seen before)."""
        for _attempt in range(2):
            path = self._fence_files.get(folder) or _fence_file(self.settings, folder,
                                                                recursive)
            if path is None:
                return None
            with self._fence_seen:
                before = self._opened.setdefault(path, 0)
            try:
                os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW))
            except OSError:  # gone, or no longer a file: pick another
                self._fence_files.pop(folder, None)
                continue
            self._fence_files[folder] = path
            return path, before
        return None

    def _targets(self) -> list[tuple[Path, bool]]:
        s = self.settings
        targets = [(s.knowledge_path, True), (s.root, False)]
        if s.manifest_path.parent not in (s.root, s.knowledge_path):
            targets.append((s.manifest_path.parent, False))
        # The rules, glossary, caveats and metrics folders (a new one shows as a change of
        # the knowledge folder, and is watched from the next check of the targets on).
        base = knowledge_root(s)
        if base not in (s.root, s.knowledge_path) and base.is_dir():
            targets.append((base, False))
            targets += [(base / f, True) for f in FOLDERS if (base / f).is_dir()
                        and base / f != s.knowledge_path]
        return targets

    def _signature(self, targets: list[tuple[Path, bool]] | None = None
                   ) -> dict[str, tuple[int, int]]:
        sig = {}
        for path, _rec in self._targets() if targets is None else targets:
            try:
                st = path.stat()
                sig[str(path)] = (st.st_dev, st.st_ino)
            except OSError:
                sig[str(path)] = (0, 0)
        return sig

    def _new_observer(self) -> Any:
        if self._factory is not None:
            return self._factory()
        if self.mode == "polling":
            from watchdog.observers.polling import PollingObserver

            return PollingObserver(timeout=self.poll_interval)
        from watchdog.observers import Observer

        return Observer()

    def _schedule_all(self, observer: Any) -> None:
        kinds = _watched_kinds()
        for path, recursive in self._targets():
            if path.is_dir():
                if kinds is not None:
                    try:
                        observer.schedule(self, str(path), recursive=recursive,
                                          event_filter=kinds)
                        continue
                    except TypeError:  # an observer without filters (a test's, an old one)
                        pass
                observer.schedule(self, str(path), recursive=recursive)

    def start(self) -> None:
        """Start watching; falls back to polling, saying so, when inotify cannot start."""
        self._watched = self._signature()
        observer = self._new_observer()
        try:
            self._schedule_all(observer)
            observer.start()
        except OSError as e:
            if self.mode == "polling":
                raise
            self.notify(f"watch: inotify unavailable ({e.strerror or e}); falling back to "
                        "polling (raise fs.inotify.max_user_watches for instant updates)")
            _stop_quietly(observer)
            self.mode, self._factory = "polling", None
            observer = self._new_observer()
            self._schedule_all(observer)
            observer.start()
        self.observer = observer
        self._next_check = time.monotonic() + self._recheck

    def get(self, timeout: float) -> list[Change] | None:
        out: list[Change] = []
        try:
            out.append(self.queue.get(timeout=max(0.0, min(timeout, self._recheck))))
            while True:
                out.append(self.queue.get_nowait())
        except queue.Empty:
            pass
        if time.monotonic() >= self._next_check:
            out.extend(self._rewatch_if_needed())
        return out or None

    def wake(self) -> None:
        """Return from a waiting ``get`` now (used on SIGTERM)."""
        self.queue.put(("", False))

    def _rewatch_if_needed(self) -> list[Change]:
        """A watched folder deleted and created again (a checkout can do that) loses its
        inotify watch, and one created after the start (the manifest's ``target/``) has
        none: notice it and watch the new one. What it holds may have changed unseen
        meanwhile, so the pairs and the manifest both count as changed."""
        self._next_check = time.monotonic() + self._recheck
        sig = self._signature()
        if sig == self._watched:
            return []
        self._watched = sig
        self._plan = None
        log.info("watch: a watched folder was created or replaced; watching it again")
        observer = self.observer
        observer.unschedule_all()
        self._schedule_all(observer)
        return [(str(self.settings.knowledge_path), True),
                (str(self.settings.manifest_path), False)]

    def close(self) -> None:
        if self.observer is not None:
            _stop_quietly(self.observer)
            self.observer = None


def _stats(path: str) -> tuple[Any, ...]:
    """What says whether ``path`` still resolves to what it did: its lstat (a link
    replaced is a new file: another inode or change time) and its stat (where it leads)."""
    out: list[Any] = []
    for look in (os.lstat, os.stat):
        try:
            st = look(path)
            out += [st.st_dev, st.st_ino, st.st_mode, st.st_ctime_ns]
        except OSError:
            out.append(None)
    return tuple(out)


def _watched_kinds() -> list[Any] | None:
    """Every kind of watchdog event but a file's opening, which is never a change (nor a
    fence's end, see :meth:`WatchdogSource.fence`): inotify then does not even queue it, so a
    read of a watched file (a fence, a grep, a sync reading the pairs) costs each observer
    one event, not two. None where watchdog lacks these kinds (every event then)."""
    try:
        from watchdog import events as e
    except ImportError:
        return None
    names = ("DirCreatedEvent", "DirDeletedEvent", "DirModifiedEvent", "DirMovedEvent",
             "FileClosedEvent", "FileClosedNoWriteEvent", "FileCreatedEvent",
             "FileDeletedEvent", "FileModifiedEvent", "FileMovedEvent")
    kinds = [getattr(e, name, None) for name in names]
    return kinds if all(k is not None for k in kinds) else None


def _fence_file(settings: Settings, folder: Path, recursive: bool) -> str | None:
    """A regular file (not a link) directly in ``folder`` or, if ``recursive``, below it."""
    for known in (settings.root / CONFIG_FILE, settings.manifest_path):
        if known.parent == folder and known.is_file() and not known.is_symlink():
            return str(known)
    pending = [folder]
    while pending:
        current = pending.pop(0)
        try:
            entries = sorted(os.scandir(current), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                return entry.path
        if recursive:
            pending += [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
    return None


def _stop_quietly(observer: Any) -> None:
    try:
        observer.stop()
        if observer.is_alive():
            observer.join(timeout=5)
    except (RuntimeError, OSError):
        pass
