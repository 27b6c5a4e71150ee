"""The one incremental-embedding engine of the derived tables (pairs, schema items,
knowledge entries): diff what a table holds against what is wanted, by content hash;
reuse the stored vector of an unchanged text; embed each new text once, in batches.

A derived table keeps, per row, an ``id`` and the hash of what it was made from. The
schema and knowledge tables also keep the ``embedder`` of each vector and the embedded
``text``: :func:`apply` brings such a table to what a sync wants (:func:`read`, then
:func:`plan`, then :func:`vectors` for each text no stored row holds, written with the
deletions by :func:`write_rows`); :func:`read_state` and :func:`write_state` let a sync
with nothing to do open nothing. The pairs table (:mod:`wrenmem.index.sync`) has no per-row
embedder: it diffs with :func:`plan_sync`, which also finds renames, gets stored vectors
from :func:`stored` and writes through :func:`write_rows` like the others.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from wrenmem.fs.fsutil import read_state as read_state  # the derived tables' state files
from wrenmem.fs.fsutil import write_state as write_state
from wrenmem.storage import lance

log = logging.getLogger(__name__)
EMBED_BATCH = 256
WRITE_CHUNK = 16384  # rows embedded per commit of a large sync (56,000 items: 4 commits)
STORED_BY_ID_MAX = 500  # up to this many keys, stored vectors are read with IN filters

Row = tuple[str, str, str]  # (hash, embedder, text) of a stored row


@dataclass(frozen=True)
class SyncPlan:
    """How a table differs from what is wanted. Every id lands in exactly one list
    (a renamed row counts once, as its ``(old, new)`` couple)."""

    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()

    @property
    def in_sync(self) -> bool:
        return not (self.added or self.changed or self.removed or self.renamed)


def plan_sync(desired: Mapping[str, str], indexed: Mapping[str, Sequence[str]]) -> SyncPlan:
    """Compare wanted ``id -> content_hash`` with the table's ``id -> [content_hash, ...]``.

    An id stored more than once is ``changed`` (rewritten once). An added id whose content
    equals a removed one's is a rename: its vector is reused rather than re-embedded.
    """
    added, changed, unchanged = [], [], []
    for row_id in sorted(desired):
        held = indexed.get(row_id)
        if held is None:
            added.append(row_id)
        elif len(held) == 1 and held[0] == desired[row_id]:
            unchanged.append(row_id)
        else:
            changed.append(row_id)
    removed = sorted(set(indexed) - set(desired))
    by_hash: dict[str, list[str]] = {}
    for row_id in removed:
        if len(indexed[row_id]) == 1:
            by_hash.setdefault(indexed[row_id][0], []).append(row_id)
    renamed, still_added = [], []
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


@dataclass
class Held:
    """What :func:`read` found: the table (None: none, or dropped as damaged), its rows
    (id -> (hash, embedder, text)), and what was wrong with it."""

    table: Any
    rows: dict[str, Row] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Plan:
    todo: list[str]  # the wanted ids to write, in the order wanted
    removed: list[str]  # ids to delete, sorted
    rebuild: bool  # build the table again (none yet, damaged, another embedder's)
    reuse: dict[str, str]  # wanted id -> id of a stored row of the same text

    @property
    def empty(self) -> bool:
        return not self.todo and not self.removed and not self.rebuild


def read(db: Any, name: str, hash_column: str,
         probed: tuple[Any, list[str]] | None = None) -> Held:
    """The table ``name`` and its rows' (hash, embedder, text), without their vectors; a
    table that cannot be opened or read is reported in ``problems``. ``probed``: what
    :func:`wrenmem.storage.lance.probe_table` said of it just before."""
    table, problems = probed if probed is not None else lance.probe_table(db, name)
    problems = list(problems)
    rows: dict[str, Row] = {}
    if table is not None and not problems:
        try:
            data = (table.search().select(["id", hash_column, "embedder", "text"])
                    .limit(None).to_arrow())
            rows = {i: (h, m, t) for i, h, m, t in zip(
                data["id"].to_pylist(), data[hash_column].to_pylist(),
                data["embedder"].to_pylist(), data["text"].to_pylist(), strict=True)}
        except Exception as e:  # a missing or truncated data file
            problems.append(f"its data cannot be read: {lance.short_error(e)}")
    return Held(table, rows, problems)


def plan(wanted: Mapping[str, tuple[str, str]], held: Held, model_id: str) -> Plan:
    """What to write for ``wanted`` (id -> (hash, text)) over what ``held`` holds: a row
    is current when its hash and its embedded text are the wanted ones and ``model_id``
    embedded it; a table of another embedder, a damaged one or none is built again."""
    rebuild = held.table is None or bool(held.problems) or any(
        row[1] != model_id for row in held.rows.values())
    existing = {} if rebuild else held.rows
    todo = [i for i, (h, t) in wanted.items() if existing.get(i, ("", "", ""))[::2] != (h, t)]
    removed = sorted(set(existing) - set(wanted))  # (a table built again: none)
    by_text = {row[2]: row_id for row_id, row in existing.items()}
    reuse = {i: by_text[wanted[i][1]] for i in todo if wanted[i][1] in by_text}
    return Plan(todo, removed, rebuild, reuse)


def stored(table: Any, keys: Iterable[str], column: str = "id",
           whole_past: int | None = STORED_BY_ID_MAX) -> dict[str, Any]:
    """The vectors the table holds for these values of ``column`` (one per value), read
    with ``IN`` filters, or in one read of the table past ``whole_past`` values."""
    wanted = sorted(set(keys))
    if table is None or not wanted:
        return {}
    query = table.search().select([column, "vector"]).limit(None)
    parts = ([query.where(lance.in_filter(column, chunk)) for chunk in lance.chunked(wanted)]
             if whole_past is None or len(wanted) <= whole_past else [query])
    found: dict[str, Any] = {}
    keep = set(wanted)
    for part in parts:
        data = part.to_arrow()
        vectors = data["vector"].to_numpy(zero_copy_only=False)
        for key, vector in zip(data[column].to_pylist(), vectors, strict=True):
            if key in keep:
                found.setdefault(key, vector)
    return found


def vectors(embedder: Any, texts: Sequence[str], *, max_chars: int | None = None,
            progress: Callable[[int, int], None] | None = None, offset: int = 0,
            total: int = 0, batch: int = EMBED_BATCH,
            embed: Callable[[list[str]], Any] | None = None) -> dict[str, Any]:
    """text -> float32 vector of each distinct text, embedded in batches of ``batch``
    (each cut to ``max_chars``, when given); ``progress(done, total)`` after each batch.
    ``embed``: what embeds a batch instead of ``embedder.embed`` (the pairs sync's child
    process, :mod:`wrenmem.index.embedpipe`)."""
    import numpy as np

    run = embed or embedder.embed
    distinct = list(dict.fromkeys(texts))
    out: dict[str, Any] = {}
    for start in range(0, len(distinct), batch):
        part = distinct[start:start + batch]
        made = np.asarray(run([t[:max_chars] for t in part] if max_chars else part),
                          dtype=np.float32)
        out.update(zip(part, made, strict=True))
        if progress is not None:
            progress(offset + start + len(part), total or len(distinct))
    return out


Write = Callable[[list[str], list[Any], Sequence[str]], None]  # ids, their vectors, deletions


def write_rows(ids: Sequence[str], text_of: Mapping[str, str], known: dict[str, Any],
               embedder: Any, write: Write, *, deletes: Sequence[str] = (),
               chunk: int | None = None, max_chars: int | None = None,
               progress: Callable[[int, int], None] | None = None,
               embed: Callable[[list[str]], Any] | None = None,
               made: Callable[[dict[str, Any]], None] | None = None) -> tuple[int, int]:
    """The one write loop of the derived tables: write every id of ``ids`` with the vector
    of its text (``text_of``), in commits of ``write(ids, vectors, deletes)``. Returns
    (texts embedded, commits).

    The rows whose text ``known`` (text -> vector) holds go first; every other distinct
    text is embedded once, sorted (the order the pairs' embedding child was given),
    ``chunk`` texts (:data:`WRITE_CHUNK`) a commit, each commit holding the rows whose
    vectors just came: a killed big sync keeps what it wrote (the next one skips those rows
    by hash) and one chunk's vectors are held at a time (``known`` is emptied too).
    ``deletes`` go with the first commit (a small sync is one commit). ``made(vectors)``
    sees each chunk's new vectors before they are written."""
    step = chunk or WRITE_CHUNK
    pending = list(ids)
    texts = sorted({text_of[i] for i in pending} - known.keys())
    total, commits, left = len(texts), 0, list(deletes)
    if progress is not None and total:
        progress(0, total)

    def flush(vectors: dict[str, Any]) -> None:
        nonlocal pending, commits, left
        ripe = [i for i in pending if text_of[i] in vectors]
        if ripe or left:
            pending = [i for i in pending if text_of[i] not in vectors]
            write(ripe, [vectors[text_of[i]] for i in ripe], left)
            commits, left = commits + 1, []
        vectors.clear()

    if any(text_of[i] in known for i in pending) or not texts:
        flush(known)
    known.clear()
    for start in range(0, total, step):
        fresh = vectors(embedder, texts[start:start + step], max_chars=max_chars,
                        progress=progress, offset=start, total=total, batch=EMBED_BATCH,
                        embed=embed)
        if made is not None:
            made(fresh)
        flush(fresh)
    return total, commits


@dataclass(frozen=True)
class Applied:
    """What :func:`apply` did; ``table`` is None when there is none now."""

    table: Any
    embedded: int = 0  # distinct texts embedded
    deleted: int = 0
    written: int = 0
    rebuilt: bool = False
    commits: int = 0


def apply(db: Any, name: str, hash_column: str, wanted: Mapping[str, tuple[str, str]],
          embedder: Any, columns: Callable[[list[str]], dict[str, list[str]]], *, uri: str,
          what: str, max_chars: int | None = None,
          progress: Callable[[int, int], None] | None = None) -> Applied:
    """Bring the table ``name`` to ``wanted`` (id -> (hash, text)), embedding only texts no
    stored row holds; ``columns(ids)``: the string columns of those ids' rows, by name.

    A damaged table or another embedder's is dropped (from disk if LanceDB cannot) and
    built again, with a warning naming ``what``; with nothing wanted there is no table.
    Rows are written by :func:`write_rows`: a new table is created by the first commit and
    the others appended (no id can be there yet: no merge join); an existing one is
    upserted, its deletions in the first commit (a normal sync is one commit)."""
    held = read(db, name, hash_column)
    todo_plan = plan(wanted, held, embedder.model_id)
    table = held.table
    if todo_plan.empty:
        return Applied(table)
    if todo_plan.rebuild and (table is not None or held.problems):  # damaged: unopenable too
        log.warning("rebuilding the %s (%s)", what,
                    "; ".join(held.problems) or "another embedder built it")
        lance.drop_table(db, name, uri)
        table = None
    removed, todo = todo_plan.removed, todo_plan.todo
    if not todo and (todo_plan.rebuild or not wanted):
        if table is not None:
            lance.drop_table(db, name, uri)
        return Applied(None, 0, len(removed), 0, todo_plan.rebuild, 0)
    found = stored(table, todo_plan.reuse.values())
    known = {wanted[i][1]: found[r] for i, r in todo_plan.reuse.items() if r in found}
    rebuild = todo_plan.rebuild

    def write(ids: list[str], vecs: list[Any], deletes: Sequence[str]) -> None:
        nonlocal table
        rows = arrow_rows(columns(ids), vecs) if ids else None
        if table is None:
            table = db.create_table(name, rows, mode="overwrite")
        elif rebuild:
            lance.retry_conflicts(partial(table.add, rows))
        else:
            lance.upsert(table, "id", rows, deletes)

    embedded, commits = write_rows(todo, {i: wanted[i][1] for i in todo}, known, embedder,
                                   write, deletes=removed, max_chars=max_chars,
                                   progress=progress)
    return Applied(table, embedded, len(removed), len(todo), rebuild, commits)


def arrow_rows(columns: Mapping[str, Sequence[str]], vectors: Sequence[Any]) -> Any:
    """An Arrow table of the string ``columns`` and a float32 ``vector`` column."""
    import numpy as np
    import pyarrow as pa

    matrix = np.asarray(np.stack(vectors), dtype=np.float32)
    data = {name: pa.array(list(values), pa.string()) for name, values in columns.items()}
    data["vector"] = pa.FixedSizeListArray.from_arrays(
        pa.array(matrix.reshape(-1), pa.float32()), int(matrix.shape[1]))
    return pa.table(data)


def table_present(uri: str, name: str) -> bool:
    """For a local index, whether the table's folder exists (a deleted index is not fresh);
    True for object storage."""
    folder = lance.table_folder(uri, name)
    return folder is None or os.path.isdir(folder)
