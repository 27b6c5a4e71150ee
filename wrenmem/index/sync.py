"""The one sync: bring the pairs table of the index exactly to the files' state.

files → parse (catalog cache) → content hashes → plan (:mod:`wrenmem.storage.embedsync`) →
embed only what is new → one commit per write → compaction now and then. When the files
still match the state mirror (:mod:`wrenmem.index.state`), a sync returns at once without
LanceDB or a model; without a mirror, the plan is made against the table's own
(id, content_hash) column, which is always the truth.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import Any

from wrenmem.embed.embedders import Embedder, get_embedder
from wrenmem.errors import (
    IndexStorageError,
    LockTimeoutError,
    PairError,
    ReaderRoleError,
    WrenmemError,
)
from wrenmem.fs import statedir
from wrenmem.index import embedpipe, maintenance, rowwrite
from wrenmem.index import table as index
from wrenmem.index.embedcache import EmbedCache, cache_path
from wrenmem.index.embedpipe import EmbedPipe, can_fork
from wrenmem.index.origin import is_older_checkout, local_origin
from wrenmem.index.report import SyncReport
from wrenmem.index.snapshot import SEED_PREFIX, Snapshot, mirror_matches, save_mirror, take_snapshot
from wrenmem.index.state import (
    IndexState,
    StatDelta,
    invalidate_state,
    load_state,
    patch_state,
    record_walk,
    report_from_state,
    stat_delta,
    usable_state,
)
from wrenmem.pairs.catalog import read_paths, require_knowledge_dir
from wrenmem.pairs.seeds import seed_pairs
from wrenmem.settings import Settings
from wrenmem.storage import embedsync, lance
from wrenmem.storage.embedsync import SyncPlan, plan_sync
from wrenmem.storage.lock import index_lock

log = logging.getLogger(__name__)

LOCK_TIMEOUT = 120.0
# A remote index has no lock across machines: a writer re-plans against the latest version
# after writing, until a plan comes back empty (the table equals its files), this often.
REMOTE_ROUNDS = 6
# Up to this many files changed (by their stats), a sync reads just those files and trusts
# the state mirror for the rest; past it, it reads the catalog and the table's ids.
DELTA_MAX = 2000
# A small sync that finds another writer finished meanwhile (the watcher's loop and its
# daemon syncing one edit) looks at the files again, this many times, before reading all.
RACE_ROUNDS = 3

Progress = Callable[[int, int], None]


def sync_pairs(settings: Settings, *, full: bool = False, progress: Progress | None = None,
               paths: Collection[str] | None = None,
               lock_timeout: float = LOCK_TIMEOUT,
               embedder: Embedder | None = None,
               delta: StatDelta | None = None) -> SyncReport:
    """Bring the index to the pairs' state; embed only added and changed pairs.

    ``full`` rebuilds from scratch. ``paths`` (relative pair paths) limits the work to
    those pairs, for ``store`` and friends. Safe from many processes and threads at once:
    writers take :func:`wrenmem.storage.lock.index_lock`; the no-op check needs no lock.
    ``embedder``: instead of the ``embedder`` setting's (``Memory(embedder=...)``).
    ``delta``: the :func:`~wrenmem.index.state.stat_delta` the caller just took for these
    ``paths`` (the daemon's): not taken again.
    """
    if settings.is_reader:
        raise ReaderRoleError(reader_refusal(settings))
    require_knowledge_dir(settings)
    embedder = embedder or get_embedder(settings.embedder, root=settings.root)
    with lance.disk_full_errors(settings.index_uri, "syncing the index"), \
            lance.storage_errors(settings.index_uri, "syncing"):
        return _sync(settings, embedder, full, progress, paths, lock_timeout, delta)


def reader_refusal(settings: Settings) -> str:
    origin = settings.origins.get("role", "settings")
    return (f"not syncing: this checkout is a reader of the shared index {settings.index_uri} "
            f"(role = \"reader\", from {origin}); readers never write it. The writer (CI, "
            "or one machine with role = \"writer\") runs `wrenmem sync`.")


def _sync(settings: Settings, embedder: Embedder, full: bool, progress: Progress | None,
          paths: Collection[str] | None, lock_timeout: float,
          delta: StatDelta | None = None) -> SyncReport:
    for _round in range(RACE_ROUNDS if not full else 0):
        # A sync limited to some paths (store, forget) looks at just them, not every file.
        delta = delta or stat_delta(settings, embedder.model_id, only=paths)
        if delta is None and _mirror_being_written(settings):
            # Another writer (the watcher's daemon syncing what a command handed it, most
            # often) deleted the mirror before its write and rewrites it after: wait for
            # it, then look again, instead of reading every file meanwhile.
            with index_lock(settings, timeout=lock_timeout):
                pass
            delta = stat_delta(settings, embedder.model_id, only=paths)
        if delta is not None and delta.empty:
            if delta.partial:
                return SyncReport(model_id=embedder.model_id, rows=delta.state.rows)
            if not delta.quick and delta.walk is not None:  # the next no-op compares bytes
                record_walk(settings, delta.state, delta.walk)
            return report_from_state(delta.state, embedder.model_id)
        if (delta is None or settings.remote_index
                or len(delta.touched) + len(delta.gone) > DELTA_MAX):
            break
        try:
            report = _sync_delta(settings, embedder, delta, progress, paths, lock_timeout)
        except _Raced:  # another writer finished meanwhile: look at the files again
            delta = None
            continue
        if report is not None:
            return report
        break
    # A first index or a rebuild: a child loads the model while this process reads files.
    early = (EmbedPipe(embedder, embedsync.EMBED_BATCH)
             if (full or delta is None) and paths is None and can_fork(embedder) else None)
    pipe = None
    try:
        snap = take_snapshot(settings, reread=full)
        seen = load_state(settings)
        if not full and mirror_matches(settings, seen, embedder.model_id, snap):
            _refresh_stats(settings, embedder.model_id)
            return _noop_report(settings, snap, embedder.model_id)

        cache = EmbedCache(cache_path(settings), embedder.model_id)
        fresh = _fresh_texts(snap, seen, full, settings.max_embed_chars)
        pipe = _embed_pipe(embedder, fresh, full, cache, early)
        if early is not None and pipe is None:  # a small sync: the child's model is not
            early.close()  # needed (it would spend seconds of CPU preparing it meanwhile)
            early = None
        if pipe is None and fresh and (full or not cache.has_all(fresh)):
            # (a deletion, a rename or a branch flip back needs no model: a second of CPU)
            _load_in_background(embedder)  # while this thread imports LanceDB
        lance.import_lancedb()  # seconds of CPU: not while holding the lock writers wait for
        with index_lock(settings, timeout=lock_timeout):
            state = load_state(settings)
            if state != seen:  # another writer finished meanwhile: read the files again
                snap = take_snapshot(settings, reread=full)
            if not full and mirror_matches(settings, state, embedder.model_id, snap):
                save_mirror(settings, embedder.model_id, snap, state.rows if state else 0,
                            state.version if state else None)
                return _noop_report(settings, snap, embedder.model_id)
            return _sync_locked(settings, embedder, snap, full, progress, paths, state, pipe)
    finally:
        for child in {early, pipe} - {None}:
            assert child is not None
            child.close()


def _fresh_texts(snap: Snapshot, state: IndexState | None, full: bool, max_chars: int
                 ) -> set[str]:
    """The texts a sync will probably embed: those of the files and seeds whose hashes
    the mirror does not know (``embed_text``'s, without its warning: write_plan gives it)."""
    files = set() if full or state is None else set(state.files.values())
    extras = set() if full or state is None else set(state.extras.values())
    return {p.nl.strip()[:max_chars] for path, p in snap.pairs.items()
            if (snap.file_hashes[path] not in files if path in snap.file_hashes
                else snap.extra_hashes.get(path) not in extras)}


def _embed_pipe(embedder: Embedder, fresh: set[str], full: bool, cache: EmbedCache,
                early: EmbedPipe | None = None) -> EmbedPipe | None:
    """The embedding child of a big sync (:mod:`wrenmem.index.embedpipe`), started with the
    ``fresh`` texts not in the cache, sorted. ``early``: the child forked before the files
    were read. None for a small sync, or where this process cannot fork safely."""
    if (early is None and not can_fork(embedder)) or len(fresh) < embedpipe.PIPE_MIN:
        return None
    wanted = sorted(fresh)
    if not full:
        known = cache.lookup(wanted)
        wanted = [t for t in wanted if t not in known]
    if len(wanted) < embedpipe.PIPE_MIN:
        return None
    pipe = early or EmbedPipe(embedder, embedsync.EMBED_BATCH)
    pipe.start(wanted)
    return pipe


class _Raced(Exception):
    """Another writer changed the mirror between a delta and its write."""


def _mirror_being_written(settings: Settings) -> bool:
    """No mirror, a local table, and the index lock held by another writer right now."""
    if settings.remote_index or load_state(settings) is not None or not index.index_exists(
            settings):
        return False
    try:
        with index_lock(settings, timeout=0):
            return False
    except LockTimeoutError:
        return True


def _sync_delta(settings: Settings, embedder: Embedder, delta: StatDelta,
                progress: Progress | None, paths: Collection[str] | None,
                lock_timeout: float) -> SyncReport | None:
    """The sync of a few changed files: only they are read and embedded, only their rows
    read from the table; the mirror vouches for the rest. None when this cannot decide
    alone (a seed a changed question shadows, another embedder's table); :class:`_Raced`
    when another writer finished meanwhile."""
    state = delta.state
    scope = set(delta.touched) | set(delta.gone)
    if paths is not None:
        scope &= set(paths)
    read = read_paths(settings, scope & set(delta.touched))
    differs = {p for p in scope if read.file_hashes.get(p) != state.hash_of(p)}
    if not differs:  # touched, not changed: record the new stats so the next no-op is quick
        if any(p in read.file_hashes for p in scope):  # (an unreadable file has none)
            _save_delta(settings, delta, read, scope, state.rows, True)
        if paths is not None:
            return SyncReport(model_id=embedder.model_id, rows=state.rows)
        errors = sorted([*(PairError(*e) for e in state.errors if e[0] not in scope),
                         *read.errors], key=lambda e: e.path)
        return SyncReport(unchanged=state.ids, errors=tuple(errors), noop=True,
                          model_id=embedder.model_id, rows=state.rows)
    pairs = {p.path: p for p in read.pairs if p.path in differs}
    shadows = _seed_questions(settings)
    if shadows & {p.nl.strip().casefold() for p in pairs.values()}:
        return None  # the question of a seed: which seeds the index holds changes too
    cache = EmbedCache(cache_path(settings), embedder.model_id)
    if pairs and not cache.has_all(rowwrite.embed_text(p, settings.max_embed_chars)
                                   for p in pairs.values()):
        _load_in_background(embedder)
    lance.import_lancedb()  # seconds of CPU: not while holding the lock other writers wait for
    with index_lock(settings, timeout=lock_timeout):
        if load_state(settings) != state:
            raise _Raced  # another writer finished meanwhile
        table = index.open_table(index.connect(settings))
        if table is None or index.table_model_id(table) != embedder.model_id:
            return None
        stored = index.rows_by_id(table, differs)
        if shadows & {q.strip().casefold() for _i, _h, q in stored}:
            return None
        indexed: dict[str, list[str]] = {}
        for row_id, content_hash, _q in stored:
            indexed.setdefault(row_id, []).append(content_hash)
        plan = plan_sync({i: p.content_hash for i, p in pairs.items()}, indexed)
        embedded, commits = 0, 0
        invalidate_state(settings)
        if not plan.in_sync:
            maintenance.prune_due(settings, table)
            snap = Snapshot(pairs, read.file_hashes, {}, read.errors)
            embedded, commits = rowwrite.write_plan(table, snap, plan, indexed, embedder, progress,
                                       settings.max_embed_chars, cache)
            lance.retry_conflicts(lambda: lance.ensure_fts(table, "terms"))
            lance.ensure_vector_index(table, pq_rows=settings.ivf_pq_rows,
                                  sample_rate=lance.PAIRS_IVF_SAMPLE_RATE)
        optimized = maintenance.maintain(settings, table, commits, embedded)
        rows = table.count_rows()
        statedir.remove_old_files(settings.state_dir)
        after = _save_delta(settings, delta, read, scope, rows, False)
    moved = set(plan.added) | set(plan.changed) | {new for _old, new in plan.renamed}
    return SyncReport(plan.added, plan.changed, plan.removed, plan.renamed,
                      tuple(i for i in after.ids if i not in moved), embedded,
                      tuple(PairError(p, r, n) for p, r, n in after.errors), (), False, None, False,
                      embedder.model_id, rows, optimized)


def _seed_questions(settings: Settings) -> set[str]:
    """The questions of the manifest's seeds: a pair file asking one hides that seed."""
    if not settings.seeds:
        return set()
    try:
        return {p.nl.strip().casefold() for p in seed_pairs(settings)}
    except WrenmemError:
        return set()


def _save_delta(settings: Settings, delta: StatDelta, read: Any,
                scope: set[str], rows: int, only_if_free: bool) -> IndexState:
    """The mirror with the files of ``scope`` as just read; every other file's record
    stays (its stat is as recorded, so its content is too). ``only_if_free``: a refresh
    of stats, written only if the lock is free right now and nobody wrote meanwhile."""
    prior = delta.state
    # path -> (raw hash, stat) as read now, or None: no longer recorded
    changes: dict[str, tuple[str, tuple[int, int, int]] | None] = {}
    for path in scope:
        key = delta.key_of(path)
        changes[path] = ((read.file_hashes[path], key)
                         if path in read.file_hashes and key is not None else None)
    errors = sorted([e for e in prior.errors if e[0] not in scope]
                    + [(e.path, e.reason, e.line) for e in read.errors])
    # Files touched but left out of scope were not read: keep the older clock for them.
    whole = scope == set(delta.touched) | set(delta.gone) and not delta.partial
    stats_at = delta.stats_at if whole else min(prior.stats_at, delta.stats_at)
    # Every file of the walk is recorded with the stat it found (the untouched ones had
    # it already, the touched ones were read): the next no-op compares the walk's bytes.
    walk = (delta.walk if whole and all(changes.get(p) is not None for p in delta.touched)
            else None)

    def save() -> IndexState:
        return patch_state(settings, prior, changes, rows=rows, errors=errors,
                           stats_at=stats_at, walk=walk, found=delta.count)

    if not only_if_free:
        return save()
    try:
        with index_lock(settings, timeout=0):
            if load_state(settings) == prior:
                return save()
    except LockTimeoutError:
        pass
    return prior


def _refresh_stats(settings: Settings, model_id: str) -> None:
    """Files were touched but not changed: record their new stats so the next no-op is
    quick again. Only under the lock (never overwrite a writer's invalidation), and only
    if the lock is free right now."""

    try:
        with index_lock(settings, timeout=0):
            snap = take_snapshot(settings)
            state = load_state(settings)
            if mirror_matches(settings, state, model_id, snap) and state is not None:
                save_mirror(settings, model_id, snap, state.rows, state.version)
    except LockTimeoutError:
        pass


def report_if_unchanged(settings: Settings, model_id: str) -> SyncReport | None:
    """The no-op report, from the state mirror alone, for a caller that knows no pair
    file changed since the last whole sync (the watcher's events): None unless the mirror
    still describes this index (its target, the table's own files, the seeds)."""
    state = usable_state(settings, model_id)
    return None if state is None else report_from_state(state, model_id)


def _load_in_background(embedder: Embedder) -> None:
    load = getattr(embedder, "load", None)
    if load is None:
        return

    def run() -> None:
        try:
            load()
        except Exception:  # the main thread will meet the same error and report it
            log.debug("model warm-up failed", exc_info=True)

    threading.Thread(target=run, name="wrenmem-model-load", daemon=True).start()


def _noop_report(settings: Settings, snap: Snapshot, model_id: str) -> SyncReport:
    state = load_state(settings)
    return SyncReport(unchanged=tuple(sorted(snap.pairs)), errors=snap.errors,
                      warnings=snap.warnings, noop=True, model_id=model_id,
                      rows=state.rows if state is not None else len(snap.pairs))


def _sync_locked(settings: Settings, embedder: Embedder, snap: Snapshot, full: bool,
                 progress: Progress | None, paths: Collection[str] | None,
                 prior: IndexState | None, pipe: EmbedPipe | None = None) -> SyncReport:
    db = index.connect(settings)
    check = index.inspect(settings, db)
    if check.owner is not None:
        raise WrenmemError(index.foreign_refusal(settings, check.owner))
    table = check.table
    here = local_origin(settings.root) if settings.remote_index else None
    if here is not None and table is not None and not full and not check.damaged:
        built_from = index.table_origin(table)
        if is_older_checkout(settings.root, built_from, here):
            assert built_from is not None
            raise IndexStorageError(
                f"the index at {settings.index_uri} was built from a newer commit of "
                f"{built_from.branch} ({built_from.commit[:10]}) than this checkout's "
                f"({here.commit[:10]}): an older job must not overwrite it; "
                "`wrenmem sync --full` overwrites it anyway")
    reason = None
    if check.damaged:
        reason = "the index is damaged: " + "; ".join(check.problems)
        index.drop_table(db, settings)
        table = None
    elif table is not None:
        built_by = index.table_model_id(table)
        if full:
            reason = "full rebuild requested"
        elif built_by != embedder.model_id:
            reason = (f"the embedder changed from {built_by or 'an older wrenmem'} "
                      f"to {embedder.model_id}")
    created = table is None or reason is not None
    if created:
        invalidate_state(settings)
        if reason is not None:
            log.warning("rebuilding the index: %s", reason)
        dim = pipe.dim() if pipe is not None else None  # not loading the model here
        table = index.create_table(db, embedder.model_id, dim or embedder.dim,
                                   str(settings.root))
        paths = None  # a new table needs every pair, whatever the caller asked for
        rows_read: dict[str, list[str]] = {}
    else:
        rows_read = check.indexed
    assert table is not None  # opened, or created above

    desired = snap.desired()
    scope = None if paths is None else set(paths)
    remote = settings.remote_index
    fresh = created and not remote  # a new local table: rows are added, none replaced
    # text -> vector: a re-applied round (another writer of a remote index) never re-embeds
    memo: dict[str, Any] | None = {} if remote else None
    first: SyncPlan | None = None
    embedded, commits = 0, 0
    for round_no in range(1, REMOTE_ROUNDS + 1):
        rows_now = rows_read if round_no == 1 else index.read_ids(table)
        plan, indexed_scope = _plan(rows_now, desired, scope, snap.extras_ok)
        first = first or plan
        if plan.in_sync:
            break
        if round_no > 1:  # another machine wrote between our plan and our commits
            log.info("another writer changed the index meanwhile: %d rows to re-apply",
                     len(plan.added) + len(plan.changed) + len(plan.removed))
            time.sleep(random.uniform(0.1, 0.5))
        if round_no == REMOTE_ROUNDS:
            raise IndexStorageError(
                f"another writer kept changing {settings.index_uri} during this sync "
                f"({REMOTE_ROUNDS} rounds); run `wrenmem sync` again")
        invalidate_state(settings)
        if round_no == 1 and not created:
            maintenance.prune_due(settings, table)
        cache = EmbedCache(cache_path(settings), embedder.model_id)
        done, made = rowwrite.write_plan(table, snap, plan, indexed_scope, embedder, progress,
                            settings.max_embed_chars, cache, use_cache=not full, memo=memo,
                            new_table=fresh, pipe=pipe)
        embedded, commits = embedded + done, commits + made
        if not remote:
            break  # the lock serialises local writers: nothing can have interleaved
    assert first is not None
    plan = first
    # Every row is written: the pairs' memory goes back before LanceDB builds the indexes
    # (at 100,000 pairs the vector index's build takes about 480 MB on top of this process).
    snap.pairs.clear()
    if embedded >= rowwrite.WRITE_CHUNK:
        _give_back_memory()
    # A new local table keeps its fragments (no superseded copies on disk); on object
    # storage, where every fragment is a request for a reader, a new table's chunks are
    # compacted before its indexes are built, so they are built once.
    compact_first = created and remote
    if compact_first:
        optimized = maintenance.maintain(settings, table, commits, embedded)
    # The vector index first: its build is the peak of a big first index (about 480 MB at
    # 100,000 pairs), and the full-text index's pages would add to it.
    lance.ensure_vector_index(table, pq_rows=settings.ivf_pq_rows,
                              sample_rate=lance.PAIRS_IVF_SAMPLE_RATE)
    lance.retry_conflicts(lambda: lance.ensure_fts(table, "terms"))
    if here is not None:
        index.record_origin(table, here)
    if not compact_first:
        optimized = maintenance.maintain(settings, table, commits, embedded, fresh=fresh)
    rows = table.count_rows()
    statedir.remove_old_files(settings.state_dir)
    # A scoped sync vouches for its paths only: never for a remote table's other rows.
    version = (_verified_version(table, desired, scope, snap.extras_ok)
               if remote and scope is None else None)
    if scope is None:
        if snap.extras_ok:
            save_mirror(settings, embedder.model_id, snap, rows, version)
    elif reason is None and _mirror_ok(settings, prior, embedder.model_id):
        assert prior is not None
        _save_scoped(settings, snap, rows, prior, scope, version)
    return SyncReport(plan.added, plan.changed, plan.removed, plan.renamed, plan.unchanged,
                      embedded, snap.errors, snap.warnings, reason is not None, reason,
                      False, embedder.model_id, rows, optimized)


def _give_back_memory() -> None:
    """Hand the heap a big write freed back to the system (Python's and pyarrow's pools,
    glibc's free lists) before the index builds add their own peak to this process's."""
    import gc

    gc.collect()
    try:
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    except Exception:  # an older pyarrow: nothing to release
        pass
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _verified_version(table: Any, desired: dict[str, str], scope: set[str] | None,
                      extras_ok: bool) -> int | None:
    """The version at which the remote table provably holds these files, for the mirror;
    None when another writer committed meanwhile (the next sync then plans for real)."""
    before = int(table.version)
    plan, _indexed = _plan(index.read_ids(table), desired, scope, extras_ok)
    return before if plan.in_sync and int(table.version) == before else None


def _plan(indexed: dict[str, list[str]], desired: dict[str, str], scope: set[str] | None,
          extras_ok: bool) -> tuple[SyncPlan, dict[str, list[str]]]:
    """The plan against the table's rows as read, limited to ``scope`` (when given)."""
    if scope is not None:
        desired = {i: h for i, h in desired.items() if i in scope}
        indexed = {i: h for i, h in indexed.items() if i in scope}
    if not extras_ok:  # seeds unknown (bad manifest): leave their rows as they are
        desired = {i: h for i, h in desired.items() if not i.startswith(SEED_PREFIX)}
        indexed = {i: h for i, h in indexed.items() if not i.startswith(SEED_PREFIX)}
    return plan_sync(desired, indexed), indexed


def _mirror_ok(settings: Settings, prior: IndexState | None, model_id: str) -> bool:
    return (prior is not None and prior.schema == index.SCHEMA_VERSION
            and prior.uri == settings.index_uri and prior.model_id == model_id)


def _save_scoped(settings: Settings, snap: Snapshot, rows: int, prior: IndexState,
                 scope: set[str], version: int | None) -> None:
    """A scoped sync vouches only for its paths: patch them into the previous mirror,
    which stayed true for every other path (any other write would have deleted it)."""
    stats = snap.stats or {}
    changes = {p: (snap.file_hashes[p], stats.get(p, (-1, -1, -1)))
               if p in snap.file_hashes else None for p in scope}
    errors = [e for e in prior.errors if e[0] not in scope]
    errors += [(e.path, e.reason, e.line) for e in snap.errors if e.path in scope]
    # The recorded stats of other paths are as old as the prior mirror; keep its clock.
    patch_state(settings, replace(prior, version=version), changes, rows=rows,
                errors=sorted(errors), stats_at=min(prior.stats_at, snap.stats_at))
