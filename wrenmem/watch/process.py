"""The watcher as a process: one per project (an exclusive ``flock`` on
``.wrenmem/watch.lock`` held for its whole life, so a pid file left by ``kill -9`` is known
stale), its pid and state files, ``--detach``, ``--stop`` and ``--status``."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wrenmem.errors import WrenmemError
from wrenmem.fs import daemonsock, pids, statedir
from wrenmem.recall.daemon_client import ping, socket_path
from wrenmem.settings import Settings
from wrenmem.storage.lock import is_locked

log = logging.getLogger(__name__)
LOCK_FILE, PID_FILE = statedir.WATCH_LOCK, statedir.WATCH_PID
STATE_FILE, LOG_FILE = statedir.WATCH_STATE, statedir.WATCH_LOG


class Singleton:
    """This watcher's hold on ``.wrenmem/watch.lock`` and its pid file."""

    def __init__(self, settings: Settings):
        self.state = settings.state_dir
        self.root = settings.root
        self.fd: int | None = None

    def _take(self) -> int | None:
        statedir.ensure_state_dir(self.state)
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
            raise _already_running(self.root, self.state)

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


def _already_running(root: Path, state: Path) -> WrenmemError:
    pid = _read_pid(state)
    return WrenmemError(f"a watcher is already running for {root}"
                        + (f" (pid {pid})" if pid else "")
                        + "; stop it with `wrenmem watch --stop`")


def _read_pid(state: Path) -> int | None:
    try:
        return int((state / PID_FILE).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None


def is_running(settings: Settings) -> bool:
    """Whether a watcher holds this project's lock (a stale pid file does not count)."""
    return is_locked(settings.state_dir / LOCK_FILE)


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


def _spawn(settings: Settings, argv: list[str]) -> subprocess.Popen[bytes]:
    """``wrenmem watch ARGV`` started in a new session, logging to ``.wrenmem/watch.log``."""
    clean_stale(settings)
    state = settings.state_dir
    statedir.ensure_state_dir(state)
    with open(state / LOG_FILE, "ab") as log_fh:
        return subprocess.Popen(
            [sys.executable, "-m", "wrenmem", "--project", str(settings.root), "watch", *argv],
            stdin=subprocess.DEVNULL, stdout=log_fh, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=settings.root)


# A watcher a recall started stops after this many seconds without a request (``wrenmem
# watch --detach`` runs until stopped); ``WRENMEM_IDLE_EXIT``, read at each start, may
# change it (the tests shorten it).
ON_DEMAND_IDLE_EXIT = 1800.0


def start_on_demand(settings: Settings) -> int | None:
    """After a recall the daemon did not answer (none running): start the project's
    watcher in the background, as ``wrenmem watch --detach`` does, without waiting for it,
    so the next one-shot recall is answered warm (the ``daemon`` setting ``on-demand``;
    ``running`` only asks a watcher already running). Its pid, or None: not started (the
    setting, ``WRENMEM_NO_DAEMON``, a reader or a remote index, a watcher already there,
    no project folder to watch)."""
    if (settings.daemon != "on-demand" or settings.is_reader or settings.remote_index
            or daemonsock.disabled()
            or not (settings.root / settings.knowledge_dir).is_dir()):
        return None
    try:
        if is_running(settings):
            return None
        idle = os.environ.get("WRENMEM_IDLE_EXIT") or ON_DEMAND_IDLE_EXIT
        return _spawn(settings, ["--idle-exit", str(idle)]).pid
    except OSError as e:  # the recall answers in-process all the same
        log.debug("could not start the watcher: %s", e)
        return None


def start_detached(settings: Settings, argv: list[str], *, wait: float = 30.0) -> int:
    """Start ``wrenmem watch`` in a new session, logging to ``.wrenmem/watch.log``; return
    its pid once it holds the lock (WrenmemError with the log's last lines if it died)."""
    if is_running(settings):
        raise _already_running(settings.root, settings.state_dir)
    state = settings.state_dir
    log_path = state / LOG_FILE
    proc = _spawn(settings, argv)
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
    if not _is_watcher(pid, settings.state_dir / LOCK_FILE):
        raise WrenmemError(
            f"{PID_FILE} names pid {pid}, which is not this project's watcher (it does not "
            f"hold {LOCK_FILE}): not signalling it; stop the watcher by hand")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if not is_running(settings):
            # it let go of the lock; give it the rest of the time to exit, so that a
            # caller who starts another watcher (or checks the pid) sees it gone
            while pids.alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            return pid
        time.sleep(0.05)
    raise WrenmemError(f"the watcher (pid {pid}) did not stop within {wait:g} s")


def _is_watcher(pid: int, lock: Path) -> bool:
    """Whether ``pid`` holds the flock on ``lock``, from /proc/locks; where there is no
    /proc, whether its command line at least mentions wrenmem (else: cannot tell, yes)."""
    try:
        inode = os.stat(lock).st_ino
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            table = fh.read()
    except OSError:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                return b"wrenmem" in fh.read()
        except OSError:
            return True
    for line in table.splitlines():
        parts = line.split()  # "1: FLOCK  ADVISORY  WRITE 12345 08:01:123456 0 EOF"
        if "->" in parts or len(parts) < 6 or parts[1] != "FLOCK":
            continue  # "->" marks a process waiting for the lock, not holding it
        if parts[4] == str(pid) and parts[5].rsplit(":", 1)[-1] == str(inode):
            return True
    return False


def _tail(path: Path, lines: int = 8) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
