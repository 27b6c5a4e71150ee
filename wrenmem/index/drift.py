"""Read-only comparison of the files with the index (``check``, ``status``), and ``reset``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from wrenmem.embed.embedders import Embedder, get_embedder
from wrenmem.errors import PairError
from wrenmem.fs import statedir
from wrenmem.index import maintenance
from wrenmem.index import table as index
from wrenmem.index.snapshot import SEED_PREFIX, mirror_matches, take_snapshot
from wrenmem.index.state import (
    disk_changes,
    invalidate_state,
    load_state,
    quick_noop,
)
from wrenmem.pairs.catalog import require_knowledge_dir
from wrenmem.settings import Settings
from wrenmem.storage import lance
from wrenmem.storage.embedsync import SyncPlan, plan_sync
from wrenmem.storage.lock import index_lock

log = logging.getLogger(__name__)

LOCK_TIMEOUT = 120.0


@dataclass(frozen=True)
class Drift:
    """A read-only comparison of the pairs with the index (for ``check`` and ``status``)."""

    plan: SyncPlan
    errors: tuple[PairError, ...]
    model_id: str
    built_by: str | None  # the embedder recorded in the index; None when there is none
    index_missing: bool
    rows: int
    pairs: int
    seeds: int
    from_state: bool  # answered from the state mirror, without opening LanceDB
    problems: tuple[str, ...] = ()  # damage found by the integrity check: `sync` rebuilds
    owner: str | None = None  # the other project whose index this is: `sync` refuses

    @property
    def rebuild_needed(self) -> bool:
        return not self.index_missing and self.built_by != self.model_id

    @property
    def fresh(self) -> bool:
        return (not self.index_missing and not self.rebuild_needed and self.plan.in_sync
                and self.owner is None and not self.problems)

    @property
    def drifted(self) -> bool:
        return (not self.plan.in_sync or self.rebuild_needed or self.owner is not None
                or bool(self.problems))

    def to_dict(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "fresh": self.fresh,
            "index_missing": self.index_missing,
            "rebuild_needed": self.rebuild_needed,
            "embedder": self.model_id,
            "built_by": self.built_by,
            "added": list(plan.added),
            "changed": list(plan.changed),
            "removed": list(plan.removed),
            "renamed": [{"from": a, "to": b} for a, b in plan.renamed],
            "errors": [{"path": e.path, "line": e.line, "reason": e.reason}
                       for e in self.errors],
            "problems": list(self.problems),
            "owner": self.owner,
        }


def check_drift(settings: Settings, embedder: Embedder | None = None) -> Drift:
    """How the index differs from the pairs, by content hash. Never writes the index.
    ``embedder``: instead of the ``embedder`` setting's (only its model id is read)."""

    with lance.storage_errors(settings.index_uri, "reading"):
        return _check_drift(settings, embedder)


def _check_drift(settings: Settings, embedder: Embedder | None) -> Drift:
    require_knowledge_dir(settings)
    model_id = (embedder or get_embedder(settings.embedder, root=settings.root)).model_id
    quick = quick_noop(settings, model_id)
    if quick is not None:
        ids = quick.ids
        n_seeds = sum(1 for i in ids if i.startswith(SEED_PREFIX))
        errors = tuple(PairError(p, r, ln) for p, r, ln in quick.errors)
        return Drift(SyncPlan(unchanged=ids), errors, model_id, model_id, False,
                     quick.rows, len(ids) - n_seeds, n_seeds, True)
    snap = take_snapshot(settings)
    seeds = len(snap.extra_hashes)
    state = load_state(settings)
    if mirror_matches(settings, state, model_id, snap):
        assert state is not None
        return Drift(SyncPlan(unchanged=tuple(sorted(snap.pairs))), snap.errors, model_id,
                     model_id, False, state.rows, len(snap.pairs) - seeds,
                     seeds, True)
    changed = disk_changes(settings, state)
    check = index.inspect(settings) if index.index_exists(settings) else None
    if check is None or (check.table is None and not check.damaged):
        plan = plan_sync(snap.desired(), {})
        return Drift(plan, snap.errors, model_id, None, True, 0, len(snap.pairs) - seeds,
                     seeds, False, (changed,) if changed else ())
    indexed = check.indexed
    built_by = index.table_model_id(check.table) if check.table is not None else None
    return Drift(plan_sync(snap.desired(), indexed), snap.errors, model_id,
                 built_by if not check.damaged else model_id, False,
                 sum(map(len, indexed.values())), len(snap.pairs) - seeds, seeds, False,
                 ((changed,) if changed else ()) + check.problems, check.owner)


def reset_index(settings: Settings) -> bool:
    """Drop the pairs table and forget the mirror; returns whether a table was dropped."""

    with index_lock(settings, timeout=LOCK_TIMEOUT):
        invalidate_state(settings)
        maintenance.counter(settings).unlink(missing_ok=True)
        statedir.remove_old_files(settings.state_dir)  # of earlier versions (see statedir)
        if not index.index_exists(settings):
            return False
        return index.drop_table(index.connect(settings), settings)
