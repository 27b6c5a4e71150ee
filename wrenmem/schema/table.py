"""The schema index: the manifest's schema items, embedded, in the LanceDB table ``schema_items``.

Sync is incremental (:func:`wrenmem.storage.embedsync.apply`). A state file
(``.wrenmem/schema_index.json``) records the manifest file's stat, its fingerprint, the
embedder and the table's files: when they match, sync opens nothing and loads no model.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wrenmem.embed.embedders import Embedder, get_embedder
from wrenmem.errors import WrenmemError
from wrenmem.fs import statedir
from wrenmem.fs.fsutil import is_racy, stat_key
from wrenmem.lazy import lazies, lazy
from wrenmem.schema import items as item_format
from wrenmem.schema.items import SchemaItem
from wrenmem.settings import Settings
from wrenmem.storage import embedsync, lance
from wrenmem.storage.lock import index_lock

# A sync that finds the index fresh (:func:`noop_report`) reads one state file: what a
# build needs (the manifest's parse and its cache, the maintenance) is imported by a build.
if TYPE_CHECKING:
    from wrenmem.schema import cache, later
    from wrenmem.schema.manifest import Manifest
    from wrenmem.storage import compaction
else:
    cache, later = lazies("wrenmem.schema", "cache later")
    compaction = lazy("wrenmem.storage.compaction")

log = logging.getLogger(__name__)
TABLE = "schema_items"
STATE_FILE = statedir.SCHEMA_STATE
STATE_VERSION = 1


class SchemaIndexMissing(WrenmemError):
    """The ``schema_items`` table is not there (deleted behind the state file's back)."""


@dataclass(frozen=True)
class SchemaSyncReport:
    """What a schema sync did. ``noop`` means nothing was opened or loaded."""

    manifest: str
    fingerprint: str
    items: int
    embedded: int = 0  # distinct texts embedded
    deleted: int = 0
    unchanged: int = 0  # rows kept as they were
    rebuilt: bool = False
    noop: bool = False
    seconds: float = 0.0
    embedder: str = ""
    written: int = 0  # rows written (items with a new hash or text; equal texts share a vector)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": round(self.seconds, 3)}


def state_path(settings: Settings) -> Path:
    return settings.state_dir / STATE_FILE


def _stat_key(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    key = stat_key(st)  # the change time: an edit whose mtime was put back is seen
    if is_racy(key[0]):
        return None  # a same-size edit within the clock tick would look unchanged
    return list(key)


def read_state(settings: Settings) -> dict[str, Any]:
    data = embedsync.read_state(state_path(settings), STATE_VERSION)
    return data if data.get("items_version") == item_format.ITEMS_VERSION else {}


def _table_present(settings: Settings) -> bool:
    return embedsync.table_present(settings.index_uri, TABLE)


def is_fresh(settings: Settings, manifest_path: Path, embedder_id: str,
             fingerprint: str | None = None) -> bool:
    """True when the index already holds exactly this manifest's items for this embedder."""
    state = read_state(settings)
    if (state.get("manifest") != str(manifest_path) or state.get("embedder") != embedder_id
            or state.get("index") != settings.index_uri or not _table_present(settings)
            or state.get("disk") != _disk(settings)):
        return False  # the disk listing: no file of the table deleted or truncated since
    if fingerprint is not None:
        return state.get("fingerprint") == fingerprint
    key = _stat_key(manifest_path)
    return key is not None and state.get("stat") == key


def noop_report(settings: Settings, embedder_id: str, manifest_path: Path | None = None
                ) -> SchemaSyncReport | None:
    """What :func:`sync_schema` returns when the index holds the manifest at
    ``manifest_path`` (the setting's by default) already; None when it would build."""
    started = time.perf_counter()
    path = (manifest_path or settings.manifest_path).resolve()
    if not is_fresh(settings, path, embedder_id):
        return None
    state = read_state(settings)
    return SchemaSyncReport(str(path), state["fingerprint"], state.get("items", 0),
                            unchanged=state.get("items", 0), noop=True,
                            seconds=time.perf_counter() - started, embedder=embedder_id)


def sync_schema(settings: Settings, *, manifest_path: Path | None = None,
                manifest: Manifest | None = None, embedder: Embedder | None = None,
                progress: Callable[[int, int], None] | None = None) -> SchemaSyncReport:
    """Bring the ``schema_items`` table up to date with the manifest, embedding only changes.
    Raises ManifestError for an unusable manifest, ExtraMissingError without the ``index``
    extra."""
    started = time.perf_counter()
    path = (manifest_path or settings.manifest_path).resolve()
    embedder = embedder or get_embedder(settings.embedder, root=settings.root)
    noop = noop_report(settings, embedder.model_id, path) if manifest is None else None
    if noop is not None:
        return noop
    if manifest is not None:
        return sync_items(settings, path, manifest.fingerprint, item_format.schema_items(manifest),
                          embedder, progress=progress, started=started)
    prepared = cache.prepare(settings, path)  # shared with fetch: parsed once per change
    return sync_items(settings, path, prepared.fingerprint, lambda: prepared.items,
                      embedder, count=len(prepared), progress=progress, started=started)


def sync_items(settings: Settings, path: Path, fingerprint: str,
               items: Sequence[SchemaItem] | Callable[[], Sequence[SchemaItem]],
               embedder: Embedder, *, count: int | None = None,
               progress: Callable[[int, int], None] | None = None,
               started: float | None = None, force: bool = False) -> SchemaSyncReport:
    """Sync already-extracted items of the manifest at ``path`` (fetch has them cached).
    ``items`` may be a function, called only when the index is not fresh (``count``: their
    number). ``force`` compares the table itself whatever the state file says."""
    started = time.perf_counter() if started is None else started
    total = len(items) if not callable(items) else (count or 0)
    stat_key = _stat_key(path)
    fresh = not force and is_fresh(settings, path, embedder.model_id, fingerprint)
    if fresh and read_state(settings).get("stat") != stat_key:
        _write_state(settings, path, fingerprint, embedder.model_id, total, stat_key)
    if fresh or settings.is_reader:  # a reader searches the shared index as its writer left it
        return SchemaSyncReport(str(path), fingerprint, total, unchanged=total, noop=True,
                                seconds=time.perf_counter() - started,
                                embedder=embedder.model_id)
    listed = items() if callable(items) else items
    with lance.disk_full_errors(settings.index_uri, "syncing the schema index"), \
            index_lock(settings), cache.no_cyclic_gc():  # 56,000 rows compared: no cycles made
        embedded, deleted, written, rebuilt = _apply(settings, listed, embedder, progress)
        _write_state(settings, path, fingerprint, embedder.model_id, len(listed), stat_key)
    return SchemaSyncReport(str(path), fingerprint, len(listed), embedded, deleted,
                            len(listed) - written, rebuilt, False,
                            time.perf_counter() - started, embedder.model_id, written)


def _write_state(settings: Settings, path: Path, fingerprint: str, embedder_id: str,
                 items: int, stat_key: list[int] | None) -> None:
    embedsync.write_state(state_path(settings), {
        "version": STATE_VERSION, "items_version": item_format.ITEMS_VERSION,
        "manifest": str(path), "stat": stat_key, "fingerprint": fingerprint,
        "embedder": embedder_id, "index": settings.index_uri, "items": items,
        "disk": _disk(settings)})


def _disk(settings: Settings) -> dict[str, list[int]] | None:
    """The table's files as JSON stores them (see :func:`wrenmem.storage.lance.disk_listing`)."""
    listing = lance.disk_listing(settings.index_uri, TABLE)
    return None if listing is None else {k: list(v) for k, v in listing.items()}


def connect(settings: Settings) -> Any:
    return lance.connect(settings.index_uri)


def open_table(db: Any) -> Any | None:
    """The ``schema_items`` table, or None when there is none yet."""
    try:
        return lance.open_table(db, TABLE)
    except Exception as e:  # a damaged table: the next sync rebuilds it
        log.warning("schema index table cannot be opened (%s); it will be rebuilt", e)
        return None


def _apply(settings: Settings, items: Sequence[SchemaItem], embedder: Embedder,
           progress: Callable[[int, int], None] | None) -> tuple[int, int, int, bool]:
    """Embed and write what changed: (embedded, deleted, written, rebuilt). Equal texts
    (every regional copy of a column, every shared audit column) are embedded once."""
    by_id = {item.id: item for item in items}
    done = embedsync.apply(
        connect(settings), TABLE, "item_hash",
        {i.id: (i.item_hash, i.vector_text) for i in items}, embedder,
        lambda ids: _columns([by_id[i] for i in ids], embedder.model_id),
        uri=settings.index_uri, what="schema index", max_chars=settings.max_embed_chars,
        progress=progress)
    if done.rebuilt or done.table is None:
        forget_handles()
    if done.table is not None and (done.written or done.deleted):
        lance.ensure_vector_index(done.table, pq_rows=settings.ivf_pq_rows)  # once, at the end
        if not done.rebuilt:  # after the index is up to date (later.py)
            later.write(partial(_maintain, settings, done.commits, done.embedded))
    return done.embedded, done.deleted, done.written, done.rebuilt


def _maintain(settings: Settings, commits: int, rows: int) -> None:
    """Count the commits and compact the table when due
    (:func:`wrenmem.storage.compaction.maintain`), under the index lock. A compaction rewrites
    the table's files but not its rows: a state naming the files before it is saved again
    for the files after it (a sync writes the state after this, unless :mod:`later` queued
    this)."""
    with index_lock(settings):
        files = _disk(settings)
        table = open_table(connect(settings))
        if table is None or not compaction.maintain(
                table, settings.state_dir / statedir.SCHEMA_MAINT, commits, rows):
            return
        state = read_state(settings)
        if files and state.get("disk") == files:
            embedsync.write_state(state_path(settings), {**state, "disk": _disk(settings)})


def _columns(items: Sequence[SchemaItem], embedder_id: str) -> dict[str, list[str]]:
    return {"id": [i.id for i in items], "item_hash": [i.item_hash for i in items],
            "embedder": [embedder_id] * len(items), "type": [i.type for i in items],
            "name": [i.name for i in items], "model": [i.model for i in items],
            "related": [i.related for i in items],
            "text": [i.vector_text for i in items]}  # what was embedded


# Open schema tables by URI. A warm process (the watcher's daemon, an agent's Memory) keeps
# its handle, so the vector index (100+ MB past 50,000 items) stays loaded instead of being
# read again per question; the connection re-checks the latest version on every read.
_handles: dict[str, Any] = {}
_handles_lock = threading.Lock()


def _search_table(settings: Settings, uri: str) -> Any | None:
    with _handles_lock:
        table = _handles.get(uri)
    if table is not None:
        return table
    db = connect(settings) if uri == settings.index_uri else lance.connect(uri)
    table = open_table(db)
    if table is not None:
        with _handles_lock:
            _handles[uri] = table
    return table


def forget_handles() -> None:
    """Drop the open tables (this process dropped or re-created the table, or its rows were
    not the manifest's): the next search opens the table again."""
    with _handles_lock:
        _handles.clear()


def vector_search(settings: Settings, question: str, *, embedder: Embedder, limit: int,
                  types: Sequence[str] = (), model: str | None = None,
                  uri: str | None = None) -> list[tuple[str, str, float]]:
    """(item id, item hash, cosine similarity) of the nearest rows, best first; ``uri``
    names another copy of the index to search (a remote index's local read copy)."""
    key = uri or settings.index_uri
    table = _search_table(settings, key)
    if table is None:
        raise SchemaIndexMissing("the schema index has no table; a sync builds it")
    vector = embedder.embed([question[:settings.max_embed_chars]])[0]
    where = []
    if types:
        where.append(lance.in_filter("type", list(types)))
    if model:
        where.append(f"(model = {lance.quote(model)} OR related = {lance.quote(model)})")
    query = lance.nearest(table, vector.tolist())
    if where:
        query = query.where(" AND ".join(where), prefilter=True)
    try:
        rows = query.select(["id", "item_hash", "_distance"]).limit(limit).to_list()
    except Exception as e:  # damaged: the caller's forced sync rebuilds it
        with _handles_lock:
            _handles.pop(key, None)  # dropped or rebuilt meanwhile: open it again next time
        raise SchemaIndexMissing(f"the schema index cannot be read: {lance.short_error(e)}"
                                 ) from e
    found = [(r["id"], r["item_hash"], 1.0 - float(r["_distance"])) for r in rows]
    return sorted(found, key=lambda r: (-r[2], r[0]))  # equal scores by id


@dataclass(frozen=True)
class SchemaDrift:
    """Whether the ``schema_items`` table holds the current manifest (for check/status)."""

    manifest: bool  # a manifest file is there
    fresh: bool
    missing: bool  # no schema index was ever built (or it was deleted)
    items: int
    reason: str = ""  # why it is not fresh

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def schema_drift(settings: Settings, embedder_id: str) -> SchemaDrift:
    """Compare the schema index with the manifest without opening LanceDB or a model:
    by the manifest's stat, else by its fingerprint (the parsed manifest is cached)."""
    path = settings.manifest_path
    if not path.is_file():
        return SchemaDrift(False, True, False, 0)
    state = read_state(settings)
    if not state or not _table_present(settings):
        return SchemaDrift(True, False, True, 0, "no schema index yet")
    items = int(state.get("items", 0))
    if is_fresh(settings, path, embedder_id):
        return SchemaDrift(True, True, False, items)
    try:
        fingerprint = cache.prepare(settings, path).fingerprint
    except WrenmemError as e:
        return SchemaDrift(True, False, False, items, f"manifest not usable: {e}")
    if is_fresh(settings, path, embedder_id, fingerprint):
        return SchemaDrift(True, True, False, items)
    if state.get("embedder") != embedder_id:
        return SchemaDrift(True, False, False, items,
                           f"built by {state.get('embedder')}, the setting is {embedder_id}")
    return SchemaDrift(True, False, False, items, "the manifest changed")


def reset_schema(settings: Settings) -> bool:
    """Drop the ``schema_items`` table and its state; True when there was a table."""
    with index_lock(settings):
        state_path(settings).unlink(missing_ok=True)
        (settings.state_dir / statedir.SCHEMA_MAINT).unlink(missing_ok=True)
        forget_handles()
        if not _table_present(settings):
            return False
        return bool(lance.drop_table(connect(settings), TABLE))
