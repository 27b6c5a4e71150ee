"""The engine check: pair SQL bound by a real DuckDB over empty tables of the manifest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, write_pair
from wrenmem.checks.engine import Engine, duck_type, transpile
from wrenmem.schema.manifest import load_manifest

pytest.importorskip("duckdb")


@pytest.fixture(autouse=True)
def _in_project(example_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(example_project)  # validate prints paths relative to the current folder

BROKEN = {
    "by-country.md": ("Customers per country", "SELECT country, COUNT(*)\nFROM customers"),
    "email-sum.md": ("Sum of emails", "SELECT SUM(email) FROM customers"),
    "city.md": ("Cities of orders", "SELECT o.id,\n       city\nFROM orders o\n"
                "JOIN customers c ON c.id = o.customer_id\nJOIN stores s ON s.id = o.store_id"),
}


def test_the_three_broken_pairs_fail_with_their_place_and_a_code(example_project: Path,
                                                                  cli) -> None:
    for name, (nl, sql) in BROKEN.items():
        write_pair(example_project, name, nl, sql)
    result = cli("validate", root=example_project)
    assert result.exit_code == 1
    lines = sorted(line for line in result.output.splitlines() if ": WM" in line)
    assert lines == [
        "knowledge/sql/by-country.md:6:8: WM009 DuckDB rejects the SQL: column \"country\" "
        "must appear in the GROUP BY clause or must be part of an aggregate function.",
        "knowledge/sql/city.md:7:8: WM009 DuckDB rejects the SQL: Ambiguous reference to "
        "column name \"city\" (use: 'c.city' or 's.city')",
        "knowledge/sql/email-sum.md:6:8: WM009 DuckDB rejects the SQL: No function matches "
        "the given name and argument types 'sum(VARCHAR)'. You might need to add explicit "
        "type casts.",
    ]


def test_the_example_project_binds_without_a_finding(example_project: Path, cli) -> None:
    result = cli("validate", "--json", root=example_project)
    data = json.loads(result.output)
    assert result.exit_code == 0 and data["ok"] and data["problems"] == []
    assert data["files"] > 40


def test_engine_none_turns_the_check_off(example_project: Path, cli) -> None:
    write_pair(example_project, "email-sum.md", *BROKEN["email-sum.md"])
    assert cli("validate", root=example_project).exit_code == 1
    (example_project / "wrenmem.toml").write_text('engine = "none"\n')
    assert cli("validate", root=example_project).exit_code == 0


def test_without_duckdb_validate_says_it_skipped_the_engine(example_project: Path) -> None:
    write_pair(example_project, "email-sum.md", *BROKEN["email-sum.md"])
    code = ("import sys; sys.modules['duckdb'] = None\n"
            "from wrenmem.cli import main\nmain(['validate'])")
    done = subprocess.run([sys.executable, "-c", code], cwd=example_project,
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
                               "HOME": str(example_project)})
    assert done.returncode == 0, done.stderr
    assert ("target/mdl.json:1:1: WM010 note: engine checks skipped: DuckDB is not installed "
            "(pip install 'wrenmem[engine]')") in done.stdout
    assert "Traceback" not in done.stderr


def test_a_lenient_dialect_gets_a_note_not_an_error(example_project: Path, cli) -> None:
    write_pair(example_project, "bare.md", "Customers per country",
               "SELECT country, COUNT(*) FROM customers", dialect="sqlite")
    write_pair(example_project, "loose.md", "Email sum", "SELECT SUM(email) FROM customers",
               dialect="mysql")
    result = cli("validate", root=example_project)
    assert result.exit_code == 0
    assert "knowledge/sql/bare.md:7:8: WM010 note: sqlite accepts this" in result.output
    assert "knowledge/sql/loose.md:7:8: WM010 note: mysql converts types here" in result.output


def test_a_join_of_a_number_with_a_text_fails_in_postgres(example_project: Path, cli) -> None:
    write_pair(example_project, "join.md", "Orders with customers",
               "SELECT o.id FROM orders o\nJOIN customers c ON o.customer_id = c.email")
    result = cli("validate", root=example_project)
    assert result.exit_code == 1
    assert ("knowledge/sql/join.md:7:21: WM009 postgres cannot compare o.customer_id, a "
            "number, with c.email, a text (cast one side)") in result.output


def test_views_bind_through_their_statement(example_project: Path, cli) -> None:
    write_pair(example_project, "view-ok.md", "Revenue per month",
               "SELECT month, revenue FROM monthly_revenue ORDER BY month")
    write_pair(example_project, "view-bad.md", "Segment sum",
               "SELECT SUM(segment) FROM customer_lifetime_value")
    result = cli("validate", root=example_project)
    assert "view-ok.md" not in result.output
    assert "knowledge/sql/view-bad.md:6:8: WM009" in result.output


def test_qualified_names_and_other_dialects_transpile(example_project: Path) -> None:
    manifest = load_manifest(example_project / "target" / "mdl.json")
    engine = Engine(manifest, manifest.table_columns())
    assert engine.check("SELECT TOP 3 id FROM dbo.orders ORDER BY amount DESC", "tsql") == []
    assert engine.check("SELECT `status`, COUNT(*) FROM shop.orders GROUP BY `status`",
                        "mysql") == []
    [problem] = engine.check("SELECT amount FROM orders GROUP BY status", "bigquery")
    assert not problem.note and "GROUP BY" in problem.message


def test_what_sqlglot_cannot_transpile_is_a_note_never_an_error() -> None:
    text, note = transpile("SELECT * FROM t MATCH_RECOGNIZE (PARTITION BY a ORDER BY b "
                           "PATTERN (x) DEFINE x AS a > 1)", "snowflake")
    assert text is None or note == ""
    text, note = transpile("SELECT 1 FROM", "postgres")
    assert text is None and note.startswith("sqlglot cannot read it")


def test_manifest_types_map_to_duckdb() -> None:
    assert duck_type("INTEGER", "postgres") == "INT"
    assert duck_type("DECIMAL(10, 2)", "postgres") == "DECIMAL(10, 2)"
    assert duck_type("varchar", "mysql") == "TEXT"  # DuckDB's name of VARCHAR
    assert duck_type("", None) is None
    assert duck_type("customers", "postgres") is None  # a relationship column's type
