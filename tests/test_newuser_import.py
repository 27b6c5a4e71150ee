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
