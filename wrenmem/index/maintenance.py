"""The pairs table's housekeeping off the request path.

A compaction (:mod:`wrenmem.storage.compaction`) rewrites about 900 MB at 100,000 pairs.
While a watcher runs, a write in its process only records that one is due (:func:`defer`);
the watcher runs :func:`run` in a child in its idle time
(:class:`wrenmem.watch.maintainer.Maintainer`) and kills it when a write arrives (a kill
leaves the table readable; the next run deletes its leftovers). The child holds the index
lock; the state mirror is told the table's new files (:func:`settle`), so it stays trusted.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wrenmem.errors import LockTimeoutError
from wrenmem.fs import statedir
from wrenmem.fs.fsutil import write_marshal
from wrenmem.index import table as index
from wrenmem.index.state import load_state, record_disk
from wrenmem.settings import Settings
from wrenmem.storage import compaction, lance
from wrenmem.storage.lock import index_lock

log = logging.getLogger(__name__)

SETTLE_WAIT = 5.0  # seconds :func:`settle` waits for the index lock
CHILD_NICE = 10  # the child yields the CPU to the watcher's requests

_deferred: set[str] = set()  # projects whose watcher runs in this process
_guard = threading.Lock()


def counter(settings: Settings) -> Path:
    """The maintenance record of the pairs table (commits since a compaction, what is due)."""
    return settings.state_dir / statedir.INDEX_MAINT


def defer(settings: Settings, on: bool = True) -> None:
    """From now on (``on``) or no longer, writes of this project in this process leave
    the compaction and the prune to the watcher (:func:`is_deferred`)."""
    with _guard:
        (_deferred.add if on else _deferred.discard)(str(settings.root))


def is_deferred(settings: Settings) -> bool:
    """A watcher in this process maintains this project's local pairs table."""
    return str(settings.root) in _deferred and not settings.remote_index


def prune_due(settings: Settings, table: Any) -> bool:
    """Before a write's commits: prune what the last compaction superseded, once due
    (:func:`wrenmem.storage.compaction.prune_due`), unless a watcher here does it."""
    return not is_deferred(settings) and compaction.prune_due(table, counter(settings))


def maintain(settings: Settings, table: Any, commits: int, embedded: int,
             fresh: bool = False) -> bool:
    """After a write: compaction now and then (not of a table it created: ``fresh``); only
    recorded as due when a watcher in this process does it in its idle time."""
    return compaction.maintain(table, counter(settings), commits, embedded, fresh=fresh,
                               defer=is_deferred(settings))


def due(settings: Settings) -> bool:
    """There is housekeeping to do (a compaction, a prune, a killed run's leftovers), by
    the record alone: no LanceDB."""
    return (not settings.remote_index and not settings.is_reader
            and compaction.maintenance_due(counter(settings)) and index.index_exists(settings))


def run(settings: Settings, started: Callable[[], None] | None = None) -> str:
    """What :func:`due` says, holding the index lock (not waited for: ``"busy"``), then
    the mirror told of the table's new files. ``started``: called once a kill would be
    noticed. Returns what :func:`wrenmem.storage.compaction.run_due_maintenance` did."""
    try:
        with index_lock(settings, timeout=0):
            table = index.open_table(index.connect(settings))
            if table is None:
                return ""
            before = index.disk_listing(settings)
            held = compaction.maintenance_record(counter(settings))
            held["before"] = before  # what :func:`settle` needs if this run is killed
            write_marshal(counter(settings), held)
            done = compaction.run_due_maintenance(table, counter(settings), started=started)
            if index.disk_listing(settings) != before:
                _repoint(settings, before)
            held = compaction.maintenance_record(counter(settings))
            if held.pop("before", None) is not None and held.get("started") is None:
                write_marshal(counter(settings), held)
            return done
    except LockTimeoutError:
        return "busy"


def settle(settings: Settings) -> bool:
    """After a child running :func:`run` was killed: when it changed the table's files
    (a compaction it committed before the kill) and nothing else wrote since, the state
    mirror is told the new listing. Returns whether it was. Holding the index lock."""
    try:
        with index_lock(settings, timeout=SETTLE_WAIT):
            held = compaction.maintenance_record(counter(settings))
            if held.get("started") is None:
                return False  # finished (or never began): it settled itself
            before = held.get("before")
            return isinstance(before, dict) and _repoint(settings, before)
    except LockTimeoutError:
        return False


def _repoint(settings: Settings, before: lance.Listing | None) -> bool:
    """The mirror recorded the table's files as ``before`` (so it was true when the run
    began, and only the run wrote since, under the lock): record them as they are now."""
    state = load_state(settings)
    now = index.disk_listing(settings)
    if state is None or before is None or state.disk != before or now == before:
        return False
    record_disk(settings, state, now)
    return True


# --- the child process ------------------------------------------------------------------

def child_command() -> list[str]:
    """How the watcher starts the child (the settings follow on its stdin, pickled)."""
    return [sys.executable, "-m", "wrenmem.index.maintenance"]


def child_main(stdin: Any = None, stdout: Any = None) -> int:
    """The child: read the pickled settings, say ``started`` once the record says so
    (from then a kill is noticed), do the work, say what was done. One JSON line each."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout
    settings = pickle.loads(stdin.read())  # from the watcher that started us (same user)
    try:
        os.nice(CHILD_NICE)
    except OSError:
        pass

    def say(**message: Any) -> None:
        stdout.write(json.dumps(message) + "\n")
        stdout.flush()

    say(done=run(settings, started=lambda: say(started=True)))
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="wrenmem maintenance: %(message)s")
    raise SystemExit(child_main())
