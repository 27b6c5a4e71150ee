"""The ``vector`` and ``hybrid`` recall backends, over the pairs table of the index.

``vector`` ranks by cosine similarity of the question's embedding. ``hybrid`` also runs
LanceDB's full-text search (ICU tokenizer: English and Chinese) and fuses the two rankings
by weighted reciprocal rank fusion. Both return the same :class:`~wrenmem.recall.Hit`s as
grep. A backend object keeps its embedder loaded and may serve many searches in a
long-lived process; every search sees the latest committed table version, and first brings
the index up to date with the files (a no-op sync costs a few milliseconds).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from wrenmem.errors import LockTimeoutError, WrenmemError
from wrenmem.recall import Filters, Hit, rank
from wrenmem.settings import Settings

log = logging.getLogger(__name__)

RRF_K = 60.0
DENSE_WEIGHT = 1.0
TEXT_WEIGHT = 1.0
MIN_DEPTH = 30  # candidates per ranking before fusion
SYNC_LOCK_TIMEOUT = 10.0
COLUMNS = ["id", "path", "question", "sql", "datasource", "dialect", "tags", "source", "meta"]


def where_clause(filters: Filters) -> str | None:
    """The filters as a LanceDB (DataFusion) predicate, applied before ranking."""
    from wrenmem.index import sql_list

    parts = []
    if filters.datasource is not None:
        parts.append(f"datasource = {sql_list([filters.datasource])}")
    if filters.source is not None:
        parts.append(f"source = {sql_list([filters.source])}")
    parts += [f"array_has(tags, {sql_list([tag])})" for tag in filters.tags]
    return " AND ".join(parts) or None


class VectorBackend:
    """Dense recall: the pairs whose question embeddings are closest to the query's."""

    name = "vector"

    def __init__(self, settings: Settings, *, auto_sync: bool = True):
        from wrenmem.embedders import get_embedder

        self.settings = settings
        self.auto_sync = auto_sync
        self.embedder = get_embedder(settings.embedder, root=settings.root)
        self._db: Any = None
        self._table: Any = None

    # -- index access ---------------------------------------------------------------
    def _bring_up_to_date(self) -> None:
        from wrenmem.sync import sync_pairs

        try:
            report = sync_pairs(self.settings, lock_timeout=SYNC_LOCK_TIMEOUT)
        except LockTimeoutError:
            log.warning("recall: another process is updating the index; answering from the "
                        "last committed version")
            return
        if not report.noop:
            self._table = None
            if report.embedded:
                log.info("recall: indexed %d new or changed pair(s) first", report.embedded)

    def table(self) -> Any:
        from wrenmem import index

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
            return fn(self.table())

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
        query = table.search(text, query_type="fts", fts_columns="question").limit(depth)
        if where:
            query = query.where(where, prefilter=True)
        try:
            return list(query.select([*COLUMNS, "_score"]).to_list())
        except Exception as e:  # e.g. a query the FTS parser rejects: dense still answers
            log.debug("full-text search failed for %r: %s", text, e)
            return []

    def search(self, queries: Sequence[str], k: int, filters: Filters) -> list[list[Hit]]:
        if self.auto_sync:
            self._bring_up_to_date()
        if not queries:
            return []
        vectors = self.embedder.embed(list(queries))
        where = where_clause(filters)
        return [self._retrying(lambda t, q=q, v=v: self._one(t, q, v, k, where))
                for q, v in zip(queries, vectors, strict=True)]

    def _one(self, table: Any, query: str, vector: Any, k: int, where: str | None
             ) -> list[Hit]:
        from wrenmem.index import row_pair

        rows = self._dense(table, vector, k + 10, where)
        scored = [(round(1.0 - float(r["_distance"]), 6), row_pair(r)) for r in rows]
        return rank(scored, k, self.name)


class HybridBackend(VectorBackend):
    """Dense and full-text rankings fused by weighted reciprocal rank."""

    name = "hybrid"

    def _one(self, table: Any, query: str, vector: Any, k: int, where: str | None
             ) -> list[Hit]:
        from wrenmem.index import row_pair

        depth = max(MIN_DEPTH, 3 * k)
        fused: dict[str, float] = {}
        rows: dict[str, dict[str, Any]] = {}
        for weight, ranked in ((DENSE_WEIGHT, self._dense(table, vector, depth, where)),
                               (TEXT_WEIGHT, self._text(table, query, depth, where))):
            for position, row in enumerate(ranked):
                rows.setdefault(row["id"], row)
                fused[row["id"]] = fused.get(row["id"], 0.0) + weight / (RRF_K + position + 1)
        scored = [(round(score, 6), row_pair(rows[i])) for i, score in fused.items()]
        return rank(scored, k, self.name)
