"""The grep backend: BM25F keyword recall straight from the files, nothing to build.

Scores are calibrated into [0, 1] (:func:`wrenmem.recall.fusion.lexical_score`, in BM25F order);
the BM25F score itself is the hit's ``raw_score``.

Parsed files come from the catalog's stat cache and term vectors from a cache keyed by the
file's content hash, so a query over 10,000 files reads none of them when none changed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from wrenmem.errors import PairError
from wrenmem.fs import statedir
from wrenmem.fs.fsutil import read_marshal, write_marshal
from wrenmem.knowledge import expansions
from wrenmem.pairs.catalog import scan
from wrenmem.pairs.pairfile import Pair, search_fields
from wrenmem.pairs.seeds import extra_pairs
from wrenmem.recall import grepsnap
from wrenmem.recall.fusion import at_least_a_phrasing
from wrenmem.recall.hits import Filters, Hit, rank
from wrenmem.recall.model import lexical_score
from wrenmem.settings import Settings
from wrenmem.textsearch import TOKENIZER_VERSION, Bm25Index, document_terms

log = logging.getLogger(__name__)
KEPT_INDEXES = 16  # per WarmGrep: one per filter in use (most calls have none)


class GrepBackend:
    """Keyword recall over the pair files (plus any extra pairs, e.g. seeds)."""

    name = "grep"
    uses_index = False
    lazy_postings = True  # one process, a few questions: only their terms' postings
    snapshots = True  # a one-shot process: the saved snapshot answers (recall.grepsnap)

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
        pairs = list(found.pairs)
        pairs += extra_pairs(self.settings, exclude_questions=[p.nl for p in pairs])  # no 2nd scan
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

    def index(self, filters: Filters) -> GrepIndex:
        """The BM25F index over the pairs ``filters`` accepts (built: the part that costs)."""
        pairs, docs = self._load()
        keep = [i for i, p in enumerate(pairs) if filters.accepts(p)]
        kept_pairs = [pairs[i] for i in keep]
        kept_docs = [docs[i] for i in keep]
        if filters.exclude:  # phrasings left out (``wrenmem eval``): the pair without them
            for n, pair in enumerate(kept_pairs):
                rest = [q for q in (pair.nl, *pair.also) if not filters.excludes(pair.path, q)]
                if len(rest) == 1 + len(pair.also):
                    continue
                if not rest:
                    kept_docs[n] = {}
                    continue
                kept_pairs[n] = replace(pair, nl=rest[0], also=tuple(rest[1:]))
                kept_docs[n] = document_terms(search_fields(kept_pairs[n]))
        return GrepIndex(kept_pairs, kept_docs, lazy=self.lazy_postings)

    def search(self, queries: Sequence[str], k: int, filters: Filters, *,
               sql: str | None = None) -> list[list[Hit]]:
        """``k`` hits per question; a draft ``sql`` is not read (keywords only). Without
        filters, the saved snapshot of the whole index answers while no file changed
        (:mod:`wrenmem.recall.grepsnap`); the index built otherwise is saved as one."""
        key = None
        if self.snapshots and self._pairs is None and filters == Filters():
            saved = grepsnap.read_ahead(self.settings)  # while the files are listed
            key = grepsnap.listing_key(self.settings)
            snapshot = grepsnap.load(self.settings, key, saved())
            if snapshot is not None:
                self.skipped = snapshot.errors
                return [snapshot.rank(query, k, self.name, expansions(self.settings, query))
                        for query in queries]
        index = self.index(filters)
        if key is not None and len(index.pairs) >= grepsnap.MIN_PAIRS and grepsnap.due(
                self.settings):
            grepsnap.save(self.settings, key, index.pairs, index.bm25.docs, self.skipped)
        return [index.rank(query, k, self.name, expansions(self.settings, query))
                for query in queries]


class GrepIndex:
    """A built BM25F index over ``pairs`` (term vectors ``docs``, in the same order):
    ranking one question over it reads no file and builds nothing."""

    def __init__(self, pairs: Sequence[Pair], docs: Sequence[dict[str, float]], *,
                 lazy: bool = False):
        self.pairs = list(pairs)
        self.bm25 = Bm25Index(docs, lazy=lazy)

    def rank(self, query: str, k: int, backend: str, extra: Sequence[str] = ()) -> list[Hit]:
        """The best ``k`` pairs for ``query``, calibrated into [0, 1]
        (:func:`wrenmem.recall.model.lexical_score`), BM25F as the raw score. ``extra``:
        more search terms (the glossary's synonyms of words in ``query``)."""
        text = " ".join([query, *extra])
        found = [(i, s) for i, s in self.bm25.scores(text).items() if s > 0]
        calibrated = lexical_score([s for _i, s in found], self.bm25.best_possible(text))
        return rank([(at_least_a_phrasing(p, query, self.pairs[i]), self.pairs[i], s)
                     for (i, s), p in zip(found, calibrated, strict=True)], k, backend, query)


class WarmGrep(GrepBackend):
    """``GrepBackend`` for a long-lived process (the MCP server, the watcher's daemon): the
    files are read once, on first use, and each filter's index is built once. Its answers
    are ``GrepBackend``'s over that snapshot; the owner makes a new one whenever a file may
    have changed (:class:`wrenmem.watch.freshness.Freshness`)."""

    lazy_postings = False  # many questions: every posting list, built once
    snapshots = False  # it holds its index: the snapshot would only cost it a save

    def __init__(self, settings: Settings, pairs: Sequence[Pair] | None = None):
        super().__init__(settings, pairs)
        self._loaded: tuple[list[Pair], list[dict[str, float]]] | None = None
        self._indexes: dict[Filters, GrepIndex] = {}

    def _load(self) -> tuple[list[Pair], list[dict[str, float]]]:
        if self._loaded is None:
            self._loaded = super()._load()
        return self._loaded

    def index(self, filters: Filters) -> GrepIndex:
        index = self._indexes.get(filters)
        if index is None:
            if len(self._indexes) >= KEPT_INDEXES:  # many filters: forget the oldest
                self._indexes.pop(next(iter(self._indexes)))
            index = self._indexes[filters] = super().index(filters)
        return index


def _load(path: Path) -> dict[str, dict[str, float]]:
    data = read_marshal(path)
    if not isinstance(data, dict) or data.get("version") != TOKENIZER_VERSION:
        return {}
    terms = data.get("terms")
    return terms if isinstance(terms, dict) else {}


def _save(path: Path, terms: dict[str, dict[str, float]]) -> None:
    write_marshal(path, {"version": TOKENIZER_VERSION, "terms": terms})
