"""Running the watcher as a process: one per project, its pid file, state, log and daemon.

``run_watch`` is ``wrenmem watch`` in the foreground; ``start_detached``, ``stop_watcher``
and ``watcher_status`` are ``--detach``, ``--stop`` and ``--status``. A watcher holds an
exclusive ``flock`` on ``.wrenmem/watch.lock`` for its whole life: the kernel drops it when
the process dies, however it dies, so a pid file left by ``kill -9`` is recognised as stale.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wrenmem import statedir
from wrenmem.errors import WrenmemError
from wrenmem.fsutil import atomic_write_text
from wrenmem.pairs.catalog import scan
from wrenmem.recall.backends import choose_backend
from wrenmem.settings import Settings
from wrenmem.watch.client import ping, socket_path
from wrenmem.watch.daemon import DaemonServer
from wrenmem.watch.loop import (
    MANIFEST,
    PAIRS,
    SETTINGS,
    LoopConfig,
    LoopStats,
    RestartRequested,
    SyncResult,
    WatchdogSource,
    run_loop,
)

log = logging.getLogger(__name__)
LOCK_FILE, PID_FILE = statedir.WATCH_LOCK, statedir.WATCH_PID
STATE_FILE, LOG_FILE = statedir.WATCH_STATE, statedir.WATCH_LOG


# --- one sync round -------------------------------------------------------------------------

def _optional(module: str, name: str) -> Callable[..., Any] | None:
    """A function another module may provide; None until it exists."""
    try:
        func: Callable[..., Any] = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    return func


def sync_all(settings: Settings, kinds: set[str] | None = None) -> SyncResult:
    """Bring every derived index up to date with the files; each part fails on its own.

    Pairs: the one sync function (``wrenmem.index.sync.sync_pairs``) when the index is installed,
    else a catalog scan (what grep recall reads). Manifest: the schema sync, when present.
    When recall uses grep (set, or ``auto`` without the index extra) nothing reads an index,
    so only the scan runs.
    """
    kinds = {PAIRS, MANIFEST} if kinds is None else kinds

    indexed = choose_backend(settings) != "grep"  # auto without the index extra is grep
    summaries: list[str] = []
    failures: list[tuple[str, BaseException]] = []
    pair_errors: tuple[Any, ...] = ()
    changed = False
    if kinds & {PAIRS, MANIFEST}:  # seed pairs come from the manifest
        try:
            sync_pairs = _optional("wrenmem.index.sync", "sync_pairs") if indexed else None
            if sync_pairs is not None:
                report = sync_pairs(settings)
                pair_errors = tuple(getattr(report, "errors", ()) or ())
                summaries.append(f"pairs: {_summary(report)}")
                changed = changed or _report_changed(report)
            else:

                found = scan(settings)
                pair_errors = found.errors
                summaries.append(f"pairs: {len(found.pairs)} read")
                changed = True
        except Exception as e:
            failures.append((PAIRS, e))
    if MANIFEST in kinds and indexed:
        sync_schema = _optional("wrenmem.schema.table", "sync_schema")
        if sync_schema is not None and settings.manifest_path.exists():
            try:
                report = sync_schema(settings)
                summaries.append(f"schema: {_summary(report)}")
                changed = changed or _report_changed(report)
            except Exception as e:
                failures.append((MANIFEST, e))
    return SyncResult(tuple(summaries), tuple(failures), pair_errors, changed)


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


# --- the watcher process --------------------------------------------------------------------

class Singleton:
    """This watcher's hold on ``.wrenmem/watch.lock`` and its pid file."""

    def __init__(self, settings: Settings):
        self.state = settings.state_dir
        self.root = settings.root
        self.fd: int | None = None

    def _take(self) -> int | None:
        self.state.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.state / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        (self.state / PID_FILE).write_text(f"{os.getpid()}\n", encoding="utf-8")
        return fd

    def acquire(self) -> None:
        """Take the lock; WrenmemError if another watcher holds it."""
        self.fd = self._take()
        if self.fd is None:
            pid = _read_pid(self.state)
            raise WrenmemError(
                f"a watcher is already running for {self.root}"
                + (f" (pid {pid})" if pid else "")
                + "; stop it with `wrenmem watch --stop`")

    def recovered(self) -> bool | None:
        """After ``.wrenmem/`` was deleted: lock and pid file again. None when nothing was
        missing, True when they are back, False when another watcher took the project."""
        assert self.fd is not None
        try:
            same = os.stat(self.state / LOCK_FILE).st_ino == os.fstat(self.fd).st_ino
            if same and (self.state / PID_FILE).exists():
                return None
        except FileNotFoundError:
            pass
        fd = self._take()
        if fd is None:
            return False
        os.close(self.fd)
        self.fd = fd
        return True

    def release(self) -> None:
        for name in (PID_FILE, STATE_FILE):
            with contextlib.suppress(FileNotFoundError):
                (self.state / name).unlink()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


@contextlib.contextmanager
def singleton(settings: Settings) -> Iterator[Singleton]:
    """Hold ``.wrenmem/watch.lock``; WrenmemError if another watcher holds it."""
    hold = Singleton(settings)
    hold.acquire()
    try:
        yield hold
    finally:
        hold.release()


class _Housekeeping:
    """The event source, plus a check every second that ``.wrenmem/`` is still ours: if it
    was deleted (it may be, any time), take the lock back, listen again and rebuild."""

    def __init__(self, source: Any, task: Callable[[], list[Any]], every: float = 1.0):
        self.source, self.task, self.every = source, task, every
        self._next = time.monotonic() + every

    def get(self, timeout: float) -> list[Any] | None:
        changes = self.source.get(min(timeout, self.every))
        if time.monotonic() >= self._next:
            self._next = time.monotonic() + self.every
            extra = self.task()
            if extra:
                changes = [*(changes or []), *extra]
        return changes


@dataclass
class WatchOptions:
    poll: bool = False
    daemon: bool = True
    config: LoopConfig | None = None


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
    source = WatchdogSource(settings, poll=opts.poll, notify=lambda m: say("WARNING", m))
    source.start()
    wakers[:] = [source.wake]
    stats = LoopStats()
    server = None
    state_path = settings.state_dir / STATE_FILE

    def info() -> dict[str, Any]:
        return {"mode": source.mode, **stats.to_dict()}

    if opts.daemon:

        server = DaemonServer(settings, info)
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
        return sync_all(settings, kinds)

    def wrapped(kinds: set[str]) -> SyncResult:
        try:
            result = sync(kinds)
        except RestartRequested:
            raise
        except Exception as e:
            result = SyncResult(failures=((SETTINGS if SETTINGS in kinds else PAIRS, e),))
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
        if server is not None and not server.path.exists():
            server.close()
            server.start()
        if back:
            say("INFO", ".wrenmem/ was deleted: rebuilding the index")
            return [(str(settings.knowledge_path), True), (str(settings.manifest_path), False)]
        return []

    try:
        run_loop(settings, _Housekeeping(source, housekeeping), after_first, stop,
                 config=opts.config, report=say, stats=stats)
    finally:
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

def _read_pid(state: Path) -> int | None:
    try:
        return int((state / PID_FILE).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None


def is_running(settings: Settings) -> bool:
    """Whether a watcher holds this project's lock (a stale pid file does not count)."""
    path = settings.state_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the lock we may have taken
    return False


def clean_stale(settings: Settings) -> bool:
    """Remove the pid, state and socket files of a watcher that died; True if any."""
    if is_running(settings):
        return False

    removed = False
    for path in (settings.state_dir / PID_FILE, settings.state_dir / STATE_FILE,
                 socket_path(settings.root)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed = True
    return removed


def watcher_status(settings: Settings) -> dict[str, Any]:
    """running, pid, socket, mode and the last sync, from the daemon or the state file."""

    running = is_running(settings)
    out: dict[str, Any] = {"running": running, "pid": None, "socket": None, "mode": None,
                           "daemon": False, "syncs": 0, "last_sync_at": None,
                           "last_summary": "", "last_error": "", "bad_files": []}
    if not running:
        out["stale_cleaned"] = clean_stale(settings)
        return out
    reply = ping(settings.root)
    if reply is None:
        with contextlib.suppress(OSError, ValueError):
            reply = json.loads((settings.state_dir / STATE_FILE).read_text(encoding="utf-8"))
    else:
        out["daemon"] = True
        out["socket"] = str(socket_path(settings.root))
    for key in ("pid", "mode", "syncs", "last_sync_at", "last_summary", "last_error",
                "bad_files"):
        if reply and key in reply:
            out[key] = reply[key]
    out["pid"] = out["pid"] or _read_pid(settings.state_dir)
    return out


def start_detached(settings: Settings, argv: list[str], *, wait: float = 30.0) -> int:
    """Start ``wrenmem watch`` in a new session, logging to ``.wrenmem/watch.log``; return
    its pid once it holds the lock (WrenmemError with the log's last lines if it died)."""
    if is_running(settings):
        raise WrenmemError(f"a watcher is already running for {settings.root} (pid "
                           f"{_read_pid(settings.state_dir)}); stop it with `wrenmem watch "
                           "--stop`")
    clean_stale(settings)
    state = settings.state_dir
    state.mkdir(parents=True, exist_ok=True)
    log_path = state / LOG_FILE
    with open(log_path, "ab") as log_fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "wrenmem", "--project", str(settings.root), "watch", *argv],
            stdin=subprocess.DEVNULL, stdout=log_fh, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=settings.root)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = _tail(log_path)
            raise WrenmemError(f"the watcher stopped at once (exit {proc.returncode}); "
                               f"{log_path}:\n{tail}")
        if is_running(settings) and _read_pid(state) == proc.pid:
            return proc.pid
        time.sleep(0.05)
    return proc.pid


def stop_watcher(settings: Settings, *, wait: float = 15.0) -> int | None:
    """SIGTERM the running watcher and wait for it to let go; its pid, or None if none ran."""
    if not is_running(settings):
        clean_stale(settings)
        return None
    pid = _read_pid(settings.state_dir)
    if pid is None:
        raise WrenmemError("a watcher holds the lock but wrote no pid file")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if not is_running(settings):
            return pid
        time.sleep(0.05)
    raise WrenmemError(f"the watcher (pid {pid}) did not stop within {wait:g} s")


def _tail(path: Path, lines: int = 8) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
