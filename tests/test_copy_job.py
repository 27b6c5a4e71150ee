"""The recall copy of a big table saved by a detached background job after a write
(:mod:`wrenmem.index.copyjob`): the next one-shot reader finds a current copy that answers
exactly as LanceDB; a kill at any step leaves the old copy, none or the new one, never one
read as current that is not; concurrent savers never leave a wrong one.

Real LanceDB, the real default model, real processes (the job is ``python -m``). "Big" is
``recallcopy.MAX_ROWS`` lowered below the 110 pairs of the shared fixture in this process
(the writer's side); the job itself saves any table up to ``FILE_MAX_ROWS``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import REPO, forget_process_state, write_pair
from test_daemon import assert_same_answers
from test_recall_copy import (
    QUESTIONS,
    built,  # noqa: F401 (a fixture)
    current_data_file,
    recall_results,
)

from wrenmem.fs import statedir
from wrenmem.fs.fsutil import read_marshal
from wrenmem.index import copyjob, recallcopy
from wrenmem.index import table as index
from wrenmem.index.sync import sync_pairs
from wrenmem.recall.hits import Filters
from wrenmem.recall.vector import HybridBackend
from wrenmem.settings import Settings, load_settings
from wrenmem.storage import lance

JOB_SECONDS = 180.0  # a job imports LanceDB and the model's tables on a loaded machine


@pytest.fixture
def big(built: Path, copy_project: Callable[..., Path],  # noqa: F811 (built: imported)
        monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the project whose table counts as past MAX_ROWS for its writers here,
    with the job on (conftest turns it off for every other test)."""
    monkeypatch.setenv("WRENMEM_BACKGROUND_COPY", "true")
    root = copy_project(built)
    settings = load_settings(root)  # its copy, of this folder (as its build saves it)
    assert recallcopy.save(settings, index.open_table(lance.connect(settings.index_uri)))
    forget_process_state(monkeypatch)
    monkeypatch.setattr(recallcopy, "MAX_ROWS", 50)
    return root


def _model_id(settings: Settings) -> str:
    return index.table_model_id(index.open_table(lance.connect(settings.index_uri))) or ""


def _lancedb_answers(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> list:
    """What the full path answers: no saved copy, the table read whole from LanceDB (as
    in test_recall_copy)."""
    with monkeypatch.context() as patched:
        patched.setattr(recallcopy, "load", lambda *a: None)
        patched.setattr(recallcopy, "MAX_ROWS", 20_000)
        patched.setattr(recallcopy, "_RECENT", {})
        backend = HybridBackend(settings)
        return recall_results(QUESTIONS, "hybrid", backend.search(QUESTIONS, 5, Filters()))


def _copy_answers(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> list:
    """What a new process answers from the saved copy (it must not open LanceDB)."""
    forget_process_state(monkeypatch)
    backend = HybridBackend(settings)
    got = recall_results(QUESTIONS, "hybrid", backend.search(QUESTIONS, 5, Filters()))
    assert backend._table is None  # answered from the copy
    return got


def _write_one(root: Path, n: int = 0) -> None:
    """A write through LanceDB (a full sync) that leaves whatever copy was saved before on
    disk, stale (as a writer killed before its copy handling, or of an older release)."""
    write_pair(root, f"more/okapi{n}.md", f"How many okapis were adopted in zoo {n}?",
               f"SELECT COUNT(*) FROM okapi WHERE zoo = {n}")
    with pytest.MonkeyPatch.context() as patched:
        patched.setenv("WRENMEM_JOURNAL", "never")
        patched.setattr(recallcopy, "save", lambda *a: False)
        assert not sync_pairs(load_settings(root)).journaled


def _run_job(root: Path, kill_at: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if kill_at is not None:
        env[copyjob.KILL_AT_ENV] = kill_at
    return subprocess.run([sys.executable, "-m", "wrenmem.index.copyjob", str(root),
                           load_settings(root).index], env=env, capture_output=True,
                          text=True, cwd=REPO, timeout=JOB_SECONDS)


def _wait_for_copy(settings: Settings, model_id: str) -> recallcopy.RecallCopy | None:
    deadline = time.monotonic() + JOB_SECONDS
    while time.monotonic() < deadline:
        recallcopy._RECENT.clear()
        copy = recallcopy.load(settings, model_id)
        if copy is not None:
            return copy
        time.sleep(0.25)
    return None


def test_a_write_past_max_rows_leaves_a_current_copy_saved_by_a_detached_job(
        big: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(big)
    model_id = _model_id(settings)
    started: list[Settings] = []
    real_start = copyjob.start
    monkeypatch.setattr(copyjob, "start", lambda s: started.append(s) or real_start(s))
    monkeypatch.setenv("WRENMEM_JOURNAL", "never")  # through LanceDB
    write_pair(big, "more/okapi.md", "How many okapis were adopted?", "SELECT 2")
    report = sync_pairs(settings)
    assert report.rows == 111 and not report.journaled
    assert len(started) == 1  # the write started the job and returned
    copy = _wait_for_copy(settings, model_id)
    assert copy is not None and len(copy) == 111
    assert recallcopy.saved_listing(settings) == index.disk_listing(settings)
    data = [p for p in settings.state_dir.iterdir() if recallcopy.LEFT_NAME.fullmatch(p.name)]
    assert len(data) == 1  # one data file: the old one was removed by the write
    assert_same_answers(_copy_answers(settings, monkeypatch),
                        _lancedb_answers(settings, monkeypatch))


@pytest.mark.parametrize("step", ["locked", "data-half", "data", "read", "written"])
def test_a_kill_at_any_step_leaves_the_old_copy_none_or_the_new_one(
        big: Path, step: str, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(big)
    model_id = _model_id(settings)
    assert recallcopy.load(settings, model_id) is not None  # the build's copy, current
    old = recallcopy.saved_listing(settings)
    _write_one(big)  # now the saved copy is of an earlier version of the table
    forget_process_state(monkeypatch)
    assert recallcopy.load(settings, model_id) is None  # a stale copy is never used
    done = _run_job(big, kill_at=step)
    assert done.returncode == -9, (done.returncode, done.stderr)  # killed there
    forget_process_state(monkeypatch)
    found = recallcopy.load(settings, model_id)
    if step == "written":  # the new copy was in place: it is the table's
        assert found is not None and len(found) == 111
        assert_same_answers(_copy_answers(settings, monkeypatch),
                            _lancedb_answers(settings, monkeypatch))
    else:  # the old copy stays (unused: stale) or a half-written file no reader opens
        assert found is None
        assert recallcopy.saved_listing(settings) in (old, None)
    # The next job finishes the work, whatever the kill left behind
    assert _run_job(big).returncode == 0
    forget_process_state(monkeypatch)
    assert recallcopy.load(settings, model_id) is not None
    assert_same_answers(_copy_answers(settings, monkeypatch),
                        _lancedb_answers(settings, monkeypatch))


def test_a_write_while_the_job_reads_leaves_no_copy_claiming_to_be_current(
        big: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(big)
    model_id = _model_id(settings)
    _write_one(big, 1)
    real_read = recallcopy.RecallCopy.for_saving

    def read_then_another_write(table: object) -> recallcopy.RecallCopy:
        copy = real_read(table)
        _write_one(big, 2)  # committed after the job listed the files and read the table
        return copy

    monkeypatch.setattr(recallcopy.RecallCopy, "for_saving", read_then_another_write)
    assert copyjob.run(settings, settle=0) == "superseded"
    monkeypatch.setattr(recallcopy.RecallCopy, "for_saving", real_read)
    forget_process_state(monkeypatch)
    assert recallcopy.load(settings, model_id) is None
    assert copyjob.run(settings, settle=0) == "written"  # (the second write's job)
    assert copyjob.run(settings, settle=0) == "current"  # nothing to do twice
    assert_same_answers(_copy_answers(settings, monkeypatch),
                        _lancedb_answers(settings, monkeypatch))


@pytest.mark.parametrize("batch_rows", [7, 110, 8_192])
def test_the_jobs_batched_read_makes_the_copy_the_whole_read_makes(
        big: Path, batch_rows: int) -> None:
    """The same rows (in their saved form), vectors bit for bit, lengths, postings and labels as
    :meth:`RecallCopy.from_table`, whatever the batches; and the same file once written."""
    settings = load_settings(big)
    _write_one(big, 5)  # (two data files)
    table = index.open_table(lance.connect(settings.index_uri))
    whole = recallcopy.RecallCopy.from_table(table)
    lean = recallcopy.RecallCopy.for_saving(table, batch_rows)
    at = recallcopy.POSITION["terms"]
    assert isinstance(lean.rows, recallcopy.LazyRows)
    assert list(lean.rows) == [(*r[:at], recallcopy._distinct_terms(r[at])) for r in whole.rows]
    assert lean.matrix.tobytes() == whole.matrix.tobytes()
    assert lean.lengths == whole.lengths and lean.postings == whole.postings
    assert lean.labels is not None and (lean.labels == whole.label_matrix()).all()
    listing = index.disk_listing(settings)
    assert recallcopy.write(settings, whole, listing)
    first = read_marshal(recallcopy.copy_path(settings))
    head = current_data_file(settings).read_bytes()
    assert recallcopy.write(settings, lean, listing)
    second = read_marshal(recallcopy.copy_path(settings))
    assert current_data_file(settings).read_bytes() == head
    assert {k: v for k, v in first.items() if k != "data"} == \
        {k: v for k, v in second.items() if k != "data"}


def test_a_write_during_the_settle_time_leaves_the_copy_to_the_later_job(
        big: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(big)
    monkeypatch.setattr(copyjob, "_settle", lambda _s: _write_one(big, 3))
    assert copyjob.run(settings) == "superseded"


def test_concurrent_jobs_and_savers_take_turns_and_leave_one_current_copy(
        big: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(big)
    model_id = _model_id(settings)
    _write_one(big, 4)
    jobs = [subprocess.Popen([sys.executable, "-m", "wrenmem.index.copyjob", str(big),
                              settings.index], stdout=subprocess.PIPE, text=True, cwd=REPO)
            for _ in range(3)]
    said = sorted(j.communicate(timeout=JOB_SECONDS)[0].strip() for j in jobs)
    assert [j.returncode for j in jobs] == [0, 0, 0]
    assert said == ["current", "current", "written"]  # one wrote it, in turn the others saw it
    forget_process_state(monkeypatch)
    assert recallcopy.load(settings, model_id) is not None
    assert_same_answers(_copy_answers(settings, monkeypatch),
                        _lancedb_answers(settings, monkeypatch))
    # A saver that cannot get the lock writes nothing (the holder's copy will do)
    copy = recallcopy.RecallCopy.from_table(index.open_table(lance.connect(settings.index_uri)))
    recallcopy.discard(settings)
    with recallcopy.copy_lock(settings) as held:
        assert held
        assert not recallcopy.write(settings, copy, index.disk_listing(settings))
    assert recallcopy.saved_listing(settings) is None
    assert recallcopy.write(settings, copy, index.disk_listing(settings))
    assert recallcopy.saved_listing(settings) == index.disk_listing(settings)


def test_no_job_when_the_setting_is_off_the_index_remote_or_the_watcher_runs(
        big: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl

    popened: list[object] = []
    monkeypatch.setattr(copyjob.subprocess, "Popen", lambda *a, **k: popened.append(a))
    settings = load_settings(big)
    off = load_settings(big, environ={"WRENMEM_BACKGROUND_COPY": "false"})
    assert load_settings(big, environ={}).background_copy  # on by default
    assert not off.background_copy and settings.background_copy
    assert not copyjob.start(off)
    assert not copyjob.start(load_settings(big, {"index_uri": "s3://bucket/index"}))
    with open(settings.state_dir / statedir.WATCH_LOCK, "w") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        assert not copyjob.start(settings)
    assert popened == []
    assert copyjob.start(settings) and len(popened) == 1
    # A table the writer saves itself starts none
    monkeypatch.setattr(recallcopy, "MAX_ROWS", 20_000)
    assert recallcopy.save(settings, index.open_table(lance.connect(settings.index_uri)))
    assert len(popened) == 1
