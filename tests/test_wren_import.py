"""`wrenmem import --from-wren PATH`: a store built through real LanceDB in Wren 0.17's
layout (tables query_history and schema_items, its columns and types) becomes pair files,
nothing lost; a second run changes nothing (real git says so)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import pytest
from conftest import PROCESS_TIMEOUT

from tests.conftest import run_wrenmem

DIM = 384
UTC = dt.UTC


def wren_store(folder: Path, rows: list[dict[str, object]]) -> None:
    """The LanceDB folder `wren memory` writes: query_history and schema_items."""
    import lancedb
    import pyarrow as pa

    vector = pa.list_(pa.float32(), DIM)
    query_schema = pa.schema([
        ("text", pa.utf8()), ("vector", vector), ("nl_query", pa.utf8()),
        ("sql_query", pa.utf8()), ("datasource", pa.utf8()),
        ("created_at", pa.timestamp("us", tz="UTC")), ("tags", pa.utf8())])
    schema_schema = pa.schema([
        ("text", pa.utf8()), ("vector", vector), ("item_type", pa.utf8()),
        ("model_name", pa.utf8()), ("item_name", pa.utf8()), ("data_type", pa.utf8()),
        ("expression", pa.utf8()), ("is_calculated", pa.bool_()), ("mdl_hash", pa.utf8()),
        ("indexed_at", pa.timestamp("us", tz="UTC"))])
    db = lancedb.connect(str(folder))
    records = [{"text": r["nl_query"], "vector": [0.1] * DIM, **r} for r in rows]
    db.create_table("query_history", data=pa.Table.from_pylist(records, schema=query_schema))
    db.create_table("schema_items", data=pa.Table.from_pylist([{
        "text": "Model 'orders'. Columns: id (INTEGER).", "vector": [0.2] * DIM,
        "item_type": "model", "model_name": "orders", "item_name": "orders",
        "data_type": None, "expression": None, "is_calculated": False,
        "mdl_hash": "c5f61a41a8b03224", "indexed_at": dt.datetime(2026, 1, 1, tzinfo=UTC)}],
        schema=schema_schema))


def at(day: int) -> dt.datetime:
    return dt.datetime(2026, 3, day, 9, 15, 2, 123456, tzinfo=UTC)


ROWS: list[dict[str, object]] = [
    {"nl_query": "Total revenue", "sql_query": "SELECT SUM(amount) FROM orders",
     "datasource": "postgres", "created_at": at(1), "tags": "source:user"},
    # Wren's `store` writes the user's tags in the tags column, no source
    {"nl_query": "Revenue by month", "sql_query": "SELECT month, SUM(amount)\nFROM orders\n"
     "GROUP BY month", "datasource": "", "created_at": at(2), "tags": "revenue,kpi"},
    {"nl_query": "List all orders", "sql_query": "SELECT * FROM orders LIMIT 100",
     "datasource": "", "created_at": at(3), "tags": "source:seed"},
    # the same question stored twice: the newer SQL wins, the older is named
    {"nl_query": "Orders count", "sql_query": "SELECT COUNT(*) FROM orders",
     "datasource": "", "created_at": at(4), "tags": "source:user"},
    {"nl_query": "Orders count", "sql_query": "SELECT COUNT(id) FROM orders",
     "datasource": "", "created_at": at(5), "tags": "source:user"},
    {"nl_query": "各门店的订单数", "sql_query": "SELECT store_id, COUNT(*) FROM orders GROUP BY 1",
     "datasource": "", "created_at": at(6), "tags": "source:dbt"},
]


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                          check=True, timeout=PROCESS_TIMEOUT).stdout


@pytest.fixture
def migrated(tmp_path: Path) -> tuple[Path, Path, dict[str, object]]:
    root = tmp_path / "proj"
    (root / "knowledge" / "sql").mkdir(parents=True)
    (root / "wrenmem.toml").write_text('backend = "grep"\n')
    store = root / ".wren" / "memory"
    wren_store(store, ROWS)
    done = run_wrenmem(["import", "--from-wren", str(store), "--json"], root)
    assert done.returncode == 0, done.stderr
    return root, store, json.loads(done.stdout)


def test_every_pair_becomes_a_file_with_its_fields(migrated) -> None:
    root, _store, report = migrated
    assert len(report["created"]) == 4 and report["wren"]["seeds_left_out"] == 1
    assert report["wren"]["superseded"] == [
        {"question": "Orders count", "created_at": "2026-03-04T09:15:02.123456Z"}]
    listed = json.loads(run_wrenmem(["list", "--json"], root).stdout)
    pairs = {p["nl"]: p for p in listed}
    assert set(pairs) == {"Total revenue", "Revenue by month", "Orders count", "各门店的订单数"}
    assert pairs["Total revenue"]["datasource"] == "postgres"
    assert pairs["Total revenue"]["created_at"] == "2026-03-01T09:15:02.123456Z"
    assert pairs["Revenue by month"]["tags"] == ["revenue", "kpi"]
    assert pairs["Revenue by month"]["source"] == "user"
    assert pairs["Revenue by month"]["sql"] == ROWS[1]["sql_query"]
    assert pairs["Orders count"]["sql"] == "SELECT COUNT(id) FROM orders"
    assert pairs["各门店的订单数"]["source"] == "dbt"


def test_a_second_run_changes_nothing(migrated) -> None:
    root, store, _report = migrated
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "migrated")
    for extra in ([], ["--upsert"]):
        again = run_wrenmem(["import", "--from-wren", str(store), "--json", *extra], root)
        assert again.returncode == 0, again.stderr
        out = json.loads(again.stdout)
        assert out["created"] == [] and out["updated"] == [], out
        assert git(root, "status", "--porcelain", "--", "knowledge") == ""


def test_seeds_with_include_seed_and_wrens_own_spelling(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / "knowledge" / "sql").mkdir(parents=True)
    (root / "wrenmem.toml").write_text('backend = "grep"\n')
    wren_store(root / ".wren" / "memory", ROWS)
    done = run_wrenmem(["memory", "export", "--include-seed"], root)   # Wren's spelling
    assert done.returncode == 0, done.stderr
    listed = json.loads(run_wrenmem(["list", "--json", "--source", "seed"], root).stdout)
    assert "List all orders" in {p["nl"] for p in listed}


def test_not_a_wren_store_is_a_clear_error(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / "knowledge" / "sql").mkdir(parents=True)
    (root / "empty").mkdir()
    done = run_wrenmem(["import", "--from-wren", "empty"], root)
    assert done.returncode == 1 and "query_history" in done.stderr
    assert list((root / "knowledge" / "sql").iterdir()) == []
