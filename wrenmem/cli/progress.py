"""Progress on stderr for anything that takes more than a second.

Shown on a terminal, or when asked (``WRENMEM_PROGRESS=1``, e.g. in a CI log; ``0`` keeps a
terminal quiet). Nothing for the first second, so quick commands print nothing extra; then
one line, redrawn in place on a terminal (a new line every few seconds otherwise): what is
running, the count of a counting step (texts embedded) when there is one, and the seconds
so far. Importing LanceDB, loading a model and writing the index all show up as time, so a
``store`` that waits for them no longer looks hung. Results stay on stdout.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import IO, Any

PROGRESS_ENV = "WRENMEM_PROGRESS"
AFTER = 1.0  # seconds of silence before the first line
EVERY = 0.5  # redraws on a terminal
LOG_EVERY = 5.0  # new lines when stderr is not a terminal


def wanted(stream: IO[str]) -> bool:
    """A terminal, unless WRENMEM_PROGRESS=0; anything else when WRENMEM_PROGRESS=1."""
    asked = os.environ.get(PROGRESS_ENV, "").strip().lower()
    if asked in ("0", "false", "no", "off"):
        return False
    if asked in ("1", "true", "yes", "on"):
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """``with Progress("store"):`` around a command's work; also the library's
    ``progress(done, total)`` callback for counting steps (texts embedded)."""

    def __init__(self, label: str, *, stream: IO[str] | None = None, after: float = AFTER,
                 enabled: bool | None = None):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.after = after
        self.enabled = wanted(self.stream) if enabled is None else enabled
        self.tty = self.enabled and _isatty(self.stream)
        self.started = time.monotonic()
        self.count: tuple[int, int] | None = None
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
        """A counting step's progress: ``done`` of ``total``."""
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
            if self.count is not None:
                done, total = self.count
                text += f"{done}/{total} texts embedded ({100 * done // max(total, 1)}%), "
            text += f"{elapsed:.0f} s"
            if self.tty:
                pad = max(0, self._width - len(text))
                self.stream.write("\r" + text + " " * pad)
                self._width = len(text)
            else:
                self.stream.write(text + "\n")
            self.stream.flush()
            self.shown = True


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
