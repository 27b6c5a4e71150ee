"""Wren's command spellings do the same job as wrenmem's own."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from click.testing import Result

FIXTURE = Path(__file__).parent / "fixtures" / "mysql-shop"


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    shutil.copytree(FIXTURE, root)
    return root


@pytest.fixture
def run(cli: Callable[..., Result], shop: Path) -> Callable[..., Result]:
    def go(*args: str) -> Result:
        result = cli(*args, root=shop)
        assert result.exit_code == 0, (args, result.output)
        return result

    return go


def test_recall_limit_and_output(run: Callable[..., Result]) -> None:
    base = ["recall", "-b", "grep", "-q", "orders shipped"]
    ours = run(*base, "-k", "2", "--json").stdout
    assert run(*base, "-l", "2", "-o", "json").stdout == ours
    assert run(*base, "--limit", "2", "--output", "json").stdout == ours
    assert len(json.loads(ours)[0]["hits"]) == 2
    assert run(*base, "-l", "2", "-o", "table").stdout == run(*base, "-k", "2").stdout


def test_recall_format_wren_gives_wrens_row_shape(run: Callable[..., Result]) -> None:
    rows = json.loads(run("recall", "-b", "grep", "-q", "orders shipped", "-l", "2",
                          "--format", "wren").stdout)
    assert isinstance(rows, list) and len(rows) == 2
    first = rows[0]
    assert {"nl_query", "sql_query", "datasource", "tags", "created_at", "_distance", "path",
            "text"} <= set(first)
    assert first["nl_query"] == first["text"] == "How many orders were shipped?"
    assert "`status` = 'shipped'" in first["sql_query"]
    assert first["datasource"] == "shop" and first["tags"] == "orders"
    assert first["created_at"] == "2026-11-01T09:00:00Z"
    assert first["path"] == "knowledge/sql/how-many-orders-were-shipped.md"
    assert rows[0]["_distance"] <= rows[1]["_distance"]  # lower is better, as in LanceDB
    several = json.loads(run("recall", "-b", "grep", "-q", "orders", "-q", "customers",
                             "--format", "wren").stdout)
    assert len(several) == 2 and all(isinstance(r, list) for r in several)


def test_store_tags_comma_list(run: Callable[..., Result], shop: Path) -> None:
    run("store", "--nl", "Orders by status", "--sql",
        "SELECT `status`, COUNT(*) FROM `orders` GROUP BY `status`", "--tags", "orders,kpi")
    text = (shop / "knowledge/sql/orders-by-status.md").read_text(encoding="utf-8")
    assert "tags: [orders, kpi]" in text


def test_mdl_is_manifest(run: Callable[..., Result], shop: Path, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere.json"
    shutil.copy(shop / "target/mdl.json", other)
    (shop / "target/mdl.json").unlink()
    for command in (["describe"], ["fetch", "-q", "orders"], ["seed"]):
        assert (run(*command, "--mdl", str(other)).stdout
                == run(*command, "--manifest", str(other)).stdout)
    assert "orders_customer" in run("describe", "--mdl", str(other)).stdout


def test_fetch_output_json(run: Callable[..., Result]) -> None:
    assert json.loads(run("fetch", "-q", "orders", "-o", "json").stdout) == json.loads(
        run("fetch", "-q", "orders", "--json").stdout)


def test_list_limit_offset_and_output(run: Callable[..., Result]) -> None:
    everything = json.loads(run("list", "--json").stdout)
    page = json.loads(run("list", "-n", "2", "--offset", "1", "-o", "json").stdout)
    assert page == everything[1:3]
    assert json.loads(run("list", "--limit", "2", "--json").stdout) == everything[:2]
    users = json.loads(run("list", "-s", "user", "--json").stdout)
    assert {p["source"] for p in users} == {"user"} and len(users) == 3
    assert run("list", "-n", "1").stderr.strip() == f"1-1 of {len(everything)} pair(s)"


def test_dump_and_load_are_export_and_import(run: Callable[..., Result], shop: Path,
                                             tmp_path: Path) -> None:
    import re

    def undated(text: str) -> str:  # the export's own time stamp may cross a second
        return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", "<now>", text)

    exported = run("export").stdout
    assert undated(run("dump").stdout) == undated(exported)
    out = tmp_path / "queries.yml"
    run("dump", "-o", str(out))
    assert undated(out.read_text(encoding="utf-8")) == undated(exported)
    assert len(yaml.safe_load(exported)["pairs"]) == 3
    for path in (shop / "knowledge/sql").glob("*.md"):
        path.unlink()
    assert "3 new" in run("load", str(out)).stdout
    assert run("export").stdout.count("nl:") == 3
    assert "3 skipped" in run("load", str(out), "--dry-run").stdout
