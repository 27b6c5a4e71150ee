"""The pairs table's housekeeping off the request path (wrenmem.index.maintenance and the
watcher's Maintainer): a deferred write only records that a compaction is due, the idle-time
run compacts with the same answers and keeps the mirror trusted, and a run killed at any
moment leaves a readable table whose leftovers the next run deletes. Real LanceDB, real
child processes."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import write_pair

from tests.fakes import RecordingEmbedder
from tests.index_helpers import install_fake, settings_for, table_rows
from wrenmem.index import maintenance
from wrenmem.index import table as index
from wrenmem.index.state import load_state, same_target, usable_state
from wrenmem.index.sync import sync_pairs
from wrenmem.settings import Settings, load_settings
from wrenmem.storage import compaction, lance
from wrenmem.watch import maintainer as maintainer_module
from wrenmem.watch.loop import LoopConfig, SyncResult, run_loop
from wrenmem.watch.maintainer import Maintainer


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> RecordingEmbedder:
    return install_fake(monkeypatch)


@pytest.fixture
def deferred(project: Path) -> Any:
    settings = settings_for(project)
    maintenance.defer(settings)
    yield settings
    maintenance.defer(settings, False)


def _build(project: Path, settings: Settings, n: int = 300) -> None:
    for i in range(n):
        write_pair(project, f"g{i % 5}/q{i}.md", f"How many orders in region {i}?",
                   f"SELECT {i}")
    sync_pairs(settings)


def _small_writes(project: Path, settings: Settings, count: int, *,
                  inline: bool = False) -> None:
    for n in range(count):
        write_pair(project, f"g0/q{n * 5}.md", f"Edited question {n}?", f"SELECT {n}")
        report = sync_pairs(settings)
        assert report.changed == (f"knowledge/sql/g0/q{n * 5}.md",)
        assert report.optimized == (inline and n == compaction.COMPACT_EVERY - 1)


def _fragments(settings: Settings) -> int:
    table = index.open_table(index.connect(settings))
    return int(table.stats()["fragment_stats"]["num_fragments"])


def _answers(settings: Settings, scores: bool = False) -> list[Any]:
    """Vector answers (ids and distances) and every full-text match of the table for a
    few questions; with ``scores``, the full-text scores too (BM25's statistics change
    when a compaction folds the new rows into the full-text index, whoever runs it)."""
    table = index.open_table(index.connect(settings))
    fake = RecordingEmbedder()
    out: list[Any] = []
    for q in ("How many orders in region 7?", "Edited question 3?", "region 250"):
        near = lance.nearest(table, fake.embed([q])[0]).limit(5).to_list()
        out.append([(r["id"], round(r["_distance"], 5)) for r in near])
        terms = " ".join(q.lower().strip("?").split())
        fts = table.search(terms, query_type="fts", fts_columns="terms").limit(None).to_list()
        out.append(sorted((r["id"], round(r["_score"], 4) if scores else 0) for r in fts))
    return out


def test_a_deferred_write_records_the_compaction_and_the_idle_run_does_it(
        project: Path, fake: RecordingEmbedder, deferred: Settings, tmp_path: Path) -> None:
    settings = deferred
    _build(project, settings)
    _small_writes(project, settings, compaction.COMPACT_EVERY)  # the tenth commit: due
    counter = maintenance.counter(settings)
    assert compaction.maintenance_record(counter).get("due") is True
    assert maintenance.due(settings) and _fragments(settings) > compaction.COMPACT_EVERY
    rows_before, answers_before = table_rows(settings), _answers(settings)
    assert maintenance.run(settings) == "compacted"
    assert _fragments(settings) == 1 and not maintenance.due(settings)
    # Same rows, same vectors, the same matches and ranking as before the compaction...
    assert table_rows(settings) == rows_before
    assert _answers(settings) == answers_before
    # ... and the very scores of the same writes compacted inline, without a watcher.
    twin = tmp_path / "twin"
    (twin / "knowledge" / "sql").mkdir(parents=True)
    twin_settings = settings_for(twin)
    _build(twin, twin_settings)
    _small_writes(twin, twin_settings, compaction.COMPACT_EVERY, inline=True)
    assert table_rows(twin_settings) == rows_before
    assert _answers(twin_settings, scores=True) == _answers(settings, scores=True)
    # The mirror was told the table's new files: the next no-op needs no LanceDB.
    state = load_state(settings)
    assert state is not None and same_target(settings, state, state.model_id)
    assert usable_state(settings, state.model_id) is not None
    assert sync_pairs(settings).noop


def test_without_a_watcher_the_tenth_write_compacts_inline_as_before(
        project: Path, fake: RecordingEmbedder) -> None:
    settings = settings_for(project)
    _build(project, settings)
    for n in range(compaction.COMPACT_EVERY):
        write_pair(project, f"g0/q{n * 5}.md", f"Edited question {n}?", f"SELECT {n}")
        optimized = sync_pairs(settings).optimized
    assert optimized and _fragments(settings) == 1
    assert not compaction.maintenance_record(maintenance.counter(settings)).get("due")


def test_a_due_compaction_left_by_a_watcher_is_done_by_the_next_inline_write(
        project: Path, fake: RecordingEmbedder) -> None:
    settings = settings_for(project)
    _build(project, settings)
    maintenance.defer(settings)
    try:
        _small_writes(project, settings, compaction.COMPACT_EVERY)
    finally:
        maintenance.defer(settings, False)
    assert maintenance.due(settings)  # the watcher stopped before its idle time
    write_pair(project, "g1/q1.md", "One more edit", "SELECT 1")
    assert sync_pairs(settings).optimized and not maintenance.due(settings)


def _child(settings: Settings) -> subprocess.Popen[bytes]:
    child = subprocess.Popen(maintenance.child_command(), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    assert child.stdin is not None
    child.stdin.write(pickle.dumps(settings))
    child.stdin.close()
    return child


def _wait_started(child: subprocess.Popen[bytes]) -> None:
    assert child.stdout is not None
    line = child.stdout.readline()
    assert json.loads(line) == {"started": True}, line


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.03, 0.3])
def test_a_run_killed_at_any_moment_leaves_a_readable_table(
        project: Path, fake: RecordingEmbedder, deferred: Settings, delay: float) -> None:
    settings = deferred
    _build(project, settings, n=1500)
    _small_writes(project, settings, compaction.COMPACT_EVERY)
    rows_before, answers_before = table_rows(settings), _answers(settings)
    child = _child(settings)
    _wait_started(child)
    time.sleep(delay)
    child.kill()
    child.wait()
    counter = maintenance.counter(settings)
    killed = compaction.maintenance_record(counter).get("started") is not None
    if delay == 0.0:
        assert killed  # right after it began: the compaction was under way
    maintenance.settle(settings)  # what the watcher does after a kill
    assert table_rows(settings) == rows_before  # readable, every row as it was
    assert _answers(settings) == answers_before
    state = load_state(settings)
    assert state is not None and same_target(settings, state, state.model_id)
    # A write after the kill is an ordinary small sync, and the next run finishes the work.
    write_pair(project, "g1/q1.md", "Written after the kill", "SELECT 1")
    assert sync_pairs(settings).changed == ("knowledge/sql/g1/q1.md",)
    assert maintenance.due(settings) == killed
    if killed:
        assert maintenance.run(settings) == "compacted"
    held = compaction.maintenance_record(counter)
    assert held.get("due") is None and held.get("started") is None
    assert _fragments(settings) <= 2  # compacted, then at most the one write after it
    rows = table_rows(settings)
    assert len(rows) == len(rows_before)
    assert [r for r in rows if r["id"] == "knowledge/sql/g1/q1.md"][0]["question"] == (
        "Written after the kill")


@pytest.mark.parametrize("watcher", [True, False])
def test_the_files_a_killed_run_left_are_deleted_by_the_next(
        project: Path, fake: RecordingEmbedder, watcher: bool) -> None:
    """A compaction killed before its commit leaves data files no version refers to:
    the next compaction (the record still says ``started``), by the watcher's next run
    or by a sync without a watcher, deletes them, and nothing else."""
    from wrenmem.fs.fsutil import write_marshal

    settings = settings_for(project)
    _build(project, settings)
    maintenance.defer(settings)
    try:
        _small_writes(project, settings, 3)
        assert maintenance.run(settings) == ""  # not due: nothing done
    finally:
        maintenance.defer(settings, watcher)
    data = Path(settings.index_uri) / "pairs.lance" / "data"
    leftover = data / "0101010101010101010101010123456789abcdef0123456789.lance"
    leftover.write_bytes(sorted(data.iterdir())[0].read_bytes())  # a killed run's file
    counter = maintenance.counter(settings)
    held = compaction.maintenance_record(counter)
    held["started"] = time.time()
    write_marshal(counter, held)
    rows_before = table_rows(settings)
    try:
        if watcher:
            assert maintenance.due(settings) and maintenance.run(settings) == "compacted"
        else:
            write_pair(project, "g1/q1.md", "One more edit", "SELECT 1")
            assert sync_pairs(settings).optimized
            rows_before = table_rows(settings)
    finally:
        maintenance.defer(settings, False)
    assert not leftover.exists()
    assert table_rows(settings) == rows_before and _fragments(settings) == 1
    held = compaction.maintenance_record(counter)
    assert not {"started", "leftovers", "due"} & set(held)


def test_the_maintainer_kills_its_child_for_a_write_and_waits_after_three(
        project: Path, fake: RecordingEmbedder, deferred: Settings,
        monkeypatch: pytest.MonkeyPatch) -> None:
    settings = deferred
    _build(project, settings, n=1500)
    _small_writes(project, settings, compaction.COMPACT_EVERY)
    rows_before = table_rows(settings)
    now = [100.0]
    keeper = Maintainer(settings, clock=lambda: now[0])
    assert keeper.tick() is None and not keeper.running  # not quiet long enough yet
    for kill in range(1, maintainer_module.MAX_KILLS + 1):
        now[0] += maintainer_module.QUIET + 1
        keeper.tick()
        assert keeper.running
        child = keeper._child
        assert child is not None
        keeper.pause()  # a write arrives
        assert child.returncode == -9 and not keeper.running and keeper.kills == kill
        assert table_rows(settings) == rows_before
    now[0] += maintainer_module.QUIET + 1
    keeper.tick()
    child = keeper._child
    assert child is not None
    keeper.pause()  # killed three times in a row: this one is waited for
    assert child.returncode == 0 and keeper.kills == 0 and keeper.last == "compacted"
    assert _fragments(settings) == 1 and table_rows(settings) == rows_before
    keeper.close()


def test_the_loop_calls_idle_only_with_nothing_pending(project: Path) -> None:
    import threading

    settings = settings_for(project)
    stop = threading.Event()
    calls: list[str] = []
    batches = [[(str(project / "knowledge" / "sql" / "a.md"), False)], None, None]

    class Source:
        def get(self, timeout: float) -> list[tuple[str, bool]] | None:
            if not batches:
                stop.set()
                return None
            return batches.pop(0)

    def sync(kinds: set[str]) -> SyncResult:
        calls.append("sync")
        return SyncResult()

    clock = iter(float(n) for n in range(1000))
    run_loop(settings, Source(), sync, stop, config=LoopConfig(debounce=0, max_delay=0),
             clock=lambda: next(clock), initial=(), idle=lambda: calls.append("idle"))
    assert calls == ["sync", "idle", "idle"]


def _questions_of(settings: Settings) -> dict[str, str]:
    return {r["id"]: r["question"] for r in table_rows(settings)}


def test_the_watcher_maintains_in_its_idle_time(project: Path, fake: RecordingEmbedder,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end: with a watcher running, ten writes handed to its daemon return without
    compacting; the watcher compacts once they stop, and its daemon answers throughout."""
    import threading

    from wrenmem.recall.daemon_client import watcher_sync
    from wrenmem.watch.run import WatchOptions, run_watch

    monkeypatch.setattr(maintainer_module, "QUIET", 0.5)
    monkeypatch.setattr(maintainer_module, "MAX_KILLS", 1000)  # every run here is killed
    # Not the recall fit after each of the watcher's syncs (its own test:
    # test_recall_fit): on 1,500 pairs it was most of this test's CPU, and its hold of the
    # index lock made the idle runs find the index busy and wait RETRY_BUSY.
    settings = load_settings(project, {"embedder": "fake", "recall_fit": False})
    _build(project, settings, n=1500)
    stop = threading.Event()
    thread = threading.Thread(target=run_watch, args=(settings,),
                              kwargs={"stop": stop, "options": WatchOptions(
                                  config=LoopConfig(idle=0.1))}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while watcher_sync(settings, []) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        for n in range(compaction.COMPACT_EVERY + 1):
            rel = write_pair(project, f"g0/q{n * 5}.md", f"Edited question {n}?",
                             f"SELECT {n}").relative_to(project).as_posix()
            report = watcher_sync(settings, [rel])
            assert report is not None and not report.optimized
        assert maintenance.is_deferred(settings)
        deadline = time.monotonic() + 60

        def compacted() -> bool:
            # the record is written once the compaction returns, after its commit has made
            # one fragment (a fresh-clone CI run read the two in between)
            return _fragments(settings) == 1 and not compaction.maintenance_record(
                maintenance.counter(settings)).get("due")

        while not compacted() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _fragments(settings) == 1
        assert not compaction.maintenance_record(maintenance.counter(settings)).get("due")
        assert sync_pairs(settings).noop
        # Due again: a write handed to the daemon while the run is under way kills it.
        from wrenmem.recall.daemon_client import ping

        for n in range(compaction.COMPACT_EVERY):
            rel = write_pair(project, f"g1/q{n * 5 + 1}.md", f"Again {n}?",
                             f"SELECT {n}").relative_to(project).as_posix()
            assert watcher_sync(settings, [rel]) is not None
        deadline = time.monotonic() + 60
        while not (ping(project) or {}).get("maintenance", {}).get("running"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        rel = write_pair(project, "g2/q2.md", "Written during the run", "SELECT 2"
                         ).relative_to(project).as_posix()
        report = watcher_sync(settings, [rel])
        assert report is not None and report.changed == (rel,)
        info = (ping(project) or {})["maintenance"]
        assert info["last"] == "killed by a write" and info["killed_in_a_row"] >= 1
        assert _questions_of(settings)[rel] == "Written during the run"
        deadline = time.monotonic() + 60
        while _fragments(settings) > 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _fragments(settings) == 1 and sync_pairs(settings).noop
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not maintenance.is_deferred(settings)
    assert os.path.exists(settings.index_uri)


def test_a_child_that_keeps_failing_gives_the_compaction_back_to_the_writes(
        project: Path, fake: RecordingEmbedder, deferred: Settings) -> None:
    import sys

    settings = deferred
    _build(project, settings)
    _small_writes(project, settings, compaction.COMPACT_EVERY)
    now = [100.0]
    keeper = Maintainer(settings, clock=lambda: now[0],
                        command=[sys.executable, "-c", "raise SystemExit(3)"])
    for _ in range(maintainer_module.MAX_FAILURES):
        now[0] += maintainer_module.RETRY + 1
        keeper.tick()
        assert keeper._child is not None
        keeper._child.wait()
        assert keeper.tick() == "failed (exit 3)"
    assert not maintenance.is_deferred(settings)
    write_pair(project, "g1/q1.md", "One more edit", "SELECT 1")
    assert sync_pairs(settings).optimized  # compacted inline, as without a watcher
