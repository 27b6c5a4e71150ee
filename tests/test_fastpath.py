"""The CLI's fast path to the daemon: no click, the same output, click for everything else."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import imported_modules, run_wrenmem
from wrenmem.__main__ import _Unhandled, parse
from wrenmem.settings import load_settings
from wrenmem.watch.daemon import DaemonServer


@pytest.fixture
def daemon(example_project: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("WRENMEM_BACKEND", "grep")  # no model needed; the path is the same
    server = DaemonServer(load_settings(example_project))
    server.start()
    yield server
    server.close()


@pytest.mark.parametrize("args", [
    ["recall", "-q", "revenue per month", "-q", "每个门店的销售额是多少？", "-k", "2"],
    ["recall", "-q", "revenue per month", "--json", "-l", "4", "--tag", "revenue"],
    ["recall", "--query=top customers", "-o", "json", "--source", "user"],
    ["recall", "-q", "revenue per month", "-k", "4", "--min-score", "0.3", "--json"],
    ["recall", "-q", "revenue per month", "-k", "4", "--min-score=0.45"],
    ["recall", "-q", "revenue per month", "--sql", "SELECT sum(amount) FROM orders", "--json"],
    ["fetch", "-q", "revenue per store"],
    ["fetch", "-q", "revenue per store", "--json", "--threshold", "0", "-t", "column"],
])
def test_daemon_answers_without_click_and_prints_the_same(
        daemon: DaemonServer, example_project: Path, args: list[str]) -> None:
    before = daemon.requests
    fast = run_wrenmem(["--project", str(example_project), *args],
                       example_project, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert daemon.requests == before + 1, fast.stderr
    slow = run_wrenmem(["--project", str(example_project), *args], example_project,
                       env={"WRENMEM_NO_DAEMON": "1"})
    assert fast.returncode == slow.returncode == 0, slow.stderr
    assert fast.stdout == slow.stdout
    imported = imported_modules(fast.stderr)
    assert "wrenmem.watch.client" in imported
    assert not {"click", "wrenmem.cli", "lancedb", "numpy", "sqlglot"} & imported
    messages = [line for line in fast.stderr.splitlines() if not line.startswith("import time:")]
    assert messages == slow.stderr.splitlines()


def test_anything_else_goes_to_click(daemon: DaemonServer, example_project: Path) -> None:
    before = daemon.requests
    out = run_wrenmem(["--project", str(example_project), "recall", "-q", "revenue",
                       "--format", "wren"], example_project)
    assert out.returncode == 0 and '"nl_query"' in out.stdout
    # click's recall asks the daemon itself (one request), after the fast path declined.
    assert daemon.requests == before + 1


@pytest.mark.parametrize("args", [
    ["recall", "-q", "revenue per month", "-b", "grep", "--json"],
    ["recall", "-q", "每个门店的销售额是多少？", "-q", "top customers", "-b", "grep", "-k", "2"],
    ["recall", "-q", "revenue", "-b", "grep", "--tag", "revenue", "--min-score", "0.1"],
    ["recall", "-q", "revenue", "-b", "grep", "--sql=SELECT 1", "-k", "5"],
])
def test_without_a_daemon_recall_runs_in_process_without_click(example_project: Path,
                                                               args: list[str]) -> None:
    fast = run_wrenmem(args, example_project, env={"PYTHONPROFILEIMPORTTIME": "1"})
    slow = run_wrenmem(args, example_project, env={"WRENMEM_NO_FAST_PATH": "1"})
    assert fast.returncode == slow.returncode == 0, slow.stderr
    assert fast.stdout == slow.stdout and "knowledge/sql/" in slow.stdout
    imported = imported_modules(fast.stderr)
    assert "wrenmem.recall.backends" in imported
    assert not {"click", "wrenmem.cli", "lancedb"} & imported


def test_errors_without_a_daemon_are_click_s_messages(example_project: Path) -> None:
    fast = run_wrenmem(["recall", "-q", "   ", "-b", "grep"], example_project)
    slow = run_wrenmem(["recall", "-q", "   ", "-b", "grep"], example_project,
                       env={"WRENMEM_NO_FAST_PATH": "1"})
    assert fast.returncode == slow.returncode != 0
    assert fast.stderr == slow.stderr and "empty" in fast.stderr


@pytest.mark.parametrize("argv", [
    [], ["--help"], ["recall"], ["recall", "--help"], ["recall", "-q"], ["store", "-q", "x"],
    ["recall", "-q", "x", "--format", "wren"], ["recall", "-q", "x", "-k", "0"],
    ["recall", "-q", "x", "-k", "many"], ["recall", "-q", "x", "-b", "nope"],
    ["recall", "-q", "x", "-o", "yaml"], ["recall", "-q", "x", "--json=1"],
    ["recall", "-q", "x", "-k", "1", "-k", "2"], ["-v", "recall", "-q", "x"],
    ["fetch", "-q", "a", "-q", "b"], ["fetch", "-q", "a", "--manifest", "m.json"],
    ["recall", "-q", "x", "--queries", "f.txt"], ["recall", "positional"],
    ["recall", "-q", "x", "--min-score", "1.5"], ["recall", "-q", "x", "--min-score", "nan"],
    ["recall", "-q", "x", "--min-score", "high"], ["fetch", "-q", "x", "--min-score", "0.5"],
])
def test_parse_declines_what_it_does_not_fully_understand(argv: list[str]) -> None:
    with pytest.raises(_Unhandled):
        parse(argv)


def test_parse_reads_what_click_reads() -> None:
    project, command, options = parse(["-P", "/p", "recall", "-q", "a", "--query", "b",
                                       "-l", "5", "--tag", "t1", "--tag=t2", "-o", "json",
                                       "-d", "pg", "--backend", "grep", "--min-score", "0.25",
                                       "--sql", "SELECT 1"])
    assert (project, command) == ("/p", "recall")
    assert options["queries"] == ["a", "b"] and options["k"] == 5
    assert options["tags"] == ["t1", "t2"] and options["json"] is True
    assert options["datasource"] == "pg" and options["backend"] == "grep"
    assert options["min_score"] == 0.25 and options["sql"] == "SELECT 1"


def test_a_one_shot_fetch_starts_openblas_with_one_thread_unless_told_otherwise(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from wrenmem import __main__ as fast

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    import numpy

    fast._one_blas_thread()  # numpy already imported: too late to matter, nothing set
    assert "OPENBLAS_NUM_THREADS" not in os.environ
    monkeypatch.delitem(sys.modules, numpy.__name__)
    fast._one_blas_thread()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")  # the user's own setting wins
    fast._one_blas_thread()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "4"


def test_a_noop_sync_is_answered_without_click_and_prints_the_same(
        example_project: Path) -> None:
    """``wrenmem sync`` with nothing changed (pairs, schema and knowledge): the fast path,
    with the early walk forced and without it, prints what click's command prints, and
    imports neither click nor LanceDB nor the sync; after an edit it hands over to click,
    which syncs the edit."""
    import time

    from wrenmem.fsutil import RACY_SECONDS

    first = run_wrenmem(["sync"], example_project)
    assert first.returncode == 0, first.stderr
    (example_project / "knowledge" / "sql" / "broken.md").write_text("no front matter\n",
                                                                     encoding="utf-8")
    assert run_wrenmem(["sync"], example_project).returncode == 0
    time.sleep(RACY_SECONDS + 0.1)
    for args in (["sync", "--json"], ["sync"], ["index", "--pairs-only"],
                 ["--project", str(example_project), "sync", "--json", "--pairs-only"]):
        slow = run_wrenmem(args, example_project, env={"WRENMEM_NO_FAST_PATH": "1"})
        assert slow.returncode == 0, slow.stderr
        assert "broken.md:" in slow.stderr  # the unreadable file, reported by both
        for early in ("1", "0"):
            fast = run_wrenmem(args, example_project, env={
                "PYTHONPROFILEIMPORTTIME": "1", "WRENMEM_EARLY_WALK": early})
            assert fast.returncode == 0, fast.stderr
            assert _timeless(fast.stdout) == _timeless(slow.stdout), args
            messages = [line for line in fast.stderr.splitlines()
                        if not line.startswith("import time:")]
            assert messages == slow.stderr.splitlines()
            imported = imported_modules(fast.stderr)
            assert "wrenmem.index.noop" in imported, args
            assert not {"click", "wrenmem.cli", "lancedb", "wrenmem.index.sync"} & imported
    assert '"noop": true' in slow.stdout and '"schema": null' in slow.stdout
    rules = example_project / "knowledge" / "rules"
    rules.mkdir()
    (rules / "units.md").write_text("Amounts are in USD.\n", encoding="utf-8")
    added = run_wrenmem(["sync", "--json"], example_project, env={
        "PYTHONPROFILEIMPORTTIME": "1", "WRENMEM_EARLY_WALK": "1"})
    assert added.returncode == 0, added.stderr
    assert "click" in imported_modules(added.stderr)  # a knowledge entry to embed: click
    assert json.loads(added.stdout)["knowledge"]["embedded"] == 1
    assert json.loads(run_wrenmem(["sync", "--json"], example_project).stdout)["knowledge"][
        "noop"]
    pair = next((example_project / "knowledge" / "sql").rglob("*.md"))
    pair.write_text(pair.read_text(encoding="utf-8").replace("\nnl: ", "\nnl: Edited ", 1),
                    encoding="utf-8")
    edited = run_wrenmem(["sync", "--json"], example_project, env={
        "PYTHONPROFILEIMPORTTIME": "1", "WRENMEM_EARLY_WALK": "1"})
    assert edited.returncode == 0, edited.stderr
    assert "click" in imported_modules(edited.stderr)  # the fast path declined
    rel = pair.relative_to(example_project).as_posix()
    assert json.loads(edited.stdout)["changed"] == [rel], edited.stdout[:600]


def _timeless(out: str) -> str:
    """The output with the schema report's own timing (which no two runs share) left out."""
    if not out.startswith("{"):
        return out
    data = json.loads(out)
    if data.get("schema"):
        data["schema"].pop("seconds", None)
    return json.dumps(data)


@pytest.mark.parametrize("args", [
    ["recall", "-q", "revenue per month", "-k", "4", "--json"],
    ["recall", "-q", "每个门店的销售额是多少？", "-q", "top customers", "-b", "hybrid"],
    ["recall", "-q", "revenue per month", "-b", "grep", "--json"],
])
def test_a_one_shot_recall_with_the_early_walk_answers_the_same(example_project: Path,
                                                                args: list[str]) -> None:
    """The catch-up sync's walk made by the child forked at the start (forced here: the
    example is small), made here, and click's: the same answers; and an edit saved just
    before the call is in the answer."""
    assert run_wrenmem(["sync", "--pairs-only"], example_project).returncode == 0
    pair = example_project / "knowledge" / "sql" / "sales" / "monthly-revenue-in-2024.md"
    pair.write_text(pair.read_text(encoding="utf-8").replace(
        "\nnl: ", "\nnl: Gross revenue per month, ", 1), encoding="utf-8")
    outs = [run_wrenmem(args, example_project, env=env) for env in (
        {"WRENMEM_EARLY_WALK": "1"}, {"WRENMEM_EARLY_WALK": "0"},
        {"WRENMEM_NO_FAST_PATH": "1"})]
    assert all(o.returncode == 0 for o in outs), [o.stderr for o in outs]
    assert outs[0].stdout == outs[1].stdout == outs[2].stdout
    assert "knowledge/sql/" in outs[0].stdout
    if "revenue per month" in args:
        assert "Gross revenue per month" in outs[0].stdout  # synced by the catch-up


def test_a_store_with_the_early_walk_finds_and_writes_what_it_does_without(
        example_project: Path, tmp_path: Path) -> None:
    """``store`` with its duplicate lookup's walk made by the child forked before click is
    imported (forced here: the example is small) and made in the command: the same file
    updated for a question asked again (the first of the two files asking it, one saved
    just before the call), the same messages, the same new file for a new one."""
    import shutil

    copies = {env: tmp_path / f"early-{env}" for env in ("1", "0")}
    outs: dict[str, list[tuple[int, str, str]]] = {}
    for env, root in copies.items():
        shutil.copytree(example_project, root)
        dup = root / "knowledge" / "sql" / "sales" / "copy-of-monthly-revenue.md"
        dup.write_text((root / "knowledge" / "sql" / "sales" / "monthly-revenue-in-2024.md"
                        ).read_text(encoding="utf-8"), encoding="utf-8")  # saved just now
        calls = [["store", "--json", "-q", "Monthly revenue in 2024", "-s", "SELECT 2"],
                 ["--project", str(root), "store", "--json", "-q",
                  "How many coupons were used last week?", "-s", "SELECT 1"]]
        outs[env] = []
        for args in calls:
            done = run_wrenmem(args, root, env={"WRENMEM_EARLY_WALK": env,
                                                "WRENMEM_BACKEND": "grep"})
            assert done.returncode == 0, done.stderr
            data = json.loads(done.stdout)
            outs[env].append((data["created"], data["path"], done.stderr))
    assert outs["1"] == outs["0"]
    (created, path, _said), (new, new_path, _) = outs["1"]
    assert not created and path == "knowledge/sql/sales/copy-of-monthly-revenue.md"
    assert new and new_path.startswith("knowledge/sql/")


def test_the_early_walk_for_store_starts_only_for_store_and_not_before_a_swap(
        example_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wrenmem import __main__ as fast
    from wrenmem import statedir
    from wrenmem.pairs import listing

    started: list[Path] = []
    monkeypatch.setattr(listing, "start_early",
                        lambda settings, **kw: started.append(settings.root) or True)
    monkeypatch.setenv(listing.EARLY_ENV, "1")  # whatever the size and the load
    monkeypatch.chdir(example_project)
    store = ["store", "-q", "x", "-s", "SELECT 1"]
    assert fast._walk_early_for_store(store)
    assert fast._walk_early_for_store(["--project", str(example_project), *store])
    assert fast._walk_early_for_store([f"--project={example_project}", *store])
    for other in (["recall", "-q", "x"], ["forget", "x"], ["store", "--help"], [],
                  ["--verbose", *store]):
        assert not fast._walk_early_for_store(other), other
    assert started == [example_project.resolve()] * 3
    swap = load_settings(example_project).state_dir / statedir.IMPORT_SWAP
    swap.parent.mkdir(parents=True, exist_ok=True)
    swap.write_text("{}")  # an interrupted import: its moves come before the lookup walks
    assert not fast._walk_early_for_store(store)
    assert len(started) == 3
