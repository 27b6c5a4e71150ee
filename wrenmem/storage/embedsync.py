"""The incremental embedding of a derived table: what its rows hold against what is wanted.

A derived table (the schema items, the knowledge entries) keeps, per row, an ``id``, the
hash of what it was made from, the ``embedder`` that made its vector and the ``text`` that
was embedded. :func:`apply` brings such a table to what a sync wants (id -> (hash, text)):
:func:`read` the rows, :func:`plan` which ids to write, which to delete, whether the table
must be built again (damaged, or another embedder's), and which wanted rows can keep a
stored vector (a row of the same text: the vector depends on the text alone); then
:func:`vectors` embeds each text that no stored row holds, once, in batches, and the rows
are written with the deletions (:func:`wrenmem.storage.lance.upsert`). The state file
helpers (:func:`read_state`, :func:`write_state`) let a sync with nothing to do open nothing.

The pairs table is synced by :mod:`wrenmem.index.sync`, which embeds through
:func:`vectors` too; its plan (:mod:`wrenmem.index.plan`) also finds renames, its vectors
also come from the embedding cache, and its rows carry no per-row embedder.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from wrenmem.fs.fsutil import atomic_write_text
from wrenmem.fs.statedir import ensure_parent
from wrenmem.storage import lance

log = logging.getLogger(__name__)
EMBED_BATCH = 256
WRITE_CHUNK = 16384  # rows embedded per commit of a large sync (56,000 items: 4 commits)
STORED_BY_ID_MAX = 500  # up to this many ids, stored vectors are read with an IN filter

Row = tuple[str, str, str]  # (hash, embedder, text) of a stored row


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


def read(db: Any, name: str, hash_column: str) -> Held:
    """The table ``name`` and its rows' (hash, embedder, text), without their vectors.
    A table that cannot be opened or read is reported in ``problems`` (the plan then
    builds it again)."""
    table, problems = lance.probe_table(db, name)
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


def stored(table: Any, ids: Sequence[str]) -> dict[str, Any]:
    """The vectors the table holds for ``ids`` (by id)."""
    if table is None or not ids:
        return {}
    query = table.search().select(["id", "vector"]).limit(None)
    if len(ids) <= STORED_BY_ID_MAX:
        query = query.where(lance.in_filter("id", ids))
    data = query.to_arrow()
    wanted = set(ids)
    vectors = data["vector"].to_numpy(zero_copy_only=False)
    return {i: v for i, v in zip(data["id"].to_pylist(), vectors, strict=True) if i in wanted}


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


def kept_vectors(table: Any, reuse: Mapping[str, str]) -> dict[str, Any]:
    """wanted id -> the stored vector it keeps (:attr:`Plan.reuse`), for the rows still
    there."""
    found = stored(table, sorted(set(reuse.values())))
    return {i: found[row_id] for i, row_id in reuse.items() if row_id in found}


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
    Rows are written in chunks of :data:`WRITE_CHUNK`, so a killed first index keeps what
    it embedded (the next sync skips those rows by hash) and memory stays bounded: a new
    table is created by the first chunk and the others appended (no id can be there yet: no
    merge join); an existing one is upserted, its deletions in the last commit (a normal
    sync is one commit)."""
    held = read(db, name, hash_column)
    todo_plan = plan(wanted, held, embedder.model_id)
    table = held.table
    if todo_plan.empty:
        return Applied(table)
    if todo_plan.rebuild and table is not None:
        log.warning("rebuilding the %s (%s)", what,
                    "; ".join(held.problems) or "another embedder built it")
        lance.drop_table(db, name, uri)
        table = None
    removed, todo = todo_plan.removed, todo_plan.todo
    if not todo and (todo_plan.rebuild or not wanted):
        if table is not None:
            lance.drop_table(db, name, uri)
        return Applied(None, 0, len(removed), 0, todo_plan.rebuild, 0)
    kept = kept_vectors(table, todo_plan.reuse) if todo_plan.reuse else {}
    made: dict[str, Any] = {}
    pending = len({wanted[i][1] for i in todo if i not in kept})
    chunks = [todo[i:i + WRITE_CHUNK] for i in range(0, len(todo), WRITE_CHUNK)] or [[]]
    for n, ids in enumerate(chunks):
        texts = [wanted[i][1] for i in ids if i not in kept and wanted[i][1] not in made]
        if texts:
            made.update(vectors(embedder, texts, max_chars=max_chars, progress=progress,
                                offset=len(made), total=pending, batch=EMBED_BATCH))
        rows = arrow_rows(columns(ids), [kept[i] if i in kept else made[wanted[i][1]]
                                         for i in ids]) if ids else None
        if table is None:
            table = db.create_table(name, rows, mode="overwrite")
        elif todo_plan.rebuild:
            lance.retry_conflicts(partial(table.add, rows))
        else:
            lance.upsert(table, "id", rows, removed if n == len(chunks) - 1 else ())
    return Applied(table, len(made), len(removed), len(todo), todo_plan.rebuild, len(chunks))


def arrow_rows(columns: Mapping[str, Sequence[str]], vectors: Sequence[Any]) -> Any:
    """An Arrow table of the string ``columns`` and a float32 ``vector`` column."""
    import numpy as np
    import pyarrow as pa

    matrix = np.asarray(np.stack(vectors), dtype=np.float32)
    data = {name: pa.array(list(values), pa.string()) for name, values in columns.items()}
    data["vector"] = pa.FixedSizeListArray.from_arrays(
        pa.array(matrix.reshape(-1), pa.float32()), int(matrix.shape[1]))
    return pa.table(data)


def read_state(path: Path, version: int) -> dict[str, Any]:
    """The JSON state file of a derived table when it is of this ``version``, else {}."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("version") == version else {}


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Write a state file; one that cannot be written costs the next sync a comparison."""
    try:
        ensure_parent(path)
        atomic_write_text(path, json.dumps(state))
    except OSError as e:
        log.debug("cannot write %s: %s", path, e)


def table_present(uri: str, name: str) -> bool:
    """For a local index, whether the table's folder exists (a deleted index is not fresh);
    True for object storage."""
    folder = lance.table_folder(uri, name)
    return folder is None or os.path.isdir(folder)
