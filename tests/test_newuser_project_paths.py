"""With `--project DIR` from another folder, the paths `list` prints name the files for
every command: `show`, `verify` and `forget` took them; `fmt` and `validate` looked in the
current folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import write_pair


def test_fmt_and_validate_take_project_paths_from_elsewhere(project: Path, tmp_path: Path,
                                                            cli, monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    pair = write_pair(project, "q.md", "Question", "SELECT   1")
    pair.write_text(pair.read_text().replace("nl:", "source: user\nnl:"))   # not canonical
    broken = project / "knowledge" / "sql" / "broken.md"
    broken.write_text("---\nnl: [x\n---\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    checked = cli("validate", "--no-schema", "knowledge/sql/q.md", "knowledge/sql/broken.md")
    assert "No such file" not in checked.output, checked.output
    assert "knowledge/sql/broken.md:2:1: WM001 front matter is not valid YAML" in checked.output
    assert "q.md" not in checked.output
    formatted = cli("fmt", "knowledge/sql/q.md")
    assert formatted.exit_code == 0, formatted.output
    assert "reformatted knowledge/sql/q.md" in formatted.output
    assert pair.read_text().startswith('---\nnl: "Question"') or \
        pair.read_text().startswith("---\nnl: Question")
