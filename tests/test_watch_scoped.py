"""The watcher's loop syncs just the pair files its events name (wrenmem.watch.run.named_pairs) when
the events alone can say what changed, and walks every file otherwise: a real watcher
(watchdog on inotify), a real LanceDB, and the index compared with the files."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import write_pair

from tests.fakes import RecordingEmbedder
from tests.index_helpers import install_fake, settings_for, table_rows
from wrenmem.index import state as state_module
from wrenmem.index.sync import sync_pairs
from wrenmem.settings import Settings
from wrenmem.watch import run as scoped
from wrenmem.watch.daemon import HANDOFF_MAX
from wrenmem.watch.loop import LoopConfig


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> RecordingEmbedder:
    return install_fake(monkeypatch)


class _Source:
    """An event source whose fence answers ``fenced`` and whose queue holds ``late``."""

    def __init__(self, fenced: bool = True, late: list[tuple[str, bool]] | None = None):
        import queue

        self.fenced = fenced
        self.queue: queue.SimpleQueue[tuple[str, bool]] = queue.SimpleQueue()
        for change in late or []:
            self.queue.put(change)

    def fence(self) -> bool:
        return self.fenced

    def get(self, timeout: float) -> list[tuple[str, bool]] | None:
        out = []
        while not self.queue.empty():
            out.append(self.queue.get())
        return out or None


def test_named_pairs_only_when_the_events_can_say(project: Path) -> None:
    settings = settings_for(project)
    sql = project / "knowledge" / "sql"
    a, b = (str(sql / "a.md"), False), (str(sql / "g" / "b.md"), False)
    log = scoped.EventLog()

    def named(changes: list[tuple[str, bool]], **kw: Any) -> list[str] | None:
        log.record(changes)
        return scoped.named_pairs(settings, _Source(**kw), log)

    assert named([a]) is None  # no whole walk yet
    log.whole_at = time.monotonic()
    late = (str(sql / "c.md"), False)
    source = _Source(late=[late])
    log.record([a, b, (str(sql / "notes.txt"), False), ("", False)])
    assert scoped.named_pairs(settings, source, log) == [
        "knowledge/sql/a.md", "knowledge/sql/c.md", "knowledge/sql/g/b.md"]
    assert source.get(0) == [late]  # put back for the loop
    assert log.take() == []
    assert named([a], fenced=False) is None  # an event may still be on its way
    assert named([a, (str(sql / "g"), True)]) is None  # a folder: its files have none
    assert named([a, (str(settings.manifest_path), False)]) is None
    many = [(str(sql / f"q{n}.md"), False) for n in range(HANDOFF_MAX + 1)]
    assert named(many) is None
    log.whole_at = time.monotonic() - scoped.MAX_AGE - 1
    assert named([a]) is None  # events may be lost: walk now and then


def _wait(predicate: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "the watcher did not sync in time"
        time.sleep(0.1)


def _questions(settings: Settings) -> dict[str, str]:
    return {r["id"]: r["question"] for r in table_rows(settings)}


def test_the_loop_syncs_the_named_files_without_a_walk(
        project: Path, fake: RecordingEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    from wrenmem.recall.daemon_client import watcher_sync
    from wrenmem.watch.run import WatchOptions, run_watch

    for i in range(60):
        write_pair(project, f"g{i % 3}/q{i}.md", f"How many orders in region {i}?",
                   f"SELECT {i}")
    settings = settings_for(project)
    sync_pairs(settings)
    walks: list[str] = []
    real_walk = state_module.walk_listing

    def counted(s: Settings) -> Any:
        walks.append(threading.current_thread().name)
        return real_walk(s)

    monkeypatch.setattr(state_module, "walk_listing", counted)
    stop = threading.Event()
    thread = threading.Thread(target=run_watch, args=(settings,), name="loop",
                              kwargs={"stop": stop, "options": WatchOptions(
                                  config=LoopConfig(idle=0.1))}, daemon=True)
    thread.start()
    try:
        _wait(lambda: watcher_sync(settings, []) is not None)
        _wait(lambda: "loop" in walks)  # the first round walks every file
        time.sleep(0.5)
        walks.clear()
        write_pair(project, "g0/q0.md", "Edited question zero?", "SELECT 0")
        write_pair(project, "new.md", "A new question?", "SELECT 1")
        (project / "knowledge" / "sql" / "g1" / "q1.md").unlink()
        _wait(lambda: "knowledge/sql/new.md" in _questions(settings)
              and "knowledge/sql/g1/q1.md" not in _questions(settings)
              and _questions(settings)["knowledge/sql/g0/q0.md"] == "Edited question zero?")
        time.sleep(0.5)
        assert "loop" not in walks  # the events named the files: none walked
        # A folder moved in: its files have no events of their own, so the loop walks.
        moved = project / "elsewhere"
        write_pair(moved, "q.md", "A question from a moved folder?", "SELECT 2")
        (moved / "knowledge" / "sql").rename(project / "knowledge" / "sql" / "moved")
        _wait(lambda: "knowledge/sql/moved/q.md" in _questions(settings))
        assert "loop" in walks
    finally:
        stop.set()
        thread.join(timeout=30)
    assert sync_pairs(settings).noop  # the index is exactly the files
