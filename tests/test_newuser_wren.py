"""Wren's spellings that docs/coming-from-wren.md says are accepted, run as a Wren user would."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import write_pair


def test_forget_force_is_wrens_spelling_of_yes(project: Path, cli) -> None:
    write_pair(project, "a.md", "Imported one", "SELECT 1", source="import")
    write_pair(project, "b.md", "Imported two", "SELECT 2", source="import")
    write_pair(project, "c.md", "Kept", "SELECT 3")
    result = cli("forget", "--source", "import", "--force")   # no terminal to ask on
    assert result.exit_code == 0, result.output
    sql = project / "knowledge" / "sql"
    assert sorted(p.name for p in sql.iterdir()) == ["c.md"]


def test_reset_force_is_accepted_as_the_page_says(project: Path, cli) -> None:
    result = cli("reset", "--force")
    assert result.exit_code == 0, result.output
