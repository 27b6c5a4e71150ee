"""A verification a change forges is claimed, never settled (issue 39, item 8).

A real git repository and a pull-request-like flow: `main` holds pairs, one verified by
`wrenmem verify` and committed; another author's branch writes `verified_by: Boss` with a
matching fingerprint (the unkeyed hash anyone can compute) into an agent's pair, and adds a
new forged pair. `wrenmem diff main...pr` (what the CI workflow posts) must say who claims
those verifications, and recall must not serve them as verified until they are committed
on the branch checked out (merged after review).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import PROCESS_TIMEOUT

from tests.conftest import write_pair
from wrenmem.pairs.pairfile import pair_fingerprint, parse_pair

SQL_A = "SELECT COUNT(*) FROM orders"
SQL_B = "SELECT SUM(amount) FROM orders"
SQL_C = "SELECT customer_id FROM orders"


def git(cwd: Path, *args: str, author: str | None = None) -> str:
    env_args = ["-c", "user.name=Ann Owner", "-c", "user.email=ann@example.com"]
    cmd = ["git", *env_args, *args]
    if author:
        cmd += ["--author", author]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=True, timeout=PROCESS_TIMEOUT).stdout


def forge(path: Path, by: str = "Boss") -> None:
    """What an attacker writes: the keys `verify` writes, with the right fingerprint."""
    pair = parse_pair(path.read_text())
    text = path.read_text()
    head, sep, body = text.partition("\n---\n")
    path.write_text(f"{head}\nverified_by: {by}\nverified_at: 2026-12-01T10:00:00Z\n"
                    f"verified_pair: {pair_fingerprint(pair)}{sep}{body}")
    assert parse_pair(path.read_text()).verification_intact  # the file alone looks verified


@pytest.fixture
def repo(project: Path, cli) -> Path:
    git(project, "init", "-q", "-b", "main")
    write_pair(project, "a.md", "How many orders?", SQL_A, source="agent")
    write_pair(project, "b.md", "Total order amount", SQL_B)
    assert cli("verify", "knowledge/sql/b.md", "--by", "Ann Owner", root=project).exit_code == 0
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "pairs")
    return project


def pr_branch(repo: Path) -> str:
    """Mallory's branch: forges a verification on a.md (metadata only) and a new c.md."""
    git(repo, "checkout", "-q", "-b", "pr")
    forge(repo / "knowledge/sql/a.md")
    write_pair(repo, "c.md", "Which customers ordered?", SQL_C, source="agent")
    forge(repo / "knowledge/sql/c.md")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "looks verified", author="Mallory <mallory@evil.test>")
    sha = git(repo, "rev-parse", "--short=7", "HEAD").strip()
    git(repo, "checkout", "-q", "main")
    return sha


def test_the_pr_diff_says_who_claims_a_forged_verification(repo: Path, cli) -> None:
    sha = pr_branch(repo)
    md = cli("diff", "main", "pr", "--format", "markdown", root=repo)
    assert md.exit_code == 0, md.output
    assert "Verified by Boss" not in md.output
    claim = f"verification by Boss claimed by Mallory <mallory@evil.test> in {sha}"
    assert md.output.count(claim) == 2  # a.md (only its metadata changed) and c.md
    data = json.loads(cli("diff", "main", "pr", "--json", root=repo).output)
    entries = {e["path"]: e for e in data["added"] + data["changed"]}
    for rel in ("knowledge/sql/a.md", "knowledge/sql/c.md"):
        e = entries[rel]
        assert e["verified"] is False and e["needs_review"] is True
        assert e["verification"]["state"] == "claimed"
        assert e["verification"]["verified_by"] == "Boss"
        assert e["verification"]["claimed_by"] == f"Mallory <mallory@evil.test> in {sha}"
    assert "knowledge/sql/a.md" not in data["metadata_only"]
    text = cli("diff", "main", "pr", "--format", "text", root=repo).output
    assert "[verified]" not in text and "claimed by Mallory" in text


def test_a_verification_the_base_has_is_settled(repo: Path, cli) -> None:
    git(repo, "checkout", "-q", "-b", "notes")
    b = repo / "knowledge/sql/b.md"
    b.write_text(b.read_text() + "\nA note from a later change.\n")
    write_pair(repo, "d.md", "Orders per day", "SELECT ordered_at FROM orders")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "note", author="Mallory <mallory@evil.test>")
    data = json.loads(cli("diff", "main", "notes", "--json", root=repo).output)
    assert data["metadata_only"] == ["knowledge/sql/b.md"]  # the verification predates it
    # a move keeps a settled verification settled
    git(repo, "mv", "knowledge/sql/b.md", "knowledge/sql/total.md")
    git(repo, "commit", "-q", "-m", "move")
    moved = json.loads(cli("diff", "main", "notes", "--json", root=repo).output)["moved"]
    assert moved[0]["verification"]["state"] == "settled" and moved[0]["verified"] is True
    md = cli("diff", "main", "notes", "--format", "markdown", root=repo).output
    assert "claimed by" not in md


def test_reverifying_in_a_pr_is_claimed_by_the_reviewer(repo: Path, cli) -> None:
    """A reviewer who runs `verify` on the branch and commits: claimed by that commit's
    author until merged; the comment names who committed it."""
    git(repo, "checkout", "-q", "-b", "review")
    assert cli("verify", "knowledge/sql/a.md", "--by", "Bo Reviewer", root=repo).exit_code == 0
    git(repo, "commit", "-q", "-am", "verify", author="Bo Reviewer <bo@example.com>")
    md = cli("diff", "main", "review", "--format", "markdown", root=repo).output
    assert "verification by Bo Reviewer claimed by Bo Reviewer <bo@example.com>" in md


def test_the_working_tree_diff_marks_an_uncommitted_forgery(repo: Path, cli) -> None:
    forge(repo / "knowledge/sql/a.md")
    text = cli("diff", "--format", "text", root=repo).output
    assert "claimed by the working tree (not committed)" in text


def _hits(cli, repo: Path, *extra: str) -> dict[str, dict]:
    out = cli("recall", "-q", "orders", "-b", "grep", "-k", "5", "--json", *extra, root=repo)
    assert out.exit_code == 0, out.output
    return {h["path"]: h for h in json.loads(out.output)[0]["hits"]}


def test_recall_serves_a_working_tree_forgery_as_claimed(repo: Path, cli) -> None:
    forge(repo / "knowledge/sql/a.md")  # an agent that writes files, unreviewed
    hits = _hits(cli, repo)
    a, b = hits["knowledge/sql/a.md"], hits["knowledge/sql/b.md"]
    assert a["verified"] is False and a["claimed_by"] == "Boss"
    assert b["verified"] is True and b["claimed_by"] is None
    assert set(_hits(cli, repo, "--verified")) == {"knowledge/sql/b.md"}
    text = cli("recall", "-q", "orders", "-b", "grep", "-k", "5", root=repo).output
    assert "verification claimed by Boss, not committed" in text
    listed = cli("list", "--verified", "--json", root=repo).output
    assert "knowledge/sql/a.md" not in listed and "knowledge/sql/b.md" in listed


def test_a_committed_verification_is_settled_without_the_local_record(repo: Path, cli) -> None:
    (repo / ".wrenmem" / "verifications.json").unlink()  # derived state, deletable
    assert set(_hits(cli, repo, "--verified")) == {"knowledge/sql/b.md"}  # from git


def test_the_branch_checked_out_after_review_counts(repo: Path, cli) -> None:
    pr_branch(repo)
    assert set(_hits(cli, repo, "--verified")) == {"knowledge/sql/b.md"}
    git(repo, "merge", "-q", "--no-edit", "pr")  # the reviewer accepted the claims
    assert set(_hits(cli, repo, "--verified")) == {
        "knowledge/sql/a.md", "knowledge/sql/b.md", "knowledge/sql/c.md"}


def test_the_index_backends_say_claimed(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.index_helpers import install_fake, settings_for
    from wrenmem.index.sync import sync_pairs
    from wrenmem.recall.hits import Filters
    from wrenmem.recall.recaller import recall_many

    install_fake(monkeypatch)
    forge(repo / "knowledge/sql/a.md")
    settings = settings_for(repo)
    sync_pairs(settings)
    for backend in ("vector", "hybrid"):
        s = settings.__class__(**{**settings.__dict__, "backend": backend})
        [both] = recall_many(s, ["How many orders?"], 3, Filters())
        got = {h.path: (h.verified, h.claimed_by) for h in both.hits}
        assert got["knowledge/sql/a.md"] == (False, "Boss")
        assert got["knowledge/sql/b.md"] == (True, None)
        [only] = recall_many(s, ["How many orders?"], 3, Filters(verified=True))
        assert [h.path for h in only.hits] == ["knowledge/sql/b.md"]
