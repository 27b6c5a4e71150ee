"""The watcher's sync of just the pair files its events name.

After a ``store`` through the watcher, the daemon syncs the stored file for the command; the
file's own event then wakes the loop, whose sync used to stat every pair file (about a
second of CPU at 100,000 pairs) and, when it came first, made the command wait for it. When
the events alone can say what changed, the loop syncs only the files they name
(``sync_pairs(paths=...)``, as ``store`` does), which costs one ``stat`` and, for a file
the daemon synced already, nothing else.

They can when: the loop walked every file (a whole sync) less than ``MAX_AGE`` seconds ago
(events can be lost, e.g. on network mounts, so a walk still comes that often while events
keep coming); every event is of a pair file (a folder's event may stand for files that
have none: a folder moved in); there are at most ``HANDOFF_MAX`` files; and the fence was
put (:meth:`wrenmem.watch.loop.WatchdogSource.fence`), so every change made before the
sync began has its event in hand. Otherwise the loop walks every file, as before.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wrenmem.errors import PairError
from wrenmem.index.state import load_state
from wrenmem.settings import Settings
from wrenmem.watch.daemon import HANDOFF_MAX
from wrenmem.watch.freshness import MAX_AGE
from wrenmem.watch.loop import PAIRS, Change, classify_path


class EventLog:
    """The changes the loop's event source delivered since the last sync took them, and
    when the loop last walked every pair file."""

    def __init__(self) -> None:
        self.changes: list[Change] = []
        self.whole_at: float | None = None  # monotonic

    def record(self, changes: Sequence[Change] | None) -> None:
        if changes:
            self.changes.extend(changes)

    def take(self) -> list[Change]:
        taken, self.changes = self.changes, []
        return taken


def named_pairs(settings: Settings, source: Any, log: EventLog) -> list[str] | None:
    """The relative paths of the pair files the events since the last sync name, when
    they are all that can have changed (see the module docstring); else None. The events
    the fence brings in are put back in the source's queue, so the loop still counts them
    (their second sync then finds nothing to do)."""
    seen = log.take()
    if log.whole_at is None or time.monotonic() - log.whole_at > MAX_AGE:
        return None
    if not source.fence():
        return None
    late = source.get(0) or []
    for change in late:
        source.queue.put(change)
    paths: set[str] = set()
    for path, is_dir in [*seen, *late]:
        if not path:
            continue  # a wake-up, not a change
        kind = classify_path(settings, path, is_dir)
        if kind is None:
            continue
        if kind != PAIRS or is_dir:
            return None
        try:
            rel = Path(path).relative_to(settings.root).as_posix()
        except ValueError:
            return None
        paths.add(rel)
    if len(paths) > HANDOFF_MAX:
        return None
    return sorted(paths)


def known_errors(settings: Settings, report: Any) -> tuple[PairError, ...]:
    """Every bad pair file the mirror knows after a sync of some paths (``report``'s are
    only those among them): the loop must not say the others were fixed."""
    state = load_state(settings)
    if state is None:
        return tuple(report.errors)
    return tuple(PairError(*e) for e in state.errors)
