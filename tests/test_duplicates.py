"""`wrenmem duplicates`: the same question twice, or one question with two SQLs."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import write_pair
from wrenmem.checks.duplicates import find_duplicates
from wrenmem.pairs.pairfile import Pair


def test_normalised_question_and_layout_free_sql() -> None:
    pairs = [
        Pair(nl="How many orders?", sql="SELECT COUNT(*) FROM orders", path="a.md"),
        Pair(nl="  how many   ORDERS ", sql="select count(*)\nfrom orders;", path="b.md"),
        Pair(nl="How many orders？", sql="SELECT COUNT(id) FROM orders", path="c.md"),
        Pair(nl="How many orders?", sql="SELECT 1", path="d.md", datasource="other"),
        Pair(nl="How many customers?", sql="SELECT COUNT(*) FROM orders", path="e.md"),
    ]
    found = {(d.pair.path, d.other.path, d.same_sql) for d in find_duplicates(pairs)}
    assert found == {("a.md", "b.md", True), ("b.md", "a.md", True), ("c.md", "a.md", False)}


def test_cli_reports_each_file_at_its_question_line(project: Path, wrenmem_proc) -> None:
    write_pair(project, "a.md", "Revenue per month?", "SELECT 1 AS r")
    write_pair(project, "sub/b.md", "revenue per month", "SELECT 2 AS r")
    write_pair(project, "c.md", "Orders per store", "SELECT 3 AS r")
    done = wrenmem_proc("duplicates")
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "knowledge/sql/a.md:2:1: WM007 the same question as knowledge/sql/sub/b.md with a different "
        "SQL: keep one, or make the questions say how they differ",
        "knowledge/sql/sub/b.md:2:1: WM007 the same question as knowledge/sql/a.md with a different "
        "SQL: keep one, or make the questions say how they differ",
    ]
    # With files (as pre-commit passes them): compared with all, reported for those only.
    done = wrenmem_proc("duplicates", "knowledge/sql/sub/b.md", "--json")
    assert done.returncode == 1
    problems = json.loads(done.stdout)["problems"]
    assert [(p["path"], p["line"], p["kind"]) for p in problems] == [
        ("knowledge/sql/sub/b.md", 2, "duplicate")]
    done = wrenmem_proc("duplicates", "knowledge/sql/c.md")
    assert (done.returncode, done.stdout) == (0, "")


def test_fmt_fail_on_change(project: Path, wrenmem_proc) -> None:
    path = project / "knowledge" / "sql" / "wren.md"
    path.write_text("---\nnl: Wren style\nsql: SELECT 1\n---\n")
    done = wrenmem_proc("fmt", "--fail-on-change", "knowledge/sql/wren.md")
    assert done.returncode == 1
    assert "```sql\nSELECT 1\n```" in path.read_text()
    done = wrenmem_proc("fmt", "--fail-on-change", "knowledge/sql/wren.md")
    assert done.returncode == 0
    path.write_text("---\nnl: Wren style\nsql: SELECT 2\n---\n")
    assert wrenmem_proc("fmt", "knowledge/sql/wren.md").returncode == 0  # documented behaviour
