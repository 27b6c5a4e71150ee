"""A warm recall's catch-up sync runs only when files may have changed."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import write_pair
from wrenmem.settings import load_settings
from wrenmem.watch.freshness import Freshness
from wrenmem.watch.loop import WatchdogSource


def eventually(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


def settle(fresh: Freshness, quiet: float = 0.5, timeout: float = 10.0) -> None:
    """Let the rest of a burst arrive (a new folder, then its file's create, modify and close
    events) before a sync "runs": one write is several events, and under load they trickle."""
    assert fresh.source is not None
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    while time.monotonic() - last < quiet and time.monotonic() < deadline:
        if fresh.source.get(0.05):
            last = time.monotonic()


@pytest.fixture
def files(project: Path) -> Path:
    """A project with a file in each watched folder: a fence needs one to open there."""
    (project / "target").mkdir()
    (project / "target" / "mdl.json").write_text("{}")
    (project / "README.md").write_text("x")
    write_pair(project, "first.md", "A first question", "SELECT 1")
    return project


@pytest.fixture
def fresh(files: Path):
    f = Freshness(load_settings(files))
    yield f
    f.close()


def test_sync_first_then_only_after_relevant_changes(fresh: Freshness, project: Path) -> None:
    assert fresh.needs_sync()  # nothing synced yet
    fresh.synced(time.monotonic())
    assert not fresh.needs_sync()
    # Irrelevant: derived state, a non-pair file, an editor's scratch file.
    (project / ".wrenmem").mkdir()
    (project / ".wrenmem" / "catalog.bin").write_bytes(b"x")
    (project / "knowledge/sql/notes.txt").write_text("x")
    (project / "knowledge/sql/.pair.md.swp").write_text("x")
    time.sleep(0.3)
    assert not fresh.needs_sync()
    write_pair(project, "sub/new.md", "A new question", "SELECT 1")
    assert eventually(fresh.needs_sync)
    settle(fresh)
    fresh.synced(time.monotonic())
    assert not fresh.needs_sync()
    (project / "target" / "mdl.json").write_text('{"models": []}')  # seeds come from it
    assert eventually(fresh.needs_sync)


def test_events_during_a_sync_still_count(fresh: Freshness, project: Path) -> None:
    fresh.synced(time.monotonic())
    started = time.monotonic()
    write_pair(project, "late.md", "Written while syncing", "SELECT 1")
    time.sleep(0.3)  # the event arrives before the sync reports
    fresh.synced(started)
    assert fresh.needs_sync()


def test_an_old_sync_is_redone(files: Path) -> None:
    f = Freshness(load_settings(files), max_age=0.2)
    try:
        f.synced(time.monotonic())
        assert not f.needs_sync()
        time.sleep(0.3)
        assert f.needs_sync()
    finally:
        f.close()


def test_a_fence_delivers_every_earlier_change(files: Path) -> None:
    """After ``fence()`` returns True, the events of changes made before it are queued."""
    source = WatchdogSource(load_settings(files))
    source.start()
    try:
        for i in range(30):
            path = write_pair(files, f"sub{i % 3}/f{i}.md", f"Question {i}", "SELECT 1")
            assert source.fence()
            assert str(path) in {p for p, _is_dir in source.get(0) or ()}, i
            (files / "target" / "mdl.json").write_text(f'{{"n": {i}}}')
            assert source.fence()
            assert str(files / "target" / "mdl.json") in {p for p, _d in source.get(0) or ()}
    finally:
        source.close()


def test_no_fence_without_a_file_to_open_or_by_polling(project: Path, files: Path) -> None:
    empty = WatchdogSource(load_settings(project.parent / "other"))
    (project.parent / "other" / "knowledge" / "sql").mkdir(parents=True)
    empty.start()
    polling = WatchdogSource(load_settings(files), poll=True)
    polling.start()
    try:
        assert not empty.fence()  # an empty knowledge folder: a deletion may be in flight
        assert not polling.fence()  # polling reports no opens
    finally:
        empty.close()
        polling.close()


def test_a_registered_key_is_kept_fresh_while_questions_come(
        files: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The age check's sync runs in the background before a question would need it; a
    process nobody asks stops walking."""
    import wrenmem.watch.freshness as freshness

    monkeypatch.setattr(freshness, "ACTIVE", 1.5)
    f = Freshness(load_settings(files), max_age=1.0)
    refreshed: list[str] = []

    def refresh() -> None:
        started = time.monotonic()
        refreshed.append(time.strftime("%T"))
        f.synced(started, "index")

    try:
        f.keep_fresh("index", refresh)
        assert f.needs_sync("index")  # a first question syncs itself
        f.synced(time.monotonic(), "index")
        stale = []
        for _ in range(12):  # a question every quarter second for three seconds
            time.sleep(0.25)
            stale.append(f.needs_sync("index"))
        assert refreshed, "the background thread kept nothing fresh"
        assert not any(stale), stale  # no question found the key old
        # idle: the last question is more than ACTIVE seconds old, nothing is walked
        time.sleep(2.0)
        count = len(refreshed)
        time.sleep(1.5)
        assert len(refreshed) == count
    finally:
        f.close()


def test_a_warm_recall_leaves_the_age_check_to_the_background(
        files: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Questions every quarter second for longer than ``max_age``: the age check's syncs
    all run in the keeper's thread. A question may still sync when its fence could not be
    put (on a loaded machine the fence's own event can come later than the fence waits):
    that is "files may have changed", not the age, so it is allowed, and only then."""
    import threading

    import wrenmem.recall.recaller as recaller_mod
    from wrenmem.recall.hits import Filters
    from wrenmem.recall.recaller import Recaller

    settings = load_settings(files, overrides={"backend": "vector"})
    real = recaller_mod.catch_up
    events: list[tuple[str, str]] = []  # (thread, "sync" | "fence" | "no fence"), in order

    def recording(*args: object, **kwargs: object) -> str | None:
        events.append((threading.current_thread().name, "sync"))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    def syncs(thread: str) -> int:
        return events.count((thread, "sync"))

    monkeypatch.setattr(recaller_mod, "catch_up", recording)
    # max_age 3 s: the keeper refreshes 1.5 s after each sync, so it has 1.5 s to spare (a
    # missed index lock, a slow thread switch) before a question would find the key old
    f = Freshness(settings, max_age=3.0)
    assert f.source is not None
    real_fence = f.source.fence

    def fence(*args: object, **kwargs: object) -> bool:
        ok = real_fence(*args, **kwargs)  # type: ignore[arg-type]
        events.append((threading.current_thread().name, "fence" if ok else "no fence"))
        return ok

    monkeypatch.setattr(f.source, "fence", fence)
    try:
        recaller = Recaller(settings, freshness=f)
        first = recaller.recall(["A first question"], 1, Filters())
        assert first[0].hits[0].question == "A first question"
        assert [e for e in events if e[1] == "sync"] == [("MainThread", "sync")]  # builds
        time.sleep(0.3)
        recaller.recall(["A first question"], 1, Filters())  # (the build's own events)
        del events[:]
        started = time.monotonic()
        while time.monotonic() - started < f.max_age + 0.5 or syncs("wrenmem-freshness") < 2:
            assert time.monotonic() - started < 30, events
            time.sleep(0.25)
            assert recaller.recall(["A first question"], 1, Filters())[0].hits
        assert syncs("wrenmem-freshness") >= 2, events
        asked = [e for e in events if e[0] == "MainThread"]
        for i, event in enumerate(asked):
            if event[1] == "sync":  # only right after a fence that could not be put
                assert i > 0 and asked[i - 1][1] == "no fence", events
    finally:
        f.close()
