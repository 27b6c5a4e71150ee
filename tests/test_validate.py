"""`wrenmem validate`: parse, SQL and schema problems, each at its line in the pair file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import BIRD, write_pair
from wrenmem.checks.references import check_schema
from wrenmem.checks.validate import validate_files
from wrenmem.settings import load_settings
from wrenmem.sql.check import check_sql

SCHEMA = {
    "orders": {"id": "INT", "customer_id": "INT", "amount": "DECIMAL", "status": "TEXT",
               "created_at": "TIMESTAMP"},
    "customers": {"id": "INT", "country": "TEXT", "city": "TEXT"},
}

# What sqlglot parses (or repairs) without a word, and wrenmem must reject.
GARBAGE = [
    "THIS IS NOT VALID SQL",
    "SELECT , FROM T",
    "Select from table_a",
    "SELECT",
    "SELECT * FROM t ORDER",
    "SELECT a FROM t GROUP",
    "SELECT a,, b FROM t",
    "SELECT a FROM t JOIN u ON",
    "SELECT a, FROM t",
    "SELECT f(a,) FROM t",
    "SELECT a FROM t WHERE (a = 1",
    "SELECT 'abc FROM t",
    "SELECT * FROM orders WHERE status = 'x' AND",
    "SELECT 1; SELECT 2",
    "orders",
    "",
    "-- only a comment",
]


@pytest.mark.parametrize("sql", GARBAGE)
def test_garbage_is_rejected(sql: str) -> None:
    assert check_sql(sql, "postgres"), sql


@pytest.mark.parametrize("sql", [
    "SELECT 1",
    "SELECT a FROM t WHERE x BETWEEN 1 AND 2 ORDER BY a;",
    "WITH x AS (SELECT 1 AS one) SELECT one FROM x",
    "SELECT a FROM t JOIN u USING (id)",
    'SELECT "order" FROM "group"',
    "SELECT COUNT(*) FILTER (WHERE status = 'paid') FROM orders",
])
def test_good_sql_passes(sql: str) -> None:
    assert check_sql(sql, "postgres") == []


def bird_questions() -> list[dict]:
    items = json.loads((BIRD / "questions.json").read_text(encoding="utf-8"))
    assert len(items) == 500  # the whole of BIRD mini-dev
    return items


@pytest.mark.parametrize("dialect", ["sqlite", "postgres", "mysql"])
def test_every_bird_minidev_sql_validates_in_its_own_dialect(dialect: str) -> None:
    failing = [(i["question_id"], check_sql(i["sql"][dialect], dialect))
               for i in bird_questions()]
    assert [f for f in failing if f[1]] == []


def test_every_bird_minidev_sql_names_only_columns_of_its_database() -> None:
    schemas = {db: {table: dict.fromkeys(columns, "TEXT") for table, columns in tables.items()}
               for db, tables in json.loads((BIRD / "schemas.json").read_text()).items()}
    failing = [(i["question_id"], check_schema(i["sql"]["postgres"], "postgres",
                                               schemas[i["db_id"]]))
               for i in bird_questions()]
    assert [f for f in failing if f[1]] == []


@pytest.mark.parametrize("sql, expected", [
    ("SELECT amout FROM orders", ["1:8 unknown column 'amout' (not in orders); did you mean "
                                  "'amount'?"]),
    ("SELECT o.amout FROM orders o", ["1:10 unknown column 'amout' in 'orders'; did you mean "
                                      "'amount'?"]),
    ("SELECT * FROM ordrs", ["1:15 unknown table 'ordrs'; did you mean 'orders'?"]),
    ("SELECT c.countri, o.amount FROM orders o\nJOIN customers c ON c.id = o.customer_id\n"
     "WHERE o.statuz = 'paid'",
     ["1:10 unknown column 'countri' in 'customers'; did you mean 'country'?",
      "3:9 unknown column 'statuz' in 'orders'; did you mean 'status'?"]),
    ("WITH t AS (SELECT amount AS a FROM orders) SELECT t.a, t.b FROM t",
     ["1:58 unknown column 'b' in 't'"]),
    ("SELECT x.id FROM orders", ["1:8 unknown table or alias 'x' for column 'id'"]),
    ("SELECT amount AS total FROM orders ORDER BY total", []),
    ("SELECT country, COUNT(*) FROM customers GROUP BY 1", []),
    ("SELECT (SELECT MAX(o.amount) FROM orders o WHERE o.customer_id = c.id) FROM customers c",
     []),
    ("SELECT AMOUNT FROM Orders", []),
])
def test_schema_check(sql: str, expected: list[str]) -> None:
    found = [f"{p.line}:{p.col} {p.message}" for p in check_schema(sql, "postgres", SCHEMA)]
    assert found == expected


def test_problems_point_at_the_pair_file_line(project: Path) -> None:
    knowledge = project / "knowledge" / "sql"
    (knowledge / "fenced.md").write_text(
        "---\nnl: Broken\ndialect: postgres\n---\n\nSome notes first.\n\n```sql\n"
        "SELECT id,\n  SUM(amount\nFROM orders\n```\n")
    (knowledge / "wren.md").write_text(
        "---\nnl: Wren style\nsql: |\n  SELECT id\n  FROM orders\n  WHERE\n---\n")
    (knowledge / "inline.md").write_text(
        "---\nnl: Inline\nsql: SELECT id FROM orders LIMIT\n---\n")
    (knowledge / "dialect.md").write_text(
        "---\nnl: Bad dialect\ntags: [a]\ndialect: postgress\n---\n```sql\nSELECT 1\n```\n")
    (knowledge / "yaml.md").write_text("---\nnl: [unclosed\n---\n```sql\nSELECT 1\n```\n")
    write_pair(project, "good.md", "Good", "SELECT id FROM orders")
    (knowledge / "README.md").write_text("# not a pair\n")
    settings = load_settings(project)
    count, problems = validate_files(settings)
    assert count == 6
    found = {Path(p.path).name: (p.line, p.col, p.kind) for p in problems}
    assert found == {
        "fenced.md": (11, 1, "sql"),  # the FROM that should have been a ')'
        "wren.md": (6, 3, "sql"),  # the indented WHERE in the YAML block
        "inline.md": (3, 28, "sql"),  # LIMIT inside `sql: ...`
        "dialect.md": (4, 1, "pair"),
        "yaml.md": (2, 1, "pair"),
    }


def test_cli_output_and_exit_status(project: Path, wrenmem_proc) -> None:
    write_pair(project, "good.md", "Good", "SELECT id FROM orders")
    done = wrenmem_proc("validate", "knowledge/sql/good.md")
    assert (done.returncode, done.stdout) == (0, "")
    write_pair(project, "bad.md", "Bad", "SELECT id FROM orders WHERE")
    done = wrenmem_proc("validate")
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "knowledge/sql/bad.md:6:23: WM002 SQL does not parse as postgres SQL: incomplete expression "
        "near 'WHERE'"]
    assert "2 file(s) checked, 1 problem(s)" in done.stderr
    data = json.loads(wrenmem_proc("validate", "--json").stdout)
    assert data["ok"] is False and data["files"] == 2
    assert data["problems"][0] | {"message": ""} == {
        "path": "knowledge/sql/bad.md", "line": 6, "col": 23, "message": "", "kind": "sql",
        "code": "WM002", "severity": "error"}


def test_dialect_comes_from_the_pair_then_the_settings(project: Path, cli,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)  # FILES are relative to the shell's folder
    write_pair(project, "mysql.md", "Backticks", "SELECT `id` FROM `orders`", dialect="mysql")
    write_pair(project, "plain.md", "Top", "SELECT TOP 5 id FROM orders")
    assert cli("validate", "knowledge/sql/mysql.md").exit_code == 0
    assert cli("validate", "knowledge/sql/plain.md").exit_code == 1
    monkeypatch.setenv("WRENMEM_DIALECT", "tsql")
    assert cli("validate", "knowledge/sql/plain.md").exit_code == 0


def test_tables_and_columns_checked_against_the_manifest(
        example_project: Path, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(example_project)
    done = cli("validate", root=example_project)
    assert done.exit_code == 0, done.stdout  # the 48 example pairs name only what exists
    write_pair(example_project, "typo.md", "Revenue per country",
               "SELECT c.countri, SUM(o.total_amount)\nFROM orders o\n"
               "JOIN customerz c ON c.id = o.customer_id\nJOIN stores s ON s.id = o.store_id\n"
               "WHERE s.nam = 'x'\nGROUP BY 1")
    done = cli("validate", "knowledge/sql/typo.md", root=example_project)
    assert done.exit_code == 1
    assert done.stdout.splitlines() == [
        "knowledge/sql/typo.md:6:25: WM004 unknown column 'total_amount' in 'orders'",
        "knowledge/sql/typo.md:8:6: WM003 unknown table 'customerz'; did you mean 'customers'?",
        "knowledge/sql/typo.md:10:9: WM004 unknown column 'nam' in 'stores'; did you mean 'name'?",
    ]
    assert cli("validate", "--no-schema", "knowledge/sql/typo.md",
               root=example_project).exit_code == 0


def test_a_changed_manifest_revalidates_every_pair(example_project: Path, cli,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(example_project)
    manifest = example_project / "target" / "mdl.json"
    data = json.loads(manifest.read_text())
    for model in data["models"]:
        if model["name"] == "payments":
            model["columns"] = [c for c in model["columns"] if c["name"] != "method"]
    manifest.write_text(json.dumps(data))
    # pre-commit passes only the manifest when only the manifest changed.
    done = cli("validate", "target/mdl.json", root=example_project)
    assert done.exit_code == 1
    assert all("unknown column 'method'" in line for line in done.stdout.splitlines())
    assert "total-payment-amount-by-payment-method.md" in done.stdout
    manifest.write_text("{not json")
    done = cli("validate", root=example_project)
    assert done.exit_code == 1
    assert done.stdout.startswith("target/mdl.json:1:1: WM006 manifest not usable")
