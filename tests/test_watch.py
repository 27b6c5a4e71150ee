"""The watch loop: filtering, debouncing, error handling (scripted), and real watchdog."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import write_pair

from wrenmem.errors import LockTimeoutError, ManifestError, PairError, SettingsError, WrenmemError
from wrenmem.settings import load_settings
from wrenmem.watch.loop import (
    MANIFEST,
    PAIRS,
    SETTINGS,
    LoopConfig,
    LoopStats,
    SyncResult,
    WatchdogSource,
    changes_from_event,
    classify_error,
    classify_path,
    run_loop,
)


@pytest.fixture
def settings(project: Path):
    return load_settings(project)


# --- filtering ------------------------------------------------------------------------------

@pytest.mark.parametrize(("rel", "is_dir", "expected"), [
    ("knowledge/sql/a.md", False, PAIRS),
    ("knowledge/sql/sub/deeper/b.md", False, PAIRS),
    ("knowledge/sql/newfolder", True, PAIRS),
    ("knowledge/sql", True, PAIRS),
    ("knowledge/sql/.a.md.tmp", False, None),
    ("knowledge/sql/.wrenmem-x.tmp", False, None),
    ("knowledge/sql/a.md~", False, None),
    ("knowledge/sql/.a.md.swp", False, None),
    ("knowledge/sql/#a.md#", False, None),
    ("knowledge/sql/a.md___jb_tmp___", False, None),
    ("knowledge/sql/4913", False, None),
    ("knowledge/sql/.hidden/a.md", False, None),
    ("knowledge/sql/.git", True, None),
    ("knowledge/sql/notes.txt", False, None),
    ("target/mdl.json", False, MANIFEST),
    ("target/other.json", False, None),
    ("wrenmem.toml", False, SETTINGS),
    (".wrenmem/index/x.lance", False, None),
    ("README.md", False, None),
])
def test_classify_path(settings, rel: str, is_dir: bool, expected: str | None) -> None:
    assert classify_path(settings, str(settings.root / rel), is_dir) == expected


def test_changes_from_event_takes_both_ends_of_a_move() -> None:
    from watchdog.events import DirModifiedEvent, FileMovedEvent, FileOpenedEvent

    moved = FileMovedEvent("/p/knowledge/sql/.q.md.tmp", "/p/knowledge/sql/q.md")
    assert changes_from_event(moved) == [("/p/knowledge/sql/.q.md.tmp", False),
                                         ("/p/knowledge/sql/q.md", False)]
    assert changes_from_event(DirModifiedEvent("/p/knowledge/sql")) == []
    assert changes_from_event(FileOpenedEvent("/p/knowledge/sql/q.md")) == []


def test_classify_error() -> None:
    assert classify_error(LockTimeoutError("busy")) == "transient"
    assert classify_error(OSError(errno.EBUSY, "busy")) == "transient"
    assert classify_error(SettingsError("bad")) == "permanent"
    assert classify_error(ManifestError("bad")) == "permanent"
    assert classify_error(ImportError("no lancedb")) == "permanent"
    assert classify_error(WrenmemError("cannot load sentence-transformers model x")) == \
        "permanent"
    assert classify_error(PermissionError(errno.EACCES, "denied")) == "permanent"
    assert classify_error(RuntimeError("lance commit conflict")) == "unknown"


# --- the loop, scripted (no sleeping) -------------------------------------------------------

class Script:
    """An event source and a clock: each ``get`` returns the next scripted batch (time
    advancing by ``step``) or, for ``None``, lets the whole timeout pass. Stops at the end."""

    def __init__(self, stop: threading.Event, items: list, step: float = 0.01):
        self.items, self.stop, self.step, self.now = list(items), stop, step, 0.0
        self.timeouts: list[float] = []

    def clock(self) -> float:
        return self.now

    def get(self, timeout: float):
        self.timeouts.append(timeout)
        if not self.items:
            self.stop.set()
            return None
        item = self.items.pop(0)
        if item is None:
            self.now += timeout
            return None
        self.now += self.step
        return item


class Recorder:
    def __init__(self, clock, outcomes: list | None = None):
        self.calls: list[tuple[float, set[str]]] = []
        self.outcomes = list(outcomes or [])
        self.clock = clock

    def __call__(self, kinds: set[str]) -> SyncResult:
        self.calls.append((self.clock(), set(kinds)))
        if self.outcomes:
            return self.outcomes.pop(0)
        return SyncResult(summaries=("ok",), changed=True)


def drive(settings, items, outcomes=None, config=None, initial=()):
    stop = threading.Event()
    script = Script(stop, items)
    recorder = Recorder(script.clock, outcomes)
    messages: list[tuple[str, str]] = []
    stats = run_loop(settings, script, recorder, stop, config=config or LoopConfig(),
                     clock=script.clock, report=lambda lv, m: messages.append((lv, m)),
                     initial=initial)
    return recorder, messages, stats, script


def ev(settings, *rels: str, is_dir: bool = False):
    return [(str(settings.root / rel), is_dir) for rel in rels]


def test_first_sync_happens_at_start(settings) -> None:
    recorder, _m, _s, _sc = drive(settings, [None], initial=(PAIRS, MANIFEST))
    assert [kinds for _t, kinds in recorder.calls] == [{PAIRS, MANIFEST}]


def test_a_burst_of_a_thousand_changes_is_one_sync(settings) -> None:
    burst = [ev(settings, *(f"knowledge/sql/q{i}.md" for i in range(n, n + 100)))
             for n in range(0, 1000, 100)]
    recorder, _m, stats, _sc = drive(settings, [*burst, None, None])
    assert len(recorder.calls) == 1
    assert stats.events == 1000


def test_temporary_and_hidden_files_never_sync(settings) -> None:
    noise = ev(settings, "knowledge/sql/.q.md.swp", "knowledge/sql/q.md~", "knowledge/sql/.#q.md",
               "notes.txt", ".wrenmem/index/data.lance", "knowledge/sql/.git/HEAD")
    recorder, _m, _s, _sc = drive(settings, [noise, None, None])
    assert recorder.calls == []


def test_an_atomic_save_syncs_once_after_the_quiet_period(settings) -> None:
    cfg = LoopConfig(debounce=0.2, max_delay=5)
    save = [ev(settings, "knowledge/sql/.q.md.tmp"),
            ev(settings, "knowledge/sql/.q.md.tmp", "knowledge/sql/q.md")]
    recorder, _m, _s, script = drive(settings, [*save, None, None], config=cfg)
    assert len(recorder.calls) == 1
    when, kinds = recorder.calls[0]
    assert kinds == {PAIRS}
    assert when == pytest.approx(0.02 + 0.2)  # debounce after the last relevant event


def test_endless_events_still_sync_within_max_delay(settings) -> None:
    cfg = LoopConfig(debounce=0.5, max_delay=0.8)
    trickle = [ev(settings, f"knowledge/sql/q{i}.md") for i in range(300)]  # every 10 ms
    recorder, _m, _s, _sc = drive(settings, trickle, config=cfg)
    times = [t for t, _k in recorder.calls]
    assert len(times) >= 3
    assert times[0] <= 0.8 + 0.011
    assert all(b - a <= 0.8 + 0.02 for a, b in zip(times, times[1:], strict=False))


def test_transient_failures_retry_with_backoff(settings) -> None:
    cfg = LoopConfig(debounce=0.1, max_delay=1, backoff=(0.5, 2.0))
    busy = SyncResult(failures=((PAIRS, LockTimeoutError("index locked by pid 7")),))
    recorder, messages, _s, _sc = drive(
        settings, [ev(settings, "knowledge/sql/q.md"), None, None, None, None],
        outcomes=[busy, busy], config=cfg)
    times = [round(t, 3) for t, _k in recorder.calls]
    assert len(times) == 3
    assert times[1] - times[0] == pytest.approx(0.5)
    assert times[2] - times[1] == pytest.approx(2.0)
    assert [lv for lv, m in messages if "locked" in m] == ["WARNING", "WARNING"]


def test_a_permanent_error_is_shown_once_and_not_retried(settings) -> None:
    broken = SyncResult(failures=((MANIFEST, ManifestError("target/mdl.json: models[2] has "
                                                            "no name")),))
    idle = [None] * 20
    recorder, messages, _s, _sc = drive(
        settings, [ev(settings, "target/mdl.json"), *idle, ev(settings, "target/mdl.json"),
                   *idle], outcomes=[broken, broken], config=LoopConfig(debounce=0.1))
    assert len(recorder.calls) == 2  # once per change, never on its own
    errors = [m for lv, m in messages if lv == "ERROR"]
    assert errors == ["manifest: target/mdl.json: models[2] has no name; not retrying until "
                      "something changes"]


def test_an_unknown_error_is_retried_a_few_times_then_reported(settings) -> None:
    cfg = LoopConfig(debounce=0.1, backoff=(0.1,), unknown_retries=2)
    weird = SyncResult(failures=((PAIRS, RuntimeError("boom")),))
    recorder, messages, _s, _sc = drive(settings, [ev(settings, "knowledge/sql/q.md"),
                                                   *[None] * 30],
                                        outcomes=[weird] * 10, config=cfg)
    assert len(recorder.calls) == 3
    assert [lv for lv, _m in messages] == ["WARNING", "WARNING", "ERROR"]
    assert "RuntimeError: boom (failed 3 times)" in messages[-1][1]


def test_bad_files_are_reported_when_they_break_and_when_fixed(settings) -> None:
    bad = SyncResult(summaries=("1 ok",), pair_errors=(
        PairError("knowledge/sql/b.md", "no fenced sql block", 4),))
    recorder, messages, stats, _sc = drive(
        settings, [ev(settings, "knowledge/sql/b.md"), None,
                   ev(settings, "knowledge/sql/a.md"), None,
                   ev(settings, "knowledge/sql/b.md"), None, None],
        outcomes=[bad, bad, SyncResult(summaries=("2 ok",))])
    assert len(recorder.calls) == 3
    texts = [m for _lv, m in messages]
    assert [t for t in texts if "b.md" in t] == [
        "knowledge/sql/b.md:4: no fenced sql block (skipped; the rest keep syncing)",
        "knowledge/sql/b.md: readable again"]
    assert stats.bad_files == ()


# --- a real watchdog observer on a real folder ----------------------------------------------

class Tap:
    """The real source as the loop sees it: every batch it handed over, numbered by call."""

    def __init__(self, source):
        self.source = source
        self.calls = 0
        self.batches: list[tuple[int, list]] = []

    def get(self, timeout: float):
        self.calls += 1
        batch = self.source.get(timeout)
        if batch:
            self.batches.append((self.calls, batch))
        return batch

    def handled(self, path: Path) -> bool:
        """A change at ``path`` reached the loop, and the loop is done with it (it has asked
        for the next batch since)."""
        return any(n < self.calls and any(p == str(path) for p, _d in batch)
                   for n, batch in list(self.batches))


class RealRun:
    """run_loop in a thread with a real WatchdogSource and a sync that reads the files."""

    def __init__(self, settings, **source_kw):
        from wrenmem.pairs.catalog import scan

        self.settings = settings
        self.snapshots: list[dict[str, str]] = []
        self.stop = threading.Event()
        self.messages: list[str] = []
        self.stats = LoopStats()
        self.source = WatchdogSource(settings, notify=self.messages.append, recheck=0.2,
                                     **source_kw)
        self.tap = Tap(self.source)

        def sync(kinds: set[str]) -> SyncResult:
            # A missing knowledge folder is an error for scan (and sync): record it as empty
            # here, where what matters is that the watcher sees the change.
            gone = not settings.knowledge_path.is_dir()
            self.snapshots.append({} if gone else {p.path: p.nl for p in scan(settings).pairs})
            return SyncResult(summaries=("ok",), changed=True)

        self.source.start()
        self.thread = threading.Thread(target=run_loop, args=(settings, self.tap, sync,
                                                              self.stop),
                                       kwargs={"config": LoopConfig(debounce=0.1,
                                                                    max_delay=0.5, idle=0.1),
                                               "stats": self.stats})
        self.thread.start()

    def wait_until(self, predicate, what: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not seen within {timeout} s")
            time.sleep(0.02)

    def wait_for(self, predicate, timeout: float = 10.0) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.snapshots and predicate(self.snapshots[-1]):
                return self.snapshots[-1]
            time.sleep(0.02)
        raise AssertionError(f"not seen within {timeout} s; last: {self.snapshots[-1:]}")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        self.source.close()


@pytest.fixture
def real(settings):
    write_pair(settings.root, "a.md", "Total revenue", "SELECT SUM(amount) FROM orders")
    runs: list[RealRun] = []

    def start(**kw) -> RealRun:
        runs.append(RealRun(settings, **kw))
        return runs[-1]

    yield start
    for run in runs:
        run.close()


def test_real_observer_sees_atomic_save_delete_move_and_new_folder(real, settings) -> None:
    run = real()
    run.wait_for(lambda s: s == {"knowledge/sql/a.md": "Total revenue"})
    folder = settings.knowledge_path
    tmp = folder / ".a.md.tmp"  # an editor's atomic save: temp file, then rename onto it
    tmp.write_text('---\nnl: "Revenue, all time"\n---\n\n```sql\nSELECT 1\n```\n', "utf-8")
    os.replace(tmp, folder / "a.md")
    run.wait_for(lambda s: s.get("knowledge/sql/a.md") == "Revenue, all time")
    (folder / "deep" / "er").mkdir(parents=True)  # a new subfolder, then a file in it
    write_pair(settings.root, "deep/er/b.md", "Orders per day", "SELECT 1")
    run.wait_for(lambda s: "knowledge/sql/deep/er/b.md" in s)
    os.rename(folder / "deep" / "er" / "b.md", folder / "b2.md")  # a move
    run.wait_for(lambda s: "knowledge/sql/b2.md" in s and "knowledge/sql/deep/er/b.md" not in s)
    (folder / "a.md").unlink()  # a delete
    run.wait_for(lambda s: s == {"knowledge/sql/b2.md": "Orders per day"})
    syncs, events = len(run.snapshots), run.stats.events
    noise = [folder / ".scratch.md.swp", folder / "b2.md~", folder / ".#b2.md"]
    for path in noise:  # editor noise: the loop sees it and drops it, so nothing is pending
        path.write_text("x", "utf-8")
    run.wait_until(lambda: all(run.tap.handled(p) for p in noise), "the noise events")
    assert (len(run.snapshots), run.stats.events) == (syncs, events)


def test_real_observer_turns_a_burst_into_few_syncs(real, settings) -> None:
    run = real()
    run.wait_for(lambda s: len(s) == 1)
    before = len(run.snapshots)
    for i in range(300):
        write_pair(settings.root, f"burst/q{i:03}.md", f"Question {i}", "SELECT 1")
    run.wait_for(lambda s: len(s) == 301)
    assert len(run.snapshots) - before <= 6


def test_falls_back_to_polling_when_inotify_fails(real, settings) -> None:
    class Exhausted:
        def schedule(self, *a, **kw):
            raise OSError(errno.ENOSPC, "inotify watch limit reached")

        def stop(self):
            pass

        def is_alive(self):
            return False

    run = real(observer_factory=Exhausted)
    assert run.source.mode == "polling"
    assert any("falling back to polling" in m and "watch limit" in m for m in run.messages)
    run.wait_for(lambda s: len(s) == 1)
    write_pair(settings.root, "c.md", "Polled question", "SELECT 1")
    run.wait_for(lambda s: "knowledge/sql/c.md" in s)


def test_a_replaced_knowledge_folder_is_watched_again(real, settings) -> None:
    import shutil

    run = real()
    run.wait_for(lambda s: len(s) == 1)
    shutil.rmtree(settings.knowledge_path)
    run.wait_for(lambda s: s == {})
    settings.knowledge_path.mkdir()
    write_pair(settings.root, "new.md", "After the folder came back", "SELECT 1")
    run.wait_for(lambda s: "knowledge/sql/new.md" in s)
    write_pair(settings.root, "newer.md", "And edits after that", "SELECT 1")
    run.wait_for(lambda s: "knowledge/sql/newer.md" in s)


def test_events_from_watchdog_event_objects() -> None:
    event = SimpleNamespace(event_type="deleted", src_path="/x/a.md", is_directory=False,
                            dest_path="")
    assert changes_from_event(event) == [("/x/a.md", False)]


def test_a_read_of_a_watched_file_is_one_event_and_the_fence_still_works(settings) -> None:
    """The observers never ask for a file's opening (not a change, not a fence's end): a
    read-only open reaches the handler as its close alone, and the fence still sees it."""
    write_pair(settings.root, "a.md", "Total revenue", "SELECT SUM(amount) FROM orders")
    source = WatchdogSource(settings)
    kinds: list[str] = []
    real_dispatch = source.dispatch

    def dispatch(event) -> None:
        kinds.append(event.event_type)
        real_dispatch(event)

    source.dispatch = dispatch  # type: ignore[method-assign]
    source.start()
    try:
        assert source.mode == "inotify"
        for _ in range(3):
            assert source.fence()
        (settings.knowledge_path / "a.md").read_bytes()
        assert source.fence()
        write_pair(settings.root, "b.md", "Orders per day", "SELECT 1")
        assert source.fence()
        deadline = time.monotonic() + 5
        while "created" not in kinds and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        source.close()
    assert "closed_no_write" in kinds and "created" in kinds, kinds
    assert "opened" not in kinds, kinds


def test_the_fence_fails_once_the_knowledge_link_leads_elsewhere(settings) -> None:
    """The fence resolves the watched folders again only when a stat or lstat of the paths
    they come from changed: a knowledge folder that is a link, pointed at another folder,
    fails the fence (the caller syncs) until that folder is watched, then it holds again."""
    root = settings.root
    first, second = root / "pairs-a", root / "pairs-b"
    for folder in (first, second):
        (folder).mkdir()
        (folder / "a.md").write_text("x", "utf-8")
    knowledge = root / "knowledge" / "sql"
    import shutil

    shutil.rmtree(knowledge)
    knowledge.symlink_to(first, target_is_directory=True)
    source = WatchdogSource(load_settings(root))
    source.start()
    try:
        assert source.fence() and source.fence()
        tmp = root / "knowledge" / "sql.tmp"
        tmp.symlink_to(second, target_is_directory=True)
        os.replace(tmp, knowledge)  # the link now leads to the other folder
        assert not source.fence()
        source._rewatch_if_needed()
        assert source.fence()
    finally:
        source.close()
