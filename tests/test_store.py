from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
from conftest import PROCESS_TIMEOUT

from wrenmem.pairs.catalog import scan
from wrenmem.pairs.pairfile import Pair
from wrenmem.pairs.store import store_pair
from wrenmem.settings import load_settings


def test_new_question_gets_its_own_file(project: Path) -> None:
    settings = load_settings(project)
    result = store_pair(settings, Pair(nl="Total revenue?", sql="SELECT SUM(amount) FROM orders"))
    assert result.created and result.path == "knowledge/sql/total-revenue.md"
    stored = scan(settings).pairs[0]
    assert stored.sql == "SELECT SUM(amount) FROM orders" and stored.created_at


def test_same_question_updates_and_keeps_notes_and_created_at(project: Path) -> None:
    settings = load_settings(project)
    first = store_pair(settings, Pair(nl="Total revenue?", sql="SELECT 1", notes="Keep me."))
    path = project / first.path
    path.write_text(path.read_text() + "\nMore notes by hand.\n")
    second = store_pair(settings, Pair(nl="  Total revenue?  ", sql="SELECT 2", tags=("kpi",)))
    assert not second.created and second.path == first.path
    [pair] = scan(settings).pairs
    assert pair.sql == "SELECT 2" and pair.tags == ("kpi",)
    assert "Keep me." in pair.notes and "More notes by hand." in pair.notes
    assert pair.created_at == first.pair.created_at


def test_colliding_slugs_never_overwrite(project: Path) -> None:
    settings = load_settings(project)
    a = store_pair(settings, Pair(nl="Revenue?!", sql="SELECT 1"))
    b = store_pair(settings, Pair(nl="Revenue???", sql="SELECT 2"))
    assert (a.path, b.path) == ("knowledge/sql/revenue.md", "knowledge/sql/revenue-2.md")
    assert {p.nl: p.sql for p in scan(settings).pairs} == {"Revenue?!": "SELECT 1",
                                                           "Revenue???": "SELECT 2"}


def test_a_broken_file_with_the_same_slug_is_not_clobbered(project: Path) -> None:
    settings = load_settings(project)
    broken = project / "knowledge/sql/revenue.md"
    broken.write_text("---\nnl: [oops\n---\n")
    result = store_pair(settings, Pair(nl="Revenue", sql="SELECT 1"))
    assert result.path == "knowledge/sql/revenue-2.md"
    assert broken.read_text() == "---\nnl: [oops\n---\n"


def test_chinese_question_gets_a_chinese_name(project: Path) -> None:
    settings = load_settings(project)
    result = store_pair(settings, Pair(nl="每个客户的订单数量是多少？", sql="SELECT 1"))
    assert result.path == "knowledge/sql/每个客户的订单数量是多少.md"


def _store_many(root: str, worker: int) -> None:
    settings = load_settings(Path(root))
    for i in range(12):
        # Every worker uses the same slug for i (punctuation differs), so names collide.
        nl = f"Revenue {i}" + "?" * (worker + 1)
        store_pair(settings, Pair(nl=nl, sql=f"SELECT {worker * 100 + i}"))
    store_pair(settings, Pair(nl="Shared question", sql=f"SELECT {worker}"))


def test_concurrent_writers_lose_nothing(project: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_store_many, args=(str(project), w)) for w in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    found = scan(load_settings(project))
    assert found.errors == ()
    questions = {p.nl: p.sql for p in found.pairs}
    for worker in range(6):
        for i in range(12):
            assert questions[f"Revenue {i}" + "?" * (worker + 1)] == f"SELECT {worker * 100 + i}"
    assert questions["Shared question"] in {f"SELECT {w}" for w in range(6)}
    assert len(found.pairs) == 6 * 12 + 1
    assert not list((project / "knowledge/sql").glob(".wrenmem-*"))  # no temp files left


# -- issue 22, data loss: which pair a question names, and what a store may write ----------

def _files(project: Path) -> dict[str, str]:
    """Every file under knowledge/sql (hidden ones too), relative, with its text."""
    sql = project / "knowledge" / "sql"
    return {p.relative_to(sql).as_posix(): p.read_text(encoding="utf-8", errors="replace")
            for p in sorted(sql.rglob("*")) if p.is_file()}


def test_forget_takes_the_exact_question_over_a_case_variant(cli, project: Path) -> None:
    assert cli("store", "--nl", "Total Sales", "--sql", "SELECT 1", "--folder", "a"
               ).exit_code == 0
    assert cli("store", "--nl", "total sales", "--sql", "SELECT 2", "--folder", "b"
               ).exit_code == 0
    result = cli("forget", "total sales", "--yes")
    assert result.exit_code == 0, result.output
    assert "Deleted: knowledge/sql/b/total-sales.md" in result.output
    assert set(_files(project)) == {"a/total-sales.md"}
    # show follows the same rule: the exact question, after NFC and whitespace.
    shown = cli("show", "Total   Sales", "--json")
    assert shown.exit_code == 0 and '"path": "knowledge/sql/a/total-sales.md"' in shown.output


def test_several_case_variants_are_refused_and_listed(cli, project: Path) -> None:
    for folder, nl in (("a", "Total Sales"), ("b", "TOTAL SALES")):
        assert cli("store", "--nl", nl, "--sql", "SELECT 1", "--folder", folder).exit_code == 0
    before = _files(project)
    for args in (("forget", "total sales", "--yes"), ("show", "total sales")):
        result = cli(*args)
        assert result.exit_code == 1, result.output
        assert "knowledge/sql/a/total-sales.md" in result.output
        assert "knowledge/sql/b/total-sales.md" in result.output
        assert "2 stored questions" in result.output
    assert _files(project) == before  # nothing deleted
    # One case variant alone is found (a person types the question without its capitals).
    assert cli("forget", "knowledge/sql/b/total-sales.md", "--yes").exit_code == 0
    result = cli("forget", "total sales", "--yes")
    assert result.exit_code == 0 and "Deleted: knowledge/sql/a/total-sales.md" in result.output


def test_api_get_and_forget_follow_the_matching_rule(project: Path) -> None:
    from wrenmem import Memory
    from wrenmem.errors import WrenmemError

    memory = Memory(project)
    memory.store("Total Sales", "SELECT 1", folder="a")
    memory.store("TOTAL SALES", "SELECT 2", folder="b")
    memory.store("total sales", "SELECT 3", folder="c")
    assert memory.get("total  sales").path == "knowledge/sql/c/total-sales.md"
    with pytest.raises(WrenmemError, match="3 stored questions"):
        memory.forget(["Total sales"])  # no exact match: three case variants
    assert memory.forget(["total sales"]) == ["knowledge/sql/c/total-sales.md"]
    assert len(memory.list()) == 2


def test_forget_id_says_how_a_pair_is_named(cli, project: Path) -> None:
    assert cli("store", "--nl", "Total Sales", "--sql", "SELECT 1").exit_code == 0
    result = cli("forget", "--id", "1")
    assert result.exit_code == 2, result.output
    assert "no numeric ids" in result.output and "wrenmem list" in result.output
    assert set(_files(project)) == {"total-sales.md"}


@pytest.mark.parametrize("field,value,where", [
    ("sql", "SELECT 1\x00", "line 1, column 9"),
    ("sql", "SELECT 1\nFROM t\x1b[2J", "line 2, column 7"),
    ("note", "see \x07 here", "line 1, column 5"),
    ("question", "Total\x0csales", "line 1, column 6"),
])
def test_control_characters_are_refused(cli, project: Path, field: str, value: str,
                                        where: str) -> None:
    assert cli("store", "--nl", "Total sales", "--sql", "SELECT 1", "--note", "good"
               ).exit_code == 0
    before = _files(project)
    args = {"question": "Total sales", "sql": "SELECT 2", "note": ""}
    args[field] = value
    result = cli("store", "--nl", args["question"], "--sql", args["sql"], "--note",
                 args["note"])
    assert result.exit_code == 1, result.output
    label = {"question": "the question", "sql": "the SQL", "note": "the notes"}[field]
    verb = "contain" if field == "note" else "contains"
    assert f"{label} {verb} a control character" in result.output, result.output
    assert where in result.output
    assert _files(project) == before  # the good pair is untouched, nothing new written


def test_api_and_mcp_refuse_control_characters(project: Path) -> None:
    from wrenmem import Memory
    from wrenmem.errors import WrenmemError
    from wrenmem.mcp.tools import Tools

    memory = Memory(project)
    memory.store("Total sales", "SELECT 1")
    before = _files(project)
    with pytest.raises(WrenmemError, match=r"the SQL contains a control character U\+0000"):
        memory.store("Total sales", "SELECT\x00 2")
    with pytest.raises(WrenmemError, match="the notes contain"):
        Tools(memory).store_query("Total sales", "SELECT 2", note="a\x01b")
    with pytest.raises(WrenmemError, match="tag"):
        memory.store("Total sales", "SELECT 2", tags=["k\x02"])
    with pytest.raises(WrenmemError, match="the folder contains a control character U\\+0000"):
        memory.store("Other question", "SELECT 2", folder="a\x00b")
    assert _files(project) == before


def test_a_file_that_would_not_parse_back_is_never_written(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wrenmem import Memory
    from wrenmem.errors import WrenmemError
    from wrenmem.pairs import store as store_module

    memory = Memory(project)
    memory.store("Total sales", "SELECT 1")
    before = _files(project)
    monkeypatch.setattr(store_module, "render_pair", lambda pair, style="fenced": "---\n")
    with pytest.raises(WrenmemError, match="would not read back"):
        memory.store("Total sales", "SELECT 2")
    with pytest.raises(WrenmemError, match="would not read back"):
        memory.store("Another question", "SELECT 2")
    assert _files(project) == before


def test_carriage_returns_are_newlines_everywhere(cli, project: Path) -> None:
    sql = "SELECT 1\r\nFROM t\rWHERE x = 1"
    first = cli("store", "--nl", "Rows of t", "--sql", sql, "--note", "a\r\nb")
    assert first.exit_code == 0 and first.output.startswith("Stored:"), first.output
    text = (project / "knowledge/sql/rows-of-t.md").read_bytes()
    assert b"\r" not in text and b"SELECT 1\nFROM t\nWHERE x = 1\n" in text
    again = cli("store", "--nl", "Rows of t", "--sql", sql, "--note", "a\r\nb")
    assert again.exit_code == 0 and again.output.startswith("Unchanged:"), again.output
    same = cli("store", "--nl", "Rows of t", "--sql", "SELECT 1\nFROM t\nWHERE x = 1")
    assert same.output.startswith("Unchanged:"), same.output
    assert cli("fmt", "--check").exit_code == 0


def test_store_refuses_a_pair_larger_than_max_pair_bytes(cli, project: Path) -> None:
    (project / "wrenmem.toml").write_text("max_pair_bytes = 2000\n", encoding="utf-8")
    assert cli("store", "--nl", "Big", "--sql", "SELECT 1").exit_code == 0
    before = _files(project)
    big = "SELECT " + " + ".join(["1"] * 800)
    for nl in ("Big", "Bigger"):
        result = cli("store", "--nl", nl, "--sql", big)
        assert result.exit_code == 1, result.output
        assert "max_pair_bytes" in result.output and "2,000" in result.output
        assert "3,2" in result.output  # the size the file would have (3,2xx bytes)
    assert _files(project) == before


def test_nfc_and_nfd_spellings_are_one_question(cli, project: Path) -> None:
    import unicodedata

    nfc = unicodedata.normalize("NFC", "Café revenue")
    nfd = unicodedata.normalize("NFD", "Café revenue")
    assert nfc != nfd
    assert cli("store", "--nl", nfd, "--sql", "SELECT 1").exit_code == 0
    result = cli("store", "--nl", nfc, "--sql", "SELECT 1")
    assert result.output.startswith("Unchanged:"), result.output
    assert list(_files(project)) == ["café-revenue.md"]
    [pair] = scan(load_settings(project)).pairs
    assert pair.nl == nfc  # written in NFC
    assert cli("show", nfd).exit_code == 0


KILL_AT_FSYNC = r"""
import os, signal, sys

real_fsync = os.fsync

def fsync(fd):
    real_fsync(fd)
    if os.pread(fd, 4, 0) == b"---\n":  # a pair file's text, not derived state
        os.kill(os.getpid(), signal.SIGKILL)  # kill -9 with the temporary file written
os.fsync = fsync

from wrenmem.cli import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize("args", [["store", "--nl", "Total sales", "--sql", "SELECT 2"],
                                  ["fmt"]], ids=["store", "fmt"])
def test_kill_9_leaves_no_temporary_file_git_would_stage(cli, project: Path,
                                                          args: list[str]) -> None:
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    assert cli("store", "--nl", "Total sales", "--sql", "SELECT 1").exit_code == 0
    path = project / "knowledge/sql/total-sales.md"
    path.write_text(path.read_text() + "\n\n\n")  # something for fmt to rewrite
    subprocess.run(["git", "init", "-q"], cwd=project, check=True, timeout=PROCESS_TIMEOUT)
    proc = subprocess.run([sys.executable, "-c", KILL_AT_FSYNC, "--project", str(project),
                           *args], env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"],
                            cwd=project, check=True, capture_output=True, text=True, timeout=PROCESS_TIMEOUT).stdout
    assert [line[3:] for line in status.splitlines()] == ["knowledge/sql/total-sales.md"]
    assert set(_files(project)) == {"total-sales.md"}
    assert cli("list").exit_code == 0
