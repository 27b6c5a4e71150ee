"""The recall fit a sync leaves to a process of its own (issue 42: the first index).

From :data:`DETACH_AT` rows, a sync that wrote does not fit recall in its own process
(:func:`wrenmem.recall.adapt.after_sync`): it marks the fit owed (``.wrenmem/
recall-fit-owed.json``: a nonce, the sync's settings, the fitter's pid) and :func:`start`\\ s
``python -m wrenmem.watch.fitter`` detached (its own session, stdio to ``/dev/null``,
niced), so the sync returns without the leave-one-out probes and the memory they take.
Whoever fits holds ``.wrenmem/recall-fit.lock`` (:func:`fit_lock`), writes the fit
atomically, then :func:`clear`\\ s the mark unless a sync marked it again meanwhile. Recall
uses the previous fit (or the shipped model) until the new one is written. A fitter killed
leaves the old fit and the mark: the next sync (a no-op one too) starts another."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wrenmem.fs import pids, statedir
from wrenmem.fs.fsutil import atomic_write_text
from wrenmem.lazy import lazy
from wrenmem.settings import Settings
from wrenmem.storage.lock import index_lock, is_locked, lock_path

if TYPE_CHECKING:
    import subprocess
    import uuid
else:  # only to start a fitter: every no-op sync asks whether one is owed (index/noop.py)
    subprocess, uuid = lazy("subprocess"), lazy("uuid")

DETACH_AT = 5000  # rows from which a sync's fit runs detached
DETACH_ENV = "WRENMEM_FIT_DETACH_AT"  # another threshold, for tests (5,000 rows are slow)
LOCK_WAIT = 3600.0  # a fitter's wait for the one before it
FITTER = "wrenmem.watch.fitter"
POLL = 0.05
_children: dict[int, subprocess.Popen[bytes]] = {}  # fitters this process started (reaped)


def detach_at() -> int:
    """:data:`DETACH_AT`, or the whole number in ``WRENMEM_FIT_DETACH_AT``."""
    raw = os.environ.get(DETACH_ENV, "").strip()
    return int(raw) if raw.isdigit() else DETACH_AT


def owed_path(state_dir: Path) -> Path:
    return state_dir / statedir.RECALL_FIT_OWED


def read_owed(state_dir: Path) -> dict[str, Any] | None:
    """The owed mark (``nonce``, ``settings``, ``pid``, ``since``, maybe ``failed``), or
    None (no fit owed, or a mark that cannot be read)."""
    try:
        data = json.loads(owed_path(state_dir).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("nonce"), str) else None


def _write(state_dir: Path, data: dict[str, Any]) -> None:
    atomic_write_text(owed_path(state_dir), json.dumps(data, ensure_ascii=False) + "\n")


def mark(settings: Settings, payload: dict[str, Any]) -> str:
    """Mark a fit owed, with ``payload`` (the settings the fitter resolves again); its
    nonce."""
    nonce = uuid.uuid4().hex
    _write(settings.state_dir, {"nonce": nonce, "since": time.time(), "settings": payload,
                                "pid": None})
    return nonce


def start(settings: Settings) -> int:
    """Start a detached fitter for the owed fit (OSError if it cannot be started); its pid,
    recorded in the mark."""
    for pid in [p for p, child in _children.items() if child.poll() is not None]:
        del _children[pid]  # reaped
    child = subprocess.Popen(
        [sys.executable, "-m", FITTER, str(settings.root)], stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        close_fds=True)
    _children[child.pid] = child
    owed = read_owed(settings.state_dir)
    if owed is not None:  # (a fitter as quick as to have cleared it: nothing to record)
        _write(settings.state_dir, {**owed, "pid": child.pid})
    return child.pid


def note_failure(settings: Settings, nonce: str | None, reason: str) -> None:
    """Say in the mark why a fit failed (it stays owed: the next sync tries again)."""
    owed = read_owed(settings.state_dir)
    if owed is not None and owed["nonce"] == nonce:
        _write(settings.state_dir, {**owed, "failed": reason})


def clear(settings: Settings, owed: dict[str, Any] | None) -> None:
    """Remove the mark ``owed`` read before a fit, unless a sync marked the fit again."""
    now = read_owed(settings.state_dir)
    if owed is not None and now is not None and now["nonce"] == owed["nonce"]:
        with contextlib.suppress(OSError):
            owed_path(settings.state_dir).unlink()


@contextlib.contextmanager
def fit_lock(settings: Settings, timeout: float = 60.0) -> Iterator[None]:
    """Hold ``.wrenmem/recall-fit.lock`` (no lock where there is no ``.wrenmem/``)."""
    if not settings.state_dir.is_dir():
        yield
        return
    with index_lock(settings, timeout, name=statedir.RECALL_FIT_LOCK):
        yield


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    if pid in _children:
        return _children[pid].poll() is None
    return pids.alive(pid, foreign=False)  # another user's: the pid was taken again


def fitting(settings: Settings) -> bool:
    """Whether a fit is being made: the fit lock held, or the mark's fitter still alive."""
    if is_locked(lock_path(settings, statedir.RECALL_FIT_LOCK)):
        return True
    owed = read_owed(settings.state_dir)
    return owed is not None and _alive(owed.get("pid"))


def pending(settings: Settings) -> bool:
    """Whether a fit is owed or being made (``status``'s ``recall_fit_pending``)."""
    return owed_path(settings.state_dir).exists() or is_locked(
        lock_path(settings, statedir.RECALL_FIT_LOCK))


def resume(settings: Settings) -> int | None:
    """A fitter started for a fit still owed that nobody is making (its fitter killed);
    its pid, or None."""
    if not owed_path(settings.state_dir).exists() or fitting(settings):
        return None
    return start(settings)


def wait(settings: Settings, timeout: float) -> bool:
    """Wait for the fit being made: True when none is owed any more; False after
    ``timeout`` seconds, or at once when one is owed and no fitter is making it."""
    deadline = time.monotonic() + timeout
    while True:
        if not owed_path(settings.state_dir).exists() and not fitting(settings):
            return True
        if not fitting(settings) or time.monotonic() >= deadline:
            return False
        time.sleep(POLL)
