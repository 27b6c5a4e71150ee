"""`wrenmem verify` on files it cannot read says why, as every other command does (it said
"no such pair file" of a FIFO, and read a file of any size whole)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import write_pair


def test_verify_names_why_a_file_is_not_read_and_goes_on(project: Path, cli) -> None:
    sql = project / "knowledge" / "sql"
    os.mkfifo(sql / "pipe.md")
    big = write_pair(project, "big.md", "Big", "SELECT 1")
    big.write_text(big.read_text() + "x" * 2_000)
    (project / "wrenmem.toml").write_text("max_pair_bytes = 1000\n")
    good = write_pair(project, "good.md", "Good", "SELECT 2")
    result = cli("verify", "--by", "Ann", str(sql / "pipe.md"), str(big), str(good),
                 str(sql / "missing.md"))
    assert result.exit_code == 1
    out = result.output
    assert "knowledge/sql/pipe.md:1:1: WM001 not a regular file: a named pipe (FIFO)" in out, out
    assert "knowledge/sql/big.md:1:1: WM001 file too large" in out, out
    assert "knowledge/sql/missing.md:1:1: WM001 no such pair file" in out, out
    assert "verified: knowledge/sql/good.md (by Ann)" in out
    assert "verified_by: Ann" in good.read_text()
    assert "verified_by" not in big.read_text()


def test_a_path_outside_the_knowledge_folder_stops_no_other_file(project: Path, tmp_path: Path,
                                                                 cli) -> None:
    outside = tmp_path / "elsewhere.md"
    outside.write_text("---\nnl: Elsewhere\n---\n\n```sql\nSELECT 1\n```\n")
    good = write_pair(project, "good.md", "Good", "SELECT 2")
    result = cli("verify", "--by", "Ann", str(outside), str(good))
    assert result.exit_code == 1
    assert "WM001 not a pair file inside knowledge/sql" in result.output, result.output
    assert "verified: knowledge/sql/good.md (by Ann)" in result.output
    assert "verified_by" in good.read_text() and "verified_by" not in outside.read_text()


def test_verify_reports_a_link_loop_instead_of_a_traceback(project: Path, cli) -> None:
    sql = project / "knowledge" / "sql"
    (sql / "loop.md").symlink_to("loop.md")
    good = write_pair(project, "good.md", "Good", "SELECT 2")
    result = cli("verify", "--by", "Ann", str(sql / "loop.md"), str(good))
    assert result.exit_code == 1
    assert "knowledge/sql/loop.md:1:1: WM001" in result.output, result.output
    assert "verified: knowledge/sql/good.md (by Ann)" in result.output
