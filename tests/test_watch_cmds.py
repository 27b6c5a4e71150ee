"""``wrenmem watch`` as a user meets it: real processes, real files, real git, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import PROCESS_TIMEOUT, REPO, run_wrenmem, write_pair

from wrenmem.recall.daemon_client import ping

NO_DAEMON = {"WRENMEM_NO_DAEMON": "1"}
# Most tests need no model: the grep backend indexes nothing. One test runs the default.
GREP = {"WRENMEM_BACKEND": "grep"}


@pytest.fixture(autouse=True)
def _grep_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in GREP.items():
        monkeypatch.setenv(name, value)


def wait_until(predicate: Callable[[], object], timeout: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or predicate}")


def recall_paths(root: Path, question: str, k: int = 5,
                 env: dict[str, str] | None = None) -> list[str]:
    """`recall --json` in this process (through the watcher's daemon while one answers, as
    from a shell: the tests that compare a process's output through it and without it run
    `wrenmem` itself)."""
    from click.testing import CliRunner

    from wrenmem.cli import cli as group

    done = CliRunner().invoke(group, ["--project", str(root), "recall", "-q", question,
                                      "-k", str(k), "--json"], env=env,
                              catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return [hit["path"] for hit in json.loads(done.stdout)[0]["hits"]]


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, timeout=PROCESS_TIMEOUT)


def log_text(root: Path) -> str:
    return (root / ".wrenmem" / "watch.log").read_text(encoding="utf-8")


@pytest.fixture
def watched(example_project: Path):
    """A git repository with the example project and a detached watcher; stopped after."""
    root = example_project
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text(".wrenmem/\n", encoding="utf-8")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "example")
    yield root
    run_wrenmem(["watch", "--stop"], root)


def start(root: Path) -> int:
    proc = run_wrenmem(["watch", "--detach", "--json"], root)
    assert proc.returncode == 0, proc.stderr
    pid = json.loads(proc.stdout)["pid"]
    wait_until(lambda: ping(root) is not None, what="the daemon")
    wait_until(lambda: (ping(root) or {}).get("syncs", 0) >= 1, what="the first sync")
    return pid


def test_watcher_follows_edits_deletes_moves_and_checkouts(watched: Path) -> None:
    root = watched
    sql = root / "knowledge" / "sql"
    # another branch with many differing pairs
    git(root, "checkout", "-q", "-b", "bulk")
    for i in range(120):
        write_pair(root, f"bulk/flamingo-{i:03}.md", f"Flamingo count number {i}",
                   f"SELECT {i}")  # distinct SQL: twins would be one hit
    git(root, "add", "-A")
    git(root, "commit", "-qm", "bulk")
    git(root, "checkout", "-q", "main")

    pid = start(root)
    status = json.loads(run_wrenmem(["watch", "--status", "--json"], root).stdout)
    assert status["running"] and status["daemon"] and status["pid"] == pid
    assert status["mode"] == "inotify"

    # the CLI goes through the daemon, and says exactly what it says without it
    before = ping(root)["requests"]
    warm = run_wrenmem(["recall", "-q", "revenue per month", "-k", "3"], root)
    cold = run_wrenmem(["recall", "-q", "revenue per month", "-k", "3"], root, env=NO_DAEMON)
    assert ping(root)["requests"] == before + 2  # the recall and our ping
    assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout,
                                                           cold.stderr)

    # an editor's atomic save: temp file, then rename onto the pair
    target = next(sql.rglob("*.md"))
    rel = target.relative_to(root).as_posix()
    tmp = target.parent / f".{target.name}.swp.tmp"
    tmp.write_text('---\nnl: "How many narwhals did we sell?"\n---\n\n```sql\nSELECT 1\n```\n',
                   encoding="utf-8")
    os.replace(tmp, target)
    wait_until(lambda: recall_paths(root, "narwhals", 1) == [rel], what="the edit")

    # a move into a new subfolder, then a delete
    (sql / "moved" / "here").mkdir(parents=True)
    moved = sql / "moved" / "here" / target.name
    os.rename(target, moved)
    moved_rel = moved.relative_to(root).as_posix()
    wait_until(lambda: recall_paths(root, "narwhals", 1) == [moved_rel], what="the move")
    moved.unlink()
    wait_until(lambda: recall_paths(root, "narwhals", 1) == [], what="the delete")

    # a checkout that changes 120 files: all of them visible, synced in a few syncs
    syncs_before = ping(root)["syncs"]
    git(root, "checkout", "-q", "bulk")
    synced = f"pairs: {len(list(sql.rglob('*.md')))} read"  # what a sync of all of them says
    wait_until(lambda: (ping(root) or {}).get("last_summary") == synced,
               what="a sync that read the whole checkout")
    assert ping(root)["syncs"] - syncs_before <= 5
    wait_until(lambda: sum("flamingo" in p for p in recall_paths(root, "flamingo", 200)) == 120,
               what="the checkout")
    # answers through the daemon equal answers without it
    for question in ("flamingo 42", "revenue", "每个门店的销售额是多少？"):
        assert recall_paths(root, question) == recall_paths(root, question, env=NO_DAEMON)


def test_sigkill_leaves_the_cli_working_and_a_new_watcher_starts(watched: Path) -> None:
    root = watched
    pid = start(root)
    second = run_wrenmem(["watch", "--detach"], root)
    assert second.returncode == 1
    assert f"already running for {root} (pid {pid})" in second.stderr
    foreground = run_wrenmem(["watch"], root, timeout=20)
    assert foreground.returncode == 1 and "already running" in foreground.stderr

    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not _alive(pid), what="the kill")
    assert (root / ".wrenmem" / "daemon.sock").exists()  # left behind by SIGKILL
    after = run_wrenmem(["recall", "-q", "revenue", "-k", "2"], root)
    cold = run_wrenmem(["recall", "-q", "revenue", "-k", "2"], root, env=NO_DAEMON)
    assert after.returncode == 0 and after.stdout == cold.stdout and after.stdout

    status = run_wrenmem(["watch", "--status"], root)
    assert status.returncode == 1
    assert "not running (removed the files of a watcher that died)" in status.stdout
    assert not (root / ".wrenmem" / "watch.pid").exists()

    new_pid = start(root)
    assert new_pid != pid
    stop = run_wrenmem(["watch", "--stop"], root)
    assert stop.returncode == 0 and f"pid {new_pid}" in stop.stdout
    assert not _alive(new_pid)
    assert not (root / ".wrenmem" / "daemon.sock").exists()
    assert "not running" in run_wrenmem(["watch", "--status"], root).stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (our child in no test here, but be safe) counts as gone
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_foreground_watch_stops_cleanly(example_project: Path, sig: int) -> None:
    root = example_project
    proc = subprocess.Popen([sys.executable, "-m", "wrenmem", "watch"], cwd=root,
                            env={**os.environ, "PYTHONPATH": str(REPO)},
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (ping(root) or {}).get("syncs", 0) >= 1, what="the watcher")
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "watching knowledge/sql/ and target/mdl.json (inotify)" in err
    assert "watch: stopped" in err and "Traceback" not in err
    for name in ("daemon.sock", "watch.pid", "watch.json"):
        assert not (root / ".wrenmem" / name).exists()


def test_bad_settings_at_start_are_one_clear_error(example_project: Path) -> None:
    (example_project / "wrenmem.toml").write_text("fetch_threshold = -5\n", encoding="utf-8")
    proc = run_wrenmem(["watch"], example_project, timeout=30)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: setting 'fetch_threshold' from wrenmem.toml")
    assert "Traceback" not in proc.stderr


def test_bad_settings_while_running_are_reported_once_then_picked_up(watched: Path) -> None:
    root = watched
    start(root)
    config = root / "wrenmem.toml"
    config.write_text("fetch_threshold = -5\n", encoding="utf-8")
    wait_until(lambda: "-5" in log_text(root), what="the error")
    syncs = ping(root)["syncs"]
    write_pair(root, "x.md", "Unrelated edit meanwhile", "SELECT 1")
    wait_until(lambda: ping(root)["syncs"] > syncs, what="the sync of the edit")
    # Reported once, as permanent: no retry warning, no repeat. (That it is never retried
    # on its own is the scripted loop's test in test_watch.py.)
    said = [line for line in log_text(root).splitlines() if "fetch_threshold" in line]
    assert len(said) == 1, said
    assert " error: settings: setting 'fetch_threshold' from wrenmem.toml" in said[0]
    assert "not retrying until something changes" in said[0]

    config.write_text("fetch_threshold = 100\n", encoding="utf-8")
    wait_until(lambda: "settings changed" in log_text(root), what="the restart")
    wait_until(lambda: ping(root) is not None, what="the daemon again")
    before = ping(root)["requests"]
    assert recall_paths(root, "unrelated edit", 1) == ["knowledge/sql/x.md"]
    assert ping(root)["requests"] == before + 2  # served warm, with the new settings


def test_a_bad_pair_is_reported_and_the_rest_keep_syncing(watched: Path) -> None:
    root = watched
    start(root)
    bad = root / "knowledge" / "sql" / "broken.md"
    bad.write_text("---\nnl: [unclosed\n---\n", encoding="utf-8")
    write_pair(root, "fine.md", "Pelican deliveries per week", "SELECT 1")
    wait_until(lambda: recall_paths(root, "pelican", 1) == ["knowledge/sql/fine.md"])
    wait_until(lambda: "knowledge/sql/broken.md:" in log_text(root), what="the report")
    status = json.loads(run_wrenmem(["watch", "--status", "--json"], root).stdout)
    assert status["bad_files"] == ["knowledge/sql/broken.md"]
    write_pair(root, "fine2.md", "Pelican returns per week", "SELECT 2")  # not a twin
    wait_until(lambda: len(recall_paths(root, "pelican", 5)) == 2)
    assert log_text(root).count("knowledge/sql/broken.md:") == 1  # once, not per sync


def test_watch_help_and_exclusive_flags(project: Path) -> None:
    proc = run_wrenmem(["watch", "--stop", "--status"], project)
    assert proc.returncode == 2
    proc = run_wrenmem(["watch", "--stop"], project)
    assert proc.returncode == 0 and "no watcher is running" in proc.stderr


@pytest.mark.slow
def test_fetch_and_recall_are_served_warm_with_the_default_backend(
        watched: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default settings: the watcher loads the model once; answers match in-process."""
    root = watched
    monkeypatch.delenv("WRENMEM_BACKEND")
    start(root)
    wait_until(lambda: "schema:" in (ping(root) or {}).get("last_summary", ""), timeout=120,
               what="the schema index")
    for args in (["fetch", "-q", "revenue by store", "--threshold", "0", "-k", "4"],
                 ["recall", "-q", "revenue per month", "-q", "每个门店的销售额是多少？"],
                 ["status", "--json"]):
        before = ping(root)["requests"]
        warm = run_wrenmem(args, root)
        assert ping(root)["requests"] == before + 2, args  # answered by the daemon
        cold = run_wrenmem(args, root, env=NO_DAEMON)
        assert warm.returncode == cold.returncode == 0, cold.stderr
        assert (warm.stdout, warm.stderr) == (cold.stdout, cold.stderr)

    # an editor's save reaches the index through the watcher alone: `check` finds no drift
    syncs = ping(root)["syncs"]
    target = root / "knowledge" / "sql" / "sales" / "monthly-revenue-in-2024.md"
    tmp = target.parent / ".monthly.tmp"
    tmp.write_text(target.read_text(encoding="utf-8").replace(
        "Monthly revenue in 2024", "Monthly takings of the year 2024"), encoding="utf-8")
    os.replace(tmp, target)
    wait_until(lambda: ping(root)["syncs"] > syncs, what="the watcher's sync")
    check = run_wrenmem(["check"], root)
    assert check.returncode == 0, check.stdout + check.stderr
    # the edited pair and its Chinese twin (the same SQL) are one hit sharing one score
    proc = run_wrenmem(["recall", "-q", "takings of the year", "-k", "1", "--json"], root)
    assert proc.returncode == 0, proc.stderr
    [hit] = json.loads(proc.stdout)[0]["hits"]
    assert "knowledge/sql/sales/monthly-revenue-in-2024.md" in [hit["path"], *hit["also_paths"]]
    assert "Monthly takings of the year 2024" in [hit["question"], *hit["also"]]


def test_poll_flag_watches_by_polling(watched: Path) -> None:
    root = watched
    proc = run_wrenmem(["watch", "--detach", "--poll"], root)
    assert proc.returncode == 0, proc.stderr
    wait_until(lambda: (ping(root) or {}).get("syncs", 0) >= 1, what="the first sync")
    assert ping(root)["mode"] == "polling"
    syncs = ping(root)["syncs"]
    write_pair(root, "polled.md", "Armadillo sightings per region", "SELECT 1")
    wait_until(lambda: ping(root)["syncs"] > syncs, what="a polled change")
    assert recall_paths(root, "armadillo", 1) == ["knowledge/sql/polled.md"]


def test_deleting_wrenmem_folder_while_watching(watched: Path) -> None:
    """Everything under .wrenmem/ may be deleted at any time, with a watcher running too."""
    import shutil

    root = watched
    pid = start(root)
    shutil.rmtree(root / ".wrenmem")
    wait_until(lambda: (root / ".wrenmem" / "watch.pid").exists(), what="the pid file")
    wait_until(lambda: ping(root) is not None, what="the socket")
    assert ping(root)["pid"] == pid
    status = json.loads(run_wrenmem(["watch", "--status", "--json"], root).stdout)
    assert status["running"] and status["pid"] == pid
    again = run_wrenmem(["watch", "--detach"], root)
    assert again.returncode == 1 and "already running" in again.stderr
    write_pair(root, "after.md", "Pangolin counts after the cleanup", "SELECT 1")
    wait_until(lambda: recall_paths(root, "pangolin", 1) == ["knowledge/sql/after.md"])


RUNNER = Path(__file__).resolve().parent / "team_runner.py"


def recall_outcome(settings: object, question: str) -> str:
    """Recall ``question`` through the daemon: "seen" (its pair is the first hit),
    "flagged" (an older answer said to be stale), "declined" (the CLI would answer
    in-process), or what came back instead."""
    from wrenmem.recall.daemon_client import remote_recall
    from wrenmem.recall.hits import Filters

    notes: list[str] = []
    got = remote_recall(settings, [question], 1, Filters(), notify=notes.append)
    if got is None:
        return "declined"
    if got[0].hits and got[0].hits[0].question == question:
        return "seen"
    if any(note.startswith("stale:") for note in notes):
        return "flagged"
    return f"old version for {question!r}: {got[0].hits[:1]}, notes {notes}"


def test_recall_through_the_daemon_sees_every_saved_edit_or_says_stale(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real watcher (the tests' embedder, so no model load): each edit, then each
    `git checkout`, is followed by a recall through the daemon at a moment when the
    watcher's own sync of it may hold the index lock. Every answer has the change, or says
    that it is stale (or the daemon declines, and the CLI answers in-process after the
    writer)."""
    from wrenmem.recall.daemon_client import remote_recall
    from wrenmem.recall.hits import Filters
    from wrenmem.settings import load_settings

    monkeypatch.setenv("WRENMEM_BACKEND", "hybrid")
    root = tmp_path / "p"
    (root / "knowledge" / "sql").mkdir(parents=True)
    (root / "wrenmem.toml").write_text('embedder = "fake"\n', encoding="utf-8")
    for i in range(20):
        write_pair(root, f"q{i:02}.md", f"Orders shipped to depot {i}", f"SELECT {i}")
    (root / ".gitignore").write_text(".wrenmem/\n", encoding="utf-8")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "depots")
    watcher = subprocess.Popen(
        [sys.executable, str(RUNNER), "--project", str(root), "watch"], cwd=root,
        env={**os.environ, "PYTHONPATH": str(REPO), "WRENMEM_BACKEND": "hybrid",
             "WRENMEM_TEST_MAIN_WRITE_DELAY": "0.4"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (ping(root) or {}).get("syncs", 0) >= 1, timeout=60,
                   what="the watcher's first sync")
        settings = load_settings(root)
        wait_until(lambda: remote_recall(settings, ["warm up"], 1, Filters()) is not None,
                   timeout=30, what="a warm answer")
        edits = []
        for i in range(20):
            write_pair(root, f"q{i:02}.md", f"How many zebras live in paddock {i}?",
                       f"SELECT {i}")
            time.sleep(0.2 + 0.05 * (i % 6))  # after the debounce: the watcher syncs
            edits.append(recall_outcome(settings, f"How many zebras live in paddock {i}?"))
        old = [o for o in edits if o not in ("seen", "flagged", "declined")]
        assert not old, f"{len(old)} of 20 answers missed the edit: {old}"
        assert edits.count("seen") >= 10, edits  # waiting for the writer is the rule

        # The same after a checkout that changes all 20 files, back and forth, 20 times.
        git(root, "checkout", "-q", "-b", "zebras")
        git(root, "commit", "-qam", "zebras")
        checkouts = []
        for n in range(20):
            branch, question = (("main", f"Orders shipped to depot {n}") if n % 2 == 0
                                else ("zebras", f"How many zebras live in paddock {n}?"))
            git(root, "checkout", "-q", branch)
            time.sleep(0.2 + 0.05 * (n % 6))
            checkouts.append(recall_outcome(settings, question))
        old = [o for o in checkouts if o not in ("seen", "flagged", "declined")]
        assert not old, f"{len(old)} of 20 answers missed the checkout: {old}"
    finally:
        watcher.terminate()
        watcher.wait(timeout=30)


def test_a_manifest_added_while_watching_gets_its_schema_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No target/ when the watcher starts; the manifest arrives later (a checkout, a dbt
    build): the watcher builds its schema index. Before it does, `status` names the schema
    as what is stale."""
    import shutil

    from conftest import EXAMPLE_MANIFEST

    monkeypatch.setenv("WRENMEM_BACKEND", "hybrid")
    root = tmp_path / "p"
    (root / "knowledge" / "sql").mkdir(parents=True)
    (root / "wrenmem.toml").write_text('embedder = "fake"\n', encoding="utf-8")
    write_pair(root, "a.md", "Orders per store", "SELECT 1")
    runner = [sys.executable, str(RUNNER), "--project", str(root)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "WRENMEM_BACKEND": "hybrid",
           **NO_DAEMON}
    assert subprocess.run([*runner, "sync"], env=env, capture_output=True, timeout=PROCESS_TIMEOUT).returncode == 0
    (root / "target").mkdir()
    shutil.copy(EXAMPLE_MANIFEST, root / "target" / "mdl.json")
    status = subprocess.run([*runner, "status"], env=env, capture_output=True, text=True, timeout=PROCESS_TIMEOUT)
    [fresh] = [line for line in status.stdout.splitlines() if line.startswith("fresh:")]
    assert "; the schema index: no schema index yet: run `wrenmem sync`)" in fresh, fresh
    shutil.rmtree(root / "target")

    watcher = subprocess.Popen([*runner, "watch"], cwd=root, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (ping(root) or {}).get("syncs", 0) >= 1, timeout=60,
                   what="the watcher's first sync")
        staging = tmp_path / "mdl.json"
        shutil.copy(EXAMPLE_MANIFEST, staging)
        (root / "target").mkdir()
        os.replace(staging, root / "target" / "mdl.json")  # as a checkout or a build writes it
        wait_until(lambda: "schema:" in (ping(root) or {}).get("last_summary", ""), timeout=30,
                   what="the schema index")
        check = subprocess.run([*runner, "check", "--json"], env=env, capture_output=True,
                               text=True, timeout=PROCESS_TIMEOUT)
        assert check.returncode == 0, check.stdout + check.stderr
        assert json.loads(check.stdout)["schema"]["fresh"]
    finally:
        watcher.terminate()
        watcher.wait(timeout=30)


def first_then_warm(root: Path, question: list[str]) -> tuple[dict, dict]:
    """The JSON of a one-shot call no watcher answers (it starts one on demand), then of
    the same call once that watcher is warm, checked to be the daemon's answer."""
    first = run_wrenmem(question, root, env={"WRENMEM_DAEMON": "on-demand"})
    assert first.returncode == 0, first.stderr
    wait_until(lambda: (ping(root) or {}).get("warm") is True, timeout=40,
               what=f"the watcher {question[0]} started")
    before = (ping(root) or {})["requests"]
    again = run_wrenmem(question, root, env={"WRENMEM_DAEMON": "on-demand"})
    assert again.returncode == 0, again.stderr
    assert (ping(root) or {})["requests"] > before  # the daemon answered it
    return json.loads(first.stdout), json.loads(again.stdout)


def test_a_recall_no_watcher_answers_starts_one_and_the_next_is_answered_warm(
        watched: Path) -> None:
    """``daemon = "on-demand"`` (the default; the tests' environment says ``running``): a
    one-shot recall that finds no watcher answers in-process and starts one in the
    background; the next recall is the daemon's, with the same answer. ``running`` starts
    none."""
    root = watched
    question = ["recall", "-q", "revenue per month", "--json"]
    running = run_wrenmem(question, root, env={"WRENMEM_DAEMON": "running"})
    assert running.returncode == 0, running.stderr
    time.sleep(0.5)
    assert ping(root) is None and not (root / ".wrenmem" / "watch.pid").exists()
    first, again = first_then_warm(root, question)
    assert again == first == json.loads(running.stdout)


def test_a_fetch_no_watcher_answers_starts_one_and_the_next_is_answered_warm(
        watched: Path) -> None:
    """A one-shot ``fetch`` in search mode starts the watcher on demand as recall does
    (there is no saved copy of the schema search for a new process: issue 42); the next
    fetch is the daemon's, with the same answer."""
    first, again = first_then_warm(
        watched, ["fetch", "-q", "revenue per month", "--threshold", "0", "--json"])
    assert again["results"] == first["results"] and first["strategy"] == "search"


def test_a_watcher_started_on_demand_stops_when_no_request_comes(watched: Path) -> None:
    """A watcher a recall started stops by itself after its idle time without a request
    (pings do not count), where ``wrenmem watch --detach`` runs until stopped: a one-shot
    recall never leaves a process behind for good."""
    root = watched
    env = {"WRENMEM_DAEMON": "on-demand", "WRENMEM_IDLE_EXIT": "4"}
    first = run_wrenmem(["recall", "-q", "revenue per month", "--json"], root, env=env)
    assert first.returncode == 0, first.stderr
    wait_until(lambda: (ping(root) or {}).get("warm") is True, timeout=40,
               what="the watcher the recall started")
    wait_until(lambda: ping(root) is None, timeout=40, what="the idle watcher to stop")
    log = (root / ".wrenmem" / "watch.log").read_text()
    assert "no request for 4 s: stopping" in log
