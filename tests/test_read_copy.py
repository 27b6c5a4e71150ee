"""The in-memory read copy a long-lived backend holds: it answers exactly as LanceDB's own
searches, follows writes by reading only the new rows, and keeps BM25 scores and SQL labels
equal to those made anew."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import index_lock_held, run_wrenmem, write_pair
from test_daemon import assert_same_answers

from wrenmem.index import table as index
from wrenmem.index.readcopy import held as readcopy
from wrenmem.index.sync import sync_pairs
from wrenmem.recall import forms, vector
from wrenmem.recall.hits import Filters
from wrenmem.recall.vector import HybridBackend, VectorBackend, _Derived
from wrenmem.settings import Settings, load_settings
from wrenmem.sql import labels as sqllabels
from wrenmem.storage import lance

THINGS = ["orders", "customers", "products", "invoices", "stores", "employees", "suppliers",
          "shipments", "refunds", "reviews"]
MEASURES = [("price", "price"), ("age", "age"), ("total amount", "amount"),
            ("rating", "rating"), ("weight", "weight")]
QUESTIONS = ["How many orders are there?", "average price of products per store",
             "which supplier has the highest rating", "每个门店的订单数量是多少？",
             "list refunds with amount above 100", "top customers by total amount"]


def _fill(root: Path) -> None:
    n = 0
    for thing in THINGS:
        table = thing.rstrip("s")
        write_pair(root, f"{thing}/count.md", f"How many {thing} are there?",
                   f"SELECT COUNT(*) FROM {table}", datasource="shop" if n % 2 else "crm")
        for label, column in MEASURES:
            n += 1
            write_pair(root, f"{thing}/avg_{column}.md", f"Average {label} of {thing}",
                       f"SELECT AVG({column}) FROM {table}",
                       datasource="shop" if n % 2 else "crm",
                       tags="[kpi]" if n % 3 == 0 else "[]")
            write_pair(root, f"{thing}/max_{column}.md",
                       f"Which of the {thing} has the highest {label}?",
                       f"SELECT * FROM {table} ORDER BY {column} DESC LIMIT 1",
                       datasource="shop")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project of 110 pairs, indexed with the real default model."""
    root = tmp_path_factory.mktemp("copy") / "proj"
    (root / "knowledge" / "sql").mkdir(parents=True)
    _fill(root)
    sync_pairs(load_settings(root))
    return root


@pytest.fixture
def project_copy(built: Path, copy_project: Any) -> Path:
    return copy_project(built)


def held_copy(settings: Settings) -> readcopy.RecallCopy:
    """The copy of the project's table as a backend that searches again holds it."""
    return readcopy.RecallCopy.from_table(index.open_table(index.connect(settings)))


@pytest.mark.parametrize("kind", [VectorBackend, HybridBackend])
@pytest.mark.parametrize("filters", [Filters(), Filters(datasource="shop"),
                                     Filters(tags=("kpi",)), Filters(source="nobody")])
def test_the_held_copy_answers_exactly_what_lancedb_answers(built: Path, kind: type,
                                                            filters: Filters,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    settings = load_settings(built)
    with monkeypatch.context() as patched:
        patched.setattr(vector, "FIRST_SEARCH_MAX_ROWS", 0)  # a table too big for one search
        warm = kind(settings)
        once = warm.search(QUESTIONS, 5, filters)  # a one-shot call: LanceDB answers
        assert warm._memory is None
        got = warm.search(QUESTIONS, 5, filters)  # searched again: read whole, held
    assert warm._memory is not None and len(warm._memory[2]) == 110
    small = kind(settings)
    assert_same_answers(recall_results(QUESTIONS, kind.name, small.search(QUESTIONS, 5, filters)),
                        recall_results(QUESTIONS, kind.name, got))
    assert small._memory is not None  # a small table: held from the first search
    monkeypatch.setattr(vector, "IN_MEMORY_MAX_ROWS", 0)  # LanceDB's own searches
    lance_backend = kind(settings)
    for _ in range(2):
        want = lance_backend.search(QUESTIONS, 5, filters)
    assert lance_backend._memory is None
    for answers in (once, got):
        assert_same_answers(recall_results(QUESTIONS, kind.name, answers),
                            recall_results(QUESTIONS, kind.name, want))
    if filters == Filters(source="nobody"):
        assert not any(got)


def fresh_full_text_index(settings: Settings) -> Any:
    """The pairs table with its full-text index made anew. LanceDB's index keeps the
    statistics of the rows it indexed, removed ones included, and scores rows added since
    with them; a new index has those of the rows the table holds, as the copy does."""
    table = index.open_table(index.connect(settings))
    for found in table.list_indices():
        if "terms" in found.columns:
            table.drop_index(found.name)
    lance.ensure_fts(table, "terms")
    return table


def recall_results(questions: list[str], name: str, hits: list) -> list:
    from wrenmem.recall.hits import RecallResult

    return [RecallResult(q, name, tuple(h)) for q, h in zip(questions, hits, strict=True)]


def test_a_backend_holds_the_copy_by_version_and_sees_another_processs_writes(
        project_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's backend checks the table's version alone while it holds the copy;
    another process's write (a new version) is seen at the next search, as a copy read
    whole answers."""
    settings = load_settings(project_copy)
    listings: list[int] = []
    real_listing = index.disk_listing

    def counted(s: Settings) -> lance.Listing | None:
        listings.append(1)
        return real_listing(s)

    monkeypatch.setattr(index, "disk_listing", counted)
    backend = HybridBackend(settings)
    backend.search(QUESTIONS, 3, Filters())
    held = backend._memory
    assert held is not None and held[1] == backend.table().version
    for question in QUESTIONS:
        backend.search([question], 3, Filters())
    assert listings == []  # the version said it was the same table
    write_pair(project_copy, "new/okapi.md", "How many okapis were adopted?", "SELECT 2")
    assert run_wrenmem(["sync"], project_copy).returncode == 0  # another process writes
    got = backend.search(["okapis adopted", *QUESTIONS], 3, Filters())
    assert got[0][0].path == "knowledge/sql/new/okapi.md"
    assert backend._memory is not None and backend._memory[1] > held[1]
    want = HybridBackend(settings).search(["okapis adopted", *QUESTIONS], 3, Filters())
    assert_same_answers(recall_results(QUESTIONS, "hybrid", got[1:]),
                        recall_results(QUESTIONS, "hybrid", want[1:]))


def test_keyword_scores_are_lancedb_full_text_scores(built: Path) -> None:
    settings = load_settings(built)
    table = index.open_table(index.connect(settings))
    copy = held_copy(settings)
    ids = [row[0] for row in copy.rows]
    found = 0
    for question in QUESTIONS:
        terms = index.query_terms(question)
        theirs = {r["id"]: r["_score"] for r in
                  table.search(terms, query_type="fts", fts_columns="terms").limit(200)
                  .select(["id", "_score"]).to_list()}
        ours = {ids[n]: s for n, s in _bm25(copy, terms).items()}
        assert ours.keys() == theirs.keys()
        for key, score in theirs.items():
            assert ours[key] == pytest.approx(score, rel=1e-5)
        found += len(ours)
    assert found > 50  # (no pair is in Chinese: that question finds nothing either way)


def _bm25_written_out(copy: readcopy.RecallCopy, terms: list[str], allowed: Any
                      ) -> tuple[Any, Any]:
    """BM25 over the copy's postings, every term's statistics computed for this call."""
    import math

    import numpy as np

    k1, b = readcopy.BM25_K1, readcopy.BM25_B
    lengths = np.frombuffer(copy.lengths, dtype=np.int32)
    total = np.zeros(len(copy.rows))
    touched = np.zeros(len(copy.rows), dtype=bool)
    for term in dict.fromkeys(terms):
        raw = copy.postings.get(term)
        if raw is None:
            continue
        rows, counts = readcopy._unpacked(raw)
        tf = counts.astype(np.float64)
        if copy.live is not None:
            rows, tf = rows[copy.live[rows]], tf[copy.live[rows]]
        idf = math.log(1.0 + (copy.live_count - len(rows) + 0.5) / (len(rows) + 0.5))
        if allowed is not None:
            rows, tf = rows[allowed[rows]], tf[allowed[rows]]
        norm = k1 * (1.0 - b + b * lengths[rows] / (copy.average_length or 1.0))
        total[rows] += idf * tf * (k1 + 1.0) / (tf + norm)
        touched[rows] = True
    hit = np.flatnonzero(touched)
    return hit, total[hit]


def test_keyword_scores_held_per_term_are_the_scores_computed_anew(
        built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy keeps each searched term's share of the scores: asked again, filtered or
    not, with rows a write removed, and once the kept ones are dropped, every score is
    the one computed from the postings for that search, bit for bit."""
    import numpy as np

    settings = load_settings(built)
    whole = held_copy(settings)
    live = np.ones(len(whole.rows), dtype=bool)
    live[::7] = False  # as a write leaves removed rows in place
    thinned = whole.with_rows(live, [], [], [])
    allowed = np.arange(len(whole.rows)) % 3 != 0
    monkeypatch.setattr(readcopy, "KEPT_POSTINGS", 60)  # dropped and made again
    asked = [index.query_terms(q).split() for q in QUESTIONS] + [["order", "order", "zzz"]]
    checked = 0
    for copy in (whole, thinned):
        for _ in range(3):
            for terms in asked:
                for rows in (None, allowed, copy.live):
                    want = _bm25_written_out(copy, terms, rows)
                    got = copy.bm25_arrays(terms, rows)
                    assert got[0].tolist() == want[0].tolist()
                    assert got[1].tobytes() == want[1].tobytes()
                    checked += len(want[0])
    assert checked > 500 and copy._term_scores


def test_a_held_copy_follows_writes_by_reading_only_the_new_rows(
        project_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-lived backend holding the table sees an edit, an added and a removed pair
    by reading those rows alone; its answers (cosines, BM25 statistics without the
    removed rows) are those of a copy read whole, and of LanceDB's own searches."""
    settings = load_settings(project_copy)
    backend = HybridBackend(settings)
    for _ in range(2):
        backend.search(QUESTIONS, 5, Filters())
    assert backend._memory is not None
    whole: list[int] = []
    real = readcopy.RecallCopy.from_table.__func__  # type: ignore[attr-defined]

    def counted(cls: type, table: object) -> readcopy.RecallCopy:
        whole.append(1)
        return real(cls, table)

    monkeypatch.setattr(readcopy.RecallCopy, "from_table", classmethod(counted))
    questions = [*QUESTIONS, "How many capybaras were adopted?", "Average weight of orders"]
    filters = [Filters(), Filters(datasource="shop"), Filters(tags=("kpi",))]
    for step in range(3):
        if step == 0:  # an edit (a new content hash for an id) and a new pair
            write_pair(project_copy, "orders/avg_weight.md", "Average weight of orders",
                       "SELECT AVG(weight_kg) FROM orders", datasource="crm")
            write_pair(project_copy, "new/capybara.md", "How many capybaras were adopted?",
                       "SELECT COUNT(*) FROM adoption WHERE animal = 'capybara'")
        elif step == 1:  # two pairs removed
            (project_copy / "knowledge/sql/orders/count.md").unlink()
            (project_copy / "knowledge/sql/stores/max_price.md").unlink()
        else:  # one removed, one back with another question
            (project_copy / "knowledge/sql/new/capybara.md").unlink()
            write_pair(project_copy, "orders/count.md", "How many orders were refunded?",
                       "SELECT COUNT(*) FROM orders WHERE refunded")
        sync_pairs(settings)
        whole.clear()
        got = {f: backend.search(questions, 5, f) for f in filters}
        held = backend._memory[2] if backend._memory else None
        assert whole == [] and held is not None and held.live is not None
        assert len(held) == index.open_table(index.connect(settings)).count_rows()
        fresh = HybridBackend(settings)  # a copy read whole: the same answers
        for f in filters:
            fresh.search(questions, 5, f)
            assert_same_answers(recall_results(questions, "hybrid", got[f]),
                                recall_results(questions, "hybrid", fresh.search(
                                    questions, 5, f)))
        whole.clear()
        table = fresh_full_text_index(settings)
        ids = [row[0] for row in held.rows]
        for question in questions:  # BM25 as LanceDB's full-text index, removed rows out
            terms = index.query_terms(question)
            theirs = {r["id"]: r["_score"] for r in
                      table.search(terms, query_type="fts", fts_columns="terms").limit(200)
                      .select(["id", "_score"]).to_list()}
            ours = {ids[n]: s for n, s in _bm25(held, terms).items()}
            assert ours.keys() == theirs.keys()
            for key, score in theirs.items():
                assert ours[key] == pytest.approx(score, rel=1e-5)
    with monkeypatch.context() as patched:  # LanceDB's own searches answer the same
        patched.setattr(vector, "IN_MEMORY_MAX_ROWS", 0)
        for f in filters:
            assert_same_answers(
                recall_results(questions, "hybrid", HybridBackend(settings).search(
                    questions, 5, f)),
                recall_results(questions, "hybrid", backend.search(questions, 5, f)))


def test_a_backend_that_searches_again_makes_prefix_codes_and_answers_the_same(
        project_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From a backend's second search of its copy the copy's scan makes its prefix codes.
    Every answer is the exact float32 scan's."""
    monkeypatch.setattr(vector.vectorscan, "MIN_ROWS", 0)
    monkeypatch.setattr(vector.vectorscan, "CANDIDATES", 40)  # 110 rows: fewer than 256
    monkeypatch.setattr(vector, "DEPTH", 10)  # (at most a quarter of the candidates)
    settings = load_settings(project_copy)
    backend = HybridBackend(settings)
    first = backend.search(QUESTIONS, 5, Filters())
    assert backend._memory is not None
    copy = backend._memory[2]
    assert copy.scan()._making is None  # one search of the copy: none made
    second = backend.search(QUESTIONS, 5, Filters())
    assert copy.scan()._making is not None
    assert copy.scan().make_prefix(wait=True) is not None
    third = backend.search(QUESTIONS, 5, Filters(datasource="shop"))
    assert copy.scan().prefixed >= len(QUESTIONS)
    with monkeypatch.context() as patched:
        patched.setattr(vector.vectorscan, "MIN_ROWS", 10**9)  # the float32 scan alone
        exact = HybridBackend(settings)
        want = exact.search(QUESTIONS, 5, Filters())
        want_shop = exact.search(QUESTIONS, 5, Filters(datasource="shop"))
        assert exact._memory is not None and exact._memory[2].scan()._prefix is None
    for got in (first, second):
        assert_same_answers(recall_results(QUESTIONS, "hybrid", got),
                            recall_results(QUESTIONS, "hybrid", want))
    assert_same_answers(recall_results(QUESTIONS, "hybrid", third),
                        recall_results(QUESTIONS, "hybrid", want_shop))


def test_while_a_writer_holds_the_lock_the_kept_copy_answers_for_its_version(
        project_copy: Path) -> None:
    """A warm search that finds the index lock held and no file saved since the last whole
    version answers from the copy of that version its kept backend holds (no LanceDB
    table opened again), with the answers of a search pinned to that version."""
    from wrenmem.recall.answerable import calibrate
    from wrenmem.recall.recaller import Recaller
    from wrenmem.watch.freshness import Freshness

    settings = load_settings(project_copy, overrides={"backend": "hybrid"})
    freshness = Freshness(settings)
    try:
        recaller = Recaller(settings, freshness=freshness)
        before = recaller.recall(QUESTIONS, 5, Filters())
        made: list[str] = []
        real = recaller.backend

        def counted(name: str, s: Settings | None = None) -> Any:
            made.append(name)
            return real(name, s)

        recaller.backend = counted  # type: ignore[method-assign]
        with index_lock_held(settings):
            during = recaller.recall_warm(QUESTIONS, 5, Filters())
            version = next(iter(recaller._complete.values()))
            pinned = real("hybrid")
            pinned.pin(version)  # type: ignore[attr-defined]
            want = pinned.search(QUESTIONS, 5, Filters())
        assert made == []  # the kept backend answered
        assert_same_answers(during, before)
        # the pinned search's hits as the recaller shows them (wrenmem.recall.answerable)
        vocabulary = recaller.vocabulary()
        shown = [calibrate(q, h, vocabulary, recaller.glossary)
                 for q, h in zip(QUESTIONS, want, strict=True)]
        assert_same_answers(during, recall_results(QUESTIONS, "hybrid", shown))
        after = recaller.recall(QUESTIONS, 5, Filters())
        assert_same_answers(after, before)
    finally:
        freshness.close()


def _fresh_labels(copy: readcopy.RecallCopy) -> Any:
    """forms.label_matrix of the copy's rows' SQL, every row lexed anew."""
    return forms.label_matrix([row[readcopy.POSITION["sql"]] for row in copy.rows])


def _recorded_lexing(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The SQL texts the recall copy lexes for labels, one list a call, from now on."""
    lexed: list[list[str]] = []
    real = sqllabels.label_matrix

    def recording(sqls: Any) -> Any:
        lexed.append(list(sqls))
        return real(lexed[-1])

    monkeypatch.setattr(sqllabels, "label_matrix", recording)
    return lexed


def _with_sql(row: tuple[Any, ...], **values: str) -> tuple[Any, ...]:
    return tuple(values.get(c, row[n]) for n, c in enumerate(readcopy.COLUMNS))


def test_an_update_in_memory_lexes_only_its_new_rows(project_copy: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy updated in memory (a pair removed, one edited, one added; then again) lexes
    only its new rows; every label matrix equals forms.label_matrix of the rows' SQL made
    anew."""
    settings = load_settings(project_copy)
    whole = held_copy(settings)
    got = whole.label_matrix()
    assert got.dtype == np.uint8 and got.shape == (110, len(forms.LABELS))
    assert np.array_equal(got, _fresh_labels(whole))
    lexed = _recorded_lexing(monkeypatch)
    rows = list(whole.rows)
    live = np.ones(len(rows), dtype=bool)
    live[[0, 5]] = False  # row 0 removed, row 5 edited
    edited = _with_sql(rows[5], sql="SELECT store, SUM(amount) FROM orders GROUP BY store "
                                    "HAVING SUM(amount) > 10")
    added = _with_sql(rows[9], id="knowledge/sql/new/join.md", path="knowledge/sql/new/join.md",
                      sql="SELECT a.name FROM a JOIN b ON a.id = b.id WHERE b.x IS NOT NULL")
    updated = whole.with_rows(live, [edited, added], None, [whole.matrix[5], whole.matrix[9]])
    assert np.array_equal(_Derived.of(updated).tally(updated.live).matrix,
                          _fresh_labels(updated))
    assert lexed == [[edited[3], added[3]]]  # (3: the sql column)
    assert np.array_equal(updated.label_matrix()[:110], got)
    again = updated.with_rows(np.concatenate([updated.live[:-1], [False]]),
                              [_with_sql(added, sql="SELECT DISTINCT name FROM a LIMIT 3")],
                              None, [whole.matrix[9]])
    assert np.array_equal(again.label_matrix(), _fresh_labels(again))
    assert len(lexed) == 2 and lexed[1] == ["SELECT DISTINCT name FROM a LIMIT 3"]


def test_a_copy_read_from_the_table_and_updated_from_it_labels_every_row(
        project_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy held by a long-lived reader follows a write (an edit, a new pair, a removed
    one) by reading and lexing only the new rows."""
    settings = load_settings(project_copy)
    whole = readcopy.RecallCopy.from_table(index.open_table(index.connect(settings)))
    assert np.array_equal(whole.label_matrix(), _fresh_labels(whole))
    write_pair(project_copy, "orders/avg_weight.md", "Average weight of orders",
               "SELECT AVG(weight_kg) FROM orders WHERE weight_kg BETWEEN 1 AND 9",
               datasource="crm")
    write_pair(project_copy, "new/capybara.md", "How many capybaras were adopted?",
               "SELECT COUNT(*) FROM adoption WHERE animal = 'capybara'")
    (project_copy / "knowledge/sql/stores/max_price.md").unlink()
    sync_pairs(settings)
    lexed = _recorded_lexing(monkeypatch)
    updated = whole.updated(index.open_table(index.connect(settings)))
    assert updated is not None and updated.live is not None
    assert np.array_equal(updated.label_matrix(), _fresh_labels(updated))
    assert sorted(lexed[0]) == [
        "SELECT AVG(weight_kg) FROM orders WHERE weight_kg BETWEEN 1 AND 9",
        "SELECT COUNT(*) FROM adoption WHERE animal = 'capybara'"]
    assert len(lexed) == 1


def test_left_out_phrasings_are_taken_away_without_a_pass_over_every_row(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A fit's or eval's leave-one-out search (a filter whose left-out phrasings differ per
    question) sees exactly the rows the filter's predicate takes, the removed ones left out
    too; the rest of the filter's mask is made once and kept, not once per question."""
    from wrenmem.recall.copyview import _CopyView

    rows = [(f"p{n}", f"knowledge/sql/p{n % 7}.md", f"question {n % 5}", "SELECT 1",
             "shop" if n % 3 else "crm", "duckdb", [], "user", "{}", f"t{n}")
            for n in range(40)]
    lengths, postings = readcopy._postings([r[-1] for r in rows])
    live = np.ones(len(rows), dtype=bool)
    live[4] = False
    copy = readcopy.RecallCopy("m", rows, np.eye(40, 8, dtype=np.float32), lengths, postings,
                               live=live)
    calls = []
    accepts = Filters.accepts_fields
    monkeypatch.setattr(Filters, "accepts_fields",
                        lambda self, *a: calls.append(1) or accepts(self, *a))
    for datasource in (None, "shop"):
        for left_out in ({("knowledge/sql/p1.md", "question 1"), ("knowledge/sql/p3.md",
                                                                  "question 3")},
                         {("knowledge/sql/p2.md", "question 2"), ("nowhere.md", "x")},
                         {("knowledge/sql/p1.md", "question 4")}):
            filters = Filters(datasource=datasource, exclude=frozenset(left_out))
            want = [bool(live[n]) and filters.accepts_fields(r[4], r[7], r[6], r[8])
                    and (r[1], r[2]) not in left_out for n, r in enumerate(rows)]
            calls.clear()
            assert _CopyView(copy, filters).allowed.tolist() == want
            assert calls == ([] if datasource is None or left_out != {
                ("knowledge/sql/p1.md", "question 1"), ("knowledge/sql/p3.md", "question 3")}
                else [1] * len(rows))


def _bm25(copy: readcopy.RecallCopy, terms: str) -> dict[int, float]:
    """Row -> the copy's BM25 score of the rows holding any of ``terms``."""
    rows, scores = copy.bm25_arrays(terms.split())
    return dict(zip(rows.tolist(), scores.tolist(), strict=True))
