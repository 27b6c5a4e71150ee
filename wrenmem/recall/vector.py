"""The ``vector`` and ``hybrid`` recall backends, over the pairs table of the index.

``vector`` ranks by cosine similarity; ``hybrid`` adds BM25 over wrenmem's own terms and
fuses both with the ranking model (:mod:`wrenmem.recall.model`) into a calibrated score
(the backend's own number is ``raw_score``). A backend keeps its embedder loaded and sees
the latest committed table version; syncing first is the caller's job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from wrenmem.embed.embedders import Embedder, get_embedder, unknown_share
from wrenmem.errors import WrenmemError
from wrenmem.index import table as index
from wrenmem.index.readcopy import vectorscan  # noqa: F401 (tests patch it as vector.vectorscan)
from wrenmem.index.readcopy.held import RecallCopy
from wrenmem.index.table import query_terms
from wrenmem.index.team import replica
from wrenmem.knowledge import expansions
from wrenmem.recall import forms, glossary, second, sqlshape
from wrenmem.recall import model as rank_model
from wrenmem.recall.copyview import (  # noqa: F401 (re-exported: tests and bench use them here)
    _CopyView,
    _Derived,
    _glossary_once,
    english_words,
    rank_rows,
    value_terms,
)
from wrenmem.recall.fusion import Signals, at_least_identical
from wrenmem.recall.hits import VERIFIED_META, Filters, Hit
from wrenmem.settings import Settings
from wrenmem.storage import lance

if TYPE_CHECKING:
    from wrenmem.recall.glossary import Glossary

log = logging.getLogger(__name__)

DEPTH = 50  # candidates per ranking before fusion (the top k is a prefix of the top k + n)
SHAPES_FILE = "recall-shapes.bin"  # the candidates' SQL shapes (sqlshape.ShapeCache)
SHAPES_SAVE_SECONDS = 10.0  # a long-lived backend saves new shapes at most this often
# A backend that searches again holds a table up to this size in memory
# (:mod:`wrenmem.index.readcopy`: exact vector scan and BM25 in numpy; 200,000 rows of 512
# dimensions: about 800 MB); a bigger one is searched by LanceDB.
IN_MEMORY_MAX_ROWS = 200_000
# ... and its first search up to this size (past it, reading the table whole costs a
# one-shot call more than LanceDB's search; below, its answers are exactly the daemon's).
FIRST_SEARCH_MAX_ROWS = 20_000
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
    parts += [f"NOT (path = {lance.quote(path)} AND question = {lance.quote(question)})"
              for path, question in sorted(filters.exclude)]
    if filters.verified:
        parts.append(f"meta LIKE {lance.quote('%' + VERIFIED_META + '%')}")
    return " AND ".join(parts) or None


def _view(table: Any) -> _CopyView | None:
    """``table`` when a search holds it in memory, else None (LanceDB answers)."""
    return table if isinstance(table, _CopyView) else None


class VectorBackend:
    """Dense recall: the pairs whose question embeddings are closest to the query's."""

    name = "vector"

    uses_index = True

    def __init__(self, settings: Settings, embedder: Embedder | None = None):
        self.settings = settings
        self.embedder = embedder or get_embedder(settings.embedder, root=settings.root)
        self._db: Any = None
        self._table: Any = None
        self._checked = 0.0  # when a remote index's version was last checked (monotonic)
        self._version: int | None = None
        self._pinned = False  # searching one version (see pin), not the latest
        self._searches = 0
        # a caller that searches many times (the recall fit's probes) holds the copy from
        # the first search, not after a first one by LanceDB (which read the table too)
        self.many_searches = False
        # the table's latest version in memory, when small: (table, version, copy)
        self._memory: tuple[Any, int, RecallCopy] | None = None
        # (table, the stamp of its versions folder, its version then): see latest_version
        self._stamped: tuple[Any, tuple[int, ...], int] | None = None
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

    def pin(self, version: int) -> None:
        """Search this version of the table, not the latest (while a writer is between
        commits): no copy is held of it."""
        self.table().checkout(version)
        self._pinned = True

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
    def _held(self, table: Any) -> RecallCopy | None:
        """The table's latest version in memory when small enough (see the limits above),
        kept while the version stays, and updated with only the rows written since."""
        version = self.latest_version() if table is self._table else table.version
        held = self._memory
        if held is not None and held[0] is table and held[1] == version:
            return held[2]
        self._memory = None  # let the old copy go before the new one is read
        if self._pinned:
            return None
        rows = table.count_rows()
        if not 0 < rows <= (IN_MEMORY_MAX_ROWS if self._searches > 1 or self.many_searches
                            else min(FIRST_SEARCH_MAX_ROWS, IN_MEMORY_MAX_ROWS)):
            return None
        copy = held[2].updated(table) if held is not None else None
        if copy is None:
            del held
            copy = RecallCopy.from_table(table)
        self._memory = (table, version, copy)
        return copy

    def latest_version(self) -> int:
        """The latest version of the table, without asking LanceDB (a millisecond) while a
        local table's versions folder is as when last asked (a commit adds a file there)."""
        table = self.table()
        stamp = (None if self.settings.remote_index or self._pinned
                 else lance.versions_stamp(self.settings.index_uri, index.TABLE))
        known = self._stamped
        if stamp is not None and known is not None and known[0] is table and known[1] == stamp:
            return known[2]
        version = int(table.version)
        self._stamped = (table, stamp, version) if stamp is not None else None
        return version

    def _still_held(self) -> RecallCopy | None:
        """The copy this backend holds, while its table's latest version is the one held."""
        held, table = self._memory, self._table
        if held is None or table is None or held[0] is not table:
            return None
        try:
            return held[2] if self.latest_version() == held[1] else None
        except Exception:  # the search opens the table again and meets it, or not
            return None

    def ready(self) -> None:
        """Make the held copy's prefix codes now (a warm-up's last step), not in the
        background of the first requests."""
        copy = self._still_held()
        if copy is not None:
            copy.scan().make_prefix(wait=True)

    def _dense(self, table: Any, vector: Any, depth: int, where: str | None,
               extra: Sequence[str] = (), held: _CopyView | None = None
               ) -> list[dict[str, Any]]:
        if held is not None:
            return held.nearest(vector, depth, [*COLUMNS, *extra])
        query = lance.nearest(table, vector).limit(depth)
        if where:
            query = query.where(where, prefilter=True)
        return list(query.select([*COLUMNS, *extra, "_distance"]).to_list())

    def _keyword(self, table: Any, terms: Sequence[str], depth: int, where: str | None,
                 columns: Sequence[str]) -> list[dict[str, Any]]:
        """The ``depth`` best rows by BM25 over their ``terms`` for search terms made
        by :func:`wrenmem.textsearch.tokenize` (with ``_score``)."""
        if not terms:
            return []
        if isinstance(table, _CopyView):
            return table.keyword(terms, depth)
        query = (table.search(" ".join(terms), query_type="fts", fts_columns="terms")
                 .limit(depth))
        if where:
            query = query.where(where, prefilter=True)
        try:
            return list(query.select([*columns, "_score"]).to_list())
        except Exception as e:  # e.g. a query the FTS parser rejects: dense still answers
            log.debug("full-text search failed for %r: %s", terms, e)
            return []

    def search(self, queries: Sequence[str], k: int, filters: Filters, *,
               sql: str | None = None) -> list[list[Hit]]:
        """Rank on the table as it is. ``sql``: a draft query, for the hybrid scorer."""
        if not queries:
            return []
        cap = self.settings.max_embed_chars  # a question of megabytes must not take gigabytes
        self._searches += 1
        copy = self._still_held() if not self._pinned else None
        vectors = self.embedder.embed([q[:cap] for q in queries])
        if copy is None:
            copy = self._retrying(self._held)
        if copy is not None:  # a small table: exact search in memory, filters applied first
            return self._search_copy(copy, queries, vectors, k, filters, sql)
        where = where_clause(filters)
        return [self._retrying(lambda t, q=q, v=v: self._one(t, q, v, k, where, sql))
                for q, v in zip(queries, vectors, strict=True)]

    def _search_copy(self, copy: RecallCopy, queries: Sequence[str], vectors: Any,
                     k: int, filters: Filters, sql: str | None) -> list[list[Hit]]:
        scan = copy.scan()
        scan.batches += 1
        if scan.batches > 1:  # searched again (by any backend): a long-lived process
            scan.make_prefix()  # (in a thread; the int8 scan answers meanwhile)
        view = _CopyView(copy, filters)
        return [self._one(view, q, v, k, None, sql) for q, v in zip(queries, vectors, strict=True)]

    def search_version(self, version: int, queries: Sequence[str], k: int, filters: Filters,
                       *, sql: str | None = None) -> list[list[Hit]] | None:
        """:meth:`search` of ``version`` when this backend holds that version in memory
        (while a writer holds the index lock), else None."""
        held = self._memory
        if (held is None or held[1] != version or self._pinned or self.settings.remote_index
                or not queries):
            return None
        cap = self.settings.max_embed_chars
        vectors = self.embedder.embed([q[:cap] for q in queries])
        return self._search_copy(held[2], queries, vectors, k, filters, sql)

    def _one(self, table: Any, query: str, vector: Any, k: int, where: str | None,
             sql: str | None) -> list[Hit]:
        rows = self._dense(table, vector, max(DEPTH, k), where, held=_view(table))
        cosines = [1.0 - float(r["_distance"]) for r in rows]
        scored = [(at_least_identical(p, query, r["question"]), r, c) for r, c, p
                  in zip(rows, cosines, rank_model.dense_score(cosines), strict=True)]
        return rank_rows(scored, k, self.name, query=query)


class HybridBackend(VectorBackend):
    """Dense similarity and LanceDB full-text (BM25) evidence, fused by
    the ranking model (:mod:`wrenmem.recall.model`) into one calibrated score."""

    name = "hybrid"

    def __init__(self, settings: Settings, embedder: Embedder | None = None,
                 load_glossary: Callable[[], Glossary | None] | None = None,
                 scorer: Callable[..., list[float]] | None = None,
                 reader: second.SecondReader | None = None):
        super().__init__(settings, embedder)
        self._glossary = load_glossary or _glossary_once()
        self._scorer = scorer or rank_model.Scorer(settings.fusion)
        self._shapes: sqlshape.ShapeCache | None = None
        self._tallied: tuple[tuple[int, int, str | None], forms.Tally] | None = None
        # the second reader (its owner's, kept warm; a backend made alone with the shipped
        # scorer makes its own), where the settings ask for it
        if reader is None and scorer is None:
            reader = second.SecondReader()
        self._second = reader if second.wanted(settings) else None

    def search(self, queries: Sequence[str], k: int, filters: Filters, *,
               sql: str | None = None) -> list[list[Hit]]:
        """:meth:`VectorBackend.search`, with the shapes of the candidates' SQL read from
        and saved to ``.wrenmem/`` (:class:`~wrenmem.recall.sqlshape.ShapeCache`)."""
        if self._shapes is None:
            self._shapes = sqlshape.ShapeCache(self.settings.state_dir / SHAPES_FILE)
            self._shapes.load()
        found = super().search(queries, k, filters, sql=sql)
        if self.settings.state_dir.is_dir():
            self._shapes.save(every=SHAPES_SAVE_SECONDS)
        return found

    def _table_tally(self, table: Any, where: str | None) -> forms.Tally:
        """The form reader's tally of the rows a search of ``table`` in LanceDB sees (a
        table too big to hold, or a pinned version): read once per version and filter."""
        version = self.latest_version() if table is self._table else int(table.version)
        key = (id(table), version, where)
        if self._tallied is not None and self._tallied[0] == key:
            return self._tallied[1]
        self._tallied = None
        search = table.search()
        if where:
            search = search.where(where)
        data = search.select(["terms", "sql"]).limit(None).to_arrow()
        tally = forms.tally_of(list(zip(data.column("terms").to_pylist(),
                                        data.column("sql").to_pylist(), strict=True)))
        self._tallied = (key, tally)
        return tally

    def _one(self, table: Any, query: str, vector: Any, k: int, where: str | None,
             sql: str | None) -> list[Hit]:
        import numpy as np

        depth = max(DEPTH, k)
        held = _view(table)
        rows: dict[str, dict[str, Any]] = {}
        cosine: dict[str, float] = {}
        for row in self._dense(table, vector, depth, where, extra=["terms"], held=held):
            rows[row["id"]] = row
            cosine[row["id"]] = 1.0 - float(row["_distance"])
        # with the table in memory, the keyword search returns ids only
        columns = ["id"] if held is not None else [*COLUMNS, "terms", "vector"]

        def keyword(terms: Sequence[str]) -> dict[str, float]:
            found = self._keyword(table, terms, depth, where, columns)
            if held is not None:
                found = held.rows_of(found, [*COLUMNS, "terms"], vector)
            scores = {}
            for row in found:
                scores[row["id"]] = float(row["_score"])
                if row["id"] not in rows:  # found by keywords only: its cosine from its vector
                    rows[row["id"]] = row
                    cosine[row["id"]] = float(np.dot(
                        np.asarray(row["vector"], dtype=np.float32), vector))
            return scores

        bm25 = keyword(query_terms(" ".join([query, *expansions(self.settings, query)])).split())
        # A Chinese question's words in English: keyword evidence on English pairs
        words = english_words(query, self._glossary)
        translated = {row["id"]: float(row["_score"]) for row in self._keyword(
            table, glossary.search_terms(words), depth, where, ["id"])}
        # The question without the values the candidates' SQL compares with: keyword
        # evidence of the structure asked for, which a shared rare value cannot swamp
        asked_list = query_terms(query).split()
        valued = value_terms(query, [(rows[i].get("sql") or "", rows[i].get("dialect"))
                                     for i in sorted(rows)])
        structure = keyword([t for t in asked_list if t not in valued]) if valued else bm25
        asked = set(asked_list)
        ids = sorted(rows)
        signals = []
        derived = _Derived.of(held.copy) if held is not None else None
        # what the pairs searched say questions with these words ask for (forms)
        tally = (derived.tally(held.allowed) if derived is not None and held is not None
                 else self._table_tally(table, where))
        form_weights = forms.label_weights(tally, asked_list).tolist()  # read per candidate
        for i in ids:
            terms = (derived.terms(rows[i]) if derived is not None
                     else set((rows[i].get("terms") or "").split()))
            signals.append(Signals(
                cosine[i], bm25.get(i), len(asked & terms) / max(len(asked), 1),
                rows[i].get("sql") or "", rows[i].get("question") or "",
                rows[i].get("datasource") or "", translated.get(i), structure.get(i),
                rows[i].get("dialect") or None,
                forms.fit(form_weights, rows[i].get("sql") or ""),
                forms.aggregate_fit(form_weights, rows[i].get("sql") or "")))
        unknown = unknown_share(self.embedder, query)
        fused = self._scorer(query, signals, draft_sql=sql,  # the one call of the scorer
                             unknown=unknown)
        if unknown > 0 and self._second is not None:
            try:
                fused = second.rescore(self._second, query, signals, fused)
            except (OSError, RuntimeError, ValueError) as e:  # its engine or model file
                log.warning("the second reader failed (%s); recall uses the first model "
                            "alone in this process", e)
                self._second = None
        scored = [(at_least_identical(p, query, rows[i].get("question") or ""), rows[i],
                   rank_model.logit(p)) for i, p in zip(ids, fused, strict=True)]
        return rank_rows(scored, k, self.name, derived.pair if derived is not None else None,
                         query)
