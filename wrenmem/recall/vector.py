"""The ``vector`` and ``hybrid`` recall backends, over the pairs table of the index.

``vector`` ranks by cosine similarity of the question's embedding. ``hybrid`` also runs
LanceDB's full-text search over wrenmem's own terms (English and Chinese) and fuses both
with :func:`wrenmem.fusion.fuse`. Every score is calibrated into [0, 1] with one meaning
(:mod:`wrenmem.fusion`); the backend's own number is the hit's ``raw_score``. Both return
the same :class:`~wrenmem.recall.hits.Hit`s as grep. A backend
object keeps its embedder loaded and may serve many searches in a long-lived process; every
search sees the latest committed table version. Bringing the index up to date with the
files first is the caller's job (:func:`wrenmem.recall.backends.catch_up`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from wrenmem import lance
from wrenmem.embedders import get_embedder
from wrenmem.errors import WrenmemError
from wrenmem.fusion import Signals, at_least_identical, dense_score, fuse, logit
from wrenmem.index import replica
from wrenmem.index import table as index
from wrenmem.index.table import query_terms, row_pair
from wrenmem.recall.hits import Filters, Hit, rank
from wrenmem.settings import Settings

log = logging.getLogger(__name__)

MIN_DEPTH = 50  # candidates per ranking before fusion
# A long-lived backend holds the vectors of a table up to this size in memory and scans
# them with numpy (exact, as LanceDB's flat scan below its ANN threshold, for a fraction
# of its CPU time); a bigger table is searched through its ANN index.
IN_MEMORY_MAX_ROWS = lance.ANN_MIN_ROWS
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
        self._checked = 0.0  # when a remote index's version was last checked (monotonic)
        self._version: int | None = None
        self._searches = 0  # the first search of a process goes to LanceDB (_in_memory)
        self._memory: _InMemory | None = None
        load = getattr(self.embedder, "load", None)
        if load is not None:  # load the model while this thread imports LanceDB
            threading.Thread(target=_quietly, args=(load,), daemon=True,
                             name="wrenmem-model-load").start()

    # -- index access ---------------------------------------------------------------
    def table(self) -> Any:
        if self.settings.remote_index:
            self._refresh_replica()
        if self._table is None:
            if self._db is None:
                self._db = lance.connect(replica.reading_uri(self.settings))
            table = index.open_table(self._db)
            if table is None:
                raise WrenmemError("there is no index yet: run `wrenmem sync`")
            built_by = index.table_model_id(table)
            if built_by != self.embedder.model_id:
                raise WrenmemError(f"the index was built by {built_by}, not "
                                   f"{self.embedder.model_id}: run `wrenmem sync`")
            self._table = table
        return self._table

    def _refresh_replica(self) -> None:
        """A remote index is searched in its local copy; its version is checked at most
        every ``refresh_seconds``, so a warm process makes no round trip per query."""
        now = time.monotonic()
        if self._table is not None and now - self._checked < self.settings.refresh_seconds:
            return
        info = replica.refresh(self.settings)
        self._checked = now
        if info.version != self._version:
            self._version, self._table = info.version, None

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
    def _in_memory(self, table: Any, where: str | None) -> _InMemory | None:
        """The table's vectors in memory, for its current version, when the search is
        unfiltered (a filter is applied inside LanceDB, before ranking): from the second
        search of a process on (a one-question CLI call would load more than it searches),
        for a table of at most IN_MEMORY_MAX_ROWS rows; else None."""
        if self._searches < 2 or where is not None:
            return None
        version = table.version
        held = self._memory
        if held is not None and held.table is table and held.version == version:
            return held
        self._memory = None  # let the old copy go before the new one is read
        if not 0 < table.count_rows() <= IN_MEMORY_MAX_ROWS:
            return None
        self._memory = _InMemory.read(table, version)
        return self._memory

    def _dense(self, table: Any, vector: Any, depth: int, where: str | None,
               extra: Sequence[str] = (), held: _InMemory | None = None
               ) -> list[dict[str, Any]]:
        if held is not None:
            return held.nearest(vector, depth, [*COLUMNS, *extra])
        query = (table.search(vector).distance_type("cosine").nprobes(lance.ANN_NPROBES)
                 .limit(depth))
        if where:
            query = query.where(where, prefilter=True)
        return list(query.select([*COLUMNS, *extra, "_distance"]).to_list())

    def _text(self, table: Any, text: str, depth: int, where: str | None,
              columns: Sequence[str]) -> list[dict[str, Any]]:
        if not text.strip():
            return []

        terms = query_terms(text)
        if not terms:
            return []
        query = table.search(terms, query_type="fts", fts_columns="terms").limit(depth)
        if where:
            query = query.where(where, prefilter=True)
        try:
            return list(query.select([*columns, "_score"]).to_list())
        except Exception as e:  # e.g. a query the FTS parser rejects: dense still answers
            log.debug("full-text search failed for %r: %s", text, e)
            return []

    def search(self, queries: Sequence[str], k: int, filters: Filters) -> list[list[Hit]]:
        """Rank on the table as it is: bringing it up to date is the caller's job
        (:func:`wrenmem.recall.backends.recall_many`, the daemon)."""
        if not queries:
            return []
        cap = self.settings.max_embed_chars  # a question of megabytes must not take gigabytes
        self._searches += 1
        vectors = self.embedder.embed([q[:cap] for q in queries])
        where = where_clause(filters)
        return [self._retrying(lambda t, q=q, v=v: self._one(t, q, v, k, where))
                for q, v in zip(queries, vectors, strict=True)]

    def _one(self, table: Any, query: str, vector: Any, k: int, where: str | None
             ) -> list[Hit]:
        rows = self._dense(table, vector, k + 10, where, held=self._in_memory(table, where))
        cosines = [1.0 - float(r["_distance"]) for r in rows]
        scored = [(at_least_identical(p, query, r["question"]), row_pair(r), c) for r, c, p
                  in zip(rows, cosines, dense_score(cosines), strict=True)]
        return rank(scored, k, self.name)


class HybridBackend(VectorBackend):
    """Dense similarity and LanceDB full-text (BM25) evidence, fused by
    :func:`wrenmem.fusion.fuse` into one calibrated score."""

    name = "hybrid"

    def _one(self, table: Any, query: str, vector: Any, k: int, where: str | None
             ) -> list[Hit]:
        import numpy as np

        depth = max(MIN_DEPTH, 3 * k)
        held = self._in_memory(table, where)
        rows: dict[str, dict[str, Any]] = {}
        cosine: dict[str, float] = {}
        for row in self._dense(table, vector, depth, where, extra=["terms"], held=held):
            rows[row["id"]] = row
            cosine[row["id"]] = 1.0 - float(row["_distance"])
        bm25: dict[str, float] = {}
        # with the table in memory, the keyword search returns ids only
        columns = ["id"] if held is not None else [*COLUMNS, "terms", "vector"]
        found = self._text(table, query, depth, where, columns)
        if held is not None:
            found = held.rows_of(found, [*COLUMNS, "terms"], vector)
        for row in found:
            bm25[row["id"]] = float(row["_score"])
            if row["id"] not in rows:  # found by keywords only: its cosine from its vector
                rows[row["id"]] = row
                cosine[row["id"]] = float(np.dot(np.asarray(row["vector"], dtype=np.float32),
                                                 vector))
        asked = set(query_terms(query).split())
        ids = sorted(rows)
        signals = [Signals(cosine[i], bm25.get(i),
                           len(asked & set((rows[i].get("terms") or "").split()))
                           / max(len(asked), 1), rows[i].get("sql") or "",
                           rows[i].get("question") or "", rows[i].get("datasource") or "")
                   for i in ids]
        fused = fuse(query, signals)
        scored = [(p, row_pair(rows[i]), logit(p)) for i, p in zip(ids, fused, strict=True)]
        return rank(scored, k, self.name)


class _InMemory:
    """One version of the pairs table held in memory: its rows (Arrow, without vectors) and
    its vectors as a unit-length float32 matrix, searched exactly by cosine."""

    def __init__(self, table: Any, version: int, rows: Any, matrix: Any):
        self.table, self.version, self.rows, self.matrix = table, version, rows, matrix
        self._position: dict[str, int] | None = None

    @classmethod
    def read(cls, table: Any, version: int) -> _InMemory:
        import numpy as np

        data = table.to_arrow()
        column = data.column("vector").combine_chunks()  # flatten() honours a slice's offset
        matrix = column.flatten().to_numpy(zero_copy_only=False).reshape(len(data), -1)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix = (matrix / np.where(norms > 0, norms, 1.0)).astype(np.float32)
        kept = [c for c in data.schema.names if c in (*COLUMNS, "terms")]  # what hits show
        return cls(table, version, data.select(kept), matrix)

    def nearest(self, vector: Any, depth: int, columns: Sequence[str]
                ) -> list[dict[str, Any]]:
        """The ``depth`` rows of highest cosine to ``vector``, best first, as LanceDB's
        search returns them (``_distance`` = 1 - cosine)."""
        import numpy as np

        query = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        # einsum, not BLAS: one thread, which on a busy machine beats waiting for several
        cosines = np.einsum("ij,j->i", self.matrix, query / norm if norm > 0 else query)
        depth = min(depth, len(cosines))
        if depth <= 0:
            return []
        top = np.argpartition(-cosines, depth - 1)[:depth]
        top = top[np.argsort(-cosines[top], kind="stable")]
        rows = self.rows.select([c for c in columns if c != "vector"]).take(top).to_pylist()
        for row, n in zip(rows, top, strict=True):
            row["_distance"] = 1.0 - float(cosines[n])
        return rows

    def rows_of(self, found: Sequence[dict[str, Any]], columns: Sequence[str], vector: Any
                ) -> list[dict[str, Any]]:
        """The rows of ``found`` (dicts with an ``id``) with ``columns`` and their
        ``vector`` (as a matrix row), keeping each one's other keys; an id this copy does
        not hold (written after it was read) is left out."""
        if self._position is None:
            self._position = {i: n for n, i in enumerate(self.rows.column("id").to_pylist())}
        known = [(r, self._position[r["id"]]) for r in found if r["id"] in self._position]
        if not known:
            return []
        rows = self.rows.select(list(columns)).take([n for _, n in known]).to_pylist()
        for row, (original, n) in zip(rows, known, strict=True):
            row.update(original)
            row["vector"] = self.matrix[n]
        return rows
