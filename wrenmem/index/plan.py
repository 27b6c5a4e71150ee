"""The sync plan, a pure function: desired (id -> content hash) against what the index holds."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SyncPlan:
    """How the index differs from the pairs. Every id lands in exactly one list
    (a renamed pair counts once, as its ``(old, new)`` couple)."""

    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()

    @property
    def in_sync(self) -> bool:
        return not (self.added or self.changed or self.removed or self.renamed)


def plan_sync(desired: Mapping[str, str], indexed: Mapping[str, Sequence[str]]) -> SyncPlan:
    """Compare wanted ``id -> content_hash`` with the index's ``id -> [content_hash, ...]``.

    An id stored more than once is ``changed`` (rewritten once). An added id whose content
    equals a removed one's is a rename: its vector is reused rather than re-embedded.
    """
    added, changed, unchanged = [], [], []
    for row_id in sorted(desired):
        stored = indexed.get(row_id)
        if stored is None:
            added.append(row_id)
        elif len(stored) == 1 and stored[0] == desired[row_id]:
            unchanged.append(row_id)
        else:
            changed.append(row_id)
    removed = sorted(set(indexed) - set(desired))
    by_hash: dict[str, list[str]] = {}
    for row_id in removed:
        stored = indexed[row_id]
        if len(stored) == 1:
            by_hash.setdefault(stored[0], []).append(row_id)
    renamed = []
    still_added = []
    for row_id in added:
        olds = by_hash.get(desired[row_id])
        if olds:
            renamed.append((olds.pop(0), row_id))
        else:
            still_added.append(row_id)
    gone = {old for old, _new in renamed}
    return SyncPlan(tuple(still_added), tuple(changed),
                    tuple(r for r in removed if r not in gone), tuple(unchanged),
                    tuple(renamed))
