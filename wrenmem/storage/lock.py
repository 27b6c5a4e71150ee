"""The index writers' lock: one exclusive ``flock`` on ``.wrenmem/index.lock``, held by
every writer of the index (concurrent upserts can duplicate rows). The kernel drops it when
its holder dies, so a ``kill -9`` leaves no stale lock. Re-entrant within a thread; threads
of one process take turns. ``name=``: another lock of the same kind in ``.wrenmem/`` (the
recall fit's, :mod:`wrenmem.index.fitjob`)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from wrenmem.errors import LockTimeoutError, WrenmemError
from wrenmem.fs import statedir
from wrenmem.settings import Settings

LOCK_NAME = statedir.INDEX_LOCK
DEFAULT_TIMEOUT = 60.0
POLL_SECONDS = 0.02

_guard = threading.Lock()
_thread_locks: dict[str, threading.RLock] = {}
_held = threading.local()


def lock_path(settings: Settings, name: str = LOCK_NAME) -> Path:
    return settings.state_dir / name


def is_locked(path: Path, *, exclusive: bool = True) -> bool:
    """Whether someone holds a flock on ``path`` that a probe (exclusive, or shared with
    ``exclusive=False``) cannot get past; a missing file is unlocked."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDWR if exclusive else os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


@contextmanager
def index_lock(settings: Settings, timeout: float = DEFAULT_TIMEOUT, *,
               name: str = LOCK_NAME) -> Iterator[None]:
    """Hold the project's index lock (``name``: another lock file of ``.wrenmem/``) for the
    ``with`` block (LockTimeoutError after ``timeout`` seconds)."""
    path = lock_path(settings, name)
    key = str(path)
    deadline = time.monotonic() + max(timeout, 0.0)
    with _guard:
        rlock = _thread_locks.setdefault(key, threading.RLock())
    if not rlock.acquire(timeout=max(timeout, 0.0)):
        raise LockTimeoutError(f"another thread held the lock {path} for {timeout:g}s")
    depth: dict[str, int] = getattr(_held, "depth", None) or {}
    _held.depth = depth
    try:
        if depth.get(key, 0) > 0:  # re-entered by the thread that holds the flock
            depth[key] += 1
            try:
                yield
            finally:
                depth[key] -= 1
            return
        fd = _acquire_flock(path, deadline, timeout)
        depth[key] = 1
        try:
            yield
        finally:
            depth[key] = 0
            _release_flock(fd)
    finally:
        rlock.release()


def _acquire_flock(path: Path, deadline: float, timeout: float) -> int:
    try:
        statedir.ensure_parent(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:  # .wrenmem a file, index.lock a folder, a read-only checkout
        raise WrenmemError(f"cannot open the index lock {path}: {e.strerror or e} "
                           f"(remove {e.filename or path} if it is in the way)") from e
    try:
        if not poll_flock(fd, deadline):
            raise LockTimeoutError(
                f"another wrenmem process held the lock {path} for "
                f"{timeout:g}s{_holder(fd)}")
        # The holder's pid helps a user who wonders who is holding the index. Written
        # only when another one is there: a truncate and write cost a long-lived process
        # (the daemon, once per request) milliseconds of file-system journal work.
        mine = f"{os.getpid()}\n".encode()
        if os.pread(fd, 64, 0) != mine:
            os.pwrite(fd, mine, 0)
            os.ftruncate(fd, len(mine))
        return fd
    except BaseException:
        os.close(fd)
        raise


def poll_flock(fd: int, deadline: float) -> bool:
    """Take an exclusive flock on ``fd``, trying every ``POLL_SECONDS`` until the monotonic
    ``deadline``: False when another holder kept it that long."""
    import fcntl

    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_SECONDS)


def _holder(fd: int) -> str:
    try:
        pid = os.pread(fd, 32, 0).decode().strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


def _release_flock(fd: int) -> None:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
