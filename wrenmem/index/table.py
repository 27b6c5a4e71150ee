"""The pairs table of the LanceDB index: schema, reads, one-commit writes.

One row per pair (file or seed): ``id`` (the relative path, or ``seed:<hash>``), its
``content_hash``, question, SQL and metadata, the embedded text and its vector; the schema
metadata records the embedder. Writes happen under :func:`wrenmem.storage.lock.index_lock`.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wrenmem.index.origin import Origin
from wrenmem.pairs.pairfile import Pair, search_fields
from wrenmem.settings import Settings
from wrenmem.storage import embedsync, lance
from wrenmem.textsearch import FIELD_WEIGHTS, tokenize

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

TABLE = "pairs"
SCHEMA_VERSION = "2"  # 2: the `terms` column for full-text search
META_MODEL = b"wrenmem.model_id"
META_DIM = b"wrenmem.dim"
META_SCHEMA = b"wrenmem.schema"
# The writer's origin, in the metadata of the `id` field (updatable without a rewrite).
ORIGIN_KEYS = {"project": "wrenmem.project", "branch": "wrenmem.branch",
               "commit": "wrenmem.commit"}
META_ROOT = b"wrenmem.project"  # the project the table holds the pairs of


def connect(settings: Settings) -> Any:
    """A connection to the project's index (always the latest committed version)."""
    return lance.connect(settings.index_uri)


def remote_version(settings: Settings) -> int | None:
    """The committed version of a remote pairs table (None: no table). One round trip."""
    with lance.storage_errors(settings.index_uri, "reading"):
        table = open_table(connect(settings))
        return None if table is None else int(table.version)


def table_origin(table: Any) -> Origin | None:
    """Where the table was last written from, as its writer recorded it."""
    meta = table.schema.field("id").metadata or {}
    values = {k: (meta.get(v.encode()) or b"").decode() for k, v in ORIGIN_KEYS.items()}
    return Origin(**values) if values["project"] else None


def record_origin(table: Any, origin: Origin) -> None:
    """Record the writer's project, branch and commit (one small commit, when changed)."""
    if table_origin(table) == origin:
        return
    metadata = {ORIGIN_KEYS[k]: v for k, v in origin.to_dict().items()}
    lance.retry_conflicts(lambda: table.update_field_metadata(
        {"path": "id", "metadata": metadata}))


def index_exists(settings: Settings) -> bool:
    """Cheap: is there a pairs table on local disk? (Remote URIs are assumed to exist.)"""
    return embedsync.table_present(settings.index_uri, TABLE)


def open_table(db: Any) -> Any | None:
    """The pairs table, or None when it was never created."""
    return lance.open_table(db, TABLE)


def table_model_id(table: Any) -> str | None:
    meta = table.schema.metadata or {}
    if meta.get(META_SCHEMA) != SCHEMA_VERSION.encode():
        return None  # built by an older wrenmem: treat like another embedder
    value = meta.get(META_MODEL)
    return value.decode() if value else None


def create_table(db: Any, model_id: str, dim: int, root: str = "") -> Any:
    """A new, empty pairs table for vectors of ``dim`` from ``model_id`` (replacing any)."""
    import pyarrow as pa

    schema = pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("path", pa.string()),
            pa.field("content_hash", pa.string()),
            pa.field("question", pa.string()),
            pa.field("sql", pa.string()),
            pa.field("datasource", pa.string()),
            pa.field("dialect", pa.string()),
            pa.field("tags", pa.list_(pa.string())),
            pa.field("source", pa.string()),
            pa.field("meta", pa.string()),
            pa.field("text", pa.string()),
            pa.field("terms", pa.string()),
            pa.field("vector", pa.list_(pa.float32(), dim)),
        ],
        metadata={META_MODEL: model_id.encode(), META_DIM: str(dim).encode(),
                  META_SCHEMA: SCHEMA_VERSION.encode(), META_ROOT: root.encode()},
    )
    return db.create_table(TABLE, schema=schema, mode="overwrite")


def drop_table(db: Any, settings: Settings) -> bool:
    return lance.drop_table(db, TABLE, settings.index_uri)


def disk_listing(settings: Settings) -> lance.Listing | None:
    return lance.disk_listing(settings.index_uri, TABLE)


@dataclass(frozen=True)
class TableCheck:
    """The one integrity check of the pairs table (``status``, ``check`` and ``sync``)."""

    table: Any | None  # None when there is no table, or it cannot be opened
    indexed: dict[str, list[str]]  # id -> its rows' content hashes
    problems: tuple[str, ...]  # damage: ``sync`` rebuilds the table
    owner: str | None = None  # another project this table belongs to: ``sync`` refuses

    @property
    def damaged(self) -> bool:
        return bool(self.problems)


def inspect(settings: Settings, db: Any | None = None) -> TableCheck:
    """Open the pairs table and read every id: its versions must open, its data files
    read, its full-text index answer, and it must belong to this project."""
    db = db if db is not None else connect(settings)
    table, problems = lance.probe_table(db, TABLE, "terms")
    indexed: dict[str, list[str]] = {}
    if table is not None and not problems:
        try:
            indexed = read_ids(table)
        except Exception as e:  # a missing or truncated data file
            problems.append(f"the pairs table's data cannot be read: {lance.short_error(e)}")
    owner = table_owner(settings, table) if table is not None else None
    return TableCheck(table, indexed, tuple(problems), owner)


def table_owner(settings: Settings, table: Any) -> str | None:
    """The other project a table was built for, when it is not this one's to write: an
    index inside the project is its own wherever it moved; one at a shared path belongs to
    the project that built it; one on object storage to the git remote of its recorded
    origin (every checkout of the team writes or reads it)."""
    if lance.is_remote(settings.index_uri):
        from wrenmem.index.origin import local_origin, other_project

        return other_project(table_origin(table), local_origin(settings.root))
    if "://" not in settings.index_uri and os.path.abspath(settings.index_uri).startswith(
            str(settings.root) + os.sep):
        return None
    try:
        recorded = (table.schema.metadata or {}).get(META_ROOT, b"").decode()
    except Exception:  # unreadable metadata is damage found elsewhere
        return None
    return recorded if recorded and recorded != str(settings.root) else None


def foreign_refusal(settings: Settings, owner: str) -> str:
    """Why a writer or a reader refuses an index that holds another project's pairs."""
    if settings.is_reader:
        return (f"the index at {settings.index_uri} holds the pairs of another project "
                f"({owner}); a reader would answer with them: read this project's own "
                "index (setting `index_uri`)")
    return (f"the index at {settings.index_uri} holds the pairs of another project "
            f"({owner}); writing would delete its rows: give this project an index "
            "of its own (setting `index_uri`)")


def read_ids(table: Any) -> dict[str, list[str]]:
    """id -> the content hashes of its rows (more than one if a crash ever made any)."""
    data = table.search().select(["id", "content_hash"]).limit(None).to_arrow()
    indexed: dict[str, list[str]] = {}
    for i, h in zip(data.column("id").to_pylist(), data.column("content_hash").to_pylist(),
                    strict=True):
        indexed.setdefault(i, []).append(h or "")
    return indexed


def rows_by_id(table: Any, ids: Iterable[str]) -> list[tuple[str, str, str]]:
    """(id, content_hash, question) of the rows with these ids (duplicates included)."""
    out: list[tuple[str, str, str]] = []
    for chunk in lance.chunked(sorted(set(ids))):
        data = (table.search().where(lance.in_filter("id", chunk))
                .select(["id", "content_hash", "question"]).limit(None).to_arrow())
        out += zip(data.column("id").to_pylist(),
                   [h or "" for h in data.column("content_hash").to_pylist()],
                   [q or "" for q in data.column("question").to_pylist()], strict=True)
    return out


def lexical_terms(pair: Pair) -> str:
    """The pair's search terms, space-separated, for LanceDB's full-text index: wrenmem's
    tokenizer (LanceDB's miss Chinese or SQL), each term repeated by its field's weight
    (question 3, tags 2, SQL 1): BM25F in BM25."""
    weighted: dict[str, float] = {}
    for name, text in search_fields(pair).items():  # textsearch.document_terms, memoised
        weight = FIELD_WEIGHTS.get(name, 1.0)
        for term, count in _field_terms(name, text):
            weighted[term] = weighted.get(term, 0.0) + weight * count
    return " ".join(" ".join([term] * max(1, round(w))) for term, w in weighted.items())


# (field, text) -> the field's term counts in first-seen order, for the fields a knowledge
# base repeats (one SQL under several phrasings, the same tags): a first index of 100,000
# generated pairs tokenizes 16,961 distinct SQL texts, not 100,000. Questions are not kept.
_FIELD_TERMS: dict[tuple[str, str], tuple[tuple[str, int], ...]] = {}
FIELD_TERMS_MAX = 50_000
REPEATED_FIELDS = frozenset({"sql", "tags"})


def _field_terms(name: str, text: str) -> tuple[tuple[str, int], ...]:
    key = (name, text)
    found = _FIELD_TERMS.get(key)
    if found is None:
        found = tuple(Counter(tokenize(text, sql=name == "sql")).items())
        if name in REPEATED_FIELDS:
            if len(_FIELD_TERMS) >= FIELD_TERMS_MAX:
                _FIELD_TERMS.clear()
            _FIELD_TERMS[key] = found
    return found


def query_terms(question: str) -> str:
    return " ".join(dict.fromkeys(tokenize(question)))


def pair_row(row_id: str, pair: Pair, text: str, vector: Sequence[float] | np.ndarray
             ) -> dict[str, Any]:
    meta: dict[str, Any] = {"created_at": pair.created_at, "sql_line": pair.sql_line}
    if pair.also:
        meta["also"] = list(pair.also)
    if pair.verified:
        meta["verified"] = True  # recall.hits.VERIFIED_META: what `recall --verified` keeps
    elif pair.claimed_by:
        meta["claimed_by"] = pair.claimed_by  # verified only by the file's word (trust.py)
    if pair.allows_writes:
        meta["allow_writes"] = True  # the pair opts out of the read-only rule: recall says so
    return {
        "id": row_id,
        "path": pair.path,
        "content_hash": pair.content_hash,
        "question": pair.nl,
        "sql": pair.sql,
        "datasource": pair.datasource,
        "dialect": pair.dialect,
        "tags": list(pair.tags),
        "source": pair.source,
        "meta": json.dumps(meta, ensure_ascii=False),
        "text": text,
        "terms": lexical_terms(pair),
        "vector": vector,  # numpy or a list: :func:`write` packs all rows' vectors at once
    }


def row_pair(row: Mapping[str, Any]) -> Pair:
    """A Pair rebuilt from a stored row (for recall results)."""
    try:
        meta = json.loads(row.get("meta") or "{}")
    except ValueError:
        meta = {}
    pair = Pair(nl=row["question"], sql=row["sql"], path=row["path"],
                datasource=row.get("datasource"), dialect=row.get("dialect"),
                tags=tuple(row.get("tags") or ()), source=row.get("source") or "user",
                created_at=meta.get("created_at"), sql_line=int(meta.get("sql_line") or 1),
                also=tuple(str(a) for a in meta.get("also") or ()))
    extra = _review_extra(pair, meta)
    return pair.with_changes(extra=extra) if extra else pair


def _review_extra(pair: Pair, meta: Mapping[str, Any]) -> dict[str, Any]:
    """Front-matter keys that make a rebuilt Pair verified, claimed or allowed to write, as
    the row says it was."""
    from wrenmem.pairs.pairfile import (
        ALLOW_WRITES,
        CLAIMED,
        VERIFIED_BY,
        VERIFIED_PAIR,
        pair_fingerprint,
    )

    extra: dict[str, Any] = {}
    if meta.get("verified") or meta.get("claimed_by"):
        extra = {VERIFIED_BY: str(meta.get("claimed_by") or "index"),
                 VERIFIED_PAIR: pair_fingerprint(pair)}
        if not meta.get("verified"):
            extra[CLAIMED] = True
    if meta.get("allow_writes"):
        extra[ALLOW_WRITES] = True
    return extra


def write(table: Any, rows: Sequence[dict[str, Any]], delete_ids: Sequence[str]) -> None:
    """Upsert ``rows`` by id and delete ``delete_ids``, as ONE commit (see
    :func:`wrenmem.storage.lance.upsert`)."""
    if not rows and not delete_ids:
        return
    lance.upsert(table, "id", arrow_rows(table.schema, rows) if rows else None, delete_ids)


def append(table: Any, rows: Sequence[dict[str, Any]]) -> None:
    """Add ``rows`` whose ids the table cannot hold yet (a table this process created and
    alone writes), as one commit: what :func:`write` stores, without its join on ``id``."""
    if rows:
        table.add(arrow_rows(table.schema, rows))


def arrow_rows(schema: Any, rows: Sequence[Mapping[str, Any]]) -> Any:
    """The rows as one pyarrow table of ``schema``, built column by column: the vectors
    go in as one float32 block (no Python float per dimension)."""
    import numpy as np
    import pyarrow as pa

    arrays = []
    for field in schema:
        if field.name == "vector":
            dim = field.type.list_size
            flat = np.asarray([r["vector"] for r in rows], dtype=np.float32).reshape(-1)
            if flat.size != dim * len(rows):
                raise ValueError(f"vectors of {flat.size // max(1, len(rows))} dimensions "
                                 f"for a table of {dim}")
            arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(flat), dim))
        else:
            arrays.append(pa.array([r[field.name] for r in rows], type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)
