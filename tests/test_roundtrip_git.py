"""`dump` then `load --upsert` of unchanged pairs leaves `git status` clean, in the native
format and with `format = "wren"`, for files as Wren writes them (a quoted multi-line
`sql:`, a `+00:00` created_at, block tags), as people write them (`sql: |`, notes) and as
wrenmem writes them; a real change is still written, and keeps the file's date."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import PROCESS_TIMEOUT

from tests.conftest import run_wrenmem

FILES = {
    "what-is-the-total-revenue.md": (
        "---\nnl: What is the total revenue across all orders?\n"
        "sql: SELECT SUM(amount) AS total_revenue FROM orders\nsource: user\n"
        "created_at: '2026-01-02T03:04:05+00:00'\ndatasource: postgres\n"
        "tags:\n- revenue\n- kpi\n---\n"),
    "dashy-query.md": (
        "---\nnl: Dashy query\nsql: 'SELECT 1\n\n  UNION ALL\n\n  SELECT 2'\n"
        "source: user\n---\n"),
    "hand.md": (
        "---\nnl: Hand written one\nsql: |\n  SELECT SUM(amount) FROM orders\nsource: user\n"
        "tags:\n  - revenue\n---\n\nOptional human notes here (preserved verbatim on update).\n"),
    "native.md": (
        "---\nnl: Native one\nsource: user\ncreated_at: 2026-02-01T00:00:00Z\n---\n\n"
        "```sql\nSELECT 2\n```\n"),
}


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                          check=True, timeout=PROCESS_TIMEOUT).stdout


@pytest.mark.parametrize("fmt", ["", 'format = "wren"\n'])
def test_dump_then_load_upsert_leaves_git_clean(tmp_path: Path, fmt: str) -> None:
    root = tmp_path / "proj"
    sql = root / "knowledge" / "sql"
    sql.mkdir(parents=True)
    for name, text in FILES.items():
        (sql / name).write_text(text, encoding="utf-8")
    (root / "wrenmem.toml").write_text('backend = "grep"\n' + fmt)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "pairs")
    dumped = tmp_path / "queries.yml"
    assert run_wrenmem(["dump", "-o", str(dumped)], root).returncode == 0
    done = run_wrenmem(["load", str(dumped), "--upsert"], root)
    assert done.returncode == 0, done.stderr
    assert "0 updated, 4 unchanged" in done.stdout
    assert git(root, "status", "--porcelain") == ""

    # a real change is written, and the file keeps its date
    dumped.write_text(dumped.read_text().replace("SELECT 2'", "SELECT 3'").replace(
        "SELECT 1\n    UNION ALL\n    SELECT 2", "SELECT 1\n    UNION ALL\n    SELECT 3"))
    text = dumped.read_text()
    assert "SELECT 3" in text, text
    done = run_wrenmem(["load", str(dumped), "--upsert"], root)
    assert "1 updated" in done.stdout, done.stdout
    assert git(root, "status", "--porcelain").strip() == "M knowledge/sql/dashy-query.md"
