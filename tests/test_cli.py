from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from click.testing import Result

from tests.conftest import REPO, documentation, write_pair
from wrenmem.cli import cli as group


def all_commands() -> list[str]:
    return group.list_commands(None)  # type: ignore[arg-type]


def test_lazy_command_table_matches_the_modules() -> None:
    import importlib

    from wrenmem.cli import COMMAND_MODULES

    for module_name in set(COMMAND_MODULES.values()):
        module = importlib.import_module(f"wrenmem.cli.{module_name}")
        names = {c.name for c in module.COMMANDS}
        assert names == {n for n, m in COMMAND_MODULES.items() if m == module_name}
    cli_files = {p.stem for p in (REPO / "wrenmem" / "cli").glob("*_cmds.py")}
    assert cli_files == set(COMMAND_MODULES.values())


@pytest.mark.parametrize("name", all_commands())
def test_every_command_has_help_and_is_in_the_readme(name: str, cli: Callable[..., Result]) -> None:
    result = cli(name, "--help")
    assert result.exit_code == 0 and "Usage:" in result.output
    assert f"`{name}`" in (REPO / "README.md").read_text(encoding="utf-8"), \
        f"the README's command table lacks `{name}`"
    assert f"### `{name}`" in documentation() or f"`{name}`" in (
        REPO / "docs" / "commands.md").read_text(encoding="utf-8"), f"docs/ lack `{name}`"


def test_store_then_recall_english_and_chinese(cli: Callable[..., Result]) -> None:
    out = cli("store", "--nl", "What is the total revenue across all orders?", "--sql",
              "SELECT SUM(amount) AS total_revenue FROM orders", "--json")
    assert out.exit_code == 0, out.output
    stored = json.loads(out.stdout)
    assert stored["path"] == "knowledge/sql/what-is-the-total-revenue-across-all-orders.md"
    assert stored["created"] is True
    cli("store", "--nl", "每个客户的订单数量是多少？", "--sql",
        "SELECT customer_id, COUNT(*) FROM orders GROUP BY customer_id")
    cli("store", "--nl", "List all products", "--sql", "SELECT * FROM products")
    out = cli("recall", "--backend", "grep", "-q", "sum of revenue over all orders",
              "-q", "客户的订单数", "-k", "2", "--json")
    assert out.exit_code == 0
    results = json.loads(out.stdout)
    assert [r["query"] for r in results] == ["sum of revenue over all orders", "客户的订单数"]
    assert results[0]["hits"][0]["question"] == "What is the total revenue across all orders?"
    assert results[1]["hits"][0]["question"] == "每个客户的订单数量是多少？"
    assert set(results[0]) == {"query", "backend", "hits"}
    assert set(results[0]["hits"][0]) == {"question", "sql", "path", "score", "source",
                                          "datasource", "dialect", "tags", "backend",
                                          "raw_score", "also", "also_paths", "verified",
                                          "claimed_by", "allows_writes"}
    assert 0 < results[0]["hits"][0]["score"] <= 1
    best = results[0]["hits"][0]["score"]
    out = cli("recall", "--backend", "grep", "-q", "sum of revenue over all orders", "-k", "2",
              "--min-score", str(best), "--json")
    assert out.exit_code == 0
    [kept] = json.loads(out.stdout)
    assert kept["hits"] and all(h["score"] >= best for h in kept["hits"])
    assert len(kept["hits"]) < len(results[0]["hits"])
    out = cli("recall", "-q", "x", "--min-score", "1.5")
    assert out.exit_code == 2 and "min-score" in out.stderr


def test_store_refuses_broken_sql_unless_forced(cli: Callable[..., Result], project: Path) -> None:
    out = cli("store", "--nl", "Broken", "--sql", "SELEC * FROM")
    assert out.exit_code == 1
    assert "--sql:1:" in out.stderr and "not stored" in out.stderr
    assert not list((project / "knowledge/sql").iterdir())
    out = cli("store", "--nl", "Broken", "--sql", "SELEC * FROM", "--force")
    assert out.exit_code == 0


def test_store_checks_sql_in_its_dialect(cli: Callable[..., Result]) -> None:
    sql = "SELECT `a b` FROM t"
    assert cli("store", "--nl", "q", "--sql", sql, "--dialect", "postgres").exit_code == 1
    assert cli("store", "--nl", "q", "--sql", sql, "--dialect", "mysql").exit_code == 0
    assert cli("store", "--nl", "q2", "--sql", "SELECT 1", "--dialect", "nosuch").exit_code == 1


def test_broken_folder_reports_one_line_per_file(cli: Callable[..., Result], project: Path) -> None:
    sql = project / "knowledge/sql"
    write_pair(project, "good.md", "Good question", "SELECT 1")
    (sql / "bad-yaml.md").write_text("---\nnl: [x\n---\n")
    (sql / "no-sql.md").write_text("---\nnl: hi\n---\n")
    (sql / "yes.md").write_text("---\nnl: yes\n---\n```sql\nSELECT 1\n```\n")
    (sql / "empty.md").write_text("")
    (sql / "bin.md").write_bytes(b"\x00\xff")
    out = cli("list")
    assert out.exit_code == 0
    assert out.stdout.strip() == "knowledge/sql/good.md\tGood question"
    lines = out.stderr.strip().splitlines()
    bad = [line for line in lines if line.startswith("knowledge/sql/")]
    assert len(bad) == 5
    assert any(line.startswith("knowledge/sql/yes.md:2: 'nl' must be text") for line in bad)
    out = cli("recall", "-b", "grep", "-q", "good question")
    assert out.exit_code == 0 and "knowledge/sql/good.md" in out.stdout
    assert cli("fmt", "--check").exit_code == 1


def test_fmt_converts_wren_format_and_keeps_notes(cli: Callable[..., Result], project: Path) -> None:
    path = project / "knowledge/sql/wren.md"
    wren = "---\nnl: Revenue\nsql: |\n  SELECT SUM(amount)\n  FROM orders\nsource: user\n---\n\nNotes.\n"
    path.write_text(wren)
    out = cli("recall", "-b", "grep", "-q", "revenue", "--json")
    assert json.loads(out.stdout)[0]["hits"][0]["sql"] == "SELECT SUM(amount)\nFROM orders"
    assert path.read_text() == wren  # read unchanged
    assert cli("fmt", "--check").exit_code == 1
    assert cli("fmt").exit_code == 0
    text = path.read_text()
    assert "```sql\nSELECT SUM(amount)\nFROM orders\n```" in text and "Notes." in text
    assert "sql:" not in text.split("---")[1]
    assert cli("fmt", "--check").exit_code == 0


def test_show_list_forget(cli: Callable[..., Result], project: Path) -> None:
    cli("store", "--nl", "Total revenue", "--sql", "SELECT 1", "-t", "kpi,revenue")
    cli("store", "--nl", "Seeded", "--sql", "SELECT 2", "--source", "seed")
    shown = cli("show", "Total revenue", "--json")
    assert json.loads(shown.stdout)["tags"] == ["kpi", "revenue"]
    assert cli("show", "knowledge/sql/total-revenue.md").stdout.startswith("---\nnl: Total revenue")
    missing = cli("show", "revenue totals")
    assert missing.exit_code == 1 and "closest: knowledge/sql/total-revenue.md" in missing.stderr
    listed = json.loads(cli("list", "--source", "seed", "--json").stdout)
    assert [p["nl"] for p in listed] == ["Seeded"]
    assert [p["nl"] for p in json.loads(cli("list", "--tag", "kpi", "--json").stdout)] == ["Total revenue"]
    assert cli("forget", "Total revenue", input="n\n").exit_code == 1
    assert (project / "knowledge/sql/total-revenue.md").exists()
    out = cli("forget", "--source", "seed", "--yes", "--json")
    assert json.loads(out.stdout)["deleted"] == ["knowledge/sql/seeded.md"]
    assert not (project / "knowledge/sql/seeded.md").exists()


def test_import_modes_and_export(cli: Callable[..., Result], project: Path, tmp_path: Path) -> None:
    cli("store", "--nl", "revenue by month", "--sql", "SELECT 0")
    doc = {"version": 1, "pairs": [
        {"nl": "revenue by month", "sql": "SELECT month, SUM(revenue) FROM orders GROUP BY month", "source": "user", "datasource": "pg"},
        {"nl": "List all orders", "sql": "SELECT * FROM orders LIMIT 100", "source": "seed"},
        {"nl": "List all orders", "sql": "SELECT * FROM orders", "source": "seed"},
    ]}
    queries = tmp_path / "queries.yml"
    queries.write_text(yaml.safe_dump(doc))
    out = json.loads(cli("import", str(queries), "--json").stdout)
    assert out["created"] == ["knowledge/sql/list-all-orders.md"]
    assert sorted(out["skipped"]) == ["List all orders", "knowledge/sql/revenue-by-month.md"]
    assert "SELECT 0" in (project / "knowledge/sql/revenue-by-month.md").read_text()
    out = json.loads(cli("import", str(queries), "--upsert", "--json").stdout)
    assert sorted(out["updated"]) == ["knowledge/sql/list-all-orders.md", "knowledge/sql/revenue-by-month.md"]
    assert "SELECT * FROM orders\n```" in (project / "knowledge/sql/list-all-orders.md").read_text()
    out = json.loads(cli("import", str(queries), "--upsert", "--json").stdout)
    assert out["updated"] == [] and len(out["unchanged"]) == 2  # nothing new: nothing written
    cli("store", "--nl", "old seed", "--sql", "SELECT 9", "--source", "seed")
    refused = cli("import", str(queries), "--overwrite")  # no terminal to ask on: --yes
    assert refused.exit_code == 2 and "--yes" in refused.stderr
    assert "would delete: knowledge/sql/old-seed.md" in refused.stderr
    assert (project / "knowledge/sql/old-seed.md").exists()
    out = json.loads(cli("import", str(queries), "--overwrite", "--yes", "--json").stdout)
    assert "knowledge/sql/old-seed.md" in out["deleted"]
    assert not (project / "knowledge/sql/old-seed.md").exists()
    exported = yaml.safe_load(cli("export").stdout)
    assert exported["version"] == 1
    assert {p["nl"] for p in exported["pairs"]} == {"revenue by month", "List all orders"}
    bad = tmp_path / "bad.yml"
    bad.write_text("version: 1\npairs:\n- nl: 5\n  sql: SELECT 1\n")
    out = cli("import", str(bad))
    assert out.exit_code == 1 and "pair #1 field 'nl' must be a string" in out.stderr
    assert cli("import", str(queries), "--upsert", "--overwrite").exit_code == 2


def test_init_is_idempotent(cli: Callable[..., Result], project: Path) -> None:
    assert cli("init").exit_code == 0
    assert ".wrenmem/" in (project / ".gitignore").read_text()
    assert "# backend = " in (project / "wrenmem.toml").read_text()
    assert "nothing to do" in cli("init").stdout
    assert (project / ".gitignore").read_text().count(".wrenmem/") == 1


def test_usage_errors_exit_2(cli: Callable[..., Result]) -> None:
    assert cli("recall").exit_code == 2
    assert cli("recall", "-q", "x", "--backend", "nope").exit_code == 2
    assert cli("nosuchcommand").exit_code == 2


def test_real_process_json_and_exit_codes(wrenmem_proc: Callable[..., object], project: Path) -> None:
    proc = wrenmem_proc("store", "--nl", "Count orders", "--sql", "SELECT COUNT(*) FROM orders")
    assert proc.returncode == 0, proc.stderr  # type: ignore[attr-defined]
    proc = wrenmem_proc("recall", "-b", "grep", "-q", "how many orders", "--json")
    data = json.loads(proc.stdout)  # type: ignore[attr-defined]
    assert data[0]["hits"][0]["path"] == "knowledge/sql/count-orders.md"


def test_store_reads_sql_from_stdin(cli: Callable[..., Result], project: Path) -> None:
    out = cli("store", "--nl", "From stdin", "--sql", "-", input="SELECT 42\nFROM t\n")
    assert out.exit_code == 0
    assert "```sql\nSELECT 42\nFROM t\n```" in (project / "knowledge/sql/from-stdin.md").read_text()
