"""``wrenmem watch``: sync rounds (pairs and schema), the watch loop with its daemon, and
restarts when settings change. Process control (one watcher per project, ``--detach``,
``--stop``, ``--status``) is :mod:`wrenmem.watch.process`."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wrenmem.api import Memory
from wrenmem.errors import PairError, WrenmemError
from wrenmem.fs.fsutil import atomic_write_text
from wrenmem.index import maintenance
from wrenmem.index.state import load_state
from wrenmem.index.sync import sync_pairs
from wrenmem.knowledge.files import load_knowledge
from wrenmem.knowledge.table import sync_knowledge
from wrenmem.pairs.catalog import scan
from wrenmem.recall.backends import catch_up, choose_backend
from wrenmem.schema import later as schema_files
from wrenmem.schema.cache import hold
from wrenmem.schema.table import sync_schema
from wrenmem.settings import Settings
from wrenmem.watch.daemon import HANDOFF_MAX, DaemonServer, RunCli, fit_recall
from wrenmem.watch.freshness import MAX_AGE
from wrenmem.watch.loop import (
    KNOWLEDGE,
    MANIFEST,
    PAIRS,
    SETTINGS,
    Change,
    LoopConfig,
    LoopStats,
    RestartRequested,
    SyncResult,
    WatchdogSource,
    classify_path,
    run_loop,
)
from wrenmem.watch.maintainer import Maintainer
from wrenmem.watch.process import STATE_FILE, Singleton, singleton

log = logging.getLogger(__name__)


# --- one sync round -------------------------------------------------------------------------

def sync_all(settings: Settings, kinds: set[str] | None = None) -> SyncResult:
    """Bring every derived index up to date with the files; each part fails on its own.

    Pairs: the one sync function (``wrenmem.index.sync.sync_pairs``) when the index is installed,
    else a catalog scan (what grep recall reads). Manifest: the schema sync, when present.
    When recall uses grep (set, or ``auto`` without the index extra) nothing reads an index,
    so only the scan runs.
    """
    kinds = {PAIRS, MANIFEST, KNOWLEDGE} if kinds is None else kinds

    indexed = choose_backend(settings) != "grep"  # auto without the index extra is grep
    summaries: list[str] = []
    failures: list[tuple[str, BaseException]] = []
    pair_errors: tuple[Any, ...] = ()
    changed = pairs_changed = False
    if kinds & {PAIRS, MANIFEST}:  # seed pairs come from the manifest
        try:
            if indexed and settings.is_reader:  # never writes: refresh the copy, say how far
                note = catch_up(settings)         # the shared index is behind the files
                summaries.append(f"pairs: {note or 'the shared index holds these files'}")
            elif indexed:
                report = sync_pairs(settings)
                pair_errors = tuple(getattr(report, "errors", ()) or ())
                summaries.append(f"pairs: {_summary(report)}")
                changed = pairs_changed = _report_changed(report)
            else:
                found = scan(settings)
                pair_errors = found.errors
                summaries.append(f"pairs: {len(found.pairs)} read")
                changed = True
        except Exception as e:
            failures.append((PAIRS, e))
    if (MANIFEST in kinds and indexed and settings.manifest_path.exists()
            and not settings.is_reader):
        try:
            # The files for other processes are written after the index is up to date.
            with schema_files.collect() as files:
                schema_report = sync_schema(settings)
                hold(settings, settings.manifest_path.resolve())  # the next change: per model
            schema_files.write_in_background(files)
            summaries.append(f"schema: {_summary(schema_report)}")
            changed = changed or _report_changed(schema_report)
        except Exception as e:
            failures.append((MANIFEST, e))
    if KNOWLEDGE in kinds:
        try:
            known = load_knowledge(settings)
            if indexed and not settings.is_reader:
                knowledge_report = sync_knowledge(settings, knowledge=known)
                if known.files:
                    summaries.append(f"knowledge: {_summary(knowledge_report)}")
                changed = changed or _report_changed(knowledge_report)
            elif known.files:
                summaries.append(f"knowledge: {len(known.entries)} entries read")
                changed = True
            pair_errors += tuple(known.errors)
        except Exception as e:
            failures.append((KNOWLEDGE, e))
    return SyncResult(tuple(summaries), tuple(failures), pair_errors, changed, pairs_changed)


def _writes_the_index(settings: Settings) -> bool:
    """This watcher's pairs sync writes the index (not grep's scan, not a reader's)."""
    return not settings.is_reader and choose_backend(settings) != "grep"


def _sync_named(settings: Settings, paths: list[str]) -> SyncResult:
    """The loop's round for just these pair files (:func:`named_pairs`)."""
    try:
        report = sync_pairs(settings, paths=paths)
    except Exception as e:
        return SyncResult(failures=((PAIRS, e),))
    changed = bool(report.added or report.changed or report.removed or report.renamed)
    return SyncResult((f"pairs: {_summary(report) if changed else 'up to date'}",), (),
                      known_errors(settings, report), changed, changed)


def _summary(report: Any) -> str:
    """One short line: counts, never the lists of paths."""
    if getattr(report, "noop", False):
        return "up to date"
    parts = []
    for name in ("added", "changed", "removed", "renamed", "embedded", "deleted", "items"):
        value = getattr(report, name, None)
        count = len(value) if isinstance(value, tuple | list) else value
        if isinstance(count, int) and (count or name in ("embedded",)):
            parts.append(f"{count} {name}")
    if getattr(report, "rebuilt", False):
        reason = getattr(report, "rebuild_reason", None)
        parts.append("rebuilt" + (f" ({reason})" if reason else ""))
    return ", ".join(parts) or str(report)


def _report_changed(report: Any) -> bool:
    return not getattr(report, "noop", False)


# --- a sync of just the pair files the events name ------------------------------------------
# After a ``store`` through the watcher the daemon syncs the stored file; its own event then
# wakes the loop, whose whole sync would stat every pair file (a second of CPU at 100,000
# pairs). When the events alone say what changed, the loop syncs just those files.

class EventLog:
    """The changes the loop's event source delivered since the last sync took them, and
    when the loop last walked every pair file."""

    def __init__(self) -> None:
        self.changes: list[Change] = []
        self.whole_at: float | None = None  # monotonic

    def record(self, changes: Sequence[Change] | None) -> None:
        if changes:
            self.changes.extend(changes)

    def take(self) -> list[Change]:
        taken, self.changes = self.changes, []
        return taken


def named_pairs(settings: Settings, source: Any, log: EventLog) -> list[str] | None:
    """The relative paths of the pair files the events since the last sync name, when they
    are all that can have changed; else None (the loop walks every file). That is when the
    last whole walk is under ``MAX_AGE`` old (events can be lost), every event is of a pair
    file (a folder moved in has no file events), at most ``HANDOFF_MAX`` files, and the
    fence was put (every change before it has its event in hand). The events the fence
    brings in go back in the source's queue: the loop still counts them."""
    seen = log.take()
    if log.whole_at is None or time.monotonic() - log.whole_at > MAX_AGE:
        return None
    if not source.fence():
        return None
    late = source.get(0) or []
    for change in late:
        source.queue.put(change)
    paths: set[str] = set()
    for path, is_dir in [*seen, *late]:
        if not path:
            continue  # a wake-up, not a change
        kind = classify_path(settings, path, is_dir)
        if kind is None:
            continue
        if kind != PAIRS or is_dir:
            return None
        try:
            paths.add(Path(path).relative_to(settings.root).as_posix())
        except ValueError:
            return None
    return sorted(paths) if len(paths) <= HANDOFF_MAX else None


def known_errors(settings: Settings, report: Any) -> tuple[PairError, ...]:
    """Every bad pair file the mirror knows after a sync of some paths (``report``'s are
    only those among them): the loop must not say the others were fixed."""
    state = load_state(settings)
    if state is None:
        return tuple(report.errors)
    return tuple(PairError(*e) for e in state.errors)


# --- the watcher process --------------------------------------------------------------------

class _Housekeeping:
    """The event source, plus a check every second that ``.wrenmem/`` is still ours: if it
    was deleted (it may be, any time), take the lock back, listen again and rebuild.
    Every change delivered goes to ``events`` too (:class:`EventLog`)."""

    def __init__(self, source: Any, task: Callable[[], list[Any]], every: float = 1.0,
                 events: EventLog | None = None):
        self.source, self.task, self.every = source, task, every
        self.events = events
        self._next = time.monotonic() + every

    def get(self, timeout: float) -> list[Any] | None:
        changes = self.source.get(min(timeout, self.every))
        if time.monotonic() >= self._next:
            self._next = time.monotonic() + self.every
            extra = self.task()
            if extra:
                changes = [*(changes or []), *extra]
        if self.events is not None:
            self.events.record(changes)
        return changes


@dataclass
class WatchOptions:
    poll: bool = False
    daemon: bool = True
    config: LoopConfig | None = None
    poll_interval: float = 0.5  # seconds between scans when polling (Wren's --interval)
    # stop after this many seconds without a request (a watcher started on demand): None never
    idle_exit: float | None = None
    run_cli: RunCli | None = None  # runs the command lines the daemon is handed (the CLI's)


def run_watch(settings: Settings, *, reload: Callable[[], Settings] | None = None,
              options: WatchOptions | None = None, stop: threading.Event | None = None,
              report: Callable[[str, str], None] | None = None) -> None:
    """Watch until SIGINT/SIGTERM (or ``stop``): sync after changes, serve the daemon."""
    opts = options or WatchOptions()
    stop = stop or threading.Event()
    say = report or (lambda level, msg: log.log(logging.getLevelName(level), msg))
    wakers: list[Callable[[], None]] = []  # unblock the loop's wait when a signal comes
    with singleton(settings) as hold, _stop_on_signals(stop, wakers):
        while True:
            try:
                _watch_once(settings, reload, opts, stop, say, wakers, hold)
                return
            except RestartRequested:
                assert reload is not None
                settings = reload()
                say("INFO", "settings changed: watching again with the new settings")


def _watch_once(settings: Settings, reload: Callable[[], Settings] | None, opts: WatchOptions,
                stop: threading.Event, say: Callable[[str, str], None],
                wakers: list[Callable[[], None]], hold: Singleton) -> None:
    source = WatchdogSource(settings, poll=opts.poll, notify=lambda m: say("WARNING", m),
                            poll_interval=opts.poll_interval)
    source.start()
    wakers[:] = [source.wake]
    stats = LoopStats()
    server = None
    state_path = settings.state_dir / STATE_FILE
    # The compaction and the prune of the pairs table run in idle time, not in the syncs.
    maintainer = Maintainer(settings)
    events = EventLog()  # what the loop's sync may limit itself to
    maintenance.defer(settings)

    def info() -> dict[str, Any]:
        return {"mode": source.mode, **stats.to_dict(), **maintainer.info()}

    if opts.daemon:
        server = DaemonServer(settings, info, poll=source.mode == "polling")
        server.maintainer = maintainer
        server.run_cli = opts.run_cli
        try:
            server.start()
        except (OSError, WrenmemError) as e:
            say("WARNING", f"daemon: cannot listen on {server.path}: {e}; watching without it")
            server = None
    _write_state(state_path, settings, server, info())
    say("INFO", f"watching {settings.relpath(settings.knowledge_path)}/ and "
        f"{settings.relpath(settings.manifest_path)} ({source.mode})"
        + (f"; daemon on {server.path}" if server else ""))

    def sync(kinds: set[str]) -> SyncResult:
        if SETTINGS in kinds and reload is not None:
            new = reload()  # a SettingsError is a permanent error, reported once
            if new != settings:
                raise RestartRequested
            kinds = kinds - {SETTINGS}
            if not kinds:
                return SyncResult()
        maintainer.pause()  # every part writes the index: not beside a compaction
        if server is None or not kinds & {PAIRS, MANIFEST}:
            events.take()
            return sync_all(settings, kinds)
        with server.sync_turn:  # not while the daemon syncs what a command handed it
            if kinds == {PAIRS}:
                known = server.unchanged_pairs()
                if known is not None:  # that sync covered these events: no walk
                    events.take()
                    return SyncResult(("pairs: up to date",), (), tuple(known.errors))
            started = time.monotonic()
            writes = _writes_the_index(settings)  # no scan
            named = named_pairs(settings, source, events) if kinds == {PAIRS} and writes else None
            if named is not None:  # the events say which files: no walk
                result = _sync_named(settings, named)
            else:
                events.take()
                result = sync_all(settings, kinds)
            if not any(kind == PAIRS for kind, _e in result.failures):
                if named is None and PAIRS in kinds:
                    events.whole_at = started
                server.pairs_synced(started)
            return result

    held: list[Memory] = []  # the Memory of the recall fit when there is no daemon

    def wrapped(kinds: set[str]) -> SyncResult:
        try:
            result = sync(kinds)
        except RestartRequested:
            raise
        except Exception as e:
            result = SyncResult(failures=((SETTINGS if SETTINGS in kinds else PAIRS, e),))
        if result.pairs_changed and _writes_the_index(settings):
            if server is None and not held:  # a watcher without its daemon
                held.append(Memory.from_settings(settings))
            fit_recall(settings, server.memory if server is not None else held[0])
        _write_state(state_path, settings, server, info())
        return result

    warmed = False

    def warm() -> None:
        try:
            server.warm()  # type: ignore[union-attr]
        except Exception as e:  # the CLI still works in-process
            say("WARNING", f"daemon: could not load the recall backend: {e}")

    def after_first(kinds: set[str]) -> SyncResult:
        nonlocal warmed
        result = wrapped(kinds)
        if not warmed and server is not None:
            # Load the model beside the loop, not in it: changes keep syncing meanwhile.
            warmed = True
            threading.Thread(target=warm, name="wrenmem-warm", daemon=True).start()
        return result

    def housekeeping() -> list[Any]:
        back = hold.recovered()
        if back is False:
            say("ERROR", "another watcher took this project over after .wrenmem/ was "
                "deleted; stopping")
            stop.set()
            return []
        if (server is not None and opts.idle_exit is not None
                and time.monotonic() - server.last_request > opts.idle_exit):
            say("INFO", f"no request for {opts.idle_exit:g} s: stopping (started on demand)")
            stop.set()
            return []
        if server is not None and not server.path.exists():
            server.close()
            server.start()
        if back:
            say("INFO", ".wrenmem/ was deleted: rebuilding the index")
            return [(str(settings.knowledge_path), True), (str(settings.manifest_path), False)]
        return []

    try:
        run_loop(settings, _Housekeeping(source, housekeeping, events=events), after_first, stop,
                 config=opts.config, report=say, stats=stats, idle=maintainer.tick)
    finally:
        maintainer.close()
        maintenance.defer(settings, False)
        source.close()
        if server is not None:
            server.close()


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event, wakers: list[Callable[[], None]]
                     ) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def handler(_signum: int, _frame: object) -> None:
        stop.set()
        for wake in wakers:
            wake()

    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _write_state(path: Path, settings: Settings, server: Any, info: dict[str, Any]) -> None:
    data = {"pid": os.getpid(), "root": str(settings.root),
            "socket": str(server.path) if server is not None else None, **info}
    with contextlib.suppress(OSError):
        atomic_write_text(path, json.dumps(data, indent=2))


# --- --detach / --stop / --status -----------------------------------------------------------
