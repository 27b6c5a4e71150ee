"""A one-shot ``recall`` or ``fetch`` handed whole to the warm daemon (wrenmem/watch/forward.py,
wrenmem/cli/forwarded.py): real watcher processes, real ``python -m wrenmem`` processes. What
the daemon prints for the client is what the client prints without it; everything it must
not answer falls back to the client's own run."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import imported_modules, run_wrenmem

from tests.test_watch_cmds import wait_until
from wrenmem.fs import daemonsock, statedir
from wrenmem.recall.daemon_client import ping, socket_path
from wrenmem.watch import forward

NO_DAEMON = {"WRENMEM_NO_DAEMON": "1"}


@pytest.fixture(autouse=True)
def _grep_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WRENMEM_BACKEND", "grep")  # no model: one test runs the default


def start_watcher(root: Path) -> int:
    proc = run_wrenmem(["watch", "--detach", "--json"], root)
    assert proc.returncode == 0, proc.stderr
    wait_until(lambda: (ping(root) or {}).get("syncs", 0) >= 1, timeout=30,
               what="the first sync")
    return int(json.loads(proc.stdout)["pid"])


@pytest.fixture
def watched(example_project: Path) -> Iterator[Path]:
    """The example project with a detached watcher (grep backend); stopped after."""
    start_watcher(example_project)
    yield example_project
    run_wrenmem(["watch", "--stop"], example_project)


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None
        ) -> tuple[int, str, str, bool]:
    """``python -m wrenmem ARGS``: exit code, stdout, stderr (without the import lines),
    and whether the daemon ran it (the process never imported click)."""
    proc = run_wrenmem(args, cwd, env={"PYTHONPROFILEIMPORTTIME": "1", **(env or {})})
    err = "".join(line + "\n" for line in proc.stderr.splitlines()
                  if not line.startswith("import time:"))
    return proc.returncode, proc.stdout, err, "click" not in imported_modules(proc.stderr)


def same_as_alone(args: list[str], root: Path, env: dict[str, str] | None = None,
                  cwd: Path | None = None) -> bool:
    """Runs ``args`` with the daemon there and without it: asserts the same exit code and
    output; returns whether the daemon ran it."""
    code, out, err, forwarded = run(args, cwd or root, env)
    alone = run(args, cwd or root, {**(env or {}), **NO_DAEMON})
    assert (code, out, err) == alone[:3], args
    assert not alone[3]
    return forwarded


def test_recall_and_fetch_printed_by_the_daemon_are_the_clients_own(watched: Path) -> None:
    root = watched
    for args in (["recall", "-q", "revenue per month"],
                 ["recall", "-q", "revenue per month", "-q", "top customers", "-k", "2",
                  "--json"],
                 ["recall", "-q", "revenue", "-o", "json", "--tag", "revenue"],
                 ["recall", "-q", "revenue", "--format", "wren"],
                 ["fetch", "-q", "revenue by store"],
                 ["fetch", "-q", "revenue by store", "--threshold", "0", "-k", "3", "--json"]):
        before = ping(root)["requests"]
        assert same_as_alone(args, root), args
        assert ping(root)["requests"] == before + 2, args  # the command line, our ping
    # from a folder inside the project too (the client finds the root as the CLI does)
    assert same_as_alone(["recall", "-q", "revenue"], root, cwd=root / "knowledge" / "sql")


def test_the_exit_code_and_a_usage_error_are_carried(watched: Path) -> None:
    for args in (["recall"], ["recall", "-q", "x", "-k", "0"], ["fetch"],
                 ["recall", "-q", "x", "--no-such-option"]):
        code, _out, err, forwarded = run(args, watched)
        assert (code, forwarded) == (2, True), args
        assert "Usage: wrenmem" in err
        assert same_as_alone(args, watched)


def test_what_only_the_client_can_print_is_declined(watched: Path, tmp_path: Path) -> None:
    root = watched
    questions = tmp_path / "questions.txt"
    questions.write_text("revenue per month\ntop customers\n", encoding="utf-8")
    manifest = root / "target" / "mdl.json"
    declined = {
        "help": (["recall", "--help"], {}),
        "short help": (["fetch", "-q", "x", "-h"], {}),
        "a file of questions": (["recall", "--queries", str(questions)], {}),
        "a manifest named": (["fetch", "-q", "revenue", "--manifest", str(manifest)], {}),
        "a manifest, short form": (["fetch", "-q", "revenue", f"-m{manifest}"], {}),
        "an error": (["recall", "-q", "x"], {"WRENMEM_FUSION": "nonsense"}),
        "a warning": (["recall", "-q", "revenue"], {"WRENMEM_BACKNED": "grep"}),
        "another project": (["recall", "-q", "revenue"], {"WRENMEM_PROJECT": str(tmp_path)}),
    }
    for what, (args, env) in declined.items():
        assert not same_as_alone(args, root, env), what
        for _ in range(2):  # a warning given once per daemon is still every client's
            code, _out, err, forwarded = run(args, root, env)
            assert not forwarded, what
        if what == "a warning":
            assert "WRENMEM_BACKEND" in err
    # the manifest named is the project's own: without the flag the daemon runs it
    assert same_as_alone(["fetch", "-q", "revenue"], root)
    # a file named relative to the client's folder, which the daemon's folder does not hold
    for spelling in (["--queries", "questions.txt"], ["--queries=questions.txt"]):
        code, out, _err, forwarded = run(["recall", *spelling], tmp_path,
                                         {"WRENMEM_PROJECT": str(root)})
        assert (code, forwarded) == (0, False) and "revenue" in out.lower()


def test_the_daemon_runs_only_its_own_code_and_project(watched: Path, tmp_path: Path) -> None:
    root = watched
    good = {"argv": ["recall", "-q", "revenue"], "root": str(root),
            "code": forward.code_stamp(), "env": {"WRENMEM_BACKEND": "grep"}}

    def send(**change: object) -> dict:
        message = {"v": daemonsock.PROTOCOL, "op": "cli", "args": {**good, **change}}
        reply = daemonsock.exchange(socket_path(root), message, 1, 30, ack_timeout=10)
        assert reply is not None
        return reply

    assert send()["ok"] is True
    assert send()["result"]["exit"] == 0
    for change in ({"code": "1-2-deadbeef"}, {"root": str(tmp_path)},
                   {"argv": ["status"]}, {"argv": ["recall", "-q", "x", "--help"]},
                   {"argv": "recall -q x"}, {"env": {"WRENMEM_BACKEND": 3}},
                   {"env": {"WRENMEM_EMBEDDER": "minilm"}}):  # settings not the daemon's
        reply = send(**change)
        assert reply["ok"] is False, change


def test_the_code_stamp_changes_with_any_file_of_the_package(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub" / "__pycache__").mkdir(parents=True)
    (package / "a.py").write_text("A = 1\n", encoding="utf-8")
    (package / "sub" / "b.json").write_text("{}", encoding="utf-8")
    first = forward.code_stamp(package)
    assert forward.code_stamp(package) == first
    (package / "sub" / "__pycache__" / "b.pyc").write_bytes(b"x")  # compiled: not the code
    assert forward.code_stamp(package) == first
    os.utime(package / "a.py", ns=(1, 1))  # an edit in place, as `git checkout` does
    assert forward.code_stamp(package) != first
    assert forward.newest_file(forward.code_stamp(package)) == pytest.approx(
        os.stat(package / "sub" / "b.json").st_mtime, abs=1e-6)
    assert forward.process_started() <= time.time()


def test_a_dead_daemon_is_passed_over(example_project: Path) -> None:
    root = example_project
    pid = start_watcher(root)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: ping(root) is None, timeout=30, what="the watcher to die")
    assert socket_path(root).exists()  # what SIGKILL leaves: a socket nobody listens on
    assert not same_as_alone(["recall", "-q", "revenue per month", "--json"], root)


class MuteDaemon:
    """A socket where the daemon's is that takes connections and never answers (a hung
    daemon): counts the connections."""

    def __init__(self, root: Path):
        path = socket_path(root)
        statedir.ensure_parent(path)
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.held: list[socket.socket] = []
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.closing.is_set():
            try:
                self.held.append(self.sock.accept()[0])
            except TimeoutError:
                continue

    def close(self) -> None:
        self.closing.set()
        self.thread.join()
        for conn in self.held:
            conn.close()
        self.sock.close()


def test_a_hung_daemon_is_waited_for_once_then_skipped(example_project: Path) -> None:
    root = example_project
    mute = MuteDaemon(root)
    try:
        alone = run(["recall", "-q", "revenue per month"], root, NO_DAEMON)
        started = time.monotonic()
        first = run(["recall", "-q", "revenue per month"], root)
        waited = time.monotonic() - started
        assert first[:3] == alone[:3] and not first[3]
        # one connection, given up on after the acknowledgement's wait, not the reply's
        # (20 s); the in-process run after it did not ask that socket again
        assert len(mute.held) == 1
        assert waited < daemonsock.REPLY_TIMEOUT
        marker = root / ".wrenmem" / statedir.DAEMON_HUNG
        assert marker.is_file()
        second = run(["fetch", "-q", "revenue"], root)
        assert second[0] == 0 and not second[3]
        assert len(mute.held) == 1  # the next process did not even connect
        os.utime(marker, (time.time() - daemonsock.HUNG_SKIP - 1,) * 2)
        run(["recall", "-q", "revenue"], root)
        assert len(mute.held) == 2  # a minute later it is tried again
    finally:
        mute.close()


def test_main_and_the_old_entry_point_run_in_process(watched: Path, capsys,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``wrenmem.__main__.main`` (the console script) asks the daemon; ``wrenmem.cli.main``
    (the entry of an install made before it) runs click, with the same output."""
    from wrenmem.__main__ import main
    from wrenmem.cli import main as cli_main

    monkeypatch.chdir(watched)
    outputs = []
    for entry in (main, cli_main):
        before = ping(watched)["requests"]
        with pytest.raises(SystemExit) as done:
            entry(["recall", "-q", "revenue per month", "--json"])
        assert done.value.code == 0
        outputs.append(capsys.readouterr())
        assert ping(watched)["requests"] == before + 2  # one request each, and our ping
    assert outputs[0] == outputs[1]
    assert json.loads(outputs[0].out)[0]["hits"]


@pytest.mark.slow
def test_the_default_backend_through_the_daemon(indexed_example: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The default settings (the model, the index): the same answers, run by the daemon."""
    root = indexed_example
    monkeypatch.delenv("WRENMEM_BACKEND")
    start_watcher(root)
    try:
        wait_until(lambda: (ping(root) or {}).get("warm"), timeout=180, what="warm")
        for args in (["recall", "-q", "revenue per month", "-q", "每个门店的销售额是多少？",
                      "--json"],
                     ["fetch", "-q", "revenue by store", "--threshold", "0", "-k", "4"]):
            assert same_as_alone(args, root), args
    finally:
        run_wrenmem(["watch", "--stop"], root)
