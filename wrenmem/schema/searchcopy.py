"""The schema search copy: the ``schema_items`` table's vectors in one file, without LanceDB.

``import lancedb`` costs a one-question ``wrenmem fetch`` process most of its time (seconds,
against milliseconds for the search). So each schema sync that writes the table also saves
``.wrenmem/schema-copy.bin``: every row's id, item hash, type, model and related name, and
the distinct unit-length vectors as one float32 block (rows with the same embedded text
share one: 56,103 items, 10,492 vectors). A process searches it with numpy: an exact cosine
scan, the filters applied first, ties broken by item id; the same ranking as LanceDB's exact
(flat) search of the table, which past 50,000 rows only approximates it with its IVF index.

The copy records the table's file listing (:func:`wrenmem.storage.lance.disk_listing`) from after
the write (under the index lock) or from before the table was read: it is used only while
the listing is still exactly that, so any later write, compaction or damage makes it stale,
and a stale, damaged or foreign copy is not used (the search then reads the table and saves
a new one). Local indexes only; a remote index is searched through its local replica.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from wrenmem.fs import statedir
from wrenmem.fs.fsutil import read_marshal, write_marshal
from wrenmem.schema import later
from wrenmem.settings import Settings
from wrenmem.storage import lance

log = logging.getLogger(__name__)

FILE_NAME = statedir.SCHEMA_COPY
VERSION = 2  # 2: the texts_version field
MAX_VECTORS = 60_000  # distinct vectors kept (about 120 MB at 512 dimensions)
TABLE = "schema_items"  # wrenmem.schema.table.TABLE (that module imports this one)
FIELDS = ("id", "item_hash", "type", "model", "related")


class SchemaCopy:
    """One saved version of the schema table: row fields and distinct unit vectors."""

    def __init__(self, model_id: str, rows: list[tuple[str, str, str, str, str]],
                 which: Any, matrix: Any, listing: lance.Listing | None = None,
                 texts_version: int | None = None):
        self.model_id = model_id
        self.rows = rows  # (id, item_hash, type, model, related) per row
        self.which = which  # int32: the vector of each row
        self.matrix = matrix  # float32, unit rows, one per distinct vector
        self.listing = listing
        # The item format (schema.items.ITEMS_VERSION) whose embedded text every row holds
        # for its item hash: set by a sync, which compared or wrote every row; None for a
        # copy read from the table by a search (its texts were not compared with items).
        self.texts_version = texts_version
        self._hashes: dict[str, str] | None = None

    def hashes(self) -> dict[str, str]:
        """Item id -> item hash of every row (made once per copy)."""
        if self._hashes is None:
            self._hashes = {r[0]: r[1] for r in self.rows}
        return self._hashes

    def __len__(self) -> int:
        return len(self.rows)

    @classmethod
    def build(cls, model_id: str, rows: Sequence[tuple[str, str, str, str, str]],
              vectors: Iterable[Any]) -> SchemaCopy:
        """The copy of ``rows`` with their ``vectors`` (one float array each, in row
        order), equal vectors stored once."""
        import numpy as np

        position: dict[bytes, int] = {}
        distinct: list[Any] = []
        which = np.zeros(len(rows), dtype=np.int32)
        for n, vector in enumerate(vectors):
            raw = np.asarray(vector, dtype=np.float32).reshape(-1)
            at = position.setdefault(raw.tobytes(), len(distinct))
            if at == len(distinct):
                distinct.append(raw)
            which[n] = at
        matrix = _units(np.stack(distinct)) if distinct else np.zeros((0, 0), np.float32)
        return cls(model_id, list(rows), which, matrix)

    @classmethod
    def from_table(cls, table: Any, model_id: str) -> SchemaCopy:
        """The copy of the table's current version (every row read, vectors included);
        ValueError when rows were embedded by another model than ``model_id``."""
        data = table.to_arrow().select([*FIELDS, "embedder", "vector"])
        if set(data.column("embedder").to_pylist()) - {model_id}:
            raise ValueError(f"the schema table holds vectors of another model than {model_id}")
        columns = [data.column(c).to_pylist() for c in FIELDS]
        rows = [tuple(r) for r in zip(*columns, strict=True)]
        return cls.build(model_id, rows, lance.unit_vectors(data))

    def updated(self, written: Sequence[tuple[str, str, str, str, str]],
                vectors: Sequence[Any], removed: Iterable[str]) -> SchemaCopy:
        """This copy after a sync upserted ``written`` rows (with their ``vectors``) and
        deleted the ``removed`` ids: what the table holds then, without reading it."""
        import numpy as np

        gone = set(removed) | {r[0] for r in written}
        keep = np.fromiter((n for n, r in enumerate(self.rows) if r[0] not in gone),
                           dtype=np.int64)
        rows = [self.rows[n] for n in keep] + list(written)
        if not written:
            return SchemaCopy(self.model_id, rows, self.which[keep], self.matrix)
        if not len(self.matrix):
            return SchemaCopy.build(self.model_id, rows, vectors)
        units = _units(np.stack([np.asarray(v, dtype=np.float32).reshape(-1)
                                 for v in vectors]))
        position = _Positions(self.matrix, len(units))
        extra: list[Any] = []
        new = np.empty(len(written), dtype=np.int32)
        for n, unit in enumerate(units):
            at = position.get(unit.tobytes())
            if at is None:
                at = position[unit.tobytes()] = len(self.matrix) + len(extra)
                extra.append(unit)
            new[n] = at
        which = np.concatenate([self.which[keep], new]).astype(np.int32)
        matrix = np.vstack([self.matrix, *extra]) if extra else self.matrix
        if len(matrix) > 2 * len(np.unique(which)) + 1000:  # many vectors no row uses now
            return SchemaCopy.build(self.model_id, rows, (matrix[n] for n in which))
        return SchemaCopy(self.model_id, rows, which, matrix)

    def search(self, vector: Any, limit: int, types: Sequence[str] = (),
               model: str | None = None) -> list[tuple[str, str, float]]:
        """(item id, item hash, cosine similarity) of the ``limit`` nearest rows that pass
        the filters, best first, equal scores by id."""
        import numpy as np

        if not self.rows or limit <= 0:
            return []
        query = _unit(np.asarray(vector, dtype=np.float32))
        scores = (self.matrix @ query)[self.which]
        if types or model is not None:
            wanted = set(types)
            candidates = np.fromiter(
                (n for n, r in enumerate(self.rows)
                 if (not wanted or r[2] in wanted)
                 and (model is None or model in (r[3], r[4]))), dtype=np.int64)
        else:
            candidates = np.arange(len(self.rows))
        if len(candidates) > limit:  # every row scoring at least the limit-th score
            kth = np.partition(scores[candidates], len(candidates) - limit)[
                len(candidates) - limit]
            candidates = candidates[scores[candidates] >= kth]
        ranked = sorted((-float(scores[n]), self.rows[n][0], n) for n in candidates)
        return [(self.rows[n][0], self.rows[n][1], -negative)
                for negative, _id, n in ranked[:limit]]


class _Positions:
    """Row of ``matrix`` holding exactly a unit vector (its bytes), or None; new rows are
    added with ``position[key] = n``. For a few vectors (one changed column) the matrix is
    searched by its dot products (equal unit vectors score 1) instead of a dict of every
    row's bytes, which costs a 10,000-vector copy tens of milliseconds to make."""

    FEW = 64

    def __init__(self, matrix: Any, wanted: int):
        self._matrix = matrix
        self._added: dict[bytes, int] = {}
        self._all: dict[bytes, int] | None = None
        if wanted > self.FEW:
            self._all = {v.tobytes(): n for n, v in enumerate(matrix)}

    def get(self, key: bytes) -> int | None:
        if key in self._added:
            return self._added[key]
        if self._all is not None:
            return self._all.get(key)
        import numpy as np

        unit = np.frombuffer(key, dtype=np.float32)
        near = (self._matrix @ unit >= 0.999) if unit.any() else ~self._matrix.any(axis=1)
        for n in np.flatnonzero(near):
            if self._matrix[n].tobytes() == key:
                return int(n)
        return None

    def __setitem__(self, key: bytes, n: int) -> None:
        self._added[key] = n


def _unit(vector: Any) -> Any:
    return _units(vector.reshape(1, -1))[0]


def _units(matrix: Any) -> Any:
    """Rows scaled to unit length (zero rows stay zero), float32, C order."""
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.ascontiguousarray(matrix / np.where(norms > 0, norms, 1.0), dtype=np.float32)


def copy_path(settings: Settings) -> Path:
    return settings.state_dir / FILE_NAME


def listing(settings: Settings) -> lance.Listing | None:
    """The schema table's files now; None for a remote index."""
    if settings.remote_index:
        return None
    return lance.disk_listing(settings.index_uri, TABLE)


# The copy this process last read or wrote, per project, index and model: the watcher's
# daemon and an agent's Memory read the file once, not once per question.
_recent: dict[tuple[str, str, str], SchemaCopy] = {}
_lock = threading.Lock()


def _key(settings: Settings, model_id: str) -> tuple[str, str, str]:
    return str(settings.root), settings.index_uri, model_id


def discard(settings: Settings) -> None:
    """Forget the copy (the table was dropped or is about to be rebuilt)."""
    with _lock:
        for key in [k for k in _recent if k[:2] == _key(settings, "")[:2]]:
            del _recent[key]
    copy_path(settings).unlink(missing_ok=True)


def save(settings: Settings, copy: SchemaCopy, files: lance.Listing | None) -> bool:
    """Keep ``copy`` of the table whose files are ``files`` (after the write that made it,
    or before the read it came from), in this process and in the file."""
    if settings.remote_index or not files or not 0 < len(copy.matrix) <= MAX_VECTORS:
        discard(settings)
        return False
    copy.listing = files
    with _lock:
        _recent[_key(settings, copy.model_id)] = copy
    written: list[bool] = []
    later.write(lambda: written.append(_write(settings, copy, files)))
    return written[0] if written else True  # queued (later.py): this process holds it


def _write(settings: Settings, copy: SchemaCopy, files: lance.Listing) -> bool:
    with _lock:
        held = _recent.get(_key(settings, copy.model_id))
    if held is not copy or copy.listing != files:  # a queued write another one superseded
        return True
    record = {"v": VERSION, "root": str(settings.root), "uri": settings.index_uri,
              "model_id": copy.model_id, "listing": files, "rows": copy.rows,
              "texts_version": copy.texts_version,
              "dim": int(copy.matrix.shape[1]), "which": copy.which.tobytes(),
              "matrix": copy.matrix.tobytes()}
    return write_marshal(copy_path(settings), record)


def load(settings: Settings, model_id: str, files: lance.Listing | None) -> SchemaCopy | None:
    """The copy of ``model_id``'s schema table while its files are still ``files`` (the
    listing now): the one this process holds, else the saved file's; else None."""
    if settings.remote_index or not files:
        return None
    with _lock:
        held = _recent.get(_key(settings, model_id))
    if held is not None and held.listing == files:
        return held
    copy = _read(settings, model_id, files)
    if copy is not None:
        with _lock:
            _recent[_key(settings, model_id)] = copy
    return copy


def _read(settings: Settings, model_id: str, files: lance.Listing) -> SchemaCopy | None:
    import numpy as np

    data = read_marshal(copy_path(settings))
    try:
        if (not isinstance(data, dict) or data.get("v") != VERSION
                or data["root"] != str(settings.root) or data["uri"] != settings.index_uri
                or data["model_id"] != model_id or data["listing"] != files):
            return None
        rows, dim = data["rows"], int(data["dim"])
        which = np.frombuffer(data["which"], dtype=np.int32)
        matrix = np.frombuffer(data["matrix"], dtype=np.float32)
        if (not isinstance(rows, list) or dim <= 0 or matrix.size % dim
                or len(which) != len(rows)
                or (len(which) and not 0 <= int(which.min()) <= int(which.max())
                    < matrix.size // dim)
                or (rows and (set(map(type, rows)) != {tuple}  # (C loops: 10,000 rows)
                             or set(map(len, rows)) != {len(FIELDS)}))):
            return None
        texts_version = data.get("texts_version")
        return SchemaCopy(model_id, rows, which, matrix.reshape(-1, dim), files,
                          texts_version if isinstance(texts_version, int) else None)
    except (KeyError, TypeError, ValueError):
        return None
