"""The pairs sync's writes: a plan's rows with their vectors, reused from the table, an
earlier round or the embedding cache, else embedded, through the one write loop of the
derived tables (:func:`wrenmem.storage.embedsync.write_rows`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from wrenmem.embed.embedders import Embedder
from wrenmem.index import table as index
from wrenmem.index.embedcache import EmbedCache
from wrenmem.index.embedpipe import AHEAD, EmbedPipe
from wrenmem.index.snapshot import Snapshot
from wrenmem.pairs.pairfile import Pair
from wrenmem.settings import MAX_EMBED_CHARS
from wrenmem.storage import embedsync
from wrenmem.storage.embedsync import SyncPlan

log = logging.getLogger(__name__)

# Texts a commit of a big build: what the embedding child may hold ahead (AHEAD batches),
# so this process writes one chunk while the child embeds the next; a kill keeps the rest.
WRITE_CHUNK = AHEAD * embedsync.EMBED_BATCH  # 2,048
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
    """Write the plan: rows of reused vectors and the deletions first, then the embedded
    chunks of :data:`WRITE_CHUNK` texts. Returns (texts embedded, commits). ``use_cache``
    False (``--full``) embeds every text again. ``memo`` (text -> vector) keeps what was
    embedded for a later round (a remote index's).
    ``new_table``: created by this sync, no other writer: rows are added without a join.
    ``pipe``: the child process embedding this sync's texts."""
    texts_of = {i: embed_text(snap.pairs[i], max_chars) for i in
                (*plan.added, *plan.changed, *(new for _old, new in plan.renamed))}
    stored_hashes = {h for hs in indexed.values() for h in hs}
    pool = embedsync.stored(table, {snap.pairs[i].content_hash for i in texts_of}
                            & stored_hashes, "content_hash", None)
    known = {texts_of[i]: pool[snap.pairs[i].content_hash] for i in texts_of
             if snap.pairs[i].content_hash in pool}
    del pool
    if memo:
        known.update((t, memo[t]) for t in set(texts_of.values()) - known.keys() if t in memo)
    missing = sorted(set(texts_of.values()) - known.keys())
    if use_cache and missing:
        known.update(cache.lookup(missing))
    duplicated = [i for i in plan.changed if len(indexed.get(i, ())) > 1]
    if duplicated:  # merge_insert refuses ids that match twice: clear them first
        index.write(table, [], duplicated)

    def made(fresh: dict[str, Any]) -> None:
        if memo is not None:
            memo.update(fresh)
        cache.store(fresh)

    def write(ids: list[str], vectors: list[Any], deletes: Sequence[str]) -> None:
        rows = [index.pair_row(i, snap.pairs[i], texts_of[i], vector)
                for i, vector in zip(ids, vectors, strict=True)]
        if new_table and not deletes:
            index.append(table, rows)
        else:
            index.write(table, rows, deletes)

    embed = None if pipe is None else partial(pipe.embed, fallback=embedder.embed)
    total, written = embedsync.write_rows(
        list(texts_of), texts_of, known, embedder, write,
        deletes=[*plan.removed, *(old for old, _new in plan.renamed)], chunk=WRITE_CHUNK,
        progress=progress, embed=embed, made=made)
    cache.save()
    return total, written + bool(duplicated)
