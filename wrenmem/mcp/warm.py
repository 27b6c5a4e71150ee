"""The grep backend kept warm between MCP calls.

``GrepBackend`` re-reads its caches and rebuilds its BM25 index on every search: right for a
CLI process, about 2 s per call at 10,000 pairs for a server that answers many. ``WarmGrep``
keeps the parsed pairs, their term vectors and one index per filter, and the server makes a
new one whenever a file may have changed (:class:`wrenmem.mcp.freshness.Freshness`). Its
answers are ``GrepBackend``'s (a test compares them).
"""

from __future__ import annotations

from collections.abc import Sequence

from wrenmem.pairs.pairfile import Pair
from wrenmem.recall.bm25f import GrepBackend
from wrenmem.recall.hits import Filters, Hit, rank
from wrenmem.textsearch import Bm25Index


class WarmGrep(GrepBackend):
    """``GrepBackend`` over a snapshot of the files, taken on first use."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._loaded: tuple[list[Pair], list[dict[str, float]]] | None = None
        self._indexes: dict[Filters, tuple[list[int], Bm25Index]] = {}

    def _load(self) -> tuple[list[Pair], list[dict[str, float]]]:
        if self._loaded is None:
            self._loaded = super()._load()
        return self._loaded

    def search(self, queries: Sequence[str], k: int, filters: Filters) -> list[list[Hit]]:
        pairs, docs = self._load()
        if filters not in self._indexes:
            keep = [i for i, p in enumerate(pairs) if filters.accepts(p)]
            self._indexes[filters] = keep, Bm25Index([docs[i] for i in keep])
        keep, index = self._indexes[filters]
        results = []
        for query in queries:
            scored = [(s, pairs[keep[i]]) for i, s in index.scores(query).items() if s > 0]
            results.append(rank(scored, k, self.name))
        return results
