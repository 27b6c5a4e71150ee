"""``python tests/team_runner.py ARGS``: the wrenmem CLI with the tests' fake embedder.

For the team-index tests, which run several wrenmem processes at once (machines sharing one
object-storage index). ``WRENMEM_TEST_START_AT`` (a Unix time) makes racing processes start
together; ``WRENMEM_TEST_EMBED_DELAY`` (seconds per batch) makes a sync last long enough
to be interrupted. ``WRENMEM_TEST_PAUSE_AT=N`` with ``WRENMEM_TEST_PAUSE_DIR=D`` stops the
process at its Nth embedding call: it creates ``D/paused`` and waits for ``D/go``, so a test
can act (stop the S3 server) at a known point of a sync instead of after a timer.
``WRENMEM_TEST_MAIN_WRITE_DELAY`` (seconds) makes every sync of the main thread (the
watcher's loop, not its daemon's threads) hold the index lock that much longer, as a slow
model or disk would.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from index_helpers import RecordingEmbedder  # noqa: E402


class SlowEmbedder(RecordingEmbedder):
    def embed(self, texts):  # type: ignore[no-untyped-def]
        time.sleep(float(os.environ.get("WRENMEM_TEST_EMBED_DELAY", "0")))
        if len(self.calls) + 1 == int(os.environ.get("WRENMEM_TEST_PAUSE_AT", "0")):
            pause(Path(os.environ["WRENMEM_TEST_PAUSE_DIR"]))
        return super().embed(texts)


def pause(folder: Path, timeout: float = 120.0) -> None:
    """Say "paused" and wait for the test's "go" (or give up after ``timeout``)."""
    (folder / "paused").touch()
    deadline = time.monotonic() + timeout
    while not (folder / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def slow_main_writes(seconds: float) -> None:
    import threading

    from wrenmem.index import sync

    real = sync._sync_locked

    def slow(*args, **kwargs):  # type: ignore[no-untyped-def]
        if threading.current_thread() is threading.main_thread():
            time.sleep(seconds)  # inside the index lock
        return real(*args, **kwargs)

    sync._sync_locked = slow


def main() -> None:
    from wrenmem.cli import main as cli_main
    from wrenmem.embed.embedders import EMBEDDERS

    fake = SlowEmbedder()
    EMBEDDERS["fake"] = lambda arg, root: fake
    hold = float(os.environ.get("WRENMEM_TEST_MAIN_WRITE_DELAY", "0"))
    if hold:
        slow_main_writes(hold)
    start = float(os.environ.get("WRENMEM_TEST_START_AT", "0"))
    while time.time() < start:
        time.sleep(0.005)
    cli_main(sys.argv[1:])


if __name__ == "__main__":
    main()
