"""One service object: the daemon answers with the Memory it holds, a Memory decides alone
whether to ask the daemon, and the modules load what they call on first use (issue 42)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from wrenmem import Memory
from wrenmem.settings import load_settings
from wrenmem.watch.daemon import DaemonServer


@pytest.fixture
def served(example_project: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("WRENMEM_BACKEND", "grep")  # no model: the asking is what is tested
    monkeypatch.delenv("WRENMEM_NO_DAEMON", raising=False)
    settings = load_settings(example_project)
    server = DaemonServer(settings)
    server.start()
    yield settings, server
    server.close()


def test_the_daemon_answers_with_the_memory_it_holds(served) -> None:
    settings, server = served
    assert isinstance(server.memory, Memory) and server.recaller is server.memory.recaller
    asking = Memory.from_settings(settings, use_daemon=True)
    local = Memory.from_settings(settings)
    before = server.requests
    assert asking.recall("revenue per month", k=2) == local.recall("revenue per month", k=2)
    fetched = asking.fetch("revenue per month")
    assert server.requests == before + 2  # both answered by the daemon
    assert fetched.to_dict() == local.fetch("revenue per month").to_dict()
    assert asking.status()["backend"] == local.status()["backend"] == "grep"
    assert server.requests == before + 3


def test_a_memory_never_asks_the_daemon_for_another_manifest_or_embedder(served) -> None:
    """The choice is the Memory's alone (it was the CLI's for ``--manifest``): a manifest
    given as a flag, or an embedder of the caller's, is answered in-process."""
    from index_helpers import RecordingEmbedder

    settings, server = served
    manifest = str(settings.manifest_path)  # the same file, but named by the caller
    flagged = Memory(settings.root, use_daemon=True, manifest=manifest, backend="grep")
    before = server.requests
    assert flagged.fetch("revenue per month").to_dict()
    assert flagged.status()
    own = Memory.from_settings(settings, use_daemon=True, embedder=RecordingEmbedder())
    assert own.recall("revenue per month", k=1)
    assert server.requests == before


def test_a_lazy_module_is_imported_at_first_use_and_sees_patches(
        monkeypatch: pytest.MonkeyPatch) -> None:
    code = ("import sys\n"
            "from wrenmem.lazy import lazy\n"
            "diff = lazy('wrenmem.git.diff')\n"
            "print('BEFORE', 'wrenmem.git.diff' in sys.modules)\n"
            "diff.diff_pairs\n"
            "print('AFTER', 'wrenmem.git.diff' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "BEFORE False" in out.stdout and "AFTER True" in out.stdout
    import wrenmem.pairs.text as real
    from wrenmem.lazy import lazy

    text = lazy("wrenmem.pairs.text")
    monkeypatch.setattr(real, "question_key", lambda q: "patched")
    assert text.question_key("anything") == "patched"


def _in_function_imports(path: Path) -> int:
    count = 0
    for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (
                        node.level or (node.module or "").split(".")[0] == "wrenmem"):
                    count += 1
                elif isinstance(node, ast.Import):
                    count += sum(a.name.split(".")[0] == "wrenmem" for a in node.names)
    return count


def test_few_internal_imports_inside_functions_and_no_long_module() -> None:
    """At most 30 internal imports inside functions outside cli/ (a module names what it
    calls at its top, lazily where a one-shot command must not pay for it); no module over
    600 lines outside index/ and storage/ (being split on their own branch)."""
    package = REPO / "wrenmem"
    files = [p for p in package.rglob("*.py") if "cli" not in p.relative_to(package).parts]
    counts = {p.relative_to(REPO).as_posix(): _in_function_imports(p) for p in files}
    assert sum(counts.values()) <= 30, sorted(((n, p) for p, n in counts.items() if n),
                                              reverse=True)
    long = [p.relative_to(REPO).as_posix() for p in package.rglob("*.py")
            if p.relative_to(package).parts[0] not in ("index", "storage")
            and len(p.read_text(encoding="utf-8").splitlines()) > 600]
    assert not long, long


def test_recall_probes_the_watcher_lock_only_when_the_daemon_did_not_answer(
        example_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A recall the daemon answered starts nothing, so it does not look for a watcher."""
    from click.testing import CliRunner

    from wrenmem.cli import cli as group
    from wrenmem.watch import process

    monkeypatch.setenv("WRENMEM_BACKEND", "grep")
    monkeypatch.setenv("WRENMEM_DAEMON", "on-demand")  # (the tests' default: "running")
    server = DaemonServer(load_settings(example_project))
    server.start()
    probes: list[object] = []  # (each probe answers "running": no watcher is started)
    monkeypatch.setattr(process, "is_running", lambda s: probes.append(s) or True)
    args = ["--project", str(example_project), "recall", "-q", "revenue per month", "--json"]
    try:
        done = CliRunner().invoke(group, args, catch_exceptions=False)
        assert done.exit_code == 0, done.output
        assert server.requests == 1 and probes == []  # answered warm: no probe
    finally:
        server.close()
    done = CliRunner().invoke(group, args, catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert len(probes) == 1  # answered in-process: on demand, a watcher is looked for


def test_the_daemon_answers_whatever_the_clients_daemon_setting(
        example_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``daemon`` says whether a client starts a watcher, not what it answers: a watcher
    started with ``running`` answers a client whose setting is ``on-demand``."""
    monkeypatch.setenv("WRENMEM_BACKEND", "grep")
    server = DaemonServer(load_settings(example_project))  # the tests' "running"
    server.start()
    try:
        monkeypatch.setenv("WRENMEM_DAEMON", "on-demand")
        asking = Memory(example_project, use_daemon=True)
        assert asking.recall("revenue per month", k=1)
        assert asking.daemon_answered and server.requests == 1
    finally:
        server.close()
