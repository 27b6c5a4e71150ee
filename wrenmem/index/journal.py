"""The pairs journal: a small sync's rows, kept beside the pairs table without LanceDB.

``import lancedb`` costs a one-edit ``wrenmem sync``, ``store`` or ``forget`` about a
second of CPU, more than the rest of its work. A small sync (at most :data:`MAX_SYNC_PAIRS`
changed pairs, the journal then at most :data:`MAX_ROWS` rows and :data:`MAX_BYTES`) in a
process that has not imported LanceDB embeds the changed questions (the embedding cache,
else the model) and records, in ``.wrenmem/pairs-journal.bin``, each changed id's row as it
would be written to the table (vector included), or its removal. The journal is rewritten
whole under the index lock, through a temporary file and a rename, so a kill or a full
disk at any byte leaves either the previous journal or the new one; then the state mirror
is patched, as after any write (a kill between the two leaves a mirror that does not know
the change yet: the next sync records it again, the same rows).

It records the table's file listing it sits on (``base``). While the listing is still that,
one-shot readers answer from the recall copy with the journal laid over it (:func:`overlaid`:
its ids' rows dropped, its rows added): exactly the table the journal describes. Any
process that opens the pairs table in LanceDB (through :func:`wrenmem.index.table.connect`,
or a recall backend) first applies the journal to it (:func:`reconcile`: one upsert
commit, the indexes and the recall copy brought along, the mirror re-keyed to the new
listing) and then deletes it. A rebuild of the table discards it (the files say it all).
"""

from __future__ import annotations

import hashlib
import logging
import marshal
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from wrenmem.fs import statedir
from wrenmem.fs.fsutil import encode_marshal, read_marshal, remove_quietly, write_temp_file
from wrenmem.index import recallcopy
from wrenmem.index import table as index
from wrenmem.settings import Settings
from wrenmem.storage import lance

log = logging.getLogger(__name__)

FILE_NAME = statedir.PAIRS_JOURNAL
VERSION = 1
MAX_SYNC_PAIRS = 32  # changed pairs a journal sync takes; a bigger sync writes LanceDB
MAX_ROWS = 256  # ids the journal holds; past it the next sync applies it to the table
MAX_BYTES = 4 << 20  # the journal's size (a row is about 2.5 kB at 512 dimensions)
LOCK_TIMEOUT = 120.0
# Test hook: "before-rename" ends the process (exit 70) after the new journal is written
# and synced to its temporary file, before the rename that makes it the journal.
FAULT_ENV = "WRENMEM_JOURNAL_FAULT"
# Which process writes the journal: "auto" (one that has not imported LanceDB), "always",
# "never" (every sync writes the table itself).
MODE_ENV = "WRENMEM_JOURNAL"
ROW_KEYS = ("id", "path", "content_hash", "question", "sql", "datasource", "dialect", "tags",
            "source", "meta", "text", "terms")


@dataclass(frozen=True)
class Journal:
    """The journal as read: ``rows`` maps each id to its row (the table's columns, the
    vector as float32 bytes) or to None (the id's rows are removed)."""

    root: str
    uri: str
    model_id: str
    dim: int
    base: str  # :func:`listing_digest` of the table's files the journal sits on
    seq: int  # how many journal writes since it was last emptied
    rows: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    damaged: bool = False  # the file is there but unreadable: no reader may trust a copy
    token: tuple[int, int, int] = (0, 0, 0)  # the file's (inode, size, mtime_ns) when read

    def to_record(self) -> dict[str, Any]:
        return {"v": VERSION, "root": self.root, "uri": self.uri, "model_id": self.model_id,
                "dim": self.dim, "base": self.base, "seq": self.seq, "rows": self.rows}

    def based_on(self, listing: lance.Listing | None) -> bool:
        """Whether the journal lies over the table whose files are ``listing`` now."""
        return not self.damaged and bool(listing) and self.base == listing_digest(listing)

    @property
    def upserts(self) -> dict[str, dict[str, Any]]:
        return {i: r for i, r in self.rows.items() if r is not None}


def journal_path(settings: Settings) -> Any:
    return settings.state_dir / FILE_NAME


def listing_digest(listing: lance.Listing | None) -> str:
    """One hash of a table's file listing (:func:`wrenmem.storage.lance.disk_listing`)."""
    return hashlib.sha256(marshal.dumps(sorted((listing or {}).items()))).hexdigest()


def mode() -> str:
    value = os.environ.get(MODE_ENV, "auto").strip().lower()
    return value if value in ("auto", "always", "never") else "auto"


def wanted(settings: Settings, changed: int) -> bool:
    """Whether a sync of ``changed`` pairs writes the journal rather than the table: a
    local index's writer, a small change, and (``auto``) LanceDB not imported here yet (a
    process holding LanceDB, the watcher's daemon, writes the table: nothing to save)."""
    if settings.remote_index or settings.is_reader or not 0 < changed <= MAX_SYNC_PAIRS:
        return False
    chosen = mode()
    if chosen == "never":
        return False
    import sys

    return chosen == "always" or "lancedb" not in sys.modules


def read(settings: Settings) -> Journal | None:
    """The journal (None: there is none; ``damaged`` when its file cannot be read)."""
    path = journal_path(settings)
    try:
        st = os.stat(path)
    except OSError:
        return None
    token = (st.st_ino, st.st_size, st.st_mtime_ns)
    data = read_marshal(path)
    if data is None and not path.exists():
        return None  # applied (and deleted) by another process meanwhile
    try:
        if not isinstance(data, dict) or data.get("v") != VERSION:
            raise ValueError("not a journal of this version")
        rows, dim = data["rows"], int(data["dim"])
        if not isinstance(rows, dict) or not all(
                isinstance(k, str) and (v is None or _is_row(v, dim))
                for k, v in rows.items()):
            raise ValueError("its rows are not rows")
        return Journal(str(data["root"]), str(data["uri"]), str(data["model_id"]),
                       int(data["dim"]), str(data["base"]), int(data["seq"]), rows,
                       token=token)
    except (KeyError, TypeError, ValueError) as e:
        log.warning("%s cannot be read (%s): the next sync reads every pair file", path, e)
        return Journal(str(settings.root), settings.index_uri, "", 0, "", 0, {}, True, token)


def _is_row(row: Any, dim: int) -> bool:
    return (isinstance(row, dict) and all(k in row for k in ROW_KEYS)
            and isinstance(row.get("vector"), bytes) and len(row["vector"]) == 4 * dim)


_PEEKED: dict[str, Journal | None] = {}  # by journal path: the last one read, by token
_PEEK_LOCK = threading.Lock()


def peek(settings: Settings) -> Journal | None:
    """:func:`read`, once per version of the file in this process (one ``stat`` when it
    did not change): what a long-lived reader checks before each search."""
    if settings.remote_index:
        return None
    path = journal_path(settings)
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = str(path)
    with _PEEK_LOCK:
        held = _PEEKED.get(key)
        if held is not None and held.token == (st.st_ino, st.st_size, st.st_mtime_ns):
            return held
    found = read(settings)
    with _PEEK_LOCK:
        _PEEKED[key] = found
    return found


def save(settings: Settings, journal: Journal) -> None:
    """Make ``journal`` the journal, atomically (temporary file, fsync, rename); under the
    index lock. Raises OSError (a full disk: the previous journal stays) or ValueError."""
    data = encode_marshal(journal.to_record())
    if len(data) > MAX_BYTES:
        raise ValueError(f"the journal would hold {len(data)} bytes (at most {MAX_BYTES})")
    path = journal_path(settings)
    statedir.ensure_state_dir(settings.state_dir)
    tmp = write_temp_file(settings.state_dir, data, 0o600)
    try:
        if os.environ.get(FAULT_ENV) == "before-rename":
            os._exit(70)
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise


def discard(settings: Settings) -> None:
    """Forget the journal (its table was rebuilt from the files, or applied)."""
    journal_path(settings).unlink(missing_ok=True)


def encode_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row of :func:`wrenmem.index.table.pair_row` as the journal keeps it (the vector as
    float32 bytes: marshal holds no numpy array)."""
    import numpy as np

    out = {k: row[k] for k in ROW_KEYS}
    out["tags"] = list(out["tags"] or ())
    out["vector"] = np.asarray(row["vector"], dtype=np.float32).tobytes()
    return out


def decode_row(row: Mapping[str, Any]) -> dict[str, Any]:
    import numpy as np

    out = dict(row)
    out["vector"] = np.frombuffer(row["vector"], dtype=np.float32)
    return out


# ---------------------------------------------------------------- reconcile ----

def apply_pending(settings: Settings, lock_timeout: float = LOCK_TIMEOUT, *,
                  compact: bool = True) -> bool:
    """:func:`reconcile`, for a process about to open the pairs table: when the journal
    cannot be applied (a damaged table, a full disk), it is dropped with the state mirror,
    so the next sync plans against the table's own rows and writes the change from the
    files (the pair files are never touched, so nothing is lost); the caller goes on and
    meets the table as it is. A lock held past ``lock_timeout`` is raised. ``compact``
    False (a recall): the commits are counted, the compaction left to the next writer."""
    from wrenmem.errors import LockTimeoutError

    try:
        return reconcile(settings, lock_timeout, compact=compact)
    except LockTimeoutError:
        raise
    except Exception as e:
        log.warning("the pairs journal could not be applied to the index (%s): the next "
                    "sync writes its pairs from the files", lance.short_error(e))
        from wrenmem.index.state import invalidate_state

        invalidate_state(settings)
        discard(settings)
        return False


def reconcile(settings: Settings, lock_timeout: float = LOCK_TIMEOUT, *,
              compact: bool = True) -> bool:
    """Apply the journal to the pairs table and delete it, under the index lock (True when
    there was one to apply). Called before any process works on the table in LanceDB.
    A journal of another project or index, of a table that is gone or was rebuilt by
    another embedder, or damaged, is dropped with the mirror: the next sync plans against
    the table's own rows, and the files say what to index."""
    if settings.remote_index or settings.is_reader or not journal_path(settings).exists():
        return False
    from wrenmem.index.state import invalidate_state, load_state, rebased
    from wrenmem.storage.lock import index_lock

    with index_lock(settings, timeout=lock_timeout):
        journal = read(settings)
        if journal is None:
            return False  # another process applied it meanwhile
        db = lance.connect(settings.index_uri)
        table = index.open_table(db)
        if (journal.damaged or journal.root != str(settings.root)
                or journal.uri != settings.index_uri or table is None
                or index.table_model_id(table) != journal.model_id):
            log.info("the pairs journal does not fit the table; dropped with the mirror")
            invalidate_state(settings)
            discard(settings)
            return False
        state = load_state(settings)
        before = index.disk_listing(settings)
        _apply(settings, table, journal, compact)
        if state is not None and state.disk == before:  # it vouched for table + journal
            rebased(settings, state, table.count_rows())
        recallcopy.save(settings, table)
        _cache_vectors(settings, journal)
        discard(settings)
    return True


def _cache_vectors(settings: Settings, journal: Journal) -> None:
    """The journal's vectors into the embedding cache (a journal sync leaves it as it was,
    so a small sync never rewrites its 40 MB)."""
    from wrenmem.index.embedcache import EmbedCache, cache_path

    cache = EmbedCache(cache_path(settings), journal.model_id)
    cache.store({r["text"]: decode_row(r)["vector"] for r in journal.upserts.values()})
    cache.save()


def _apply(settings: Settings, table: Any, journal: Journal, compact: bool = True) -> None:
    """The journal's rows and removals as one upsert commit (two where a crash once left
    an id twice in the table), then the indexes and the compaction policy."""
    ids = sorted(journal.rows)
    rows = [decode_row(r) for r in journal.upserts.values()]
    if compact:
        lance.prune_due(table, settings.state_dir / statedir.INDEX_MAINT)
    counts: dict[str, int] = {}
    for row_id, _hash, _q in index.rows_by_id(table, ids):
        counts[row_id] = counts.get(row_id, 0) + 1
    twice = [i for i, n in counts.items() if n > 1]
    commits = 0
    if twice:  # merge_insert refuses ids that match twice: clear them first
        index.write(table, [], twice)
        commits += 1
    gone = [i for i in ids if journal.rows[i] is None and i in counts]
    index.write(table, rows, gone)
    commits += 1
    lance.retry_conflicts(lambda: lance.ensure_fts(table, "terms"))
    lance.ensure_vector_index(table, pq_rows=settings.ivf_pq_rows,
                              sample_rate=lance.PAIRS_IVF_SAMPLE_RATE)
    counter = settings.state_dir / statedir.INDEX_MAINT
    if compact:
        lance.maintain(table, counter, commits, len(rows))
    else:
        lance.count_commits(counter, commits)


# ----------------------------------------------------------------- overlay ----

# by project: (the copy, the journal's token, the copy with the journal laid over it)
_OVERLAID: dict[str, tuple[recallcopy.RecallCopy, tuple[int, int, int],
                           recallcopy.RecallCopy]] = {}


def overlaid(settings: Settings, copy: recallcopy.RecallCopy, journal: Journal
             ) -> recallcopy.RecallCopy:
    """``copy`` (of the table the journal sits on) with the journal laid over it: every
    row of a journal id out of every search and statistic, the journal's rows added. Made
    once per copy and journal in this process."""
    import numpy as np

    key = str(settings.root)
    held = _OVERLAID.get(key)
    if held is not None and held[0] is copy and held[1] == journal.token:
        return held[2]
    live = np.ones(len(copy.rows), dtype=bool) if copy.live is None else copy.live.copy()
    live[rows_with_ids(copy.rows, set(journal.rows))] = False
    rows, hashes, vectors = [], [], []
    upserts = journal.upserts
    for row_id in sorted(upserts):
        row = upserts[row_id]
        rows.append(tuple(row[c] for c in recallcopy.COLUMNS))
        hashes.append(row["content_hash"] or "")
        vector = np.frombuffer(row["vector"], dtype=np.float32).reshape(1, -1)
        norm = np.linalg.norm(vector, axis=1, keepdims=True)  # as lance.unit_vectors
        vectors.append((vector / np.where(norm > 0, norm, 1.0)).astype(np.float32)[0])
    result = copy.with_rows(live, rows, None if copy.hashes is None else hashes, vectors)
    result.listing = copy.listing
    _OVERLAID[key] = (copy, journal.token, result)
    return result


def rows_with_ids(rows: Any, ids: set[str]) -> list[int]:
    """The numbers of the rows (of a recall copy) whose id is one of ``ids`` (every row's
    id is read: 0.2 s at 100,000 rows of a saved copy, mostly reading the mapped file)."""
    at_id = recallcopy.POSITION["id"]
    return [n for n, values in enumerate(rows) if values[at_id] in ids] if ids else []


def with_changes(prior: Journal | None, settings: Settings, model_id: str, dim: int,
                 listing: lance.Listing | None,
                 changes: Mapping[str, dict[str, Any] | None]) -> Journal:
    """The journal after a small sync: ``prior``'s rows with ``changes`` laid over them."""
    rows = dict(prior.rows) if prior is not None else {}
    rows.update(changes)
    return replace(prior, rows=rows, seq=prior.seq + 1, dim=dim or prior.dim) if (
        prior is not None) else Journal(
        str(settings.root), settings.index_uri, model_id, dim, listing_digest(listing), 1,
        rows)
