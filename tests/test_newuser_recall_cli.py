"""`recall --queries FILE` with a file that holds no question names the file."""

from __future__ import annotations

from pathlib import Path


def test_an_empty_queries_file_is_named(project: Path, tmp_path: Path, cli) -> None:
    empty = tmp_path / "questions.txt"
    empty.write_text("# only a comment\n\n")
    result = cli("recall", "--queries", str(empty), "--backend", "grep")
    assert result.exit_code == 2
    assert f"{empty} holds no question" in result.output, result.output
    assert "give a question with -q" not in result.output
