"""The recall copy: a one-shot recall answers from it exactly as from LanceDB, never from a
stale, damaged or foreign copy, and the CLI then imports neither LanceDB nor click."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import copy_of, imported_modules, index_lock_held, run_wrenmem, write_pair
from test_daemon import assert_same_answers

from wrenmem.fs.fsutil import read_marshal, write_marshal
from wrenmem.index import copyjob, recallcopy
from wrenmem.index import table as index
from wrenmem.index.sync import sync_pairs
from wrenmem.recall import forms, vector
from wrenmem.recall.hits import Filters
from wrenmem.recall.recaller import recall_many
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
def project_copy(built: Path, copy_project: Callable[..., Path],
                 monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of ``built``, whose syncs start no detached copy job (tests/test_copy_job.py
    has those): a job's data file, written a second or more later, would be one more
    than a test counts."""
    monkeypatch.setattr(copyjob, "start", lambda _settings: False)
    return copy_project(built)


@pytest.mark.parametrize("kind", [VectorBackend, HybridBackend])
@pytest.mark.parametrize("filters", [Filters(), Filters(datasource="shop"),
                                     Filters(tags=("kpi",)), Filters(source="nobody")])
def test_the_copy_answers_exactly_what_lancedb_answers(built: Path, kind: type,
                                                       filters: Filters,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(built)
    copy = recallcopy.load(settings, kind(settings).embedder.model_id)
    assert copy is not None and len(copy) == 110
    fast = kind(settings)
    got = fast.search(QUESTIONS, 5, filters)
    assert fast._table is None  # LanceDB was never opened
    monkeypatch.setattr(recallcopy, "load", lambda *a: None)  # no saved copy
    monkeypatch.setattr(recallcopy, "_RECENT", {})
    warm = kind(settings)  # it reads the table whole and holds it
    assert_same_answers(recall_results(QUESTIONS, kind.name, warm.search(QUESTIONS, 5, filters)),
                        recall_results(QUESTIONS, kind.name, got))
    assert warm._table is not None and warm._memory is not None
    monkeypatch.setattr(vector, "IN_MEMORY_MAX_ROWS", 0)  # LanceDB's own searches
    monkeypatch.setattr(recallcopy, "MAX_ROWS", 0)
    want = kind(settings).search(QUESTIONS, 5, filters)
    assert_same_answers(
        [r for r in recall_results(QUESTIONS, kind.name, got)],
        [r for r in recall_results(QUESTIONS, kind.name, want)])
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


def current_data_file(settings: Settings) -> Path:
    """The data file the saved copy's header names."""
    return settings.state_dir / read_marshal(recallcopy.copy_path(settings))["data"]


def recall_results(questions: list[str], name: str, hits: list) -> list:
    from wrenmem.recall.hits import RecallResult

    return [RecallResult(q, name, tuple(h)) for q, h in zip(questions, hits, strict=True)]


def test_a_long_lived_process_reads_the_saved_copy_once_and_sees_writes(
        project_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(project_copy)
    recall_many(settings, ["warm-up"], 1, Filters())  # leaves a copy for this folder
    monkeypatch.setattr(recallcopy, "_RECENT", {})  # as a new process
    reads: list[int] = []
    real_read = recallcopy._read

    def counted(*args: object) -> recallcopy.RecallCopy | None:
        found = real_read(*args)  # type: ignore[arg-type]
        reads.append(found is not None)
        return found

    monkeypatch.setattr(recallcopy, "_read", counted)
    for question in QUESTIONS:  # a new backend per call, as Memory.recall makes
        recall_many(settings, [question], 3, Filters())
    backend = HybridBackend(settings)
    backend.search(QUESTIONS, 3, Filters())
    assert reads == [True] and backend._table is None  # one read; LanceDB never opened
    write_pair(project_copy, "new/capybara.md", "How many capybaras were adopted?",
               "SELECT COUNT(*) FROM adoption WHERE animal = 'capybara'")
    sync_pairs(settings)  # a writer: a new table version and a new saved copy
    [hits] = backend.search(["capybaras adopted"], 1, Filters())
    assert hits[0].path == "knowledge/sql/new/capybara.md"
    assert reads == [True] and backend._table is None  # this process's sync handed it over
    write_pair(project_copy, "new/okapi.md", "How many okapis were adopted?", "SELECT 2")
    # another process writes the table (its small sync would write the journal: the held
    # copy would then be searched with the journal laid over it, test_journal.py)
    assert run_wrenmem(["sync"], project_copy,
                       env={"WRENMEM_JOURNAL": "never"}).returncode == 0
    [hits] = backend.search(["okapis adopted"], 1, Filters())
    assert hits[0].path == "knowledge/sql/new/okapi.md"
    assert reads == [True, True] and backend._table is None  # its copy, read once
    write_pair(project_copy, "new/quokka.md", "How many quokkas were adopted?", "SELECT 3")
    assert run_wrenmem(["sync"], project_copy).returncode == 0  # to the journal
    [hits] = backend.search(["quokkas adopted"], 1, Filters())
    assert hits[0].path == "knowledge/sql/new/quokka.md"
    assert reads == [True, True] and backend._table is None  # nothing read again


def test_a_backend_with_the_table_open_holds_the_saved_copy_by_version_and_sees_writes(
        project_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's backend (its table open) finds the saved copy by the table's files
    once, then checks the table's version alone; another process's write (a new version,
    a new copy) is seen at the next search, as LanceDB itself answers."""
    settings = load_settings(project_copy)
    recall_many(settings, ["warm-up"], 1, Filters())  # leaves a copy for this folder
    monkeypatch.setattr(recallcopy, "_RECENT", {})  # as a new process
    listings: list[int] = []
    real_listing = index.disk_listing

    def counted(s: Settings) -> lance.Listing | None:
        listings.append(1)
        return real_listing(s)

    monkeypatch.setattr(index, "disk_listing", counted)
    backend = HybridBackend(settings)
    backend.table()  # as the daemon's recaller opens it first
    backend.search(QUESTIONS, 3, Filters())
    held = backend._memory
    assert held is not None and isinstance(held[2].rows, recallcopy.LazyRows)  # the file's
    assert held[1] == backend.table().version
    for question in QUESTIONS:
        backend.search([question], 3, Filters())
    assert len(listings) == 1  # the version said it was the same table
    write_pair(project_copy, "new/okapi.md", "How many okapis were adopted?", "SELECT 2")
    assert run_wrenmem(["sync"], project_copy).returncode == 0  # another process writes
    got = backend.search(["okapis adopted", *QUESTIONS], 3, Filters())
    assert got[0][0].path == "knowledge/sql/new/okapi.md"
    with monkeypatch.context() as patched:
        patched.setattr(vector, "IN_MEMORY_MAX_ROWS", 0)
        patched.setattr(recallcopy, "load", lambda *a: None)
        want = HybridBackend(settings).search(["okapis adopted", *QUESTIONS], 3, Filters())
    assert_same_answers(recall_results(QUESTIONS, "hybrid", got[1:]),
                        recall_results(QUESTIONS, "hybrid", want[1:]))


def test_keyword_scores_are_lancedb_full_text_scores(built: Path) -> None:
    settings = load_settings(built)
    table = index.open_table(index.connect(settings))
    copy = recallcopy.load(settings, index.table_model_id(table) or "")
    assert copy is not None
    ids = [row[0] for row in copy.rows]
    found = 0
    for question in QUESTIONS:
        terms = index.query_terms(question)
        theirs = {r["id"]: r["_score"] for r in
                  table.search(terms, query_type="fts", fts_columns="terms").limit(200)
                  .select(["id", "_score"]).to_list()}
        ours = {ids[n]: s for n, s in copy.bm25(terms.split()).items()}
        assert ours.keys() == theirs.keys()
        for key, score in theirs.items():
            assert ours[key] == pytest.approx(score, rel=1e-5)
        found += len(ours)
    assert found > 50  # (no pair is in Chinese: that question finds nothing either way)


def _bm25_written_out(copy: recallcopy.RecallCopy, terms: list[str], allowed: Any
                      ) -> tuple[Any, Any]:
    """BM25 over the copy's postings, every term's statistics computed for this call."""
    import math

    import numpy as np

    k1, b = recallcopy.BM25_K1, recallcopy.BM25_B
    lengths = np.frombuffer(copy.lengths, dtype=np.int32)
    total = np.zeros(len(copy.rows))
    touched = np.zeros(len(copy.rows), dtype=bool)
    for term in dict.fromkeys(terms):
        raw = copy.postings.get(term)
        if raw is None:
            continue
        rows, counts = recallcopy._unpacked(raw)
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
    whole = recallcopy.load(settings, index.table_model_id(
        index.open_table(index.connect(settings))) or "")
    assert whole is not None
    live = np.ones(len(whole.rows), dtype=bool)
    live[::7] = False  # as a write leaves removed rows in place
    thinned = whole.with_rows(live, [], [], [])
    allowed = np.arange(len(whole.rows)) % 3 != 0
    monkeypatch.setattr(recallcopy, "KEPT_POSTINGS", 60)  # dropped and made again
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


def test_a_saved_copy_holds_the_tables_rows_and_postings_in_fewer_bytes(
        built: Path, copy_project: Callable[..., Path]) -> None:
    """Saved, a row's path where it is its id is left out and its short columns are kept
    once a copy, a term's counts as uint8 (uint16 past 255): read back, the same rows
    (their terms each once) and the same BM25 arrays as the copy read from the table."""
    settings = load_settings(copy_project(built))
    whole = recallcopy.RecallCopy.from_table(index.open_table(index.connect(settings)))
    rows = list(whole.rows)
    at = recallcopy.POSITION
    rows[3] = (*rows[3][:at["path"]], "knowledge/sql/moved/elsewhere.md",
               *rows[3][at["path"] + 1:])  # a path that is not its id
    rows[7] = (*rows[7][:at["tags"]], ["kpi", "weekly"], *rows[7][at["tags"] + 1:])
    rows[9] = (*rows[9][:at["terms"]], " ".join(["orders"] * 300 + ["tally"]))  # > 255
    lengths, postings = recallcopy._postings([r[at["terms"]] for r in rows])
    copy = recallcopy.RecallCopy(whole.model_id, rows, whole.matrix, lengths, postings)
    assert recallcopy.write(settings, copy, index.disk_listing(settings))
    record = read_marshal(recallcopy.copy_path(settings))
    assert len(record["groups"]) < len(rows) // 4
    assert isinstance(record["postings"]["orders"], tuple)
    assert len(record["postings"]["orders"][1]) == 2 * len(record["postings"]["orders"][0]) // 4
    recallcopy._RECENT.clear()
    saved = recallcopy.load(settings, whole.model_id)
    assert saved is not None and isinstance(saved.rows, recallcopy.LazyRows)
    want = [(*r[:at["terms"]], recallcopy._distinct_terms(r[at["terms"]])) for r in rows]
    assert list(saved.rows) == want and [saved.rows[n] for n in (3, 7, 9)] == \
        [want[n] for n in (3, 7, 9)]
    for question in [*QUESTIONS, "tally of orders"]:
        terms = index.query_terms(question).split()
        got, expected = saved.bm25_arrays(terms), copy.bm25_arrays(terms)
        assert got[0].tolist() == expected[0].tolist()
        assert got[1].tobytes() == expected[1].tobytes()


def test_a_write_makes_the_copy_stale_and_the_sync_renews_it(project_copy: Path) -> None:
    settings = load_settings(project_copy)
    model_id = HybridBackend(settings).embedder.model_id
    path = recallcopy.copy_path(settings)
    assert recallcopy.load(settings, model_id) is None  # the copy of another folder's index
    recall_many(settings, ["capybaras adopted"], 1, Filters())  # from the table: it leaves one
    assert recallcopy.load(settings, model_id) is not None
    old = path.read_bytes()
    write_pair(project_copy, "new/capybara.md", "How many capybaras were adopted?",
               "SELECT COUNT(*) FROM adoption WHERE animal = 'capybara'")
    sync_pairs(settings)
    renewed = recallcopy.load(settings, model_id)
    assert renewed is not None and len(renewed) == 111
    [result] = recall_many(settings, ["capybaras adopted"], 1, Filters())
    assert result.hits[0].path == "knowledge/sql/new/capybara.md"
    path.write_bytes(old)  # the copy from before the write: the table's files changed since
    recallcopy._RECENT.clear()  # as a new process
    assert recallcopy.load(settings, model_id) is None
    [again] = recall_many(settings, ["capybaras adopted"], 1, Filters())
    assert again.hits[0].path == "knowledge/sql/new/capybara.md"
    # that search read the table itself, and left a current copy for the next process
    recallcopy._RECENT.clear()
    assert recallcopy.load(settings, model_id) is not None


def test_a_damaged_or_foreign_copy_is_not_used(project_copy: Path, tmp_path: Path) -> None:
    settings = load_settings(project_copy)
    model_id = HybridBackend(settings).embedder.model_id
    want = recall_many(settings, QUESTIONS, 3, Filters())
    path = recallcopy.copy_path(settings)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    recallcopy._RECENT.clear()  # as a new process
    assert recallcopy.load(settings, model_id) is None
    assert_same_answers(recall_many(settings, QUESTIONS, 3, Filters()), want)
    path.write_bytes(data)
    recallcopy._RECENT.clear()
    assert recallcopy.load(settings, "another-model@1") is None
    elsewhere = copy_of(project_copy, tmp_path / "elsewhere")  # .wrenmem copied along
    assert recallcopy.load(load_settings(elsewhere), model_id) is None


def test_no_copy_past_its_size_limit(project_copy: Path, monkeypatch: pytest.MonkeyPatch
                                     ) -> None:
    settings = load_settings(project_copy)
    monkeypatch.setattr(recallcopy, "MAX_ROWS", 100)
    write_pair(project_copy, "new/one.md", "One more question", "SELECT 1")
    sync_pairs(settings)
    assert not recallcopy.copy_path(settings).exists()
    [result] = recall_many(settings, ["One more question"], 1, Filters())
    assert result.hits[0].path == "knowledge/sql/new/one.md"


def test_a_table_too_big_to_save_is_read_whole_only_by_a_backend_that_searches_again(
        project_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(project_copy)
    monkeypatch.setattr(recallcopy, "MAX_ROWS", 100)  # 110 pairs: no copy to save
    monkeypatch.setattr(recallcopy, "_RECENT", {})
    backend = HybridBackend(settings)
    first = backend.search(QUESTIONS, 3, Filters())  # a one-shot call: LanceDB's search
    assert backend._table is not None and backend._memory is None
    assert not recallcopy.copy_path(settings).exists() or recallcopy.load(
        settings, backend.embedder.model_id) is None
    second = backend.search(QUESTIONS, 3, Filters())  # a long-lived one: held in memory
    assert backend._memory is not None
    assert_same_answers(recall_results(QUESTIONS, "hybrid", second),
                        recall_results(QUESTIONS, "hybrid", first))


@pytest.mark.parametrize("args", [
    ["recall", "-q", "How many orders are there?", "-q", "每个门店的订单数量是多少？", "--json"],
    ["recall", "-q", "average price", "-k", "4", "-d", "shop", "--min-score", "0.2"],
    ["recall", "-q", "highest rating", "-b", "vector", "--tag", "kpi", "-o", "json"],
])
def test_a_one_shot_cli_recall_needs_no_lancedb(project_copy: Path, args: list[str]) -> None:
    recall_many(load_settings(project_copy), ["warm-up"], 1, Filters())  # writes the copy
    env = {"WRENMEM_NO_DAEMON": "1"}
    fast = run_wrenmem(args, project_copy, env={**env, "PYTHONPROFILEIMPORTTIME": "1"})
    assert fast.returncode == 0, fast.stderr
    imported = imported_modules(fast.stderr)
    assert "wrenmem.index.recallcopy" in imported
    assert not {"lancedb", "pyarrow"} & imported


def test_a_held_copy_follows_writes_by_reading_only_the_new_rows(
        project_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-lived backend holding the table sees an edit, an added and a removed pair
    by reading those rows alone; its answers (cosines, BM25 statistics without the
    removed rows) are those of a copy read whole, and of LanceDB's own searches."""
    settings = load_settings(project_copy)
    monkeypatch.setattr(recallcopy, "load", lambda *a: None)  # no saved or handed copy
    monkeypatch.setattr(recallcopy, "_RECENT", {})
    backend = HybridBackend(settings)
    for _ in range(2):
        backend.search(QUESTIONS, 5, Filters())
    assert backend._memory is not None
    whole: list[int] = []
    real = recallcopy.RecallCopy.from_table.__func__  # type: ignore[attr-defined]

    def counted(cls: type, table: object) -> recallcopy.RecallCopy:
        whole.append(1)
        return real(cls, table)

    monkeypatch.setattr(recallcopy.RecallCopy, "from_table", classmethod(counted))
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
        sync_pairs(settings)  # (which saves a copy of its own, read whole)
        recallcopy._RECENT.clear()  # as if another process wrote
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
            ours = {ids[n]: s for n, s in held.bm25(terms.split()).items()}
            assert ours.keys() == theirs.keys()
            for key, score in theirs.items():
                assert ours[key] == pytest.approx(score, rel=1e-5)
    with monkeypatch.context() as patched:  # LanceDB's own searches answer the same
        patched.setattr(vector, "IN_MEMORY_MAX_ROWS", 0)
        patched.setattr(recallcopy, "MAX_ROWS", 0)
        for f in filters:
            assert_same_answers(
                recall_results(questions, "hybrid", HybridBackend(settings).search(
                    questions, 5, f)),
                recall_results(questions, "hybrid", backend.search(questions, 5, f)))


def test_a_long_lived_reader_saves_a_copy_too_big_for_a_writer_and_a_new_process_uses_it(
        project_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_ROWS the writer saves no copy (reading the table whole would slow every
    write); a backend that holds the table saves it, removed rows and int8 vectors
    included, and a new process answers from the mapped file exactly as LanceDB does."""
    monkeypatch.setattr(vector.vectorscan, "PREFIX_DIMS", 64)  # (prefix codes saved too)
    monkeypatch.setattr(recallcopy, "MAX_ROWS", 50)  # 110 pairs: too big for the writer
    monkeypatch.setattr(recallcopy, "KEEP_OTHER_SECONDS", 3600.0)
    monkeypatch.setattr(vector.vectorscan, "MIN_ROWS", 0)  # and the int8 scan saved too
    settings = load_settings(project_copy)
    (project_copy / "knowledge/sql/orders/count.md").unlink()
    sync_pairs(settings)
    assert not recallcopy.copy_path(settings).exists()
    monkeypatch.setattr(recallcopy, "_RECENT", {})
    backend = HybridBackend(settings)
    for _ in range(2):
        backend.search(QUESTIONS, 5, Filters())
    assert backend._memory is not None
    write_pair(project_copy, "orders/count.md", "How many orders were refunded?",
               "SELECT COUNT(*) FROM orders WHERE refunded")
    (project_copy / "knowledge/sql/stores/max_price.md").unlink()
    sync_pairs(settings)
    recallcopy._RECENT.clear()
    backend.search(QUESTIONS, 5, Filters())  # brought up to date, then saved
    held = backend._memory[2] if backend._memory else None
    assert held is not None and held.live is not None
    for thread in threading.enumerate():
        if thread.name == "wrenmem-recall-copy":
            thread.join()
    recallcopy._RECENT.clear()  # a new process
    saved = recallcopy.load(settings, backend.embedder.model_id)
    assert saved is not None and isinstance(saved.rows, recallcopy.LazyRows)
    assert len(saved) == len(held) == 109 and saved.live is not None
    assert saved.scan()._prefix is not None  # the prefix codes, read from the file
    questions = [*QUESTIONS, "How many orders were refunded?"]
    fresh_full_text_index(settings)  # (a new table version: the listing the file keys is
    recallcopy.write(settings, saved, index.disk_listing(settings))  # that of the old one)
    for filters in (Filters(), Filters(datasource="shop")):
        fresh = HybridBackend(settings)
        got = fresh.search(questions, 5, filters)
        assert fresh._table is None  # answered from the file
        with monkeypatch.context() as patched:
            patched.setattr(vector, "IN_MEMORY_MAX_ROWS", 0)
            patched.setattr(recallcopy, "load", lambda *a: None)
            want = HybridBackend(settings).search(questions, 5, filters)
        assert_same_answers(recall_results(questions, "hybrid", got),
                            recall_results(questions, "hybrid", want))
    for thread in threading.enumerate():
        if thread.name == "wrenmem-recall-copy":
            thread.join()
    # other writers' data files of moments ago are kept beside the new one: how many there
    # are depends on how many saves the searches above made (3 files, not 2, in a
    # fresh-clone CI run under load, with the saving threads joined), so at least one
    assert len(recallcopy._data_files(settings)) >= 2
    monkeypatch.setattr(recallcopy, "KEEP_OTHER_SECONDS", 0.0)
    assert recallcopy.write(settings, saved, index.disk_listing(settings))
    assert len(recallcopy._data_files(settings)) == 1  # the old one is cleaned up


def test_a_damaged_data_file_is_not_used(project_copy: Path) -> None:
    settings = load_settings(project_copy)
    model_id = HybridBackend(settings).embedder.model_id
    want = recall_many(settings, QUESTIONS, 3, Filters())
    data = current_data_file(settings)
    whole = data.read_bytes()
    data.write_bytes(whole[:-10])  # cut short: not opened
    recallcopy._RECENT.clear()
    assert recallcopy.load(settings, model_id) is None
    assert_same_answers(recall_many(settings, QUESTIONS, 3, Filters()), want)
    data = current_data_file(settings)  # that search saved a good one again
    whole = data.read_bytes()
    data.write_bytes(whole[:-200] + b"\xff" * 200)  # the last rows garbled, same size
    recallcopy._RECENT.clear()
    assert recallcopy.load(settings, model_id) is not None  # (rows are read when shown)
    backend = HybridBackend(settings)
    found = backend.search(["How many suppliers are there?", *QUESTIONS], 3, Filters(
        datasource="crm"))  # a filter reads every row: the garbled one too
    assert backend._table is not None  # LanceDB answered
    recallcopy._RECENT.clear()
    asked = ["How many suppliers are there?", *QUESTIONS]
    assert_same_answers(recall_results(asked, "hybrid", found), recall_results(
        asked, "hybrid", HybridBackend(settings).search(asked, 3, Filters(datasource="crm"))))


def test_reset_removes_the_copy_with_the_table(project_copy: Path) -> None:
    from wrenmem.index.drift import reset_index

    settings = load_settings(project_copy)
    assert recallcopy.copy_path(settings).exists() and recallcopy._data_files(settings)
    assert reset_index(settings)
    assert not recallcopy.copy_path(settings).exists() and not recallcopy._data_files(settings)


def test_a_process_that_searches_again_makes_prefix_codes_and_answers_the_same(
        project_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From a process's second search of the copy (a new backend per call, as Memory.recall
    makes) the copy's scan makes its prefix codes; a one-shot search of many questions
    makes none. Every answer is LanceDB's."""
    monkeypatch.setattr(vector.vectorscan, "MIN_ROWS", 0)
    monkeypatch.setattr(vector.vectorscan, "CANDIDATES", 40)  # 110 rows: fewer than 256
    monkeypatch.setattr(vector, "DEPTH", 10)  # (at most a quarter of the candidates)
    settings = load_settings(project_copy)
    recall_many(settings, ["warm-up"], 1, Filters())
    monkeypatch.setattr(recallcopy, "_RECENT", {})
    backend = HybridBackend(settings)
    first = backend.search(QUESTIONS, 5, Filters())
    copy = recallcopy.load(settings, backend.embedder.model_id)
    assert copy is not None and copy.scan()._making is None  # one search: none made
    second = HybridBackend(settings).search(QUESTIONS, 5, Filters())
    assert copy.scan()._making is not None
    assert copy.scan().make_prefix(wait=True) is not None
    third = backend.search(QUESTIONS, 5, Filters(datasource="shop"))
    assert copy.scan().prefixed >= len(QUESTIONS)
    with monkeypatch.context() as patched:
        patched.setattr(vector, "IN_MEMORY_MAX_ROWS", 0)
        patched.setattr(recallcopy, "load", lambda *a: None)
        lance_backend = HybridBackend(settings)
        want = lance_backend.search(QUESTIONS, 5, Filters())
        want_shop = lance_backend.search(QUESTIONS, 5, Filters(datasource="shop"))
    for got in (first, second):
        assert_same_answers(recall_results(QUESTIONS, "hybrid", got),
                            recall_results(QUESTIONS, "hybrid", want))
    assert_same_answers(recall_results(QUESTIONS, "hybrid", third),
                        recall_results(QUESTIONS, "hybrid", want_shop))


def test_a_warm_up_ends_when_the_copy_its_searches_save_is_written(
        project_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-lived reader of a table too big for its writer saves the copy from a thread;
    the warm-up (the daemon's, before it says it is warm) waits for that thread, so the
    first requests do not share the interpreter with it."""
    import time

    from wrenmem.recall.recaller import Recaller
    from wrenmem.watch.freshness import Freshness

    monkeypatch.setattr(recallcopy, "MAX_ROWS", 50)  # 110 pairs: too big for the writer
    settings = load_settings(project_copy, overrides={"backend": "hybrid"})
    recallcopy.discard(settings)
    monkeypatch.setattr(recallcopy, "_RECENT", {})
    real = recallcopy._write

    def slow(*args: Any) -> bool:
        time.sleep(1.0)
        return real(*args)

    monkeypatch.setattr(recallcopy, "_write", slow)
    freshness = Freshness(settings)
    try:
        Recaller(settings, freshness=freshness).warm_up()
        assert recallcopy.copy_path(settings).exists()
        assert not any(t.name == "wrenmem-recall-copy" and t.is_alive()
                       for t in threading.enumerate())
    finally:
        freshness.close()


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


def _fresh_labels(copy: recallcopy.RecallCopy) -> Any:
    """forms.label_matrix of the copy's rows' SQL, every row lexed anew."""
    return forms.label_matrix([row[recallcopy.POSITION["sql"]] for row in copy.rows])


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
    return tuple(values.get(c, row[n]) for n, c in enumerate(recallcopy.COLUMNS))


def test_a_saved_copy_holds_its_rows_labels_and_an_update_lexes_only_its_new_rows(
        project_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new process maps the labels saved with the copy (none lexed); a copy updated in
    memory (a pair removed, one edited, one added; then again) lexes only its new rows;
    every label matrix equals forms.label_matrix of the rows' SQL made anew."""
    settings = load_settings(project_copy)
    model_id = HybridBackend(settings).embedder.model_id
    recall_many(settings, ["warm-up"], 1, Filters())  # leaves a copy for this folder
    recallcopy._RECENT.clear()  # as a new process
    lexed = _recorded_lexing(monkeypatch)
    saved = recallcopy.load(settings, model_id)
    assert saved is not None and isinstance(saved.rows, recallcopy.LazyRows)
    assert saved.labels is not None and not saved.labels.flags.writeable  # mapped
    tally = _Derived.of(saved).tally(saved.live)
    got = saved.label_matrix()
    assert lexed == [] and tally.matrix is got
    assert got.dtype == np.uint8 and got.shape == (110, len(forms.LABELS))
    assert np.array_equal(got, _fresh_labels(saved))
    rows = list(saved.rows)
    live = np.ones(len(rows), dtype=bool)
    live[[0, 5]] = False  # row 0 removed, row 5 edited
    edited = _with_sql(rows[5], sql="SELECT store, SUM(amount) FROM orders GROUP BY store "
                                    "HAVING SUM(amount) > 10")
    added = _with_sql(rows[9], id="knowledge/sql/new/join.md", path="knowledge/sql/new/join.md",
                      sql="SELECT a.name FROM a JOIN b ON a.id = b.id WHERE b.x IS NOT NULL")
    updated = saved.with_rows(live, [edited, added], None, [saved.matrix[5], saved.matrix[9]])
    assert np.array_equal(_Derived.of(updated).tally(updated.live).matrix,
                          _fresh_labels(updated))
    assert lexed == [[edited[3], added[3]]]  # (3: the sql column)
    assert np.array_equal(updated.label_matrix()[:110], got)  # the saved rows' as saved
    again = updated.with_rows(np.concatenate([updated.live[:-1], [False]]),
                              [_with_sql(added, sql="SELECT DISTINCT name FROM a LIMIT 3")],
                              None, [saved.matrix[9]])
    assert np.array_equal(again.label_matrix(), _fresh_labels(again))
    assert len(lexed) == 2 and lexed[1] == ["SELECT DISTINCT name FROM a LIMIT 3"]


def test_a_copy_read_from_the_table_and_updated_from_it_labels_every_row(
        project_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy held by a long-lived reader follows a write (an edit, a new pair, a removed
    one) by reading and lexing only the new rows; the sync's saved copy, read back, holds
    the labels of the table's rows."""
    settings = load_settings(project_copy)
    whole = recallcopy.RecallCopy.from_table(index.open_table(index.connect(settings)))
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
    recallcopy._RECENT.clear()  # as a new process
    saved = recallcopy.load(settings, whole.model_id)
    assert saved is not None and saved.labels is not None and len(saved.rows) == 110
    assert np.array_equal(saved.label_matrix(), _fresh_labels(saved))
    assert len(lexed) == 1  # the saved labels were read, not made


def test_an_older_copy_or_damaged_labels_are_not_read_but_made_again(
        project_copy: Path) -> None:
    settings = load_settings(project_copy)
    model_id = HybridBackend(settings).embedder.model_id
    want = recall_many(settings, QUESTIONS, 3, Filters())  # leaves a copy for this folder
    path = recallcopy.copy_path(settings)
    record = read_marshal(path)
    assert record["v"] == recallcopy.VERSION and record["labels"] == sqllabels.fingerprint()
    older = {k: v for k, v in record.items() if k != "labels"}  # as version 4 saved it
    older["v"] = 4
    assert write_marshal(path, older)
    recallcopy._RECENT.clear()  # as a new process
    assert recallcopy.load(settings, model_id) is None
    assert_same_answers(recall_many(settings, QUESTIONS, 3, Filters()), want)
    renewed = read_marshal(path)  # that search read the table and saved a current copy
    assert renewed["v"] == recallcopy.VERSION and "labels" in renewed["sections"]
    at, size = renewed["sections"]["labels"]
    assert size == 110 * len(sqllabels.LABELS)
    data = current_data_file(settings)
    raw = bytearray(data.read_bytes())
    raw[at + 7] = 9  # not a 0/1 label: the labels are made again, the copy still used
    data.write_bytes(bytes(raw))
    recallcopy._RECENT.clear()
    copy = recallcopy.load(settings, model_id)
    assert copy is not None and copy.labels is not None
    assert np.array_equal(copy.label_matrix(), _fresh_labels(copy))
    assert_same_answers(recall_many(settings, QUESTIONS, 3, Filters()), want)


def test_labels_saved_under_other_label_rules_are_made_again(
        project_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy saves the fingerprint of sqllabels.LABELS (forms.LABELS is that tuple),
    the lexer and its RULES; a process whose labels differ reads the rest of the copy and
    makes the labels anew, whichever side changed."""
    settings = load_settings(project_copy)
    model_id = HybridBackend(settings).embedder.model_id
    recall_many(settings, ["warm-up"], 1, Filters())  # leaves a copy for this folder
    sql = recallcopy.POSITION["sql"]
    for name, value in [("LABELS", (*sqllabels.LABELS, "qualify")),
                        ("RULES", sqllabels.RULES + 1)]:
        with monkeypatch.context() as patched:
            patched.setattr(sqllabels, name, value)
            recallcopy._RECENT.clear()  # a new process with other label rules
            copy = recallcopy.load(settings, model_id)
            assert copy is not None and copy.labels is None
            made = copy.label_matrix()
            assert made.shape == (110, len(sqllabels.LABELS))
            assert np.array_equal(made, sqllabels.label_matrix(r[sql] for r in copy.rows))
            # and what that process saves, this code does not read as its own
            assert recallcopy.write(settings, copy, index.disk_listing(settings))
        recallcopy._RECENT.clear()
        copy = recallcopy.load(settings, model_id)
        assert copy is not None and copy.labels is None
        assert np.array_equal(copy.label_matrix(), _fresh_labels(copy))
