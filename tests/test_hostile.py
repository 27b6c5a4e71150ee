"""Hostile input: no file a user (or an accident) puts in a project crashes, hangs or
exhausts a command, and nothing a user wrote is lost."""

from __future__ import annotations

import json
import os
import shutil
import signal
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import PROCESS_TIMEOUT

from tests.conftest import EXAMPLE_MANIFEST, write_pair


class Hang(Exception):
    pass


def _runner(root: Path, seconds: int = 60) -> Callable[..., Result]:
    """The CLI in-process; a command still running after ``seconds`` fails the test."""
    from wrenmem.cli import cli as group

    def on_alarm(signum: int, frame: object) -> None:
        raise Hang(f"still running after {seconds} s")

    def run(*args: str, input: str | None = None) -> Result:
        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(seconds)
        try:
            return CliRunner().invoke(group, ["--project", str(root), *args], input=input,
                                      catch_exceptions=False)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)

    return run


def _bad_manifest(root: Path, *, huge: bool = False) -> Path:
    """The example manifest with a lone surrogate in a model name and in a description,
    and an integer literal too long for int(); ``huge``: and a 20 MB description and a
    1 MB column expression."""
    doc = json.loads(EXAMPLE_MANIFEST.read_text(encoding="utf-8"))
    doc["models"][0]["name"] = "t\ud800x"
    doc["models"][1]["properties"] = {"description": "bad \udc80 text"}
    if huge:
        doc["models"][2]["properties"] = {"description": "Order lines. " * 1_600_000}
        doc["models"][3]["columns"][0]["expression"] = "a + " * 250_000 + "1"
    text = json.dumps(doc)  # ensure_ascii: surrogates spelled \\ud800
    text = text.replace('"catalog"', '"bignum": ' + "9" * 5000 + ', "catalog"', 1)
    path = root / "target" / "mdl.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="ascii")
    return path


# --- item 1: one bad value in the manifest -------------------------------------------------

def test_manifest_surrogates_and_huge_ints_load(tmp_path: Path) -> None:
    from wrenmem.schema.describe import describe
    from wrenmem.schema.manifest import load_manifest

    manifest = load_manifest(_bad_manifest(tmp_path))
    assert manifest.models[0].name == "t\ufffdx"
    describe(manifest).encode("utf-8")


@pytest.mark.parametrize("args", [
    ["list"], ["recall", "-q", "revenue", "--backend", "grep"], ["check"], ["status"],
    ["export"], ["seed"], ["describe"], ["fetch", "-q", "revenue"],
])
def test_bad_manifest_never_crashes_a_command(project: Path, args: list[str]) -> None:
    _bad_manifest(project)
    write_pair(project, "a.md", "What is the revenue?", "SELECT 1")
    result = _runner(project)(*args)
    assert result.exit_code in (0, 1), result.output
    assert "Traceback" not in result.output


# --- item 2: non-regular *.md files are reported, never read --------------------------------

def _special_files(root: Path) -> None:
    sql = root / "knowledge" / "sql"
    os.mkfifo(sql / "pipe.md")
    (sql / "zero.md").symlink_to("/dev/zero")


@pytest.mark.parametrize("args", [
    ["list"], ["validate"], ["recall", "-q", "revenue", "--backend", "grep"], ["fmt"],
    ["fmt", "--check"], ["duplicates"], ["check"], ["status"], ["export"],
])
def test_fifo_and_device_are_reported_not_read(project: Path, args: list[str]) -> None:
    write_pair(project, "a.md", "What is the revenue?", "SELECT 1")
    _special_files(project)
    result = _runner(project)(*args)
    assert result.exit_code in (0, 1), result.output
    if args[0] in ("list", "validate", "fmt", "check", "duplicates", "export"):
        assert "pipe.md" in result.output and "zero.md" in result.output, result.output


def test_validate_refuses_a_device(project: Path) -> None:
    result = _runner(project)("validate", "/dev/zero")
    assert result.exit_code == 1
    assert "not a regular file" in result.output


# --- item 3: small files that would exhaust memory ------------------------------------------

ALIAS_BOMB = """---
nl: What is the revenue?
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
---

```sql
SELECT 1
```
"""


def test_yaml_alias_bomb_is_refused(project: Path) -> None:
    (project / "knowledge" / "sql" / "bomb.md").write_text(ALIAS_BOMB, encoding="utf-8")
    result = _runner(project, 20)("list")
    assert result.exit_code == 0
    assert "bomb.md:" in result.output and "alias" in result.output
    cache = project / ".wrenmem" / "catalog.bin"
    assert not cache.exists() or cache.stat().st_size < 100_000


def test_a_few_aliases_still_load() -> None:
    from wrenmem.pairs.pairfile import parse_pair

    pair = parse_pair("---\nnl: q\nx: &x [1, 2]\ny: *x\n---\n```sql\nSELECT 1\n```\n")
    assert pair.extra == {"x": [1, 2], "y": [1, 2]}


def test_pair_file_size_cap(project: Path) -> None:
    write_pair(project, "huge.md", "revenue " * 700_000, "SELECT 1")
    write_pair(project, "ok.md", "What is the revenue?", "SELECT 1")
    result = _runner(project, 20)("list")
    assert result.exit_code == 0
    assert "huge.md:1: file too large" in result.output and "max_pair_bytes" in result.output
    assert "ok.md" in result.output
    (project / "wrenmem.toml").write_text("max_pair_bytes = 50\n", encoding="utf-8")
    result = _runner(project, 20)("validate")
    assert "ok.md:1:1: WM001 file too large" in result.output


def test_embedded_text_is_capped(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.index_helpers import install_fake, settings_for
    from wrenmem.index.sync import sync_pairs

    fake = install_fake(monkeypatch)
    write_pair(project, "long.md", "revenue " * 1000, "SELECT 1")
    (project / "wrenmem.toml").write_text("max_embed_chars = 100\n", encoding="utf-8")
    sync_pairs(settings_for(project))
    assert fake.texts and max(len(t) for t in fake.texts) == 100


# --- item 7: the parse cache is derived state, never trusted blindly -------------------------

def _forge_catalog(root: Path, rel: str, record: object) -> None:
    """Rewrite the catalog entry of ``rel`` (a well-formed file, valid checksum)."""
    from wrenmem.fs.fsutil import read_marshal, write_marshal

    path = root / ".wrenmem" / "catalog.bin"
    data = read_marshal(path)
    key, digest, _record, _racy = data["entries"][rel]
    data["entries"][rel] = (key, digest, record, False)
    write_marshal(path, data)


def _age(path: Path) -> None:
    os.utime(path, (1_600_000_000, 1_600_000_000))  # older than the racy window


def test_flipped_byte_in_catalog_is_not_trusted(project: Path) -> None:
    _age(write_pair(project, "a.md", "What is the revenue?", "SELECT 1"))
    run = _runner(project)
    run("list")
    cache = project / ".wrenmem" / "catalog.bin"
    cache.write_bytes(cache.read_bytes().replace(b"revenue", b"revenuf"))
    result = run("list")
    assert "revenue" in result.output and "revenuf" not in result.output


@pytest.mark.parametrize("record", [("ok", (1, 2, 3)), ("ok", None), ("error", None, "x"),
                                    "garbage", ("ok", ("q", "SELECT 1", None, None, 5, "user",
                                                       None, "", {}, 1, False))])
def test_wrong_shape_cache_entry_is_discarded(project: Path, record: object) -> None:
    _age(write_pair(project, "a.md", "What is the revenue?", "SELECT 1"))
    run = _runner(project)
    run("list")
    _forge_catalog(project, "knowledge/sql/a.md", record)
    for args in (["list"], ["recall", "-q", "revenue", "-b", "grep"], ["export"]):
        result = run(*args)
        assert result.exit_code == 0 and "What is the revenue?" in result.output


def test_full_sync_rereads_the_files(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.index_helpers import install_fake, settings_for, table_rows
    from wrenmem.index.sync import sync_pairs

    install_fake(monkeypatch)
    _age(write_pair(project, "a.md", "What is the revenue?", "SELECT 1"))
    settings = settings_for(project)
    sync_pairs(settings)
    _forge_catalog(project, "knowledge/sql/a.md", ("ok", (
        "forged question", "SELECT 2", None, None, [], "user", None, "", {}, 1, False)))
    sync_pairs(settings, full=True)
    assert [r["question"] for r in table_rows(settings)] == ["What is the revenue?"]


# --- item 5: forget deletes a link, never what it points to ---------------------------------

def test_forget_a_symlink_deletes_the_link_only(project: Path) -> None:
    real = write_pair(project, "real-question.md", "What is the revenue?", "SELECT 1")
    alias = project / "knowledge" / "sql" / "alias.md"
    alias.symlink_to("real-question.md")
    result = _runner(project)("forget", "-y", "knowledge/sql/alias.md")
    assert result.exit_code == 0, result.output
    assert real.is_file() and not alias.is_symlink()
    assert "alias.md" in result.output


# --- item 6: store never writes where nothing reads -----------------------------------------

@pytest.mark.parametrize("folder", [".hidden", "sub/.git", "backup~", "a" * 300])
def test_store_refuses_folders_nothing_reads(project: Path, folder: str) -> None:
    result = _runner(project)("store", "-q", "What is the revenue?", "--sql", "SELECT 1",
                              "--folder", folder)
    assert result.exit_code == 1, result.output
    assert "error:" in result.output and "folder" in result.output
    assert not [p for p in (project / "knowledge").rglob("*.md")]


# --- item 9: fmt and store keep what people wrote -------------------------------------------

COMMENTED = """---
# approved by finance
nl: What is the revenue?  # the CFO's wording
tags:
  - kpi  # weekly report
  - revenue
owner: "team # data"  # not a comment inside the quotes
notes_key: |
  # this is text, not a comment
source: user
---

```sql
SELECT 1
```
"""


def test_fmt_keeps_yaml_comments(project: Path) -> None:
    from wrenmem.pairs.pairfile import parse_pair

    path = project / "knowledge" / "sql" / "a.md"
    path.write_text(COMMENTED, encoding="utf-8")
    before = parse_pair(COMMENTED)
    run = _runner(project)
    assert run("fmt").exit_code in (0, 1)
    text = path.read_text(encoding="utf-8")
    for comment in ("# approved by finance", "# the CFO's wording", "# weekly report",
                    "# not a comment inside the quotes"):
        assert text.count(comment) == 1, text
    after = parse_pair(text)
    assert (after.nl, after.tags, after.extra) == (before.nl, before.tags, before.extra)
    assert after.extra["notes_key"] == "# this is text, not a comment\n"
    assert run("fmt", "--check").exit_code == 0  # canonical now: stable


def test_store_update_keeps_comments(project: Path) -> None:
    path = project / "knowledge" / "sql" / "a.md"
    path.write_text(COMMENTED, encoding="utf-8")
    result = _runner(project)("store", "-q", "What is the revenue?", "--sql", "SELECT 2")
    assert result.exit_code == 0, result.output
    text = path.read_text(encoding="utf-8")
    assert "SELECT 2" in text and "# approved by finance" in text


def test_rewritten_files_keep_their_mode(project: Path) -> None:
    path = project / "knowledge" / "sql" / "a.md"
    path.write_text(COMMENTED.replace("source: user\n", ""), encoding="utf-8")
    path.chmod(0o664)
    run = _runner(project)
    run("fmt")
    assert path.stat().st_mode & 0o777 == 0o664
    old = os.umask(0o022)
    try:
        run("store", "-q", "How many orders?", "--sql", "SELECT 1")
    finally:
        os.umask(old)
    new = next((project / "knowledge" / "sql").glob("how-many*.md"))
    assert new.stat().st_mode & 0o777 == 0o644


def test_fmt_through_a_symlink_keeps_the_link(project: Path) -> None:
    real = project / "knowledge" / "sql" / "real.md"
    real.write_text(COMMENTED.replace("source: user\n", ""), encoding="utf-8")
    link = project / "knowledge" / "sql" / "link.md"
    link.symlink_to("real.md")
    _runner(project)("fmt")
    assert link.is_symlink() and "source: user" in real.read_text(encoding="utf-8")


# --- item 10: no traceback from odd files and odd input --------------------------------------

NESTED = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("name,data", [("q.txt", b"\xff\xfe bad utf-8\n"),
                                       ("q.json", NESTED.encode())])
def test_recall_questions_file_errors_are_messages(project: Path, name: str,
                                                   data: bytes) -> None:
    write_pair(project, "a.md", "What is the revenue?", "SELECT 1")
    path = project / name
    path.write_bytes(data)
    result = _runner(project)("recall", "--queries", str(path), "-b", "grep")
    assert result.exit_code == 1, result.output
    assert "error:" in result.output and name in result.output


@pytest.mark.parametrize("data", [b"pairs:\n- nl: \xff\n  sql: SELECT 1\n",
                                  NESTED.encode(),
                                  ALIAS_BOMB.split("---")[1].encode() + b"pairs: []\n"])
def test_import_of_bad_files_is_a_message(project: Path, data: bytes) -> None:
    path = project / "queries.yml"
    path.write_bytes(data)
    result = _runner(project, 20)("import", str(path))
    assert result.exit_code == 1, result.output
    assert "error:" in result.output and "queries.yml" in result.output


@pytest.mark.parametrize("layout", ["state-file", "index-file", "lock-folder"])
def test_odd_state_layout_is_a_message(project: Path, monkeypatch: pytest.MonkeyPatch,
                                       layout: str) -> None:
    from tests.index_helpers import install_fake

    install_fake(monkeypatch)
    (project / "wrenmem.toml").write_text('embedder = "fake"\n', encoding="utf-8")
    write_pair(project, "a.md", "What is the revenue?", "SELECT 1")
    state = project / ".wrenmem"
    if layout == "state-file":
        state.write_text("not a folder", encoding="utf-8")
    elif layout == "index-file":
        state.mkdir()
        (state / "index").write_text("not a folder", encoding="utf-8")
    else:
        (state / "index.lock").mkdir(parents=True)
    run = _runner(project)
    for args in (["sync"], ["check"], ["status"], ["list"], ["recall", "-q", "revenue"],
                 ["store", "-q", "How many orders?", "--sql", "SELECT 2"], ["reset"]):
        result = run(*args)
        assert result.exit_code in (0, 1), (args, result.output)


def test_daemon_survives_deeply_nested_json(project: Path) -> None:
    from wrenmem.settings import load_settings
    from wrenmem.watch.daemon import DaemonServer

    daemon = DaemonServer(load_settings(project))
    reply = daemon.handle_line(NESTED.encode())
    assert reply["ok"] is False and "bad request" in reply["error"]


# --- item 11: nothing skipped silently ------------------------------------------------------

@pytest.mark.parametrize("args", [["list"], ["sync"], ["check"], ["status"], ["export"],
                                  ["validate"], ["fmt"], ["duplicates"],
                                  ["recall", "-q", "x", "-b", "grep"]])
def test_dangling_links_and_loops_are_named(project: Path, args: list[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.index_helpers import install_fake

    install_fake(monkeypatch)
    (project / "wrenmem.toml").write_text('embedder = "fake"\n', encoding="utf-8")
    write_pair(project, "a.md", "What is the revenue?", "SELECT 1")
    sql = project / "knowledge" / "sql"
    (sql / "dangling.md").symlink_to("nowhere.md")
    (sql / "loop.md").symlink_to("loop.md")
    result = _runner(project)(*args)
    assert result.exit_code in (0, 1), result.output
    assert "dangling.md" in result.output and "loop.md" in result.output, result.output


@pytest.mark.parametrize("args", [["sync"], ["check"], ["status"], ["list"], ["validate"],
                                  ["recall", "-q", "revenue", "-b", "grep"]])
def test_missing_knowledge_dir_is_an_error(project: Path, args: list[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.index_helpers import install_fake

    install_fake(monkeypatch)
    write_pair(project, "a.md", "What is the revenue?", "SELECT 1")
    (project / "wrenmem.toml").write_text('embedder = "fake"\n', encoding="utf-8")
    run = _runner(project)
    assert run("sync").exit_code == 0
    (project / "wrenmem.toml").write_text('embedder = "fake"\nknowledge_dir = "knowlege/sql"\n',
                                          encoding="utf-8")
    result = run(*args)
    assert result.exit_code == 1, result.output
    assert "knowlege/sql" in result.output and "wrenmem.toml" in result.output
    (project / "wrenmem.toml").write_text('embedder = "fake"\n', encoding="utf-8")
    assert run("check").exit_code == 0  # the index kept its row


# --- item 12: smaller ----------------------------------------------------------------------

def test_watcher_and_catalog_follow_one_rule(project: Path) -> None:
    from wrenmem.pairs.catalog import iter_pair_files
    from wrenmem.settings import load_settings
    from wrenmem.watch.loop import PAIRS, classify_path

    sql = project / "knowledge" / "sql"
    names = ["#42-tapirs.md", "archive.bak/x.md", "a.md", ".q.md.swp", "q.md~", "#q.md#",
             "4913", "x.md.tmp", ".hidden/y.md", "b~/z.md", "README.md", "notes.txt",
             "sub.tmp/w.md", "~$office.md", "flycheck_a.md"]
    for name in names:
        (sql / name).parent.mkdir(parents=True, exist_ok=True)
        (sql / name).write_text("x", encoding="utf-8")
    settings = load_settings(project)
    read = {p.relative_to(sql).as_posix() for p in iter_pair_files(sql)}
    watched = {n for n in names if classify_path(settings, str(sql / n), False) == PAIRS}
    assert watched == read
    assert {"#42-tapirs.md", "archive.bak/x.md"} <= read


def test_watch_stop_signals_only_our_watcher(project: Path) -> None:
    import fcntl
    import subprocess

    state = project / ".wrenmem"
    state.mkdir()
    lock = os.open(state / "watch.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # "a watcher" is running...
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        (state / "watch.pid").write_text(f"{bystander.pid}\n", encoding="utf-8")  # ...stale pid
        result = _runner(project)("watch", "--stop")
        assert result.exit_code == 1, result.output
        assert "not signalling" in result.output
        assert bystander.poll() is None  # still alive
    finally:
        bystander.kill()
        bystander.wait()
        os.close(lock)


def test_a_stopped_watcher_is_not_waited_for(project: Path) -> None:
    import socket
    import subprocess
    import sys
    import time

    from wrenmem.recall.daemon_client import request, socket_path
    from wrenmem.settings import load_settings

    settings = load_settings(project)
    path = socket_path(project)
    path.parent.mkdir(parents=True, exist_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(os.fspath(path))
    server.listen(8)  # accepts connections (the kernel does) but never answers
    frozen = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (project / ".wrenmem").mkdir(exist_ok=True)
        (project / ".wrenmem" / "watch.pid").write_text(f"{frozen.pid}\n", encoding="utf-8")
        frozen.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the signal is delivered asynchronously
            with open(f"/proc/{frozen.pid}/stat", encoding="ascii") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "T":
                    break
            time.sleep(0.01)
        started = time.monotonic()
        assert request(settings, "ping") is None
        assert time.monotonic() - started < 2
    finally:
        frozen.kill()
        frozen.wait()
        server.close()


def test_hooks_leave_other_repositories_alone(tmp_path: Path) -> None:
    from wrenmem.git.hooks import run_hook
    from wrenmem.settings import load_settings

    other = tmp_path / "other-repo"
    other.mkdir()
    assert run_hook(load_settings(other), "post-commit", ()) is None
    assert not (other / ".wrenmem").exists()


@pytest.mark.parametrize("question", ["", "   "])
def test_recall_refuses_an_empty_question(project: Path, question: str) -> None:
    write_pair(project, "a.md", "What is the revenue?", "SELECT 1")
    result = _runner(project)("recall", "-q", question, "-b", "grep")
    assert result.exit_code == 1 and "empty" in result.output


def test_list_escapes_newlines_and_tabs(project: Path) -> None:
    write_pair(project, "two\nlines\tand tab.md", "What is the revenue?", "SELECT 1")
    result = _runner(project)("list")
    assert result.exit_code == 0
    lines = [line for line in result.stdout.splitlines() if line]
    assert lines == ["knowledge/sql/two\\nlines\\tand tab.md\tWhat is the revenue?"]


# --- the hostile corpus: every command, as a real process, bounded in time and memory --------

FAKE_CLI = """
import atexit, sys
def peak():  # VmHWM: this process's own peak (ru_maxrss would include its parent's at fork)
    with open("/proc/self/status") as fh:
        kb = next(line.split()[1] for line in fh if line.startswith("VmHWM:"))
    print("\\nPEAK_RSS_KB", kb, file=sys.stderr, flush=True)
atexit.register(peak)
from tests.fakes import RecordingEmbedder
from wrenmem.embed.embedders import EMBEDDERS
EMBEDDERS["fake"] = lambda arg, root: RecordingEmbedder()
from wrenmem.cli import main
main(sys.argv[1:])
"""
MB = 1024 * 1024
MEMORY_LIMIT = 500 * MB
# LanceDB's runtime reserves far more address space than it uses (and hangs, rather than
# failing, when RLIMIT_AS refuses it): commands that open the index get a wider address
# space, and their peak resident memory is held to MEMORY_LIMIT instead.
INDEX_ADDRESS_SPACE = 4000 * MB
SECONDS = 10.0
# Under a loaded CI machine, importing LanceDB alone can take seconds: index commands get
# this much, and WRENMEM_HOSTILE_SLACK multiplies both.
INDEX_SECONDS = 30.0
# Read when the module is collected: the `isolate` fixture removes every WRENMEM_ variable
# before a test runs.
SLACK = float(os.environ.get("WRENMEM_HOSTILE_SLACK", "1"))

HOSTILE_FILES = ["pipe.md", "zero.md", "bomb.md", "huge.md", "latin1.md", "dangling.md",
                 "loop.md", "nul.md"]


def _hostile_project(root: Path) -> Path:
    sql = root / "knowledge" / "sql"
    sql.mkdir(parents=True)
    write_pair(root, "good.md", "What is the total revenue?", "SELECT SUM(amount) FROM orders")
    os.mkfifo(sql / "pipe.md")
    (sql / "zero.md").symlink_to("/dev/zero")
    (sql / "bomb.md").write_text(ALIAS_BOMB, encoding="utf-8")
    write_pair(root, "huge.md", "revenue " * 700_000, "SELECT 1")
    (sql / "latin1.md").write_bytes("---\nnl: Qué pasó\n---\n```sql\nSELECT 1\n```\n"
                                    .encode("latin-1"))
    (sql / "dangling.md").symlink_to("nowhere.md")
    (sql / "loop.md").symlink_to("loop.md")
    (sql / "nul.md").write_bytes(b"---\nnl: Nul\n---\n```sql\nSELECT 1\x00\n```\n")
    # Readable, if odd: CRLF line ends and a lone CR, a control character in the notes, the
    # NFD spelling of good.md's question (a second file of one question, written by hand).
    (sql / "crlf.md").write_bytes(b"---\r\nnl: Orders\r\n---\r\n```sql\rSELECT 1\r```\r\n")
    (sql / "vt.md").write_bytes(b"---\nnl: Vertical tab\n---\n```sql\nSELECT 1\n```\n\x0b\n")
    write_pair(root, "nfd.md", unicodedata.normalize("NFD", "Qué pasó"), "SELECT 2")
    write_pair(root, "deep.md", "How deep is it?", _deep_sql())
    write_pair(root, "long.md", "How long is it?", _long_sql())
    _bad_manifest(root, huge=True)
    (root / "wrenmem.toml").write_text('embedder = "fake"\nfetch_threshold = 100\n',
                                       encoding="utf-8")
    return root


def _run_bounded(root: Path, args: list[str], *, index: bool, stdin: bytes | None = None
                 ) -> tuple[int, str, float, int]:
    """(exit code, stdout + stderr, seconds, peak resident bytes) of one command."""
    import resource
    import subprocess
    import sys
    import time

    from tests.conftest import REPO

    space = INDEX_ADDRESS_SPACE if index else MEMORY_LIMIT
    slack = SLACK

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (space, space))

    # RLIMIT_AS also counts the malloc arenas glibc reserves for threads that allocate at
    # once (64 MB of address space each, how many depends on timing): `validate` reserved
    # 850 MB with them and 435 MB without, and once aborted creating a thread under the
    # limit. Two arenas make the limit measure what the command allocates, every run.
    env = {**os.environ, "PYTHONPATH": str(REPO), "WRENMEM_NO_DAEMON": "1",
           "MALLOC_ARENA_MAX": "2"}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", FAKE_CLI, "--project", str(root), *args],
                            cwd=root, env=env, stdout=subprocess.PIPE,
                            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, preexec_fn=limit)
    try:
        out, _ = proc.communicate(stdin, timeout=(INDEX_SECONDS if index else SECONDS) * slack)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"{args} did not finish in time: {out.decode()[-2000:]}"
                             ) from None
    seconds = time.monotonic() - started
    text, _, peak_kb = out.decode("utf-8", "replace").rpartition("\nPEAK_RSS_KB ")
    kb, _, after = peak_kb.partition("\n")  # a message printed after the atexit hook ran
    return proc.returncode, text + "\n" + after, seconds, int(kb.strip()) * 1024


CORPUS_COMMANDS: list[tuple[list[str], bool, bool]] = [
    # (arguments, opens the index, must name every bad pair file)
    (["list"], False, True),
    (["show", "knowledge/sql/good.md"], False, False),
    (["show", "knowledge/sql/pipe.md"], False, False),
    (["recall", "-q", "total revenue", "-b", "grep"], False, True),
    (["validate"], False, True),
    (["fmt", "--check"], False, True),
    (["duplicates"], False, True),
    (["export"], False, True),
    (["describe"], False, False),
    (["seed"], False, False),
    (["sync"], True, True),
    (["check"], True, True),
    (["status"], True, True),
    (["fetch", "-q", "revenue by customer"], True, False),
    (["recall", "-q", "total revenue", "-b", "hybrid"], True, False),
]


@pytest.mark.parametrize("args,index,names_files", CORPUS_COMMANDS,
                         ids=[" ".join(c[0][:2]) for c in CORPUS_COMMANDS])
def test_hostile_corpus(tmp_path: Path, args: list[str], index: bool,
                        names_files: bool) -> None:
    root = _hostile_project(tmp_path / "hostile")
    code, output, _seconds, peak = _run_bounded(root, args, index=index)
    assert code in (0, 1), output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert peak < MEMORY_LIMIT, f"{args}: {peak / MB:.0f} MB"
    if names_files:
        missing = [name for name in HOSTILE_FILES if name not in output]
        assert not missing, (missing, output[-3000:])
    if args[0] in ("list", "export", "recall"):
        assert "total revenue" in output.lower()
    if args[0] in ("describe", "fetch"):  # the huge texts are cut, and said to be
        assert output.count("cut to 10,000") == 2, output[-3000:]
    if args[0] == "validate":  # readable pairs whose SQL is out of sqlglot's bounds
        assert "deep.md:6:" in output and "long.md:6:" in output, output[-3000:]


NFD_QUESTION = "Cafe\u0301 revenue by month"  # "Café", its accent a combining character
# (arguments, stdin, exit code, what the output must say): hostile text at the door of
# `store`, against the hostile corpus; a refusal changes no file.
HOSTILE_STORES: list[tuple[list[str], bytes | None, int, str]] = [
    (["store", "--nl", "What is the total revenue?", "--sql", "-"], b"SELECT 1\x00", 1,
     "the SQL contains a control character U+0000 (NUL) at line 1, column 9"),
    (["store", "--nl", "What is the total revenue?", "--sql", "SELECT 1", "--note",
      "a\x1b[31m"], None, 1, "the notes contain a control character U+001B"),
    (["store", "--nl", "Bell \x07", "--sql", "SELECT 1"], None, 1,
     "the question contains a control character U+0007"),
    (["store", "--nl", "What is the total revenue?", "--sql", "-"], b"SELECT " + b"1+" * 600_000
     + b"1", 1, "max_pair_bytes"),
    (["store", "--nl", "What is the total revenue?", "--sql", "-"],
     b"SELECT SUM(amount)\r\nFROM orders", 0, "Updated: knowledge/sql/good.md"),
    (["store", "--nl", NFD_QUESTION, "--sql", "SELECT 1"], None, 0,
     "Updated: knowledge/sql/nfc.md"),  # the same file, not a second one
]


@pytest.mark.parametrize("args,stdin,code,says", HOSTILE_STORES,
                         ids=["nul", "escape", "bell", "oversize", "crlf", "nfd"])
def test_hostile_store_inputs(tmp_path: Path, args: list[str], stdin: bytes | None,
                              code: int, says: str) -> None:
    root = _hostile_project(tmp_path / "hostile")
    write_pair(root, "nfc.md", unicodedata.normalize("NFC", NFD_QUESTION), "SELECT 1")
    sql = root / "knowledge" / "sql"
    readable = {p.name: p.read_bytes() for p in sql.iterdir() if p.name in ("good.md", "nfc.md")}
    status, output, _seconds, peak = _run_bounded(root, args, index=False, stdin=stdin)
    assert (status, "Traceback" in output) == (code, False), output[-3000:]
    assert says in output, output[-3000:]
    assert peak < MEMORY_LIMIT
    assert sorted(p.name for p in sql.iterdir()) == sorted(
        [*HOSTILE_FILES, "good.md", "nfc.md", "crlf.md", "vt.md", "nfd.md", "deep.md",
         "long.md"])  # nothing new
    if code:
        assert {n: (sql / n).read_bytes() for n in readable} == readable
    else:
        from wrenmem.pairs.pairfile import decode_file, parse_pair

        for name in readable:
            data = (sql / name).read_bytes()
            assert b"\r" not in data
            parse_pair(decode_file(data, name), name)


def test_show_names_a_file_it_will_not_read(project: Path) -> None:
    os.mkfifo(project / "knowledge" / "sql" / "pipe.md")
    result = _runner(project)("show", "knowledge/sql/pipe.md")
    assert result.exit_code == 1
    assert "pipe.md:1: not a regular file: a named pipe" in result.output


def test_any_damaged_state_file_is_survived_and_repaired(project: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """Caches are checksummed and shape-checked (a damaged one is rebuilt); the index is
    checked by tests/test_integrity.py. No damage is a traceback; sync repairs all."""
    from tests.index_helpers import install_fake

    install_fake(monkeypatch)
    (project / "target").mkdir()
    shutil.copy(EXAMPLE_MANIFEST, project / "target" / "mdl.json")
    (project / "wrenmem.toml").write_text('embedder = "fake"\nfetch_threshold = 10\n',
                                          encoding="utf-8")
    _age(write_pair(project, "a.md", "What is the total revenue?", "SELECT 1"))
    run = _runner(project)
    for args in (["sync"], ["list"], ["recall", "-q", "revenue", "-b", "grep"],
                 ["fetch", "-q", "revenue"]):
        assert run(*args).exit_code == 0
    state = project / ".wrenmem"
    files = sorted(p for p in state.iterdir() if p.is_file() and not p.is_socket())
    assert {p.name for p in files} >= {"catalog.bin", "index-state.bin", "grep-terms.bin"}
    for path in files:
        data = path.read_bytes()
        for damaged in (data[: len(data) // 2], bytes(b ^ 0x20 for b in data)):
            path.write_bytes(damaged)
            for args in (["check"], ["status"], ["list"],
                         ["recall", "-q", "revenue", "-b", "grep"], ["fetch", "-q", "revenue"]):
                result = run(*args)
                assert result.exit_code in (0, 1), (path.name, args, result.output)
            assert run("sync").exit_code == 0, path.name
            assert run("check").exit_code == 0, path.name
            listed = run("list")
            assert "What is the total revenue?" in listed.output, (path.name, listed.output)


def test_diff_names_links_it_cannot_read(project: Path) -> None:
    import subprocess

    write_pair(project, "a.md", "What is the revenue?", "SELECT 1")
    subprocess.run(["git", "init", "-q", str(project)], check=True, timeout=PROCESS_TIMEOUT)
    subprocess.run(["git", "-C", str(project), "add", "-A"], check=True, timeout=PROCESS_TIMEOUT)
    subprocess.run(["git", "-C", str(project), "commit", "-qm", "pairs"], check=True, timeout=PROCESS_TIMEOUT)
    sql = project / "knowledge" / "sql"
    (sql / "dangling.md").symlink_to("nowhere.md")
    (sql / "loop.md").symlink_to("loop.md")
    os.mkfifo(sql / "pipe.md")
    result = _runner(project)("diff", "--format", "text")
    assert result.exit_code in (0, 1), result.output
    for name in ("dangling.md", "loop.md", "pipe.md"):
        assert name in result.output


# --- issue 22: SQL nested too deep or too long never reaches sqlglot -------------------------

def _deep_sql(levels: int = 3000) -> str:
    return "SELECT a FROM " + "(SELECT a FROM " * levels + "t" + ") s" * levels


def _long_sql() -> str:
    return "SELECT " + ", ".join(f"col{i} + 1 AS x{i}" for i in range(12_000)) + " FROM t"


def _git_commit_all(root: Path, message: str) -> None:
    import subprocess

    if not (root / ".git").exists():
        subprocess.run(["git", "init", "-q", str(root)], check=True, timeout=PROCESS_TIMEOUT)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, timeout=PROCESS_TIMEOUT)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", message], check=True, timeout=PROCESS_TIMEOUT)


@pytest.mark.parametrize("sql,reason", [
    (_deep_sql(), "nested too deep to parse"),
    ("SELECT " + "(" * 200 + "1" + ")" * 200, "nested too deep to parse"),
    ("SELECT " + "abs(" * 101 + "1" + ")" * 101, "nested too deep to parse"),
    ("SELECT " + "CASE WHEN a THEN " * 120 + "1" + " END" * 120 + " FROM t",
     "nested too deep to parse"),
    ("SELECT a FROM t WHERE " + "NOT " * 3000 + "a", "nested too deep to parse"),
    (_long_sql(), "longer than 100,000 characters"),
])
def test_sql_out_of_bounds_is_a_problem_not_a_crash(sql: str, reason: str) -> None:
    from wrenmem.recall.sqlshape import shape
    from wrenmem.sql.check import check_sql

    problems = check_sql(sql, None)
    assert len(problems) == 1 and reason in problems[0].message, problems
    assert shape(sql).key  # recall still has a shape for it (its tokens)


def test_sql_bounds_point_at_the_spot_and_spare_real_queries() -> None:
    from wrenmem.sql.check import check_sql

    sql = "SELECT a\nFROM t\nWHERE b = ')' -- (((\n  AND c IN " + "(" * 101 + "1" + ")" * 101
    problem = check_sql(sql, None)[0]
    assert (problem.line, problem.col) == (4, 12 + 100), problem
    # 100 levels of anything, quoted parentheses and comments are fine
    assert check_sql("SELECT " + "abs(" * 99 + "1" + ")" * 99 + " FROM t", None) == []
    assert check_sql("SELECT '((((((' AS x /* ((((( */ FROM t", None) == []


def test_store_refuses_deep_and_long_sql_with_a_message(project: Path) -> None:
    run = _runner(project)
    for sql, reason in ((_deep_sql(), "nested too deep to parse"),
                        (_long_sql(), "longer than 100,000")):
        result = run("store", "-q", "What is deep?", "--sql", sql)
        assert result.exit_code == 1, result.output
        assert reason in result.output and "Traceback" not in result.output
        assert len(result.output) < 2000, result.output[:3000]
    assert not list((project / "knowledge" / "sql").glob("*.md"))


def test_deep_pairs_are_findings_and_the_rest_goes_on(project: Path) -> None:
    write_pair(project, "deep.md", "What is deep?", _deep_sql())
    write_pair(project, "deep2.md", "What is deep?", _deep_sql())
    write_pair(project, "long.md", "What is long?", _long_sql())
    write_pair(project, "good.md", "What is the total revenue?", "SELECT SUM(amount) FROM t")
    write_pair(project, "bad.md", "What is broken?", "SELEC 1")
    run = _runner(project)
    result = run("validate")
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output[-3000:]
    lines = result.output.splitlines()
    assert any("knowledge/sql/deep.md:6:" in line and "nested too deep to parse"
               in line for line in lines), result.output
    assert any("knowledge/sql/long.md:6:" in line and "longer than 100,000" in line
               for line in lines), result.output
    assert any("knowledge/sql/bad.md" in line for line in lines)  # and it went on
    assert not any("good.md" in line for line in lines)
    for args in (["duplicates"], ["recall", "-q", "what is deep", "-b", "grep"],
                 ["list"], ["fmt", "--check"]):
        result = run(*args)
        assert result.exit_code in (0, 1), (args, result.output[-3000:])
        assert "Traceback" not in result.output, args
    assert "deep.md" in run("duplicates").output
    assert "deep.md" in run("recall", "-q", "what is deep", "-b", "grep").output


def test_diff_of_a_deep_pair_is_a_finding(project: Path) -> None:
    write_pair(project, "good.md", "What is the total revenue?", "SELECT SUM(amount) FROM t")
    _git_commit_all(project, "first")
    write_pair(project, "deep.md", "What is deep?", _deep_sql())
    _git_commit_all(project, "deep")
    run = _runner(project)
    for args in (["diff", "HEAD~1", "HEAD", "--format", "text"], ["diff", "HEAD~1"]):
        result = run(*args)
        assert "Traceback" not in result.output, result.output[-3000:]
        assert "deep.md" in result.output and "nested too deep to parse" in result.output


def test_sql_bounds_hold_in_threads_and_restore_the_limit() -> None:
    """The MCP server and the daemon check SQL in worker threads: a chain the scan does not
    count (NOT NOT … NOT) is a problem there too, and the recursion limit comes back."""
    import sys
    from concurrent.futures import ThreadPoolExecutor

    from wrenmem.sql.check import check_sql

    before = sys.getrecursionlimit()
    sqls = ["SELECT a FROM t WHERE " + "NOT " * 3000 + "a", _deep_sql(),
            "SELECT " + "abs(" * 100 + "1" + ")" * 100 + " FROM t"] * 3
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda sql: check_sql(sql, "postgres"), sqls))
    assert all("nested too deep to parse" in r[0].message for r in results[0::3]), results
    assert all("nested too deep to parse" in r[0].message for r in results[1::3]), results
    assert all(r == [] for r in results[2::3]), results
    assert sys.getrecursionlimit() == before


# --- issue 22: diff holds committed blobs to the size cap the working tree has ----------------

def test_diff_refuses_a_committed_pair_over_the_size_cap(project: Path) -> None:
    import time

    write_pair(project, "good.md", "What is the total revenue?", "SELECT SUM(amount) FROM t")
    (project / "knowledge" / "rules").mkdir(parents=True)
    (project / "knowledge" / "rules" / "big.md").write_text(
        "# Big rule\n\n" + "word " * 260_000, encoding="utf-8")
    _git_commit_all(project, "first")
    huge = "SELECT " + " + ".join(["amount"] * 150_000) + " FROM t"  # 1.4 MB of SQL
    write_pair(project, "huge.md", "What is huge?", huge)
    write_pair(project, "good.md", "What is the total revenue?", "SELECT SUM(amount) FROM u")
    _git_commit_all(project, "huge")
    (project / "wrenmem.toml").write_text("max_pair_bytes = 1000000\n", encoding="utf-8")
    run = _runner(project, seconds=30)
    for args in (["diff", "HEAD~1", "HEAD", "--format", "text"],  # both sides committed
                 ["diff", "HEAD~1", "--format", "text"],  # the working tree
                 ["diff", "HEAD~1", "HEAD", "--json"],
                 ["diff", "HEAD", "HEAD~1", "--direct", "--format", "text"]):  # removed
        started = time.monotonic()
        result = run(*args)
        assert time.monotonic() - started < 10, args
        assert "Traceback" not in result.output, result.output[-2000:]
        assert "huge.md" in result.output, (args, result.output[-2000:])
        assert len(result.output) < 20_000, (args, len(result.output))
        if args[1:3] != ["HEAD", "HEAD~1"]:
            assert "file too large" in result.output, (args, result.output[-2000:])
            assert result.exit_code == 0, (args, result.output[-2000:])
    assert run("diff", "HEAD~1", "HEAD", "--fail-on-invalid").exit_code == 1
    # the unchanged big blob is no change; the edited good pair still is
    result = run("diff", "HEAD~1", "HEAD", "--json")
    data = json.loads(result.output)
    assert [e["path"] for e in data["added"]] == ["knowledge/sql/huge.md"]
    assert [e["path"] for e in data["changed"]] == ["knowledge/sql/good.md"]
    assert data["knowledge"] == [] and data["removed"] == [] and data["moved"] == []


# --- issue 22: a huge manifest, or one huge text in it -------------------------------------

def _manifest_with_huge_texts(root: Path, description_chars: int = 8_000_000) -> Path:
    """The example manifest, with a description of ``description_chars`` on its first model
    and a 300,000-character expression on a column of its second."""
    doc = json.loads(EXAMPLE_MANIFEST.read_text(encoding="utf-8"))
    doc["models"][0]["properties"] = {"description": "Every order ever. " * (
        description_chars // 18)}
    doc["models"][1]["columns"][0]["expression"] = "x + " * 75_000 + "1"
    path = root / "target" / "mdl.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_each_schema_text_is_cut_with_a_marker_and_a_warning(tmp_path: Path) -> None:
    from wrenmem.schema.describe import describe
    from wrenmem.schema.manifest import MAX_ITEM_CHARS, load_manifest

    doc = json.loads(EXAMPLE_MANIFEST.read_text(encoding="utf-8"))
    first, second = doc["models"][0]["name"], doc["models"][1]
    manifest = load_manifest(_manifest_with_huge_texts(tmp_path))
    model = manifest.models[0]
    assert len(model.description) < MAX_ITEM_CHARS + 100
    assert model.description.endswith("[cut: 7,999,991 characters, 10,000 kept]")
    column = manifest.models[1].columns[0]
    assert len(column.expression) < MAX_ITEM_CHARS + 100 and "[cut: 300,001" in column.expression
    cut = [w for w in manifest.warnings if "cut to 10,000" in w]
    assert len(cut) == 2, manifest.warnings
    assert f"'{first}'" in cut[0] and "description" in cut[0]
    assert f"'{second['name']}'" in cut[1] and f"'{second['columns'][0]['name']}'" in cut[1]
    assert len(describe(manifest)) < 100_000


def test_huge_schema_text_is_described_fetched_and_embedded_capped(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.index_helpers import install_fake, settings_for
    from wrenmem.schema.table import sync_schema

    _manifest_with_huge_texts(project)
    (project / "wrenmem.toml").write_text("max_embed_chars = 500\nfetch_threshold = 100\n",
                                          encoding="utf-8")
    run = _runner(project, 60)
    for args in (["describe"], ["fetch", "-q", "orders", "-b", "grep"]):
        result = run(*args)
        assert result.exit_code == 0, result.output[-2000:]
        assert "cut to 10,000" in result.output and len(result.output) < 200_000, args
    fake = install_fake(monkeypatch)
    sync_schema(settings_for(project))
    assert fake.texts and max(len(t) for t in fake.texts) <= 500


def test_a_manifest_over_its_size_cap_is_refused_by_name(project: Path) -> None:
    path = _manifest_with_huge_texts(project, 2_000_000)
    write_pair(project, "a.md", "What is the revenue?", "SELECT 1")
    (project / "wrenmem.toml").write_text("max_manifest_bytes = 1000000\n", encoding="utf-8")
    run = _runner(project, 30)
    for args in (["describe"], ["fetch", "-q", "orders"], ["validate"], ["seed"]):
        result = run(*args)
        assert "Traceback" not in result.output, (args, result.output[-2000:])
        assert "manifest too large" in result.output, (args, result.output[-2000:])
        assert "max_manifest_bytes" in result.output, args
    assert run("describe").exit_code == 1
    assert f"{path.stat().st_size:,} bytes" in run("describe").output


# --- issue 22: a full disk is one line, and the index stays usable --------------------------

def _numbered_pairs(root: Path, numbers: range) -> None:
    for i in numbers:
        write_pair(root, f"q{i}.md", f"What is metric {i} of the orders?",
                   f"SELECT SUM(amount{i}) FROM orders")


def _disk_full_then_space(root: Path, fill: Callable[[], None], free: Callable[[], None]
                          ) -> None:
    """A good index of 30 pairs; the disk fills; 10 more pairs: sync fails in one line,
    recall answers from the last good version; space comes back: sync and recall work."""
    _numbered_pairs(root, range(1, 31))
    (root / "wrenmem.toml").write_text('embedder = "fake"\n', encoding="utf-8")
    run = _runner(root, 60)
    assert run("sync").exit_code == 0
    fill()
    _numbered_pairs(root, range(31, 41))
    result = run("sync")
    assert result.exit_code == 1, result.output[-3000:]
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output[-3000:]
    assert "no space left on device" in lines[0] and "free" in lines[0], lines[0]
    result = run("recall", "-q", "metric 7 of the orders", "-b", "hybrid", "--json")
    assert result.exit_code == 0, result.output[-3000:]
    assert "no space left on device" in result.output, result.output[-3000:]
    assert "What is metric 7 of the orders?" in result.output
    free()
    assert run("sync").exit_code == 0
    assert run("check").exit_code == 0
    found = run("recall", "-q", "metric 37 of the orders", "-b", "hybrid", "--json")
    assert "What is metric 37 of the orders?" in found.output, found.output[-3000:]
    assert "no space left" not in found.output


def test_a_full_disk_is_a_message_on_a_real_filesystem(project: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The state folder on a 8 MB tmpfs (needs root), filled to the last byte."""
    import subprocess

    from tests.index_helpers import install_fake

    state = project / ".wrenmem"
    state.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(state)],
            capture_output=True, timeout=PROCESS_TIMEOUT).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    install_fake(monkeypatch)
    filler = state / "filler"

    def fill() -> None:
        with filler.open("wb", buffering=0) as fh:  # unbuffered: closing flushes nothing
            try:
                while True:
                    fh.write(b"\0" * 65536)
            except OSError:
                pass

    try:
        _disk_full_then_space(project, fill, filler.unlink)
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False, timeout=PROCESS_TIMEOUT)


@pytest.mark.parametrize("error", [
    RuntimeError("lance error: LanceError(IO): No space left on device (os error 28), "
                 "/root/.cargo/registry/src/lance-file-13.0.0/src/writer/structural.rs:258:9"),
    OSError(28, "No space left on device"),
])
def test_a_full_disk_from_the_lancedb_write_is_a_message(
        project: Path, monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    """The same, with LanceDB's write failing as it does on a full disk (any machine)."""
    from tests.index_helpers import install_fake
    from wrenmem.storage import lance

    install_fake(monkeypatch)
    real = lance.upsert
    full = [False]

    def upsert(*args: object, **kw: object) -> None:
        if full[0]:
            raise error
        real(*args, **kw)  # type: ignore[arg-type]

    def fill() -> None:
        full[0] = True

    def free() -> None:
        full[0] = False

    monkeypatch.setattr(lance, "upsert", upsert)
    _disk_full_then_space(project, fill, free)


@pytest.mark.parametrize("sql", [
    "SELECT " + "DATE(" * 18 + "1" + ")" * 18,
    "SELECT CAST(1 AS " + "DECIMAL(" * 18 + "1" + ")" * 18 + ")",
    "SELECT " + "TIMESTAMP(abs(" * 12 + "1" + "))" * 12,
])
def test_calls_named_like_types_are_bounded_before_they_hang_the_parser(sql: str) -> None:
    """sqlglot backtracks on each call named like a data type: 18 levels took minutes."""
    from wrenmem.checks.engine import duck_type
    from wrenmem.sql.check import check_sql

    def on_alarm(signum: int, frame: object) -> None:
        raise Hang("still parsing after 10 s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(10)
    try:
        problems = check_sql(sql, "postgres")
        assert duck_type("DECIMAL(" * 30 + "1" + ")" * 30, "postgres") is None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert problems and "levels of calls named like a data type" in problems[0].message
    assert check_sql("SELECT DATE(DATE(DATE(CAST(x AS DECIMAL(10, 2))))) FROM t", None) == []
