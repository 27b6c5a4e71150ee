"""The grep backend: BM25F keyword recall straight from the files, nothing to build.

Parsed files come from the catalog's stat cache and term vectors from a cache keyed by the
file's content hash, so a query over 10,000 files reads none of them when none changed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from wrenmem import statedir
from wrenmem.errors import PairError
from wrenmem.fsutil import read_marshal, write_marshal
from wrenmem.pairs.catalog import scan
from wrenmem.pairs.pairfile import Pair, search_fields
from wrenmem.pairs.seeds import extra_pairs
from wrenmem.recall.hits import Filters, Hit, rank
from wrenmem.settings import Settings
from wrenmem.textsearch import TOKENIZER_VERSION, Bm25Index, document_terms

log = logging.getLogger(__name__)


class GrepBackend:
    """Keyword recall over the pair files (plus any extra pairs, e.g. seeds)."""

    name = "grep"
    uses_index = False

    def __init__(self, settings: Settings, pairs: Sequence[Pair] | None = None):
        self.settings = settings
        self._pairs = pairs
        self.skipped: tuple[PairError, ...] = ()  # files the last search could not read

    def _load(self) -> tuple[list[Pair], list[dict[str, float]]]:
        if self._pairs is not None:
            pairs = list(self._pairs)
            return pairs, [document_terms(search_fields(p)) for p in pairs]
        found = scan(self.settings)
        self.skipped = found.errors  # recall answers without them, and says so
        pairs = list(found.pairs) + list(extra_pairs(self.settings))
        cache_path = self.settings.state_dir / statedir.GREP_TERMS
        cache = _load(cache_path)
        docs: list[dict[str, float]] = []
        fresh: dict[str, dict[str, float]] = {}
        for pair in pairs:
            key = found.file_hashes.get(pair.path) or pair.content_hash
            terms = cache.get(key)
            if terms is None:
                terms = document_terms(search_fields(pair))
            fresh[key] = terms
            docs.append(terms)
        if set(fresh) != set(cache):
            _save(cache_path, fresh)
        return pairs, docs

    def search(self, queries: Sequence[str], k: int, filters: Filters) -> list[list[Hit]]:
        pairs, docs = self._load()
        keep = [i for i, p in enumerate(pairs) if filters.accepts(p)]
        index = Bm25Index([docs[i] for i in keep])
        results = []
        for query in queries:
            scored = [(s, pairs[keep[i]]) for i, s in index.scores(query).items() if s > 0]
            results.append(rank(scored, k, self.name))
        return results


def _load(path: Path) -> dict[str, dict[str, float]]:
    data = read_marshal(path)
    if not isinstance(data, dict) or data.get("version") != TOKENIZER_VERSION:
        return {}
    terms = data.get("terms")
    return terms if isinstance(terms, dict) else {}


def _save(path: Path, terms: dict[str, dict[str, float]]) -> None:
    write_marshal(path, {"version": TOKENIZER_VERSION, "terms": terms})
