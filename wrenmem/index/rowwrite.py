"""The pairs sync's writes: a plan's rows with their vectors, reused from the table or the
embedding cache, else embedded (:func:`wrenmem.storage.embedsync.vectors`), in commits of
``WRITE_CHUNK`` rows."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from wrenmem.embed.embedders import Embedder
from wrenmem.index import table as index
from wrenmem.index.embedcache import EmbedCache
from wrenmem.index.embedpipe import EmbedPipe
from wrenmem.index.snapshot import Snapshot
from wrenmem.pairs.pairfile import Pair
from wrenmem.settings import MAX_EMBED_CHARS
from wrenmem.storage import embedsync
from wrenmem.storage.embedsync import SyncPlan

log = logging.getLogger(__name__)

EMBED_BATCH = 256
WRITE_CHUNK = 2048  # rows per commit during a big build: progress survives a kill
Progress = Callable[[int, int], None]


def embed_text(pair: Pair, max_chars: int = MAX_EMBED_CHARS) -> str:
    """What the vector stands for: the question (queries are questions too), cut to
    ``max_chars`` (the ``max_embed_chars`` setting), because a model's memory grows with
    the text and a question of megabytes would take gigabytes."""
    text = pair.nl.strip()
    if len(text) > max_chars:
        log.warning("%s: the question has %d characters; only the first %d are embedded "
                    "(setting max_embed_chars)", pair.path, len(text), max_chars)
        return text[:max_chars]
    return text


def write_plan(table: Any, snap: Snapshot, plan: SyncPlan, indexed: Mapping[str, list[str]],
           embedder: Embedder, progress: Progress | None, max_chars: int,
           cache: EmbedCache, use_cache: bool = True,
           memo: dict[str, Any] | None = None, new_table: bool = False,
           pipe: EmbedPipe | None = None) -> tuple[int, int]:
    """Write the plan: reused vectors and deletions first, then embedded chunks. Returns
    (texts embedded, commits). ``use_cache`` False (``--full``) embeds every text again.
    ``memo`` (text -> vector) keeps what was embedded for a later round (a remote index's).
    ``new_table``: created by this sync, no other writer: rows are added without a join.
    ``pipe``: the child process embedding this sync's texts."""
    texts_of = {i: embed_text(snap.pairs[i], max_chars) for i in
                (*plan.added, *plan.changed, *(new for _old, new in plan.renamed))}
    commits = 0
    duplicated = [i for i in plan.changed if len(indexed.get(i, ())) > 1]
    targets = list(plan.added) + list(plan.changed) + [new for _old, new in plan.renamed]
    stored_hashes = {h for hs in indexed.values() for h in hs}
    wanted_hashes = {snap.pairs[i].content_hash for i in targets}
    pool = embedsync.stored(table, wanted_hashes & stored_hashes, "content_hash", None)
    if duplicated:  # merge_insert refuses ids that match twice: clear them first
        index.write(table, [], duplicated)
        commits += 1
    ready, todo = [], []
    for row_id in targets:
        pair = snap.pairs[row_id]
        vector = pool.get(pair.content_hash)
        if vector is None and memo is not None:
            vector = memo.get(texts_of[row_id])
        if vector is not None:
            ready.append(index.pair_row(row_id, pair, texts_of[row_id], vector))
        else:
            todo.append(row_id)
    deletes = list(plan.removed) + [old for old, _new in plan.renamed]
    if ready or deletes:
        index.write(table, ready, deletes)
        commits += 1
    wanted = sorted({texts_of[i] for i in todo})
    vectors: dict[str, Any] = cache.lookup(wanted) if wanted and use_cache else {}
    texts = [t for t in wanted if t not in vectors]  # never embedded by this model before
    total = len(texts)
    if progress is not None and total:
        progress(0, total)
    pending: list[str] = list(todo)
    embed = None if pipe is None else partial(pipe.embed, fallback=embedder.embed)
    for start in range(0, len(texts), WRITE_CHUNK):
        fresh = embedsync.vectors(embedder, texts[start:start + WRITE_CHUNK],
                                  progress=progress, offset=start, total=total,
                                  batch=EMBED_BATCH, embed=embed)
        vectors.update(fresh)
        if memo is not None:
            memo.update(fresh)
        cache.store(fresh)
        commits += _write_ripe(table, snap, pending, vectors, texts_of, new_table)
    commits += _write_ripe(table, snap, pending, vectors, texts_of, new_table)  # the rest
    cache.save()
    return total, commits


def _write_ripe(table: Any, snap: Snapshot, pending: list[str], vectors: dict[str, Any],
                texts_of: Mapping[str, str], new_table: bool = False) -> int:
    """Write the pending rows whose vectors are ready (and drop them from ``pending``).
    Then no pending row wants any of ``vectors`` (texts are embedded once): they are
    dropped, so a first index holds one chunk of vectors at a time, not all of them."""
    ripe = [i for i in pending if texts_of[i] in vectors]
    if not ripe:
        return 0
    pending[:] = [i for i in pending if texts_of[i] not in vectors]
    rows = [index.pair_row(i, snap.pairs[i], texts_of[i], vectors[texts_of[i]]) for i in ripe]
    if new_table:
        index.append(table, rows)
    else:
        index.write(table, rows, [])
    vectors.clear()
    return 1
