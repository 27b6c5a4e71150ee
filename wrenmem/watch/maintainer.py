"""The watcher's idle-time housekeeping of the pairs table (:mod:`wrenmem.index.maintenance`).

While the watcher runs, its writes only record that a compaction is due; this runs it in
a child process once nothing has happened for ``QUIET`` seconds, and kills the child when
a write arrives (a ``sync``, ``store`` or ``forget`` handed over, or the loop's own sync),
so a write never waits for a compaction. A child killed ``MAX_KILLS`` times in a row is
waited for the next time instead, so a busy watcher still compacts now and then; after
``MAX_FAILURES`` children failed in a row, the writes compact inline again.
"""

from __future__ import annotations

import json
import logging
import pickle
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wrenmem.index import maintenance
from wrenmem.settings import Settings

log = logging.getLogger(__name__)

QUIET = 2.0  # seconds without a write or a request before housekeeping starts
RETRY = 60.0  # after a run that could not do its work (a failed compaction)
RETRY_BUSY = 5.0  # after a run that found another process writing the index
MAX_KILLS = 3
MAX_FAILURES = 3  # children that failed in a row, after which the writes compact inline


class Maintainer:
    """Starts, reaps and stops the housekeeping child; thread-safe (the loop ticks it,
    the daemon's requests pause it)."""

    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.monotonic,
                 command: list[str] | None = None):
        self.settings = settings
        self.clock = clock
        self.command = command or maintenance.child_command()
        self._lock = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None
        self._quiet_from = clock()
        self._not_before = 0.0
        self.kills = 0  # in a row
        self.failures = 0  # children that failed, in a row
        self.runs = 0
        self.last = ""

    @property
    def running(self) -> bool:
        return self._child is not None

    def info(self) -> dict[str, Any]:
        return {"maintenance": {"runs": self.runs, "last": self.last,
                                "killed_in_a_row": self.kills, "running": self.running}}

    def touch(self) -> None:
        """A request came: housekeeping waits for ``QUIET`` seconds more."""
        self._quiet_from = self.clock()

    def pause(self) -> None:
        """Before a write of the index: stop a running child (killed; waited for after
        ``MAX_KILLS`` kills in a row), and tell the mirror what a killed one committed."""
        with self._lock:
            self._quiet_from = self.clock()
            child = self._child
            if child is None:
                return
            if self.kills >= MAX_KILLS:
                child.wait()
                self._reap(child)
                return
            self._stop(child)
            self.kills += 1
            self.last = "killed by a write"
            log.info("housekeeping stopped for a write (%d in a row)", self.kills)

    def tick(self) -> str | None:
        """In the watcher's idle time: reap a child that finished (what it did), or start
        one when housekeeping is due and nothing happened for ``QUIET`` seconds."""
        with self._lock:
            child = self._child
            if child is not None:
                return self._reap(child) if child.poll() is not None else None
            now = self.clock()
            if now - self._quiet_from < QUIET or now < self._not_before:
                return None
            try:
                if not maintenance.due(self.settings):
                    return None
                self._start()
            except OSError as e:
                log.warning("housekeeping not started: %s", e)
                self._not_before = now + RETRY
            return None

    def close(self) -> None:
        """The watcher stops: so does a running child (the next watcher or sync redoes it)."""
        with self._lock:
            if self._child is not None:
                self._stop(self._child)

    def _start(self) -> None:
        import os

        # The child imports this very wrenmem, whatever the watcher's folder (``--detach``).
        here = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (here, os.environ.get("PYTHONPATH", "")) if p)}
        child = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 env=env)
        assert child.stdin is not None
        try:
            child.stdin.write(pickle.dumps(self.settings))
            child.stdin.close()
        except OSError:  # it died at once; reaped on the next tick
            pass
        self._child = child
        self.runs += 1

    def _stop(self, child: subprocess.Popen[bytes]) -> None:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
        self._child = None
        maintenance.settle(self.settings)

    def _reap(self, child: subprocess.Popen[bytes]) -> str:
        out = child.stdout.read() if child.stdout is not None else b""
        if child.stdout is not None:
            child.stdout.close()
        self._child = None
        done = ""
        for line in out.decode("utf-8", "replace").splitlines():
            try:
                done = str(json.loads(line).get("done", done))
            except (ValueError, AttributeError):
                continue
        if child.returncode != 0:
            done = done or f"failed (exit {child.returncode})"
            self.failures += 1
            if self.failures >= MAX_FAILURES and maintenance.is_deferred(self.settings):
                # Never leave the table uncompacted: the writes compact inline again.
                maintenance.defer(self.settings, False)
                log.warning("housekeeping failed %d times in a row (%s); the writes compact "
                            "the index themselves again", self.failures, done)
        else:
            self.failures = 0
        now = self.clock()
        worked = done in ("compacted", "pruned")
        if worked:
            self.kills = 0
        if done == "busy":
            self._not_before = now + RETRY_BUSY
        elif maintenance.due(self.settings):  # still due: failed, or due again already
            self._not_before = now + (QUIET if worked else RETRY)
        self.last = done or "nothing to do"
        if done:
            log.info("housekeeping: %s", done)
        return self.last
