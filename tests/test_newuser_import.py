"""`wrenmem import` of a hand-edited queries.yml that is not valid YAML: one line naming the
file, line and column, as pair files' YAML errors are named; nothing written."""

from __future__ import annotations

from pathlib import Path


def test_bad_yaml_in_queries_yml_is_one_line_with_its_place(project: Path, tmp_path: Path,
                                                            cli) -> None:
    queries = tmp_path / "queries.yml"
    queries.write_text("version: 1\npairs:\n  - nl: Orders per day\n    sql: [SELECT 1\n")
    result = cli("import", str(queries))
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [f"error: {queries}:5:1: not valid YAML: expected ',' or ']', but got "
                     "'<stream end>'"], result.output
    assert "<unicode string>" not in result.output
    assert not list((project / "knowledge" / "sql").iterdir())


def test_overwrite_keeps_each_replaced_questions_file_name(project: Path, tmp_path: Path,
                                                           cli) -> None:
    """`import --overwrite` run twice used to move `one.md` to `one-2.md` and back: every
    run a rename in git for a pair that did not change its question."""
    first = tmp_path / "first.yml"
    first.write_text("version: 1\npairs:\n  - {nl: One, sql: SELECT 1, source: wren}\n"
                     "  - {nl: Two, sql: SELECT 2, source: wren}\n")
    second = tmp_path / "second.yml"
    second.write_text("version: 1\npairs:\n  - {nl: One, sql: SELECT 11, source: wren}\n")
    sql = project / "knowledge" / "sql"
    assert cli("import", str(first)).exit_code == 0
    (sql / "one.md").rename(sql / "kept-name.md")        # a name of the team's own choosing
    for _ in range(2):
        result = cli("import", str(second), "--overwrite", "--yes")
        assert result.exit_code == 0, result.output
        assert sorted(p.name for p in sql.iterdir()) == ["kept-name.md"], result.output
        assert "replace: knowledge/sql/kept-name.md" in result.output
        assert "delete: knowledge/sql/kept-name.md" not in result.output
        assert "SELECT 11" in (sql / "kept-name.md").read_text()
    (sql / "kept-name.md").unlink()
    (sql / "one.md").write_text("---\nnl: One!\nsource: wren\n---\n\n```sql\nSELECT 0\n```\n")
    result = cli("import", str(second), "--overwrite", "--yes")   # another question, one slug
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in sql.iterdir()) == ["one.md"]    # the deleted file's name
    assert "nl: One\n" in (sql / "one.md").read_text()
