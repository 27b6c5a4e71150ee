"""The one sync: bring the pairs table of the index exactly to the files' state.

files → parse (catalog cache) → content hashes → plan (pure) → embed only what is new →
one commit per write → compaction now and then. Used by ``wrenmem sync``, ``store``
(through :mod:`wrenmem.index.autosync`), recall, the watcher and the git hooks.

A small state file (``.wrenmem/index-state.bin``) mirrors what the index holds: the raw
hash of every file and the content hash of every seed, plus the embedder and URI. When the
files still match it, a sync returns at once without importing LanceDB or loading a model.
The state file is deleted before any index write and rewritten after it, so a kill at any
point leaves either a true mirror or none; without one, the plan is made against the
table's own (id, content_hash) column, which is always the truth.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wrenmem.embedders import get_embedder
from wrenmem.errors import LockTimeoutError, PairError, WrenmemError
from wrenmem.fsutil import read_marshal, write_marshal
from wrenmem.index import table as index
from wrenmem.index.state import (
    Stats,
    invalidate_state,
    load_state,
    quick_noop,
    save_state,
    seeds_digest,
    state_matches,
    walk_stats,
)
from wrenmem.lock import index_lock
from wrenmem.pairs.catalog import scan
from wrenmem.pairs.pairfile import Pair
from wrenmem.pairs.seeds import extra_pairs
from wrenmem.settings import Settings

log = logging.getLogger(__name__)

MAINT_NAME = "index-maint.bin"
SEED_PREFIX = "seed:"
EMBED_BATCH = 64
WRITE_CHUNK = 2048  # rows per commit during a big build: progress survives a kill
OPTIMIZE_EVERY = 10  # write commits between compactions
LOCK_TIMEOUT = 120.0

Progress = Callable[[int, int], None]


# ---------------------------------------------------------------- the plan (pure) ----

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


# --------------------------------------------------------------- what is wanted ----

@dataclass(frozen=True)
class Snapshot:
    """The pairs the index should hold, read from the files and the seeds."""

    pairs: dict[str, Pair]  # id -> pair
    file_hashes: dict[str, str]  # relative path -> raw sha256 (bad files too)
    extra_hashes: dict[str, str]  # seed id -> content hash
    errors: tuple[PairError, ...]
    warnings: tuple[str, ...] = ()
    extras_ok: bool = True
    stats: Stats | None = None  # taken before the files were read
    stats_at: float = 0.0
    seeds: str | None = None

    def desired(self) -> dict[str, str]:
        return {row_id: pair.content_hash for row_id, pair in self.pairs.items()}


def seed_id(pair: Pair) -> str:
    """Seeds are not files: an id no relative path takes (``seed:<key>``, or by content)."""
    if pair.path.startswith(SEED_PREFIX):
        return pair.path
    return SEED_PREFIX + pair.content_hash[:24]


def take_snapshot(settings: Settings) -> Snapshot:

    stats_at = time.time()
    stats = walk_stats(settings)
    try:
        seeds: str | None = seeds_digest(settings)
    except WrenmemError:
        seeds = None
    found = scan(settings)
    pairs = {p.path: p for p in found.pairs}
    warnings: list[str] = []
    extras: dict[str, str] = {}
    extras_ok = True
    try:
        for pair in extra_pairs(settings, exclude_questions=[p.nl for p in found.pairs]):
            row_id = seed_id(pair)
            pairs.setdefault(row_id, pair)
            extras[row_id] = pair.content_hash
    except WrenmemError as e:  # a broken manifest must not block the pair files
        extras_ok = False
        warnings.append(f"seed pairs left as they were: {e}")
    return Snapshot(pairs, dict(found.file_hashes), extras, found.errors, tuple(warnings),
                    extras_ok, stats, stats_at, seeds)


# ---------------------------------------------------------------- state mirror ----

def _matches(settings: Settings, state: dict[str, Any] | None, model_id: str,
             snap: Snapshot) -> bool:
    return snap.extras_ok and state_matches(settings, state, model_id, snap.file_hashes,
                                            snap.extra_hashes)


def _save(settings: Settings, model_id: str, snap: Snapshot, rows: int) -> None:
    save_state(settings, model_id=model_id, files=snap.file_hashes, extras=snap.extra_hashes,
               rows=rows, ids=sorted(snap.pairs),
               errors=[(e.path, e.reason, e.line) for e in snap.errors], stats=snap.stats,
               stats_at=snap.stats_at, seeds=snap.seeds)


# ---------------------------------------------------------------------- report ----

@dataclass(frozen=True)
class SyncReport:
    """What a sync did. Paths are relative to the project; seeds appear as ``seed:...``."""

    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()
    unchanged: tuple[str, ...] = ()
    embedded: int = 0
    errors: tuple[PairError, ...] = ()
    warnings: tuple[str, ...] = ()
    rebuilt: bool = False
    rebuild_reason: str | None = None
    noop: bool = False
    model_id: str = ""
    rows: int = 0
    optimized: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "noop": self.noop, "rebuilt": self.rebuilt, "rebuild_reason": self.rebuild_reason,
            "added": list(self.added), "changed": list(self.changed),
            "removed": list(self.removed),
            "renamed": [{"from": a, "to": b} for a, b in self.renamed],
            "unchanged": len(self.unchanged),
            "embedded": self.embedded, "rows": self.rows, "embedder": self.model_id,
            "optimized": self.optimized,
            "errors": [{"path": e.path, "line": e.line, "reason": e.reason}
                       for e in self.errors],
            "warnings": list(self.warnings),
        }

    def summary(self) -> str:
        """One line for people: counts, never the lists of paths."""
        if self.noop:
            return f"index up to date: {self.rows} pairs ({self.model_id})"
        counts = [f"{len(self.added)} added", f"{len(self.changed)} changed",
                  f"{len(self.removed)} removed", f"{len(self.renamed)} renamed",
                  f"{len(self.unchanged)} unchanged"]
        texts = "text" if self.embedded == 1 else "texts"
        return (f"{'rebuilt' if self.rebuilt else 'synced'}: {', '.join(counts)}; "
                f"{self.embedded} {texts} embedded; {self.rows} rows ({self.model_id})")


# ------------------------------------------------------------------------ sync ----

def embed_text(pair: Pair) -> str:
    """What the vector stands for: the question (queries are questions too)."""
    return pair.nl.strip()


def sync_pairs(settings: Settings, *, full: bool = False, progress: Progress | None = None,
               paths: Collection[str] | None = None,
               lock_timeout: float = LOCK_TIMEOUT) -> SyncReport:
    """Bring the index to the pairs' state; embed only added and changed pairs.

    ``full`` rebuilds from scratch. ``paths`` (relative pair paths) limits the work to
    those pairs, for ``store`` and friends. Safe from many processes and threads at once:
    writers take :func:`wrenmem.lock.index_lock`; the no-op check needs no lock.
    """

    embedder = get_embedder(settings.embedder, root=settings.root)
    if not full:
        state = quick_noop(settings, embedder.model_id)
        if state is not None:
            return _report_from_state(state, embedder.model_id)
    snap = take_snapshot(settings)
    seen = load_state(settings)
    if not full and _matches(settings, seen, embedder.model_id, snap):
        _refresh_stats(settings, embedder.model_id)
        return _noop_report(settings, snap, embedder.model_id)

    _warm_up(embedder, snap, seen, full)

    with index_lock(settings, timeout=lock_timeout):
        state = load_state(settings)
        if state != seen:  # another writer finished meanwhile: read the files again
            snap = take_snapshot(settings)
        if not full and _matches(settings, state, embedder.model_id, snap):
            _save(settings, embedder.model_id, snap, int(state.get("rows", 0)) if state else 0)
            return _noop_report(settings, snap, embedder.model_id)
        return _sync_locked(settings, embedder, snap, full, progress, paths, state)


def _refresh_stats(settings: Settings, model_id: str) -> None:
    """Files were touched but not changed: record their new stats so the next no-op is
    quick again. Only under the lock (never overwrite a writer's invalidation), and only
    if the lock is free right now."""

    try:
        with index_lock(settings, timeout=0):
            snap = take_snapshot(settings)
            state = load_state(settings)
            if _matches(settings, state, model_id, snap) and state is not None:
                _save(settings, model_id, snap, int(state.get("rows", 0)))
    except LockTimeoutError:
        pass


def _report_from_state(state: dict[str, Any], model_id: str) -> SyncReport:
    errors = tuple(PairError(p, reason, line) for p, reason, line in state.get("errors") or ())
    return SyncReport(unchanged=tuple(state.get("ids") or ()), errors=errors, noop=True,
                      model_id=model_id, rows=int(state.get("rows", 0)))


def _warm_up(embedder: Any, snap: Snapshot, state: dict[str, Any] | None, full: bool) -> None:
    """Load the model in a thread while this one imports LanceDB and reads the table.

    Only when something will probably be embedded: a file or seed whose hash the index
    does not hold yet (a deletion or a rename needs no model, and loading one costs a
    second of CPU on a small machine).
    """
    load = getattr(embedder, "load", None)
    if load is None:
        return
    if state is not None and not full:
        known = set((state.get("files") or {}).values()) | set(
            (state.get("extras") or {}).values())
        fresh = [h for h in snap.file_hashes.values() if h not in known]
        fresh += [h for h in snap.extra_hashes.values() if h not in known]
        if not fresh:
            return

    def run() -> None:
        try:
            load()
        except Exception:  # the main thread will meet the same error and report it
            log.debug("model warm-up failed", exc_info=True)

    threading.Thread(target=run, name="wrenmem-model-load", daemon=True).start()


def _noop_report(settings: Settings, snap: Snapshot, model_id: str) -> SyncReport:
    state = load_state(settings) or {}
    return SyncReport(unchanged=tuple(sorted(snap.pairs)), errors=snap.errors,
                      warnings=snap.warnings, noop=True, model_id=model_id,
                      rows=int(state.get("rows", len(snap.pairs))))


def _sync_locked(settings: Settings, embedder: Any, snap: Snapshot, full: bool,
                 progress: Progress | None, paths: Collection[str] | None,
                 prior: dict[str, Any] | None) -> SyncReport:
    db = index.connect(settings)
    table = index.open_table(db)
    reason = None
    if table is not None:
        built_by = index.table_model_id(table)
        if full:
            reason = "full rebuild requested"
        elif built_by != embedder.model_id:
            reason = (f"the embedder changed from {built_by or 'an older wrenmem'} "
                      f"to {embedder.model_id}")
    if table is None or reason is not None:
        invalidate_state(settings)
        if reason is not None:
            log.warning("rebuilding the index: %s", reason)
        table = index.create_table(db, embedder.model_id, embedder.dim)
        paths = None  # a new table needs every pair, whatever the caller asked for

    indexed: dict[str, list[str]] = {}
    for row in index.read_ids(table):
        indexed.setdefault(row.id, []).append(row.content_hash)
    desired = snap.desired()
    scope = None if paths is None else set(paths)
    if scope is not None:
        desired = {i: h for i, h in desired.items() if i in scope}
        indexed_scope = {i: h for i, h in indexed.items() if i in scope}
    else:
        indexed_scope = dict(indexed)
    if not snap.extras_ok:  # seeds unknown (bad manifest): leave their rows as they are
        desired = {i: h for i, h in desired.items() if not i.startswith(SEED_PREFIX)}
        indexed_scope = {i: h for i, h in indexed_scope.items()
                         if not i.startswith(SEED_PREFIX)}
    plan = plan_sync(desired, indexed_scope)
    embedded, commits = 0, 0
    if not plan.in_sync:
        invalidate_state(settings)
        embedded, commits = _apply(table, snap, plan, indexed_scope, embedder, progress)
    index.ensure_fts(table)
    optimized = _maintain(settings, table, commits, embedded)
    rows = table.count_rows()
    if scope is None:
        if snap.extras_ok:
            _save(settings, embedder.model_id, snap, rows)
    elif reason is None and _mirror_ok(settings, prior, embedder.model_id):
        assert prior is not None
        _save_scoped(settings, embedder.model_id, snap, rows, prior, scope)
    return SyncReport(plan.added, plan.changed, plan.removed, plan.renamed, plan.unchanged,
                      embedded, snap.errors, snap.warnings, reason is not None, reason,
                      False, embedder.model_id, rows, optimized)


def _mirror_ok(settings: Settings, prior: dict[str, Any] | None, model_id: str) -> bool:

    return (prior is not None and prior.get("schema") == index.SCHEMA_VERSION
            and prior.get("uri") == settings.index_uri
            and prior.get("model_id") == model_id)


def _save_scoped(settings: Settings, model_id: str, snap: Snapshot, rows: int,
                 prior: dict[str, Any], scope: set[str]) -> None:
    """A scoped sync vouches only for its paths: patch them into the previous mirror,
    which stayed true for every other path (any other write would have deleted it)."""
    files = dict(prior.get("files") or {})
    stats = dict(prior.get("stats") or {})
    ids = set(prior.get("ids") or ())
    errors = [e for e in prior.get("errors") or () if e[0] not in scope]
    for path in scope:
        files.pop(path, None)
        stats.pop(path, None)
        ids.discard(path)
        if path in snap.file_hashes:
            files[path] = snap.file_hashes[path]
        if snap.stats is not None and path in snap.stats:
            stats[path] = snap.stats[path]
        if path in snap.pairs:
            ids.add(path)
    errors += [(e.path, e.reason, e.line) for e in snap.errors if e.path in scope]
    # The recorded stats of other paths are as old as the prior mirror; keep its clock.
    save_state(settings, model_id=model_id, files=files,
               extras=dict(prior.get("extras") or {}), rows=rows, ids=sorted(ids),
               errors=sorted(errors), stats=stats if prior.get("stats") is not None else None,
               stats_at=min(float(prior.get("stats_at") or 0.0), snap.stats_at),
               seeds=prior.get("seeds"))


def _apply(table: Any, snap: Snapshot, plan: SyncPlan, indexed: Mapping[str, list[str]],
           embedder: Any, progress: Progress | None) -> tuple[int, int]:
    """Write the plan: reused vectors and deletions first, then embedded chunks."""
    commits = 0
    duplicated = [i for i in plan.changed if len(indexed.get(i, ())) > 1]
    targets = list(plan.added) + list(plan.changed) + [new for _old, new in plan.renamed]
    stored_hashes = {h for hs in indexed.values() for h in hs}
    wanted_hashes = {snap.pairs[i].content_hash for i in targets}
    pool = (index.vectors_by_hash(table, wanted_hashes & stored_hashes)
            if wanted_hashes & stored_hashes else {})
    if duplicated:  # merge_insert refuses ids that match twice: clear them first
        index.write(table, [], duplicated)
        commits += 1
    ready, todo = [], []
    for row_id in targets:
        pair = snap.pairs[row_id]
        vector = pool.get(pair.content_hash)
        if vector is not None:
            ready.append(index.pair_row(row_id, pair, embed_text(pair), vector))
        else:
            todo.append(row_id)
    deletes = list(plan.removed) + [old for old, _new in plan.renamed]
    if ready or deletes:
        index.write(table, ready, deletes)
        commits += 1
    texts = sorted({embed_text(snap.pairs[i]) for i in todo})
    total, done = len(texts), 0
    if progress is not None and total:
        progress(0, total)
    vectors: dict[str, Any] = {}
    pending: list[str] = list(todo)
    for start in range(0, len(texts), WRITE_CHUNK):
        chunk = texts[start:start + WRITE_CHUNK]
        for b in range(0, len(chunk), EMBED_BATCH):
            batch = chunk[b:b + EMBED_BATCH]
            for text, vector in zip(batch, embedder.embed(batch), strict=True):
                vectors[text] = vector
            done += len(batch)
            if progress is not None:
                progress(done, total)
        ripe = [i for i in pending if embed_text(snap.pairs[i]) in vectors]
        pending = [i for i in pending if embed_text(snap.pairs[i]) not in vectors]
        index.write(table, [index.pair_row(i, snap.pairs[i], embed_text(snap.pairs[i]),
                                           vectors[embed_text(snap.pairs[i])])
                            for i in ripe], [])
        commits += 1
    return total, commits


def _maintain(settings: Settings, table: Any, commits: int, embedded: int) -> bool:
    """Compact every OPTIMIZE_EVERY write commits, and after any big write."""
    if not commits:
        return False
    path = settings.state_dir / MAINT_NAME
    stored = read_marshal(path)
    count = stored if isinstance(stored, int) else 0
    count += commits
    done = False
    if count >= OPTIMIZE_EVERY or embedded >= 1000:
        done = index.optimize(table)
        if done:
            count = 0
    write_marshal(path, count)
    return done


# ----------------------------------------------------------------------- drift ----

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

    @property
    def rebuild_needed(self) -> bool:
        return not self.index_missing and self.built_by != self.model_id

    @property
    def fresh(self) -> bool:
        return not self.index_missing and not self.rebuild_needed and self.plan.in_sync

    @property
    def drifted(self) -> bool:
        return not self.plan.in_sync or self.rebuild_needed

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
        }


def check_drift(settings: Settings) -> Drift:
    """How the index differs from the pairs, by content hash. Never writes the index."""

    model_id = get_embedder(settings.embedder, root=settings.root).model_id
    quick = quick_noop(settings, model_id)
    if quick is not None:
        ids = tuple(quick.get("ids") or ())
        n_seeds = sum(1 for i in ids if i.startswith(SEED_PREFIX))
        errors = tuple(PairError(p, r, ln) for p, r, ln in quick.get("errors") or ())
        return Drift(SyncPlan(unchanged=ids), errors, model_id, model_id, False,
                     int(quick.get("rows", 0)), len(ids) - n_seeds, n_seeds, True)
    snap = take_snapshot(settings)
    seeds = len(snap.extra_hashes)
    state = load_state(settings)
    if _matches(settings, state, model_id, snap):
        assert state is not None
        return Drift(SyncPlan(unchanged=tuple(sorted(snap.pairs))), snap.errors, model_id,
                     model_id, False, int(state.get("rows", 0)), len(snap.pairs) - seeds,
                     seeds, True)
    table = index.open_table(index.connect(settings)) if index.index_exists(settings) else None
    if table is None:
        plan = plan_sync(snap.desired(), {})
        return Drift(plan, snap.errors, model_id, None, True, 0, len(snap.pairs) - seeds,
                     seeds, False)
    indexed: dict[str, list[str]] = {}
    for row in index.read_ids(table):
        indexed.setdefault(row.id, []).append(row.content_hash)
    return Drift(plan_sync(snap.desired(), indexed), snap.errors, model_id,
                 index.table_model_id(table), False, sum(map(len, indexed.values())),
                 len(snap.pairs) - seeds, seeds, False)


def reset_index(settings: Settings) -> bool:
    """Drop the pairs table and forget the mirror; returns whether a table was dropped."""

    with index_lock(settings, timeout=LOCK_TIMEOUT):
        invalidate_state(settings)
        (settings.state_dir / MAINT_NAME).unlink(missing_ok=True)
        if not index.index_exists(settings):
            return False
        return index.drop_table(index.connect(settings))
