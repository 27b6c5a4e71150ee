"""A pair's own ``wrenmem-ignore`` is an opt-out a pull request writes too (issue 39, item
5): it can never name the read-only rule (WM008: SQL that writes, reads a file or reaches
the network), and ``diff`` flags what it does silence (text, JSON, the PR comment), in a
real git PR flow. The ``ignore`` setting given on the command line still may."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_wrenmem, write_pair
from tests.test_allow_writes_flagged import WRITE_SQL, git

READ_FILE_SQL = "SELECT * FROM read_csv('.git/config')"


def _pr(project: Path, *pairs: tuple[str, str, str, str]) -> Path:
    git(project, "init", "-q", "-b", "main")
    write_pair(project, "count.md", "How many orders?", "SELECT COUNT(*) FROM orders")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "base")
    git(project, "checkout", "-q", "-b", "pr")
    for name, nl, sql, codes in pairs:
        write_pair(project, name, nl, sql, **{"wrenmem-ignore": codes})
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "pr")
    return project


def test_a_pair_cannot_silence_the_read_only_rule(project: Path) -> None:
    repo = _pr(project, ("cleanup.md", "Remove the negative orders", WRITE_SQL, "[WM008]"),
               ("config.md", "Read the config", READ_FILE_SQL, "WM008 WM009 WM002"))
    done = run_wrenmem(["--project", str(repo), "validate"], repo)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    for name in ("cleanup.md", "config.md"):
        said = [x for x in lines if x.startswith(f"knowledge/sql/{name}:")]
        assert any("WM001 wrenmem-ignore cannot name WM008" in x for x in said), said
        assert any(" WM008 " in x for x in said), said  # the finding itself still stands
    assert any("READ_CSV() reads a file" in x for x in lines)
    diff = json.loads(run_wrenmem(["--project", str(repo), "diff", "main", "pr", "--json"],
                                  repo).stdout)
    assert {e["path"]: e["valid"] for e in diff["added"]} == {
        "knowledge/sql/cleanup.md": False, "knowledge/sql/config.md": False}
    # the person running the command may still accept writes, never through the pair
    mine = run_wrenmem(["--project", str(repo), "validate", "knowledge/sql/cleanup.md"], repo,
                       env={"WRENMEM_IGNORE": "WM008"})
    assert "WM008 not a read-only" not in mine.stdout and "cannot name WM008" in mine.stdout


def test_diff_flags_the_checks_a_pair_silences(project: Path) -> None:
    repo = _pr(project, ("ghost.md", "Orders per ghost column",
                         "SELECT ghost_column FROM orders", "[WM004]"))
    valid = run_wrenmem(["--project", str(repo), "validate"], repo)
    assert valid.returncode == 0, valid.stdout  # the opt-out itself keeps working
    md = run_wrenmem(["--project", str(repo), "diff", "main", "pr", "--format", "markdown"],
                     repo).stdout
    assert "#### ✅ Orders per ghost column" not in md
    assert "#### ⚠️ Orders per ghost column" in md and "**Checks silenced:**" in md
    assert "✅ every added" not in md and "silence checks of their own" in md
    data = json.loads(run_wrenmem(["--project", str(repo), "diff", "main", "pr", "--json"],
                                  repo).stdout)
    assert data["added"][0]["ignores"] == ["WM004"]
    text = run_wrenmem(["--project", str(repo), "diff", "main", "pr", "--format", "text"],
                       repo).stdout
    assert "[SILENCED: wrenmem-ignore WM004]" in text
    # added to a pair the base has, with nothing else changed: still shown, not "metadata"
    git(repo, "checkout", "-q", "main")
    path = repo / "knowledge/sql/count.md"
    path.write_text(path.read_text().replace("---\n\n", "wrenmem-ignore: [WM003]\n---\n\n", 1))
    edited = json.loads(run_wrenmem(["--project", str(repo), "diff", "--json"], repo).stdout)
    assert [e["path"] for e in edited["changed"]] == ["knowledge/sql/count.md"]
    assert edited["changed"][0]["ignores"] == ["WM003"] and not edited["metadata_only"]
