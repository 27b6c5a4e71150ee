"""Progress on stderr for anything that takes more than a second, on a terminal or in CI
(docs/settings.md: ``WRENMEM_PROGRESS``). Importing LanceDB, loading a model and writing the
index all show up as time, so a ``store`` that waits for them does not look hung. The
library reports a counting step through a plain ``progress(done, total)`` callback."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

PROGRESS_ENV = "WRENMEM_PROGRESS"
AFTER_ENV = "WRENMEM_PROGRESS_AFTER"  # seconds of silence before the first line (default 1)
CI_ENV = "CI"  # set by GitHub Actions, GitLab CI, CircleCI, Travis, Buildkite, Jenkins…
AFTER = 1.0  # seconds of silence before the first line
EVERY = 0.5  # redraws on a terminal
LOG_EVERY = 5.0  # new lines when stderr is not a terminal
BAR = 20  # characters of the bar on a terminal
ETA_AFTER = 3.0  # seconds before a time left is guessed
OFF = ("0", "false", "no", "off")


def wanted(stream: IO[str]) -> bool:
    """A terminal or a CI log, unless WRENMEM_PROGRESS=0; anything when WRENMEM_PROGRESS=1."""
    asked = os.environ.get(PROGRESS_ENV, "").strip().lower()
    if asked in OFF:
        return False
    if asked in ("1", "true", "yes", "on"):
        return True
    ci = os.environ.get(CI_ENV, "").strip().lower()
    return _isatty(stream) or bool(ci and ci not in OFF)


def silence() -> float:
    """Seconds before the first line: WRENMEM_PROGRESS_AFTER, else one."""
    try:
        return max(0.0, float(os.environ.get(AFTER_ENV, "") or AFTER))
    except ValueError:
        return AFTER


class Progress:
    """``with Progress("store"):`` around a command's work; also the library's
    ``progress(done, total)`` callback for counting steps (texts embedded)."""

    def __init__(self, label: str, *, stream: IO[str] | None = None,
                 after: float | None = None, enabled: bool | None = None):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.after = silence() if after is None else after
        self.enabled = wanted(self.stream) if enabled is None else enabled
        self.tty = self.enabled and _isatty(self.stream)
        self.started = time.monotonic()
        self.count: tuple[int, int] | None = None
        self.unit = "texts embedded"
        self._step_started = self.started
        self.shown = False
        self._last = 0.0
        self._width = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        self.started = time.monotonic()
        if self.enabled:
            self._thread = threading.Thread(target=self._tick, name="wrenmem-progress",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()

    def __call__(self, done: int, total: int) -> None:
        """A counting step's progress: ``done`` of ``total`` texts embedded."""
        self._count("texts embedded", done, total)

    def counter(self, unit: str) -> Callable[[int, int], None]:
        """The ``progress(done, total)`` callback of a counting step in ``unit`` ("files
        checked"); a step of another unit starts its own count and pace."""

        def report(done: int, total: int) -> None:
            self._count(unit, done, total)

        return report

    def _count(self, unit: str, done: int, total: int) -> None:
        if unit != self.unit or self.count is None:
            self.unit = unit
            self._step_started = time.monotonic()
        self.count = (done, total)
        self._draw(force=done >= total)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)
            self._thread = None
        with self._lock:
            if self.shown and self.tty:
                self.stream.write("\n")
                self.stream.flush()
            self.shown = False

    def _tick(self) -> None:
        while not self._stop.wait(EVERY if self.tty else 1.0):
            self._draw()

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        elapsed = now - self.started
        if elapsed < self.after:
            return
        with self._lock:
            if self._stop.is_set() and not force:
                return
            if not force and now - self._last < (EVERY if self.tty else LOG_EVERY):
                return
            self._last = now
            text = f"{self.label}: "
            if self.count is not None and self.count[0] >= self.count[1] and not force:
                text += f"{self.count[0]} {self.unit}, "  # the step is done; the rest runs
            elif self.count is not None:
                done, total = self.count
                share = min(done, total) / max(total, 1)
                if self.tty:
                    filled = int(BAR * share)
                    text += f"[{'#' * filled}{'.' * (BAR - filled)}] "
                text += f"{done}/{total} {self.unit} ({int(100 * share)}%), "
            text += f"{elapsed:.0f} s"
            left = self._left(now - self._step_started)
            if left is not None:
                text += f", about {left:.0f} s left"
            if self.tty:
                pad = max(0, self._width - len(text))
                self.stream.write("\r" + text + " " * pad)
                self._width = len(text)
            else:
                self.stream.write(text + "\n")
            self.stream.flush()
            self.shown = True

    def _left(self, elapsed: float) -> float | None:
        """Seconds left in the counting step at its pace so far (``elapsed``: the step's
        seconds), once there is a pace to go by."""
        if self.count is None or elapsed < ETA_AFTER:
            return None
        done, total = self.count
        if done <= 0 or done >= total:
            return None
        return elapsed * (total - done) / done


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
