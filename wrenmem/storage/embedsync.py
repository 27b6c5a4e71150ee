"""The incremental embedding of a derived table: what its rows hold against what is wanted.

A derived table (the schema items, the knowledge entries) keeps, per row, an ``id``, the
hash of what it was made from, the ``embedder`` that made its vector and the ``text`` that
was embedded. A sync hands :func:`read` the table and :func:`plan` what it wants (id ->
(hash, text)); the plan says which ids to write, which to delete, whether the table must be
built again (damaged, or another embedder's), and which wanted rows can keep a stored
vector (a row of the same text: the vector depends on the text alone). :func:`vectors`
then embeds each text that no stored row holds, once, in batches. The caller makes its
rows and writes them in one commit with the deletions (:func:`wrenmem.storage.lance.upsert`).

The pairs table is synced by :mod:`wrenmem.index.sync`, which embeds through
:func:`vectors` too; its plan (:mod:`wrenmem.index.plan`) also finds renames, its vectors
also come from the embedding cache, and its rows carry no per-row embedder.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from wrenmem.storage import lance

log = logging.getLogger(__name__)
EMBED_BATCH = 256
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


def read(db: Any, name: str, hash_column: str,
         probed: tuple[Any, list[str]] | None = None) -> Held:
    """The table ``name`` and its rows' (hash, embedder, text), without their vectors.
    A table that cannot be opened or read is reported in ``problems`` (the plan then
    builds it again). ``probed``: what :func:`wrenmem.storage.lance.probe_table` said of
    it just before (not asked again)."""
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
