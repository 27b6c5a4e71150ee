"""The index lock: exclusive across processes and threads, re-entrant, freed by kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from wrenmem.errors import LockTimeoutError
from wrenmem.settings import load_settings
from wrenmem.storage.lock import index_lock, lock_path

REPO = Path(__file__).resolve().parent.parent

HOLDER = """
import sys, time
from pathlib import Path
from wrenmem.storage.lock import index_lock
from wrenmem.settings import load_settings
with index_lock(load_settings(Path(sys.argv[1]))):
    print("locked", flush=True)
    time.sleep(60)
"""


def _hold_in_other_process(root: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], text=True,
                            stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_lock_file_lives_in_the_state_folder(project: Path) -> None:
    settings = load_settings(project)
    with index_lock(settings):
        assert lock_path(settings).parent == project / ".wrenmem"
        assert lock_path(settings).read_text().strip() == str(os.getpid())


def test_the_lock_file_names_its_holder_and_is_not_rewritten_by_the_same_one(
        project: Path) -> None:
    settings = load_settings(project)
    path = lock_path(settings)
    path.parent.mkdir(exist_ok=True)
    path.write_text("123456789012\n")  # a former holder with a longer pid
    with index_lock(settings):
        assert path.read_text() == f"{os.getpid()}\n"
    written = path.stat().st_mtime_ns
    os.utime(path, ns=(written - 10**9, written - 10**9))
    with index_lock(settings):  # the same holder again (a daemon's next request)
        assert path.read_text() == f"{os.getpid()}\n"
    assert path.stat().st_mtime_ns == written - 10**9  # not written again


def test_reentrant_in_one_thread(project: Path) -> None:
    settings = load_settings(project)
    with index_lock(settings, timeout=0.1), index_lock(settings, timeout=0.1):
        pass
    with index_lock(settings, timeout=0.1):  # fully released afterwards
        pass


def test_other_process_times_out_then_gets_it_after_kill_9(project: Path) -> None:
    settings = load_settings(project)
    holder = _hold_in_other_process(project)
    try:
        start = time.monotonic()
        with pytest.raises(LockTimeoutError, match=f"pid {holder.pid}"), \
                index_lock(settings, timeout=0.3):
            pass
        assert time.monotonic() - start >= 0.3
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with index_lock(settings, timeout=5):
        pass


def test_threads_take_turns(project: Path) -> None:
    settings = load_settings(project)
    inside = 0
    overlaps: list[int] = []

    def work() -> None:
        nonlocal inside
        for _ in range(20):
            with index_lock(settings, timeout=10):
                inside += 1
                overlaps.append(inside)
                time.sleep(0.001)
                inside -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps and max(overlaps) == 1


def test_another_thread_times_out(project: Path) -> None:
    settings = load_settings(project)
    errors: list[BaseException] = []

    def other() -> None:
        try:
            with index_lock(settings, timeout=0.1):
                pass
        except LockTimeoutError as e:
            errors.append(e)

    with index_lock(settings):
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert len(errors) == 1


def test_is_locked_sees_shared_and_exclusive_holders(tmp_path: Path) -> None:
    import fcntl

    from wrenmem.storage.lock import is_locked

    path = tmp_path / "probe.lock"
    assert not is_locked(path) and not is_locked(path, exclusive=False)  # no file yet
    path.write_bytes(b"")
    assert not is_locked(path)
    with open(path) as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_SH)
        assert is_locked(path)                       # a shared holder blocks an exclusive probe
        assert not is_locked(path, exclusive=False)  # ... but not a shared one
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        assert is_locked(path, exclusive=False)
    assert not is_locked(path)
