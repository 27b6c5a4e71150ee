"""The compaction policy of every table of the index: compact every ``COMPACT_EVERY`` write
commits (and after a big write), prune superseded versions older than ``CLEANUP_AFTER``,
or, for a writer that defers it (the watcher), record that a compaction is due. The count
is kept in a small counter file per table."""

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
    """Compact every COMPACT_EVERY write commits (counted in ``counter``) and after any big
    write; the copy the compaction supersedes is pruned by the first write past the grace
    period (:func:`prune_due`). ``fresh``: the table was just created with its indexes over
    every row: not compacted (that would leave 400 MB of first copies at 100,000 pairs), its
    commits not counted. ``defer``: only record that a compaction is due, for the watcher's
    idle time (:func:`run_due_maintenance`). Never fails the write it follows."""
    if not commits:
        return False
    held = maintenance_record(counter)
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
    """The compaction itself, on ``held`` (the counter's record, written by the caller).
    With ``leftovers`` recorded (a killed run), it also deletes the files no version refers
    to: call it holding the index lock. True when compacted."""
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
    held = maintenance_record(counter)
    prune = held.get("prune_after")
    return bool(held.get("due") or held.get("started") is not None
                or (isinstance(prune, float) and (now or time.time()) >= prune))


def run_due_maintenance(table: Any, counter: Path, *,
                        started: Callable[[], None] | None = None) -> str:
    """Do what :func:`maintenance_due` says is due, holding the index lock: the compaction,
    else the prune. The record says ``started`` while it runs, so the next run notices a
    kill and deletes its files (:func:`compact`); ``started`` is called once it says so.
    Returns ``"compacted"``, ``"pruned"`` or ``""``."""
    held = maintenance_record(counter)
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
    held = maintenance_record(counter)
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
    """The ``cleanup_older_than`` that prunes only versions whose successor is older than
    CLEANUP_AFTER, keeping those made within ``margin`` before the oldest kept (LanceDB
    measures the age later). ``superseding``: the call commits a version first (a
    compaction), so the latest stays too."""
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
    """Prune what the last compaction superseded, once CLEANUP_AFTER has passed, while the
    table is as it left it (one fragment: ``optimize`` rewrites nothing). True when pruned."""
    held = maintenance_record(counter)
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


def maintenance_record(counter: Path) -> dict[str, Any]:
    """The record :func:`maintain` keeps in ``counter``: ``{"commits": n, "prune_after":
    unix time, "due"...}`` (once a bare count)."""
    stored = read_marshal(counter)
    if isinstance(stored, int):
        return {"commits": stored}
    if isinstance(stored, dict) and isinstance(stored.get("commits"), int):
        return stored
    return {"commits": 0}
