"""The ``vector`` and ``hybrid`` recall backends, over the pairs table of the index.

``vector`` ranks by cosine similarity of the question's embedding. ``hybrid`` also runs
LanceDB's full-text search (ICU tokenizer: English and Chinese) and fuses the two rankings
by score. Both return the same :class:`~wrenmem.recall.hits.Hit`s as grep. A backend
object keeps its embedder loaded and may serve many searches in a long-lived process; every
search sees the latest committed table version. Bringing the index up to date with the
files first is the caller's job (:func:`wrenmem.recall.backends.catch_up`).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from typing import Any

from wrenmem import lance
from wrenmem.embedders import get_embedder
from wrenmem.errors import WrenmemError
from wrenmem.index import table as index
from wrenmem.index.table import query_terms, row_pair
from wrenmem.recall.hits import Filters, Hit, rank
from wrenmem.settings import Settings

log = logging.getLogger(__name__)

# Hybrid score = cosine + LEXICAL_WEIGHT * (1 - best cosine) * sqrt(coverage) * bm25 / best
# bm25, where coverage is the share of the question's terms the pair contains. Keyword
# evidence counts in proportion to the dense model's doubt (a near-identical stored
# question, cosine near 1, wins on meaning; when nothing is close, shared table names,
# values and rare words decide) and to how much of the question it covers (a Chinese
# question matching one number in an English pair is no evidence). Two parameters, tuned
# with bench/recall_quality.py; see the README.
LEXICAL_WEIGHT = 1.5
MIN_DEPTH = 50  # candidates per ranking before fusion
COLUMNS = ["id", "path", "question", "sql", "datasource", "dialect", "tags", "source", "meta"]


def _quietly(fn: Any) -> None:
    try:
        fn()
    except Exception:  # the search itself meets the same error and reports it
        log.debug("model warm-up failed", exc_info=True)


def where_clause(filters: Filters) -> str | None:
    """The filters as a LanceDB (DataFusion) predicate, applied before ranking."""

    parts = []
    if filters.datasource is not None:
        parts.append(f"datasource = {lance.quote(filters.datasource)}")
    if filters.source is not None:
        parts.append(f"source = {lance.quote(filters.source)}")
    parts += [f"array_has(tags, {lance.quote(tag)})" for tag in filters.tags]
    return " AND ".join(parts) or None


class VectorBackend:
    """Dense recall: the pairs whose question embeddings are closest to the query's."""

    name = "vector"

    uses_index = True

    def __init__(self, settings: Settings):

        self.settings = settings
        self.embedder = get_embedder(settings.embedder, root=settings.root)
        self._db: Any = None
        self._table: Any = None
        load = getattr(self.embedder, "load", None)
        if load is not None:  # load the model while this thread imports LanceDB
            threading.Thread(target=_quietly, args=(load,), daemon=True,
                             name="wrenmem-model-load").start()

    # -- index access ---------------------------------------------------------------
    def table(self) -> Any:
        if self._table is None:
            if self._db is None:
                self._db = index.connect(self.settings)
            table = index.open_table(self._db)
            if table is None:
                raise WrenmemError("there is no index yet: run `wrenmem sync`")
            built_by = index.table_model_id(table)
            if built_by != self.embedder.model_id:
                raise WrenmemError(f"the index was built by {built_by}, not "
                                   f"{self.embedder.model_id}: run `wrenmem sync`")
            self._table = table
        return self._table

    def _retrying(self, fn: Any) -> Any:
        """Run ``fn(table)``; once more on a fresh handle if compaction removed a file."""
        try:
            return fn(self.table())
        except WrenmemError:
            raise
        except Exception as e:  # lance raises plain RuntimeError/OSError for vanished files
            log.debug("recall: retrying after %s", e)
            self._table = None
        try:
            return fn(self.table())
        except WrenmemError:
            raise
        except Exception as e:  # a damaged index is a message, not a traceback
            raise WrenmemError(f"the index cannot be read ({lance.short_error(e)}): "
                               "run `wrenmem sync` to rebuild it") from e

    # -- search ---------------------------------------------------------------------
    def _dense(self, table: Any, vector: Any, depth: int, where: str | None
               ) -> list[dict[str, Any]]:
        query = table.search(vector).distance_type("cosine").limit(depth)
        if where:
            query = query.where(where, prefilter=True)
        return list(query.select([*COLUMNS, "_distance"]).to_list())

    def _text(self, table: Any, text: str, depth: int, where: str | None
              ) -> list[dict[str, Any]]:
        if not text.strip():
            return []

        terms = query_terms(text)
        if not terms:
            return []
        query = table.search(terms, query_type="fts", fts_columns="terms").limit(depth)
        if where:
            query = query.where(where, prefilter=True)
        try:
            return list(query.select([*COLUMNS, "terms", "_score"]).to_list())
        except Exception as e:  # e.g. a query the FTS parser rejects: dense still answers
            log.debug("full-text search failed for %r: %s", text, e)
            return []

    def search(self, queries: Sequence[str], k: int, filters: Filters) -> list[list[Hit]]:
        """Rank on the table as it is: bringing it up to date is the caller's job
        (:func:`wrenmem.recall.backends.recall_many`, the daemon)."""
        if not queries:
            return []
        cap = self.settings.max_embed_chars  # a question of megabytes must not take gigabytes
        vectors = self.embedder.embed([q[:cap] for q in queries])
        where = where_clause(filters)
        return [self._retrying(lambda t, q=q, v=v: self._one(t, q, v, k, where))
                for q, v in zip(queries, vectors, strict=True)]

    def _one(self, table: Any, query: str, vector: Any, k: int, where: str | None
             ) -> list[Hit]:

        rows = self._dense(table, vector, k + 10, where)
        scored = [(round(1.0 - float(r["_distance"]), 6), row_pair(r)) for r in rows]
        return rank(scored, k, self.name)


class HybridBackend(VectorBackend):
    """Dense similarity plus LanceDB full-text (BM25) evidence, weighted by dense doubt."""

    name = "hybrid"

    def _one(self, table: Any, query: str, vector: Any, k: int, where: str | None
             ) -> list[Hit]:

        depth = max(MIN_DEPTH, 3 * k)
        dense = self._dense(table, vector, depth, where)
        text = self._text(table, query, depth, where)
        rows: dict[str, dict[str, Any]] = {}
        scores: dict[str, float] = {}
        for row in dense:
            rows[row["id"]] = row
            scores[row["id"]] = 1.0 - float(row["_distance"])
        best_cos = max(scores.values(), default=0.0)
        best_bm25 = max((float(r["_score"]) for r in text), default=0.0)
        weight = LEXICAL_WEIGHT * max(0.0, 1.0 - best_cos)
        asked = set(query_terms(query).split())
        for row in text:
            rows.setdefault(row["id"], row)
            lexical = float(row["_score"]) / best_bm25 if best_bm25 > 0 else 0.0
            covered = len(asked & set((row.get("terms") or "").split())) / max(len(asked), 1)
            scores[row["id"]] = (scores.get(row["id"], 0.0)
                                 + weight * math.sqrt(covered) * lexical)
        scored = [(round(score, 6), row_pair(rows[i])) for i, score in scores.items()]
        return rank(scored, k, self.name)
