"""The compaction policy of every table of the index: compact every ``COMPACT_EVERY`` write
commits (and after a big write), prune superseded versions once they are older than
``CLEANUP_AFTER``, and, for a writer that defers it (the watcher), record that a compaction
is due for whoever runs it in idle time. The count is kept in a small counter file per
table. The LanceDB calls go through :mod:`wrenmem.storage.lance`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from wrenmem.fs.fsutil import read_marshal, write_marshal

log = logging.getLogger(__name__)

COMPACT_EVERY = 10  # write commits between compactions
COMPACT_AFTER_ROWS = 1000  # ...or at once after a write this big
# Old versions are pruned only when older than this, so a reader that opened the previous
# version a moment ago still finds its files (readers also retry once on a vanished file).
CLEANUP_AFTER = timedelta(seconds=60)

def maintain(table: Any, counter: Path, commits: int, rows_written: int, *,
             fresh: bool = False, defer: bool = False) -> bool:
    """Compact every COMPACT_EVERY write commits (counted in ``counter``), and after any big
    write: merge small fragments, fold new rows into the indexes, prune the versions
    superseded more than CLEANUP_AFTER ago (:func:`cleanup_age`). The copy the compaction
    itself supersedes is young: ``counter`` remembers that it is due, and the first write
    past the grace period prunes it (:func:`prune_due`).
    ``fresh``: the table was created by this write and its indexes were just built over
    every row, so a compaction would only rewrite the table and its indexes and leave the
    first copies on disk (about 400 MB at 100,000 pairs): it is not compacted now, and its
    commits are not counted.
    ``defer``: count the commits, and only record that a compaction is due (``due`` in
    ``counter``); the running watcher does it in its idle time
    (:func:`run_due_maintenance`), so the write it follows returns at once.
    Housekeeping only: never fails the write it follows."""
    if not commits:
        return False
    held = _maint_record(counter)
    count = 0 if fresh else held["commits"] + commits
    done = False
    if held.get("started") is not None and not defer:  # a watcher's run was killed
        held["leftovers"] = held["due"] = True
    wanted = not fresh and (count >= COMPACT_EVERY or rows_written >= COMPACT_AFTER_ROWS
                            or bool(held.get("due")))
    if wanted and defer:
        held["due"] = True
    elif wanted:
        done = compact(table, held)
        if done:
            count = 0
    held["commits"] = count
    write_marshal(counter, held)
    return done


def compact(table: Any, held: dict[str, Any]) -> bool:
    """The compaction itself, on ``held`` (the record of ``counter``, written by the
    caller): clears ``due``, sets ``prune_after``. With ``leftovers`` recorded (a run was
    killed mid-way), it also deletes the files no version refers to, which LanceDB keeps
    for a week unless told they are no other writer's work in progress: call it holding
    the index lock (every local writer holds it while it writes). True when compacted."""
    leftovers = bool(held.get("leftovers"))
    try:
        # LanceDB prunes after it compacted, which may take seconds: a margin of the
        # grace period keeps every version superseded less than CLEANUP_AFTER ago.
        table.optimize(cleanup_older_than=cleanup_age(table, superseding=True,
                                                       margin=CLEANUP_AFTER),
                       delete_unverified=leftovers)
        if not _one_fragment(table):
            # LanceDB compacts the indexed and the unindexed fragments apart; only a
            # table of one fragment can be pruned later without being rewritten again.
            table.optimize(cleanup_older_than=cleanup_age(table, superseding=True,
                                                           margin=CLEANUP_AFTER))
    except Exception as e:  # a concurrent writer preempted us: try next time
        log.debug("compaction skipped: %s", e)
        return False
    for key in ("due", "started", "leftovers"):
        held.pop(key, None)
    held["commits"] = 0
    held["prune_after"] = time.time() + CLEANUP_AFTER.total_seconds()
    return True


def maintenance_due(counter: Path, now: float | None = None) -> bool:
    """Whether ``counter`` says there is housekeeping to do: a compaction recorded as due
    by a deferred write, the files of a run that was killed, or a prune whose grace
    period is over. Reads the record only (no LanceDB)."""
    held = _maint_record(counter)
    prune = held.get("prune_after")
    return bool(held.get("due") or held.get("started") is not None
                or (isinstance(prune, float) and (now or time.time()) >= prune))


def run_due_maintenance(table: Any, counter: Path, *,
                        started: Callable[[], None] | None = None) -> str:
    """Do what :func:`maintenance_due` says is due, holding the index lock: the compaction,
    else the prune. The record says ``started`` while it runs, so a kill at any point is
    noticed by the next run, which compacts with the killed one's files deleted
    (:func:`compact`); a kill never harms the table (LanceDB commits a version only when
    all of it is written). ``started`` is called once the record says so. Returns what
    was done: ``"compacted"``, ``"pruned"`` or ``""``."""
    held = _maint_record(counter)
    if held.get("started") is not None:  # a run was killed: its files are left over
        held["leftovers"] = held["due"] = True
    held["started"] = time.time()
    write_marshal(counter, held)
    if started is not None:
        started()
    if held.get("due"):
        done = compact(table, held)
        write_marshal(counter, held)
        return "compacted" if done else ""
    held.pop("started", None)
    write_marshal(counter, held)
    if prune_due(table, counter):
        return "pruned"
    held = _maint_record(counter)
    if held.pop("prune_after", None) is not None:  # written since: the next compaction
        write_marshal(counter, held)                 # prunes it; not asked again until then
    return ""


# A version stays on disk this long after a later one superseded it, not after it was
# made: LanceDB's own rule (versions *made* before now - older_than) would delete the
# version a compaction just superseded when it was made long before, under a reader that
# opened it a moment ago.
PRUNE_MARGIN = timedelta(seconds=5)  # clock skew between our cut and LanceDB's


def cleanup_age(table: Any, *, superseding: bool, margin: timedelta = PRUNE_MARGIN,
                now: datetime | None = None) -> timedelta:
    """The ``cleanup_older_than`` for ``table.optimize`` that prunes only versions whose
    successor was made more than CLEANUP_AFTER ago (none of them was the latest within the
    grace period), keeping the versions made within ``margin`` before the oldest one kept
    (LanceDB measures the age when it reaches its prune, later than this). ``superseding``:
    the call commits a version of its own first (a compaction), so the latest version
    stays too. Nothing to prune: an age no version has."""
    grace = CLEANUP_AFTER
    stamps = sorted((int(v["version"]), v["timestamp"]) for v in table.list_versions())
    never = timedelta(days=36500)
    if len(stamps) < 2:
        return never
    now = now or datetime.now(stamps[0][1].tzinfo)
    if not superseding and now - stamps[-1][1] >= grace:
        return timedelta(seconds=1)  # all but the latest, which LanceDB never removes
    cut = None
    for _version, made in stamps[1:]:  # each one's predecessor may go once it is old
        if now - made < grace:
            break
        cut = made
    if cut is None:
        return never
    return now - cut + margin


def prune_due(table: Any, counter: Path, now: float | None = None) -> bool:
    """Prune what the last compaction superseded, once CLEANUP_AFTER has passed (the first
    write after it calls this before its own commits). Only while the table is as the
    compaction left it (one fragment, no deleted rows, so ``optimize`` has nothing to
    rewrite; otherwise the next compaction prunes it). True when pruned now."""
    held = _maint_record(counter)
    due = held.get("prune_after")
    if not isinstance(due, float) or (now or time.time()) < due:
        return False
    try:
        if not _one_fragment(table):
            return False  # written since: the next compaction prunes it
        table.optimize(cleanup_older_than=cleanup_age(table, superseding=False))
    except Exception as e:  # housekeeping only
        log.debug("prune skipped: %s", e)
        return False
    held.pop("prune_after", None)
    write_marshal(counter, held)
    return True


def _one_fragment(table: Any) -> bool:
    """The table is one fragment with no deleted rows: ``optimize`` has nothing to rewrite."""
    stats = table.stats()
    fragments = stats["fragment_stats"]
    return bool(fragments["num_fragments"] == 1
                and fragments["lengths"]["max"] == stats["num_rows"])


def count_commits(counter: Path, commits: int) -> None:
    """Add ``commits`` to ``counter`` without compacting: a write made on a reader's request
    path (a recall applying the pairs journal) leaves the compaction to the next writer."""
    if commits:
        held = _maint_record(counter)
        held["commits"] = held["commits"] + commits
        write_marshal(counter, held)


def maintenance_record(counter: Path) -> dict[str, Any]:
    """The record :func:`maintain` keeps in ``counter`` (see :func:`_maint_record`)."""
    return _maint_record(counter)


def _maint_record(counter: Path) -> dict[str, Any]:
    """``{"commits": n, "prune_after": unix time}`` from ``counter`` (once a bare count)."""
    stored = read_marshal(counter)
    if isinstance(stored, int):
        return {"commits": stored}
    if isinstance(stored, dict) and isinstance(stored.get("commits"), int):
        return stored
    return {"commits": 0}
