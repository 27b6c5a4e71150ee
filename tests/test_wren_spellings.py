"""Each row of docs/coming-from-wren.md, run as a Wren user would type it: the table of the
page and the cases below must name the same rows (a new row needs a case)."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.conftest import EXAMPLE_KNOWLEDGE, EXAMPLE_MANIFEST, REPO

DOC = REPO / "docs" / "coming-from-wren.md"
Q = "Number of customers by country"


def doc_rows() -> list[str]:
    """The first cell of every row of the page's table."""
    rows = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("| ") and not line.startswith("| Wren ") and "---" not in line[:5]:
            rows.append(re.split(r"(?<!\\)\|", line)[1].strip())
    return rows


@pytest.fixture
def acme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "acme"
    shutil.copytree(EXAMPLE_KNOWLEDGE, root / "knowledge")
    (root / "target").mkdir()
    shutil.copy(EXAMPLE_MANIFEST, root / "target" / "mdl.json")
    monkeypatch.setenv("WRENMEM_BACKEND", "grep")
    monkeypatch.chdir(root)
    return root


def run(root: Path, *args: str) -> Result:
    from wrenmem.cli import cli

    return CliRunner().invoke(cli, ["--project", str(root), *args], catch_exceptions=False)


def ok(root: Path, *args: str) -> Result:
    result = run(root, *args)
    assert result.exit_code == 0, (args, result.output)
    return result


def _recall(root: Path) -> None:
    for limit in (["-l", "1"], ["--limit", "1"], ["-k", "1"]):
        for prefix in ([], ["memory"]):
            out = json.loads(ok(root, *prefix, "recall", "-q", Q, *limit, "--json").stdout)
            assert len(out[0]["hits"]) == 1 and out[0]["hits"][0]["question"] == Q


def _store(root: Path) -> None:
    ok(root, "memory", "store", "--nl", "How many stores", "--sql", "SELECT COUNT(*) FROM stores",
       "--tags", "a,b")
    pair = json.loads(ok(root, "show", "How many stores", "--json").stdout)
    assert pair["tags"] == ["a", "b"]


def _mdl(root: Path) -> None:
    moved = root / "elsewhere.json"
    shutil.move(root / "target" / "mdl.json", moved)
    assert "orders" in ok(root, "memory", "describe", "--mdl", str(moved)).stdout
    ok(root, "memory", "fetch", "-q", "orders", "--mdl", str(moved))
    ok(root, "memory", "index", "--mdl", str(moved), "--no-seed", "--no-queries",
       "--no-instructions")


def _path(root: Path) -> None:
    for args in (["index", "--path", ".wren/memory"], ["reset", "-p", ".wren/memory"],
                 ["memory", "recall", "-q", Q, "--path", ".wren/memory"],
                 ["memory", "list", "--path=.wren/memory"]):
        result = ok(root, *args)
        assert "not used" in result.stderr


def _list(root: Path) -> None:
    out = json.loads(ok(root, "memory", "list", "-n", "2", "--offset", "1", "-s", "user",
                        "-o", "json").stdout)
    assert len(out) == 2 and all(p["source"] == "user" for p in out)


def _dump_load(root: Path) -> None:
    ok(root, "memory", "dump", "-o", "q.yml")
    assert "pairs:" in (root / "q.yml").read_text()
    for mode in ("--upsert", "--overwrite", "--dry-run"):
        extra = ["--yes"] if mode == "--overwrite" else []
        ok(root, "memory", "load", "q.yml", mode, *extra)


def _forget_id(root: Path) -> None:
    result = run(root, "memory", "forget", "--id", "3")
    assert result.exit_code == 2 and "no numeric ids" in result.output


def _forget_force(root: Path) -> None:
    ok(root, "store", "--nl", "Temp one", "--sql", "SELECT 1", "--source", "tmp")
    ok(root, "memory", "forget", "--source", "tmp", "--force")
    assert run(root, "show", "Temp one").exit_code != 0


def _reset_force(root: Path) -> None:
    ok(root, "memory", "reset", "--force")
    ok(root, "reset", "-f")


def _watch(root: Path) -> None:
    # Two polls of a tenth of a second each: the watcher stops by itself, as Wren's does.
    result = ok(root, "--project", str(root), "watch", "--interval", "0.1", "--max-polls", "2",
                "--no-daemon")
    assert "polling" in result.stderr and "stopped" in result.stderr


def _describe_status_check(root: Path) -> None:
    for cmd in (["describe"], ["status"], ["check"], ["fetch", "-q", "orders", "-l", "5"]):
        ok(root, "memory", *cmd)


def _memory_prefix(root: Path) -> None:
    from wrenmem.cli.wren_cmds import WREN_COMMANDS

    for name in WREN_COMMANDS:
        assert ok(root, "memory", name, "--help").exit_code == 0


def _recall_format(root: Path) -> None:
    out = json.loads(ok(root, "recall", "-q", Q, "-l", "1", "-o", "json").stdout)
    assert out[0]["query"] == Q
    rows = json.loads(ok(root, "recall", "-q", Q, "-l", "1", "--format", "wren").stdout)
    assert rows[0]["nl_query"] == Q and "_distance" in rows[0]
    ok(root, "recall", "-q", Q, "-o", "table")


def _list_fetch_json(root: Path) -> None:
    assert json.loads(ok(root, "list", "-o", "json").stdout)[0]["nl"]
    ok(root, "fetch", "-q", "orders", "-o", "json")


def _export_migration(root: Path) -> None:
    pass  # tests/test_wren_import.py builds a store in Wren's layout and migrates it


def _mcp(root: Path) -> None:
    pass  # test_mcp_aliases below, over a real MCP session


CASES: dict[str, Callable[[Path], None]] = {
    "`wren memory CMD …`": _memory_prefix,
    "`recall -q Q -l 3` / `--limit 3`": _recall,
    "`recall … -o table`": _recall_format,
    "`recall … -o json`": _recall_format,
    "`recall … -o json` rows (`nl_query`, `sql_query`, `_distance`…)": _recall_format,
    "`list … -o json`, `fetch … -o json`": _list_fetch_json,
    "`describe`, `status`, `check`, `fetch -q Q -l 5`": _describe_status_check,
    "`store --nl Q --sql S --tags a,b`": _store,
    "`--mdl PATH`": _mdl,
    "`--path DIR` (Wren's LanceDB folder)": _path,
    "`list -n 20 --offset 40 -s user`": _list,
    "`dump [-o FILE]`": _dump_load,
    "`load FILE [--upsert\\|--overwrite] [--dry-run]`": _dump_load,
    "`index [--mdl M] [--no-seed] [--no-queries] [--no-instructions]`": _mdl,
    "`export [--path DIR] [--include-seed]` (Wren's store to files)": _export_migration,
    "`forget --id N`": _forget_id,
    "`forget --source S --force`": _forget_force,
    "`reset --force`": _reset_force,
    "`watch --interval S --max-polls N`": _watch,
    "`wren serve mcp`: `recall_queries`, `describe_schema`, `store_query`": _mcp,
    "MCP `get_context(question, limit)`": _mcp,
    "MCP `list_stored_queries(source, limit)`": _mcp,
    "(none)": _mcp,
}
KNOWLEDGE_ROW = "`wren context instructions`"  # tests/test_newuser_knowledge.py


def test_every_row_of_the_page_has_a_case() -> None:
    rows = [r for r in doc_rows() if not r.startswith(KNOWLEDGE_ROW)]
    assert rows and set(rows) == set(CASES), set(rows) ^ set(CASES)


@pytest.mark.parametrize("row", sorted(set(CASES) - {"(none)"}))
def test_row(row: str, acme: Path) -> None:
    CASES[row](acme)


def test_index_with_wrens_options_builds_the_schema_of_that_manifest(tmp_path: Path) -> None:
    """The real index (LanceDB, default model): --mdl names the manifest, --no-queries
    leaves the pairs out, --no-seed the seeds."""
    root = tmp_path / "p"
    (root / "knowledge" / "sql").mkdir(parents=True)
    mdl = tmp_path / "other.json"
    shutil.copy(EXAMPLE_MANIFEST, mdl)
    out = json.loads(ok(root, "index", "--mdl", str(mdl), "--no-seed", "--no-queries",
                        "--json").stdout)
    assert out["pairs"] is None and out["schema"]["items"] > 0


def test_mcp_aliases() -> None:
    pytest.importorskip("mcp")
    from tests.test_mcp import call, in_session

    root = REPO  # the example project: knowledge/ and target/mdl.json, read only

    async def body(session: object) -> dict[str, object]:
        return {
            "alias": await call(session, "get_context", question="orders by store", limit=3),
            "own": await call(session, "get_schema_context", question="orders by store", k=3),
            "stored": await call(session, "list_stored_queries", source="user", limit=5),
            "listed": await call(session, "list_queries", source="user", limit=5),
        }

    out = in_session(root, body, "--backend", "grep", "--read-only")
    assert out["alias"] == out["own"] and out["alias"]["question"] == "orders by store"
    assert out["stored"] == out["listed"] and out["stored"]["pairs"]
