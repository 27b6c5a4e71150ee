"""Whether a process a pid file or mark names still runs: its state from Linux's /proc,
signal 0 elsewhere. Standard library only (the CLI's entry uses it through daemonsock)."""

from __future__ import annotations

import os


def state(pid: int) -> str | None:
    """The state letter of process ``pid`` in /proc/PID/stat (``R``, ``S``, ``T`` stopped,
    ``Z`` zombie...), or None when it cannot be read: no such process, or no /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def alive(pid: int, *, foreign: bool = True) -> bool:
    """Whether process ``pid`` exists and is not a zombie: its /proc state, else (no /proc)
    signal 0; ``foreign`` is what a process signal 0 may not reach (another user's) counts
    as."""
    if pid <= 0:  # signal 0 to 0 or -n asks a process group, not a process
        return False
    found = state(pid)
    if found is not None:
        return found != "Z"
    try:
        os.kill(pid, 0)
    except PermissionError:
        return foreign
    except OSError:
        return False
    return True
