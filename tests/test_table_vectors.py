"""The recall copy's float32 vectors read from the table's own data files: the saved copy
holds none of them, the rows a reader makes are the copy's rows bit for bit, and a copy
whose vectors are not in the table (or whose runs are damaged) is handled as before."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import write_pair
from test_daemon import assert_same_answers
from test_recall_copy import QUESTIONS, _fill, recall_results

from wrenmem.fs.fsutil import read_marshal, write_marshal
from wrenmem.index import recallcopy, tablevectors, vectorscan
from wrenmem.index import table as index
from wrenmem.index.sync import sync_pairs
from wrenmem.recall import vector
from wrenmem.recall.hits import Filters
from wrenmem.recall.vector import HybridBackend
from wrenmem.settings import Settings, load_settings
from wrenmem.storage import lance


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """110 pairs written in two syncs (two data files), with the real default model."""
    root = tmp_path_factory.mktemp("tablevectors") / "proj"
    (root / "knowledge" / "sql").mkdir(parents=True)
    _fill(root)
    sync_pairs(load_settings(root))
    write_pair(root, "extra/one.md", "How many refunds were paid twice?",
               "SELECT COUNT(*) FROM refunds WHERE paid > 1")
    sync_pairs(load_settings(root))
    return root


@pytest.fixture
def project(indexed: Path, copy_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
            ) -> Path:
    """A copy of the project, its recall copy saved as for a table past MIN_ROWS rows (a
    smaller one's copy keeps its float32 vectors: its searches scan them all)."""
    monkeypatch.setattr(vectorscan, "MIN_ROWS", 0)
    root = copy_project(indexed)
    settings = load_settings(root)  # the copy of this folder, as its sync saves it
    assert recallcopy.save(settings, index.open_table(index.connect(settings)))
    recallcopy._RECENT.clear()
    return root


def table_copy(settings: Settings) -> recallcopy.RecallCopy:
    return recallcopy.RecallCopy.from_table(index.open_table(index.connect(settings)))


def test_the_saved_copy_holds_no_float32_vectors_and_reads_the_same_rows_from_the_table(
        project: Path) -> None:
    settings = load_settings(project)
    record = read_marshal(recallcopy.copy_path(settings))
    assert "matrix" not in record["sections"] and record["runs"]
    assert sum(r[3] for r in record["runs"]) == record["count"] == 111
    assert len({r[0] for r in record["runs"]}) >= 2  # rows from both writes' files
    data = settings.state_dir / record["data"]
    assert data.stat().st_size == sum(n for _at, n in record["sections"].values())
    float32 = record["count"] * record["dim"] * 4
    assert all(n < float32 for name, (_at, n) in record["sections"].items()
               if name != "p_rotation")  # no float32 block of the rows (the rotation: 512 x 160)
    want = table_copy(settings).matrix
    saved = recallcopy.load(settings, record["model_id"])
    assert saved is not None and isinstance(saved.matrix, tablevectors.MappedRows)
    rows = saved.matrix
    assert rows.shape == want.shape and len(rows) == len(want)
    rng = np.random.default_rng(7)
    for size in (1, 2, 17, 64, 110):  # any part is the rows of the whole, bit for bit
        numbers = rng.choice(len(want), size, replace=False)
        assert rows[numbers].tobytes() == want[numbers].tobytes()
    mask = rng.random(len(want)) < 0.3
    assert rows[mask].tobytes() == want[mask].tobytes()
    assert rows[3].tobytes() == want[3].tobytes() and rows[-1].tobytes() == want[-1].tobytes()
    assert rows[5:40].tobytes() == want[5:40].tobytes()
    assert rows[::9].tobytes() == want[::9].tobytes()
    with pytest.raises(IndexError):
        rows[len(want)]
    assert np.asarray(rows).tobytes() == want.tobytes()  # every row, made once and kept
    assert rows[np.array([4, 2])].tobytes() == want[[4, 2]].tobytes()


def test_a_scan_of_the_mapped_rows_finds_what_the_float32_scan_finds(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The int8 and prefix scans over the saved copy (candidates re-scored from the
    table's files): the same rows, order and cosines as the float32 scan of every row."""
    monkeypatch.setattr(vectorscan, "CANDIDATES", 40)
    monkeypatch.setattr(vectorscan, "PREFIX_DIMS", 64)
    settings = load_settings(project)
    whole = table_copy(settings)
    recallcopy._RECENT.clear()
    recallcopy.write(settings, whole, index.disk_listing(settings))  # with int8 codes
    recallcopy._RECENT.clear()
    saved = recallcopy.load(settings, whole.model_id)
    assert saved is not None and isinstance(saved.matrix, tablevectors.MappedRows)
    scan = saved.scan()
    assert scan._prefix is not None and scan._quantized is None  # the file's prefix codes
    assert scan._prefix.ints.shape == (len(whole.matrix), 64)
    with vectorscan._one_blas_thread():  # as the writer made them (make_prefix: one
        made = vectorscan.PrefixCodes.build(whole.matrix, 64)  # BLAS thread)
    assert scan._prefix.ints.tobytes() == made.ints.tobytes()
    assert scan._prefix.terms.tobytes() == made.terms.tobytes()
    embedder = HybridBackend(settings).embedder
    vectors = embedder.embed([*QUESTIONS, "refunds paid twice", "stores by rating"])
    codes = scan._prefix
    for prefix in (True, False):
        scan._prefix = codes if prefix else None  # without: the int8 scan, made from the
        for raw in vectors:  # rows read from the table's files
            query = np.asarray(raw, dtype=np.float32)
            query = query / float(np.linalg.norm(query))
            every = vectorscan.exact_cosines(whole.matrix, query)
            for depth in (1, 5, 10):
                rows, cosines = scan.nearest(raw, depth)
                want = vectorscan.best(every, np.arange(len(every)), depth, None)
                assert rows.tolist() == want.tolist()
                assert cosines.tobytes() == every[want].tobytes()
    assert scan.prefixed and scan.proved > scan.prefixed  # both ways were taken


@pytest.mark.parametrize("off", [[40], [0, 1, 2, 60, 110], list(range(3, 73))])
def test_vectors_not_in_the_table_are_saved_in_the_copy(project: Path, off: list[int]
                                                        ) -> None:
    """Rows not found in the table's files (as a small fragment's may be): a few are held
    in the copy itself, beside the runs; past 64 (and one in 100) the copy holds every
    row. Read back, the same vectors bit for bit either way."""
    settings = load_settings(project)
    whole = table_copy(settings)
    changed = whole.matrix.copy()
    for n in off:  # rows off by an ulp: in no data file
        changed[n] = np.nextafter(changed[n], np.float32(2.0))
    other = recallcopy.RecallCopy(whole.model_id, whole.rows, changed, whole.lengths,
                                  whole.postings)
    listing = index.disk_listing(settings)
    folder = lance.table_folder(settings.index_uri, index.TABLE)
    assert folder is not None and tablevectors.locate(folder, listing, whole.matrix) is not None
    runs = tablevectors.locate(folder, listing, changed)
    held = len(off) <= 64
    assert (runs is not None) == held
    recallcopy._RECENT.clear()
    assert recallcopy.write(settings, other, listing)
    record = read_marshal(recallcopy.copy_path(settings))
    recallcopy._RECENT.clear()
    saved = recallcopy.load(settings, whole.model_id)
    assert saved is not None
    if held:
        assert runs is not None and tablevectors.own_rows(runs) == off
        assert record["runs"] == runs and "matrix" not in record["sections"]
        assert record["sections"]["own"][1] == len(off) * changed.shape[1] * 4
        assert isinstance(saved.matrix, tablevectors.MappedRows)
        for n in [*off, 5, len(changed) - 1]:  # one row, as a search re-scores it
            assert saved.matrix[n].tobytes() == changed[n].tobytes()
        picked = np.array([off[0], 7, off[-1], 8])
        assert saved.matrix[picked].tobytes() == changed[picked].tobytes()
    else:
        assert record["runs"] is None and "matrix" in record["sections"]
        assert isinstance(saved.matrix, np.ndarray)
    assert np.asarray(saved.matrix).tobytes() == changed.tobytes()


@pytest.mark.parametrize("damage", ["unlisted file", "past the end", "a row short"])
def test_damaged_runs_are_not_used(project: Path, damage: str) -> None:
    settings = load_settings(project)
    model_id = HybridBackend(settings).embedder.model_id
    path = recallcopy.copy_path(settings)
    record = read_marshal(path)
    name, offset, first, rows = record["runs"][0]
    if damage == "unlisted file":
        record["runs"][0] = ("data/elsewhere.lance", offset, first, rows)
    elif damage == "past the end":
        record["runs"][0] = (name, 1 << 40, first, rows)
    else:
        record["runs"][-1] = (*record["runs"][-1][:3], record["runs"][-1][3] - 1)
    assert write_marshal(path, record)
    recallcopy._RECENT.clear()
    assert recallcopy.load(settings, model_id) is None
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(vector, "IN_MEMORY_MAX_ROWS", 0)
        patched.setattr(recallcopy, "load", lambda *a: None)
        want = HybridBackend(settings).search(QUESTIONS, 5, Filters())
    got = HybridBackend(settings).search(QUESTIONS, 5, Filters())  # reads the table anew
    assert_same_answers(recall_results(QUESTIONS, "hybrid", got),
                        recall_results(QUESTIONS, "hybrid", want))


def test_a_small_tables_copy_keeps_its_float32_vectors(
        indexed: Path, copy_project: Callable[..., Path]) -> None:
    """Below MIN_ROWS every search scans every row: the copy keeps them, mapped whole."""
    root = copy_project(indexed)
    settings = load_settings(root)
    assert recallcopy.save(settings, index.open_table(index.connect(settings)))
    record = read_marshal(recallcopy.copy_path(settings))
    assert record["runs"] is None and "matrix" in record["sections"]
    assert record["prefix"] is None and "ints" not in record["sections"]
    recallcopy._RECENT.clear()
    saved = recallcopy.load(settings, record["model_id"])
    assert saved is not None and isinstance(saved.matrix, np.ndarray)
    assert saved.matrix.tobytes() == table_copy(settings).matrix.tobytes()
