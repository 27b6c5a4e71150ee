"""Read-only pairs: SQL that writes is refused by every door and flagged by validate."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import write_pair
from wrenmem.api import Memory
from wrenmem.errors import SqlCheckError, WrenmemError
from wrenmem.sql.check import parse_checked, write_problem

WRITES = [
    "DELETE FROM orders", "DROP TABLE orders", "UPDATE orders SET amount = 0",
    "INSERT INTO orders (id) VALUES (1)", "TRUNCATE TABLE orders", "GRANT SELECT ON orders TO bob",
    "CREATE TABLE x AS SELECT * FROM orders", "ALTER TABLE orders ADD COLUMN x INT",
    "SELECT * INTO backup FROM orders", "MERGE INTO orders o USING payments p ON o.id = p.order_id "
    "WHEN MATCHED THEN DELETE", "WITH gone AS (DELETE FROM orders RETURNING id) SELECT * FROM gone",
    "-- tidy up\nVACUUM",
]
READS = ["SELECT 1", "WITH a AS (SELECT id FROM orders) SELECT * FROM a",
         "SELECT id FROM orders UNION SELECT order_id FROM payments", "(SELECT 1)"]


@pytest.mark.parametrize("sql", WRITES)
def test_every_kind_of_write_is_named(sql: str) -> None:
    tree, _problems = parse_checked(sql, "postgres")
    problem = write_problem(tree, sql)
    assert problem is not None and problem.message.startswith("not a read-only query")


@pytest.mark.parametrize("sql", READS)
def test_queries_are_read_only(sql: str) -> None:
    tree, problems = parse_checked(sql, "postgres")
    assert not problems and write_problem(tree, sql) is None


def test_cli_store_refuses_a_write_even_with_force(example_project: Path, cli) -> None:
    before = sorted((example_project / "knowledge").rglob("*.md"))
    result = cli("store", "--nl", "Wipe the orders", "--sql", "DELETE FROM orders", "--force",
                 root=example_project)
    assert result.exit_code == 1
    assert "--sql:1:1: not a read-only query: a DELETE statement changes the database" in (
        result.output)
    assert "--allow-writes accepts it" in result.output
    assert sorted((example_project / "knowledge").rglob("*.md")) == before


def test_allow_writes_opts_out_per_pair_and_per_project(example_project: Path, cli,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(example_project)
    result = cli("store", "--nl", "Archive old orders", "--sql",
                 "DELETE FROM orders WHERE ordered_at < DATE '2020-01-01'", "--allow-writes",
                 root=example_project)
    assert result.exit_code == 0, result.output
    stored = example_project / "knowledge/sql/archive-old-orders.md"
    assert "allow-writes: true" in stored.read_text()
    assert cli("validate", root=example_project).exit_code == 0
    write_pair(example_project, "drop.md", "Drop orders", "DROP TABLE orders")
    result = cli("validate", root=example_project)
    assert result.exit_code == 1
    assert "knowledge/sql/drop.md:6:1: WM008 not a read-only query: a DROP statement" in (
        result.output)
    # the project's own wrenmem.toml cannot accept writes (a pull request could change it)
    (example_project / "wrenmem.toml").write_text("allow_writes = true\n"
                                                  'ignore = ["WM008"]\n')
    assert cli("validate", root=example_project).exit_code == 1
    (example_project / "wrenmem.toml").write_text('ignore = ["all"]\n')
    assert cli("validate", root=example_project).exit_code == 1
    (example_project / "wrenmem.toml").unlink()
    monkeypatch.setenv("WRENMEM_ALLOW_WRITES", "1")  # the person running it can
    assert cli("validate", root=example_project).exit_code == 0


def test_the_api_refuses_a_write_and_writes_nothing(example_project: Path) -> None:
    memory = Memory(example_project, backend="grep")
    with pytest.raises(SqlCheckError) as caught:
        memory.store("Zero the amounts", "UPDATE orders SET amount = 0", force=True)
    assert caught.value.prefix == "not stored (read-only)"
    assert not (example_project / "knowledge/sql/zero-the-amounts.md").exists()


def test_import_refuses_writes_and_writes_nothing(example_project: Path, cli) -> None:
    source = example_project / "queries.yml"
    source.write_text("version: 1\npairs:\n"
                      "  - nl: Orders per status\n"
                      "    sql: SELECT status, COUNT(*) FROM orders GROUP BY status\n"
                      "  - nl: Clean up\n"
                      "    sql: DROP TABLE payments\n")
    before = sorted((example_project / "knowledge").rglob("*.md"))
    result = cli("import", str(source), "--force", root=example_project)
    assert result.exit_code == 1
    assert "1 SQL that writes" in result.output and "pair #2 (Clean up)" in result.output
    assert sorted((example_project / "knowledge").rglob("*.md")) == before


def test_import_refuses_what_the_engine_rejects_unless_forced(example_project: Path) -> None:
    source = example_project / "queries.yml"
    source.write_text("version: 1\npairs:\n"
                      "  - nl: Email total\n"
                      "    sql: SELECT SUM(email) FROM customers\n")
    memory = Memory(example_project, backend="grep")
    with pytest.raises(WrenmemError, match=r"pair #1 \(Email total\): 1:8: DuckDB rejects"):
        memory.import_(source)
    assert memory.import_(source, force=True).created == ["knowledge/sql/email-total.md"]


def test_restoring_a_pair_that_allows_writes_checks_the_sql_as_its_file_allows(
        example_project: Path) -> None:
    """store checks the SQL before its lookup as if no file asked the question (the early
    walk goes on meanwhile), then again when the file found allows writes: the answer of a
    check made after the lookup."""
    from wrenmem import Memory, SqlCheckError

    memory = Memory(example_project)
    first = memory.store("Archive old orders", "DELETE FROM orders", allow_writes=True)
    again = memory.store("Archive old orders", "DELETE FROM orders WHERE id < 10")
    assert again.path == first.path and again.pair.allows_writes
    with pytest.raises(SqlCheckError, match="read-only"):
        memory.store("Archive new orders", "DELETE FROM orders WHERE id < 10")
