"""``wrenmem.fs.pids``: the one reader of a process's state (watcher, fitter, temp writer)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from wrenmem.fs import pids


def _state_becomes(pid: int, wanted: str) -> str | None:
    deadline = time.monotonic() + 10
    found = pids.state(pid)
    while found != wanted and time.monotonic() < deadline:  # signals arrive asynchronously
        time.sleep(0.01)
        found = pids.state(pid)
    return found


def test_running_stopped_zombie_and_gone() -> None:
    assert pids.alive(os.getpid()) and pids.state(os.getpid()) == "R"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pids.alive(child.pid)
        child.send_signal(signal.SIGSTOP)
        assert _state_becomes(child.pid, "T") == "T"
        assert pids.alive(child.pid)  # stopped is not gone
        child.send_signal(signal.SIGCONT)
        child.kill()
        assert _state_becomes(child.pid, "Z") == "Z"  # not reaped yet: a zombie
        assert not pids.alive(child.pid) and not pids.alive(child.pid, foreign=False)
    finally:
        child.kill()
        child.wait()
    assert pids.state(child.pid) is None and not pids.alive(child.pid)


def test_no_process_group_is_asked() -> None:
    assert not pids.alive(0) and not pids.alive(-1)
