"""Wren round trip: the `format` setting, one timestamp style, import checks, export shape."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.conftest import write_pair
from wrenmem.pairs.pairfile import Pair, canonical_time, parse_pair, render_pair


def wren_loadable(doc: object) -> None:
    """The checks Wren's `load` makes (reference §8.2, `load FILE`), as assertions."""
    assert isinstance(doc, dict) and isinstance(doc.get("pairs"), list)
    assert doc.get("version", 1) == 1
    for item in doc["pairs"]:
        assert isinstance(item, dict)
        assert "nl" in item and "sql" in item
        for key in ("nl", "sql", "source", "datasource"):
            assert key not in item or isinstance(item[key], str), (key, item)


def test_a_wren_project_stays_wren(project: Path, cli) -> None:
    (project / "wrenmem.toml").write_text('format = "wren"\n')
    result = cli("store", "--nl", "Revenue by month", "--sql",
                 "SELECT month, SUM(amount)\nFROM orders\nGROUP BY month")
    assert result.exit_code == 0, result.output
    path = project / "knowledge" / "sql" / "revenue-by-month.md"
    text = path.read_text()
    assert "sql: |-\n  SELECT month, SUM(amount)\n  FROM orders\n  GROUP BY month\n" in text
    assert "```" not in text
    pair = parse_pair(text, "x.md")
    assert pair.wren_format and pair.sql == "SELECT month, SUM(amount)\nFROM orders\nGROUP BY month"
    # Updating keeps the layout; fmt --check agrees it is canonical.
    assert cli("store", "--nl", "Revenue by month", "--sql", "SELECT 1").exit_code == 0
    assert "sql: |-\n  SELECT 1\n" in path.read_text()
    assert cli("fmt", "--check").exit_code == 0
    # A fenced file in a Wren project is rewritten to Wren's layout by fmt.
    write_pair(project, "fenced.md", "Orders", "SELECT * FROM orders")
    assert cli("fmt", "--check").exit_code == 1
    assert cli("fmt").exit_code == 0
    assert "sql: |-\n  SELECT * FROM orders\n" in (project / "knowledge/sql/fenced.md").read_text()


def test_wren_layout_round_trips_awkward_sql() -> None:
    for sql in ("  SELECT 1\nFROM t", "SELECT '---'\n---\nUNION ALL SELECT 2",
                "SELECT 'a: b' -- c\n\n\nFROM t", "SELECT \"x\"\tFROM t"):
        text = render_pair(Pair(nl="q", sql=sql), "wren")
        fenced = parse_pair(render_pair(Pair(nl="q", sql=sql)), "x.md").sql
        assert parse_pair(text, "x.md").sql == fenced.strip(), text  # Wren strips its sql:


def test_timestamps_are_written_one_way() -> None:
    assert canonical_time("2026-11-29T12:00:00+00:00") == "2026-11-29T12:00:00Z"
    assert canonical_time("2026-11-29 12:00:00.5+00:00") == "2026-11-29T12:00:00.500000Z"
    assert canonical_time("2026-11-29T12:00:00+02:00") == "2026-11-29T12:00:00+02:00"
    assert canonical_time("2026-11-29") == "2026-11-29"
    assert canonical_time("last tuesday") == "last tuesday"


def test_import_then_fmt_check_agree(project: Path, cli, tmp_path: Path) -> None:
    doc = {"version": 1, "pairs": [
        {"nl": "Orders per day", "sql": "SELECT 1", "source": "user",
         "created_at": "2026-07-30T09:15:02.123456+00:00"}]}
    queries = tmp_path / "queries.yml"
    queries.write_text(yaml.safe_dump(doc))
    assert cli("import", str(queries)).exit_code == 0
    text = (project / "knowledge/sql/orders-per-day.md").read_text()
    assert "created_at: 2026-07-30T09:15:02.123456Z" in text
    assert cli("fmt", "--check").exit_code == 0


def test_import_checks_sql_like_store(project: Path, cli, tmp_path: Path) -> None:
    doc = {"version": 1, "pairs": [{"nl": "Good", "sql": "SELECT 1"},
                                   {"nl": "Bad", "sql": "SELECT FROM WHERE"}]}
    queries = tmp_path / "queries.yml"
    queries.write_text(yaml.safe_dump(doc))
    result = cli("import", str(queries))
    assert result.exit_code == 1 and "pair #2 (Bad)" in result.stderr
    assert list((project / "knowledge" / "sql").glob("*.md")) == []  # nothing written
    assert cli("import", str(queries), "--force").exit_code == 0
    assert len(list((project / "knowledge" / "sql").glob("*.md"))) == 2


def test_export_is_what_wren_loads_and_imports_back(project: Path, cli, tmp_path: Path) -> None:
    cli("store", "--nl", "Revenue by month", "--sql", "SELECT 1", "--tag", "kpi", "--tag",
        "revenue", "--datasource", "pg")
    cli("store", "--nl", "yes", "--sql", "SELECT 2")  # a question YAML would read as a bool
    text = cli("export").stdout
    doc = yaml.safe_load(text)
    wren_loadable(doc)
    first = next(p for p in doc["pairs"] if p["nl"] == "Revenue by month")
    assert first["tags"] == ["kpi", "revenue"] and first["datasource"] == "pg"
    assert isinstance(first["created_at"], str) and first["created_at"].endswith("Z")
    exported = tmp_path / "queries.yml"
    exported.write_text(text)
    other = tmp_path / "other"
    (other / "knowledge" / "sql").mkdir(parents=True)
    result = cli("import", str(exported), "--json", root=other)
    assert len(json.loads(result.stdout)["created"]) == 2
    assert cli("export", root=other).stdout.split("pairs:")[1] == text.split("pairs:")[1]
