"""A pair's own opt-out of the read-only rule is flagged, never a plain check mark
(issue 39, item 7): `diff` (text, JSON, the PR comment), recall (text, JSON, index
backends) and MCP recall all say so. The opt-out itself keeps working."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import PROCESS_TIMEOUT

from tests.conftest import write_pair

WRITE_SQL = "DELETE FROM orders WHERE amount < 0"


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=Ann", "-c", "user.email=ann@example.com", *args],
                   cwd=cwd, capture_output=True, text=True, check=True, timeout=PROCESS_TIMEOUT)


@pytest.fixture
def repo(project: Path) -> Path:
    git(project, "init", "-q", "-b", "main")
    write_pair(project, "count.md", "How many orders?", "SELECT COUNT(*) FROM orders")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "base")
    git(project, "checkout", "-q", "-b", "pr")
    write_pair(project, "cleanup.md", "Remove the orders with a negative amount", WRITE_SQL,
               **{"allow-writes": "true"})
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "cleanup")
    return project


def test_validate_still_honours_the_opt_out(repo: Path, cli) -> None:
    assert cli("validate", "knowledge/sql/cleanup.md", root=repo).exit_code == 0


def test_diff_flags_the_opt_out(repo: Path, cli) -> None:
    md = cli("diff", "main", "pr", "--format", "markdown", root=repo).output
    assert "#### ✅ Remove the orders" not in md
    assert "#### ⚠️ Remove the orders" in md and "**Writes allowed:**" in md
    assert "✅ every added" not in md and "1 pair(s) opt out of the read-only rule" in md
    data = json.loads(cli("diff", "main", "pr", "--json", root=repo).output)
    assert data["added"][0]["allows_writes"] is True
    text = cli("diff", "main", "pr", "--format", "text", root=repo).output
    assert "[WRITES: allow-writes opts out of the read-only rule]" in text


def test_diff_flags_an_opt_out_added_to_an_existing_pair(repo: Path, cli) -> None:
    path = repo / "knowledge/sql/count.md"
    path.write_text(path.read_text().replace("---\n\n", "allow-writes: true\n---\n\n", 1))
    data = json.loads(cli("diff", "--json", root=repo).output)
    assert [e["path"] for e in data["changed"]] == ["knowledge/sql/count.md"]
    assert data["changed"][0]["allows_writes"] is True and not data["metadata_only"]


def test_recall_marks_the_hit(repo: Path, cli) -> None:
    out = cli("recall", "-q", "orders negative amount", "-b", "grep", "--json", root=repo)
    hits = {h["path"]: h for h in json.loads(out.output)[0]["hits"]}
    assert hits["knowledge/sql/cleanup.md"]["allows_writes"] is True
    assert hits["knowledge/sql/count.md"]["allows_writes"] is False
    text = cli("recall", "-q", "orders negative amount", "-b", "grep", root=repo).output
    line = next(ln for ln in text.splitlines() if "knowledge/sql/cleanup.md" in ln)
    assert "WRITES: allow-writes, outside the read-only rule" in line


def test_the_index_backends_mark_the_hit(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.index_helpers import install_fake, settings_for
    from wrenmem.index.sync import sync_pairs
    from wrenmem.recall.hits import Filters
    from wrenmem.recall.recaller import recall_many

    install_fake(monkeypatch)
    settings = settings_for(repo)
    sync_pairs(settings)
    for backend in ("vector", "hybrid"):
        s = settings.__class__(**{**settings.__dict__, "backend": backend})
        [result] = recall_many(s, ["Remove the orders with a negative amount"], 2, Filters())
        assert {h.path: h.allows_writes for h in result.hits} == {
            "knowledge/sql/cleanup.md": True, "knowledge/sql/count.md": False}


def test_mcp_recall_marks_the_hit(repo: Path) -> None:
    pytest.importorskip("mcp")
    from tests.test_mcp import call, in_session

    async def body(session) -> dict:
        return await call(session, "recall_queries",
                          question="Remove the orders with a negative amount", k=2)

    out = in_session(repo, body, "--backend", "grep")
    pairs = {p["path"]: p for p in out["pairs"]}
    assert pairs["knowledge/sql/cleanup.md"]["allows_writes"] is True
    assert pairs["knowledge/sql/count.md"]["allows_writes"] is False
