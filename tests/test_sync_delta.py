"""The sync at scale: one stat walk decides, a few changed files are read alone, the state
mirror is compact and left alone by a no-op (see wrenmem.index.sync._sync_delta)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.conftest import settle, write_pair
from tests.fakes import RecordingEmbedder
from tests.index_helpers import install_fake, settings_for, table_rows
from wrenmem.index import table as index
from wrenmem.index.state import STATE_NAME, load_state, stat_delta
from wrenmem.index.sync import sync_pairs

_PATCH: list[pytest.MonkeyPatch] = []


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> RecordingEmbedder:
    _PATCH[:] = [monkeypatch]
    return install_fake(monkeypatch)


def _age(project: Path, seconds: float = 60.0) -> None:
    past = time.time() - seconds
    for path in (project / "knowledge").rglob("*.md"):
        os.utime(path, (past, past))
    settle(_PATCH[0])  # the change times too


def _many(project: Path, n: int = 12) -> None:
    for i in range(n):
        write_pair(project, f"g{i % 3}/q{i}.md", f"How many orders in region {i}?",
                   f"SELECT COUNT(*) FROM orders WHERE region = {i}")
    _age(project)


def _no_full_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the sync reads every file or every row id of the table."""
    from wrenmem.index import snapshot

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("the sync read every file or every id")

    monkeypatch.setattr(snapshot, "scan", boom)
    monkeypatch.setattr(index, "read_ids", boom)


def test_a_noop_sync_leaves_the_state_file_alone(project: Path, fake: RecordingEmbedder
                                                  ) -> None:
    _many(project)
    settings = settings_for(project)
    sync_pairs(settings)
    path = settings.state_dir / STATE_NAME
    before = path.stat()
    data = path.read_bytes()
    for _ in range(3):
        assert sync_pairs(settings).noop
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert path.read_bytes() == data


def test_one_edit_reads_and_embeds_only_that_file(project: Path, fake: RecordingEmbedder,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _many(project)
    settings = settings_for(project)
    sync_pairs(settings)
    fake.calls.clear()
    with monkeypatch.context() as m:
        _no_full_read(m)
        edited = write_pair(project, "g1/q4.md", "How many returns in region 4?", "SELECT 4")
        report = sync_pairs(settings)
        assert report.changed == ("knowledge/sql/g1/q4.md",) and not report.added
        assert fake.texts == ["How many returns in region 4?"] and report.embedded == 1
        assert len(report.unchanged) == 11 and report.rows == 12
        rows = {r["id"]: r for r in table_rows(settings)}
        assert rows["knowledge/sql/g1/q4.md"]["question"] == "How many returns in region 4?"
        assert len(rows) == 12
        # A rename keeps its vector, a deletion removes its row, a new file is added.
        os.rename(edited, project / "knowledge/sql/g2/moved.md")
        (project / "knowledge/sql/g0/q0.md").unlink()
        write_pair(project, "g0/new.md", "Brand new question", "SELECT 9")
        fake.calls.clear()
        report = sync_pairs(settings)
        assert report.renamed == (("knowledge/sql/g1/q4.md", "knowledge/sql/g2/moved.md"),)
        assert report.removed == ("knowledge/sql/g0/q0.md",)
        assert report.added == ("knowledge/sql/g0/new.md",)
        assert fake.texts == ["Brand new question"]
        assert sorted(r["id"] for r in table_rows(settings)) == sorted(
            load_state(settings).ids)  # type: ignore[union-attr]
    from wrenmem.index.drift import check_drift

    assert check_drift(settings).fresh


def test_same_size_and_mtime_edit_in_the_racy_window_is_seen(
        project: Path, fake: RecordingEmbedder) -> None:
    """An edit that keeps the file's size and mtime (a coarse clock, two writes in one
    tick) right after a sync must not be hidden by the stat check."""
    path = write_pair(project, "a.md", "How many orders?", "SELECT 1")
    write_pair(project, "b.md", "How many stores?", "SELECT 2")
    settings = settings_for(project)
    sync_pairs(settings)  # both files are fresh: recorded within the racy window
    st = path.stat()
    path.write_text(path.read_text().replace("SELECT 1", "SELECT 7"), encoding="utf-8")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    report = sync_pairs(settings)
    assert report.changed == ("knowledge/sql/a.md",)
    assert {r["id"]: r for r in table_rows(settings)}["knowledge/sql/a.md"][
        "content_hash"] != ""
    assert sync_pairs(settings).noop


def test_touched_files_are_rechecked_once_then_trusted(project: Path,
                                                       fake: RecordingEmbedder) -> None:
    _many(project, 4)
    settings = settings_for(project)
    sync_pairs(settings)
    past = time.time() - 30
    os.utime(project / "knowledge/sql/g0/q0.md", (past, past))  # same content, new stat
    settle(_PATCH[0])  # (its new change time out of the racy window)
    delta = stat_delta(settings, fake.model_id)
    assert delta is not None and delta.touched == ("knowledge/sql/g0/q0.md",)
    assert sync_pairs(settings).noop and not fake.calls[1:]
    delta = stat_delta(settings, fake.model_id)
    assert delta is not None and delta.empty  # the new stat was recorded


def test_a_kill_during_a_small_sync_leaves_no_mirror(project: Path, fake: RecordingEmbedder,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _many(project, 6)
    settings = settings_for(project)
    sync_pairs(settings)
    write_pair(project, "g0/q0.md", "An edited question", "SELECT 0")

    def killed(*a: object, **k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(index, "write", killed)
    with pytest.raises(KeyboardInterrupt):
        sync_pairs(settings)
    assert load_state(settings) is None  # never a mirror that claims the edit
    monkeypatch.undo()
    install_fake(monkeypatch)
    report = sync_pairs(settings)
    assert report.changed == ("knowledge/sql/g0/q0.md",)
    assert sync_pairs(settings).noop


def test_the_compact_mirror_round_trips_and_a_damaged_one_is_ignored(
        project: Path, fake: RecordingEmbedder) -> None:
    _many(project, 5)
    (project / "knowledge/sql/bad.md").write_text("no front matter\n")
    settings = settings_for(project)
    report = sync_pairs(settings)
    state = load_state(settings)
    assert state is not None and state.stats is not None
    assert set(state.files) == {f"knowledge/sql/g{i % 3}/q{i}.md" for i in range(5)} | {
        "knowledge/sql/bad.md"}
    assert state.ids == tuple(sorted(f"knowledge/sql/g{i % 3}/q{i}.md" for i in range(5)))
    assert [e[0] for e in state.errors] == ["knowledge/sql/bad.md"]
    assert all(len(h) == 64 for h in state.files.values())
    path = settings.state_dir / STATE_NAME
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # truncated: the crc check refuses it
    assert load_state(settings) is None
    again = sync_pairs(settings)
    assert again.rows == report.rows == 5 and not again.added and not again.removed
    assert [e.path for e in again.errors] == ["knowledge/sql/bad.md"]


def test_an_unreadable_file_is_reported_by_every_sync_without_rewriting_the_mirror(
        project: Path, fake: RecordingEmbedder) -> None:
    _many(project, 3)
    settings = settings_for(project)
    sync_pairs(settings)
    fifo = project / "knowledge/sql/pipe.md"
    os.mkfifo(fifo)
    report = sync_pairs(settings)
    assert [e.path for e in report.errors] == ["knowledge/sql/pipe.md"]
    assert "not a regular file" in report.errors[0].reason and report.rows == 3
    path = settings.state_dir / STATE_NAME
    before = path.stat()
    for _ in range(2):  # the FIFO is looked at again each time (it has no recorded stat)...
        again = sync_pairs(settings)
        assert again.noop and [e.path for e in again.errors] == ["knowledge/sql/pipe.md"]
    after = path.stat()  # ...but the mirror, which it is not part of, is not rewritten
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_small_sync_raced_by_another_writer_looks_again_not_at_every_file(
        project: Path, fake: RecordingEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """The watcher's loop and its daemon sync one edit at once: the one that finds the
    other finished meanwhile (or the mirror being rewritten) looks at the files again,
    and never scans every file; the index ends as the files say."""
    import threading

    from wrenmem.index import sync as sync_module
    from wrenmem.storage import lance

    _many(project)
    settings = settings_for(project)
    sync_pairs(settings)
    edited = write_pair(project, "g1/q4.md", "How many returns in region 4?", "SELECT 4")
    real = lance.import_lancedb
    raced = []

    def other_writer_first() -> object:
        module = real()
        if not raced and threading.current_thread() is threading.main_thread():  # once: the other writer syncs the same edit, then this one goes on
            raced.append(True)
            worker = threading.Thread(target=sync_pairs, args=(settings,))
            worker.start()
            worker.join()
        return module

    with monkeypatch.context() as m:
        _no_full_read(m)
        m.setattr(sync_module.lance, "import_lancedb", other_writer_first)
        report = sync_pairs(settings)
    assert raced and report.noop  # the other writer had indexed it
    rows = {r["id"]: r for r in table_rows(settings)}
    assert rows["knowledge/sql/g1/q4.md"]["question"] == "How many returns in region 4?"
    assert len(rows) == 12 and edited.exists()
    assert fake.texts.count("How many returns in region 4?") == 1


def test_an_older_versions_journal_is_not_trusted_the_first_sync_indexes_its_pairs(
        project: Path, fake: RecordingEmbedder) -> None:
    """Earlier versions wrote a small sync's rows to ``.wrenmem/pairs-journal.bin`` and
    patched the state mirror as if the table held them (its file listing unchanged). Such
    a mirror is not trusted: the first sync indexes those pairs from the files and removes
    the journal and the recall copy's files."""
    from wrenmem.fs.fsutil import read_marshal, write_marshal
    from wrenmem.index.state import patch_state
    from wrenmem.pairs.catalog import read_paths

    _many(project)
    settings = settings_for(project)
    sync_pairs(settings)
    write_pair(project, "g0/journaled.md", "How many refunds last week?", "SELECT 7")
    delta = stat_delta(settings, fake.model_id)
    assert delta is not None and delta.touched == ("knowledge/sql/g0/journaled.md",)
    path = delta.touched[0]
    read = read_paths(settings, {path})
    key = delta.key_of(path)
    assert key is not None
    patch_state(settings, delta.state, {path: (read.file_hashes[path], key)},
                rows=delta.state.rows + 1, errors=[], stats_at=delta.stats_at)
    state_path = settings.state_dir / STATE_NAME
    record = read_marshal(state_path)
    record["v"] = 5  # as the version with the journal wrote it
    assert write_marshal(state_path, record)
    old = ["pairs-journal.bin", "recall-copy.bin", "recall-copy.0123456789abcdef.data",
           "recall-copy.lock", "pair-listing.bin"]
    for name in old:
        (settings.state_dir / name).write_bytes(b"old")
    assert path not in {r["id"] for r in table_rows(settings)}  # only "in the journal"
    report = sync_pairs(settings)
    assert not report.noop and path in report.added
    assert path in {r["id"] for r in table_rows(settings)}
    assert not [n for n in old if (settings.state_dir / n).exists()]
    assert sync_pairs(settings).noop
