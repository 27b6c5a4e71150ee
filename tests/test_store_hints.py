"""What `store` tells the user besides "Stored": the schema check, a near-duplicate it just
made, and the index update as a structured value (issue 22, "Expected and missing")."""

from __future__ import annotations

import json
from pathlib import Path

from wrenmem.api import Memory


def test_cli_store_checks_the_schema_with_the_api_message(cli, example_project: Path) -> None:
    sql = "SELECT order_date, COUNT(*) FROM orders GROUP BY 1"
    out = cli("store", "--nl", "Orders per day", "--sql", sql, root=example_project)
    assert out.exit_code == 1
    assert ("--sql:1:8: unknown column 'order_date' (not in orders); did you mean "
            "'ordered_at'?") in out.stderr
    assert not list(example_project.glob("knowledge/sql/orders-per-day*.md"))
    memory = Memory(example_project, backend="grep")
    try:
        memory.store("Orders per day", sql, check_schema=True)
    except Exception as e:  # the same finding, at the same place, through the API
        assert [p.message for p in e.problems] == [  # type: ignore[attr-defined]
            "unknown column 'order_date' (not in orders); did you mean 'ordered_at'?"]
    else:
        raise AssertionError("the API stored SQL with an unknown column")


def test_store_warns_when_it_makes_a_near_duplicate(cli, example_project: Path) -> None:
    out = cli("store", "--nl", "what is the total revenue", "--sql",
              "SELECT SUM(amount) FROM orders", root=example_project)
    assert out.exit_code == 0, out.output
    first = out.stdout.split(": ", 1)[1].strip()
    out = cli("store", "--nl", "What is the  total revenue?", "--sql",
              "SELECT SUM(amount) AS revenue FROM orders", root=example_project)
    assert out.exit_code == 0, out.output
    second = out.stdout.split(": ", 1)[1].strip()
    assert second != first
    assert (f"warning: {second}: the same question as {first} with a different SQL"
            in out.stderr)
    assert "wrenmem duplicates" in out.stderr
    assert cli("duplicates", root=example_project).exit_code == 1  # what the warning foretold
    out = cli("store", "--nl", "A question nobody asked", "--sql", "SELECT 1",
              root=example_project)
    assert out.exit_code == 0 and "warning" not in out.stderr


def test_store_json_index_is_a_structured_value(cli, example_project: Path) -> None:
    out = cli("store", "--json", "--nl", "How many customers are there in all?", "--sql",
              "SELECT COUNT(*) FROM customers", root=example_project)
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    # No index yet: nothing to update (the first vector recall or `sync` builds it).
    assert data["index"] == {"status": "none", "indexed": 0, "embedded": 0, "removed": 0,
                             "rebuilt": None, "error": None}
    assert data["notes"] == []
    assert data["created"] is True and data["changed"] is True
    again = json.loads(cli("store", "--json", "--nl", "How many customers are there in all?",
                           "--sql", "SELECT COUNT(*) FROM customers", root=example_project).stdout)
    assert (again["created"], again["changed"]) == (False, False)  # "Unchanged" in text
    gone = json.loads(cli("forget", "--json", "--yes", again["path"],
                          root=example_project).stdout)
    assert gone["deleted"] == [again["path"]]
    assert gone["index"]["status"] == "none" and gone["notes"] == []

    from fakes import RecordingEmbedder

    memory = Memory(example_project, embedder=RecordingEmbedder(), backend="vector")
    memory.sync()
    memory.store("How many stores are there?", "SELECT COUNT(*) FROM stores")
    assert memory.last_index is not None
    assert memory.last_index.to_dict() == {"status": "updated", "indexed": 1, "embedded": 1,
                                           "removed": 0, "rebuilt": None, "error": None}
    memory.store("How many stores are there?", "SELECT COUNT(*) FROM stores")
    assert memory.last_index.status == "unchanged"


def test_mcp_store_query_returns_the_near_duplicate_warning(example_project: Path) -> None:
    from wrenmem.mcp.tools import Tools

    tools = Tools(Memory(example_project, backend="grep"))
    first = tools.store_query("Revenue by store", "SELECT store_id, SUM(amount) FROM orders "
                              "GROUP BY store_id")
    assert first["notes"] == []
    second = tools.store_query("revenue by store?", "SELECT store_id, SUM(amount) FROM orders "
                               "GROUP BY store_id")
    assert second["notes"] == [
        f"warning: {second['path']}: duplicate pair: same question and SQL as "
        f"{first['path']} (`wrenmem duplicates` reports it)"]
