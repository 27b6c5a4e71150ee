"""The recall copy of a big table, saved after a write by a detached background process.

A writer saves the recall copy itself only for a table of up to ``recallcopy.MAX_ROWS``
rows: reading 100,000 rows whole would add seconds to every write. Past that, the writer
(under the index lock, once its LanceDB write is done) removes the old copy, which no
longer fits the table, and starts this module as a detached, niced process
(:func:`start`), which returns at once: the write is not slower for its caller. The job,
``python -m wrenmem.index.copyjob ROOT INDEX``:

1. waits ``SETTLE_SECONDS``, and stops if the table's files changed meanwhile (a later
   write started a job of its own: a run of writes saves one copy, not one per write);
2. takes ``.wrenmem/recall-copy.lock`` (an exclusive ``flock``, the kernel drops it when its
   holder dies): one job at a time, and never beside a long-lived reader's own save
   (:func:`wrenmem.index.recallcopy.write` takes it too);
3. stops if a copy of the table's files as they are now is already saved (a daemon's);
4. lists the table's files, reads the table whole through LanceDB (a reader: it takes no
   index lock, so writers never wait for it) and stops if the files changed while it
   read (the copy would be of another version than it names);
5. writes the copy as :func:`wrenmem.index.recallcopy.write` does: its data file under a
   temporary name, renamed into place, then the small file that names it, replaced
   atomically, keyed by the listing of step 4.

A kill at any moment leaves the old copy (nothing renamed yet), no copy (the writer
removed it), or the new one: a half-written file is under a temporary name no reader
opens, and a copy whose listing is not the table's files now is never used, so none is
read as current that is not. The job is not started for a remote index (no copy), a
table past ``recallcopy.FILE_MAX_ROWS`` rows, while the project's watcher runs (its daemon
answers the one-shot recalls, and saves the copy it holds after its searches), or when the
``background_copy`` setting is false: then, as before, only a long-lived process (the
watcher's daemon, the MCP server) saves the copy of a big table.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from wrenmem.fs import statedir
from wrenmem.index import recallcopy
from wrenmem.index import table as index
from wrenmem.settings import Settings
from wrenmem.storage import lance
from wrenmem.storage.lock import is_locked

log = logging.getLogger(__name__)

SETTLE_SECONDS = 1.0  # a job waits this long for a run of writes to end
LOCK_WAIT_SECONDS = 600.0  # and at most this long for another job (or saver) to finish
NICENESS = 10
# Test only: the job kills itself (SIGKILL) on reaching the named step: a kill exactly there
KILL_AT_ENV = "WRENMEM_COPY_JOB_KILL_AT"


def start(settings: Settings) -> bool:
    """Start the job for ``settings``' project, detached (its own session, no standard
    streams, niced): True when it was started. Never raises: the copy is an optimisation."""
    if settings.remote_index or not settings.background_copy or os.name != "posix":
        return False
    if is_locked(settings.state_dir / statedir.WATCH_LOCK):
        return False  # the watcher's daemon answers recalls (and saves the copy it holds)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a job's start-up is a one-shot's too
    try:
        subprocess.Popen(  # noqa: S603 - our own module, by the running interpreter
            [sys.executable, "-m", "wrenmem.index.copyjob", str(settings.root),
             settings.index],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            cwd=str(settings.root), env=env, close_fds=True, start_new_session=True)
    except OSError as e:
        log.debug("recall copy job not started: %s", e)
        return False
    return True


def _reached(step: str) -> None:
    if os.environ.get(KILL_AT_ENV) == step:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def _settle(seconds: float) -> None:
    time.sleep(seconds)


def run(settings: Settings, settle: float = SETTLE_SECONDS) -> str:
    """The job's steps (see the module docstring); what it did, as a word."""
    first = index.disk_listing(settings)
    if not first:
        return "no table"
    _settle(settle)
    if index.disk_listing(settings) != first:
        return "superseded"  # a later write's job saves the copy
    with recallcopy.copy_lock(settings, LOCK_WAIT_SECONDS) as held:
        if not held:
            return "busy"
        _reached("locked")
        listing = index.disk_listing(settings)
        if not listing:
            return "no table"
        if recallcopy.saved_listing(settings) == listing:
            return "current"
        table = index.open_table(lance.connect(settings.index_uri))
        if table is None:
            return "no table"
        rows = table.count_rows()
        if not 0 < rows <= recallcopy.FILE_MAX_ROWS:
            return "too big"
        try:
            copy = recallcopy.RecallCopy.for_saving(table)
        except ValueError:  # written while it read: a later write's job saves the copy
            return "superseded"
        del table
        _reached("read")
        if index.disk_listing(settings) != listing:
            return "superseded"
        done = recallcopy.write_held(settings, copy, listing, _reached, again=False)
        _reached("written")
        return "written" if done else "failed"


def main(argv: list[str]) -> int:
    try:
        os.nice(NICENESS)
    except OSError:
        pass
    root, uri = Path(argv[0]), argv[1]
    try:
        settings = Settings(root=root, index=uri)
        done = run(settings)
    except Exception as e:  # a detached job has no one to tell but the debug log
        log.debug("recall copy job failed: %s", e)
        return 1
    print(done)  # (to no one when detached; a test's pipe)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
