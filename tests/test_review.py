"""Review status: agents' pairs are unreviewed, `verify` marks them, recall says `verified`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import PROCESS_TIMEOUT

from tests.conftest import write_pair
from wrenmem.api import Memory
from wrenmem.pairs.catalog import read_pair_file
from wrenmem.pairs.pairfile import Pair, parse_pair, render_pair
from wrenmem.recall.hits import Hit, RecallResult, prefer_verified

GOOD_SQL = "SELECT store_id, SUM(amount) AS revenue FROM orders GROUP BY store_id"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True, timeout=PROCESS_TIMEOUT).stdout


@pytest.fixture
def repo(example_project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example project committed on `main`, with a reviewer's git identity."""
    git(example_project, "init", "-q", "-b", "main")
    git(example_project, "config", "user.name", "Ann Reviewer")
    git(example_project, "config", "user.email", "ann@example.com")
    git(example_project, "add", "-A")
    git(example_project, "commit", "-q", "-m", "example")
    monkeypatch.chdir(example_project)
    return example_project


def test_an_mcp_stored_pair_is_unreviewed_until_verified(repo: Path, cli) -> None:
    pytest.importorskip("mcp")
    from tests.test_mcp import call, error_text, in_session

    async def body(session) -> dict:
        return {"stored": await call(session, "store_query", question="Revenue per store",
                                     sql=GOOD_SQL),
                "drop": await error_text(session, "store_query", question="Drop it",
                                         sql="DROP TABLE orders"),
                "bad": await error_text(session, "store_query", question="Email sum",
                                        sql="SELECT SUM(email) FROM customers")}

    out = in_session(repo, body, "--backend", "grep")
    path = out["stored"]["path"]
    assert "not a read-only query: a DROP statement" in out["drop"]
    assert "nothing was written" in out["drop"]
    assert "DuckDB rejects the SQL" in out["bad"] and "line 1, column 8" in out["bad"]
    assert sorted(p.name for p in (repo / "knowledge/sql").glob("*.md")
                  if "drop" in p.name or "email" in p.name) == []
    text = (repo / path).read_text()
    assert "source: agent" in text and "reviewed: false" in text

    diff = cli("diff", "--format", "text", root=repo)
    assert f"A {path}  Revenue per store  ok  [review: written by `agent`, not verified]" in (
        diff.output)
    assert "🔍 **Review:**" in cli("diff", root=repo).output

    verified = cli("verify", path, root=repo)
    assert verified.exit_code == 0, verified.output
    assert f"verified: {path} (by Ann Reviewer <ann@example.com>)" in verified.output
    pair = read_pair_file(repo / path, path)[0]
    assert pair.verified and not pair.unreviewed and "reviewed" not in pair.extra
    assert pair.extra["verified_schema"] == {
        "orders": pytest.approx(pair.extra["verified_schema"]["orders"]),
        "orders.amount": pair.extra["verified_schema"]["orders.amount"],
        "orders.store_id": pair.extra["verified_schema"]["orders.store_id"]}
    diff = cli("diff", "--format", "text", root=repo)
    assert f"A {path}  Revenue per store  ok  [verified]" in diff.output
    assert "✔️ Verified by Ann Reviewer" in cli("diff", root=repo).output

    recalled = json.loads(cli("recall", "-q", "revenue per store", "--json", "-b", "grep",
                              root=repo).output)
    hits = {h["path"]: h["verified"] for h in recalled[0]["hits"]}
    assert hits[path] is True
    for other, verified in hits.items():  # the example's own pairs: verified_by by hand or not
        if other != path and not other.startswith("seed:"):
            assert verified == ("verified_by:" in (repo / other).read_text())
        elif other != path:
            assert verified is False


def test_editing_the_sql_unverifies_the_pair(repo: Path, cli) -> None:
    write_pair(repo, "rev.md", "Revenue per store", GOOD_SQL)
    assert cli("verify", "knowledge/sql/rev.md", "--by", "Bo", root=repo).exit_code == 0
    path = repo / "knowledge/sql/rev.md"
    reindented = path.read_text().replace(" FROM orders", "\nFROM orders")
    path.write_text(reindented)
    assert read_pair_file(path, "knowledge/sql/rev.md")[0].verified  # whitespace is no edit
    path.write_text(reindented.replace("SUM(amount)", "SUM(shipping_fee)"))
    pair = read_pair_file(path, "knowledge/sql/rev.md")[0]
    assert not pair.verified and pair.unreviewed
    assert "[review: edited since Bo verified it]" in cli("diff", "--format", "text",
                                                          root=repo).output
    memory = Memory(repo, backend="grep")
    memory.store("Revenue per store", GOOD_SQL.replace("amount", "amount - shipping_fee"),
                 source="agent")
    stored = read_pair_file(path, "knowledge/sql/rev.md")[0]
    assert "verified_by" not in stored.extra and stored.extra["reviewed"] is False


def test_verify_refuses_a_pair_that_does_not_validate(repo: Path, cli) -> None:
    bad = write_pair(repo, "bad.md", "Email sum", "SELECT SUM(email) FROM customers")
    before = bad.read_bytes()
    result = cli("verify", "knowledge/sql/bad.md", root=repo)
    assert result.exit_code == 1
    assert "not verified: knowledge/sql/bad.md" in result.output and "WM009" in result.output
    assert bad.read_bytes() == before


def test_verify_without_a_git_identity_asks_for_a_name(example_project: Path, cli,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(example_project)
    write_pair(example_project, "rev.md", "Revenue per store", GOOD_SQL)
    result = cli("verify", "knowledge/sql/rev.md", root=example_project)
    assert result.exit_code == 1 and "pass --by NAME" in result.output


def test_a_verified_file_is_stable_under_fmt_and_old_hashes_stay(repo: Path, cli) -> None:
    write_pair(repo, "rev.md", "Revenue per store", GOOD_SQL)
    before = parse_pair((repo / "knowledge/sql/rev.md").read_text())
    cli("verify", "knowledge/sql/rev.md", "--by", "Bo", root=repo)
    text = (repo / "knowledge/sql/rev.md").read_text()
    assert cli("fmt", "--check", "knowledge/sql/rev.md", root=repo).exit_code == 0
    after = parse_pair(text)
    assert render_pair(after) == text
    import hashlib

    payload = json.dumps([before.nl, before.sql, None, None, [], "user"], ensure_ascii=False)
    assert before.content_hash == hashlib.sha256(payload.encode()).hexdigest()
    assert after.content_hash != before.content_hash  # the index row must say verified


def test_recall_verified_and_prefer_verified(repo: Path, cli) -> None:
    write_pair(repo, "a.md", "Revenue per store this year", GOOD_SQL)
    write_pair(repo, "b.md", "Revenue per store", GOOD_SQL + " ORDER BY 2 DESC")
    write_pair(repo, "c.md", "Orders per customer", "SELECT customer_id, COUNT(*) FROM orders "
               "GROUP BY customer_id")
    assert cli("verify", "knowledge/sql/a.md", "knowledge/sql/c.md", "--by", "Bo",
               root=repo).exit_code == 0
    args = ("recall", "-q", "revenue per store", "--json", "-b", "grep", "-k", "2")
    plain = json.loads(cli(*args, root=repo).output)[0]["hits"]
    assert [h["path"] for h in plain][:1] == ["knowledge/sql/b.md"]
    only = json.loads(cli(*args, "--verified", root=repo).output)[0]["hits"]
    assert only[0]["path"] == "knowledge/sql/a.md" and all(h["verified"] for h in only)
    assert "knowledge/sql/b.md" not in {h["path"] for h in only}
    (repo / "wrenmem.toml").write_text("prefer_verified = true\n")
    preferred = json.loads(cli(*args, root=repo).output)[0]["hits"]
    gap = plain[0]["score"] - next(h["score"] for h in plain if h["path"].endswith("a.md"))
    expected = "knowledge/sql/a.md" if gap <= 0.05 else "knowledge/sql/b.md"
    assert preferred[0]["path"] == expected


def test_prefer_verified_moves_a_verified_hit_only_past_close_scores() -> None:
    def hit(path: str, score: float, verified: bool) -> Hit:
        return Hit("q", "SELECT 1", path, score, "user", verified=verified)

    result = RecallResult("q", "grep", (hit("a", 0.90, False), hit("b", 0.87, True),
                                        hit("c", 0.80, False), hit("d", 0.60, True)))
    [ranked] = prefer_verified([result])
    assert [h.path for h in ranked.hits] == ["b", "a", "c", "d"]
    assert [h.score for h in ranked.hits] == [0.87, 0.90, 0.80, 0.60]


def test_the_index_row_carries_verified(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.index_helpers import install_fake, settings_for
    from wrenmem.index.sync import sync_pairs
    from wrenmem.recall.hits import Filters
    from wrenmem.recall.recaller import recall_many

    install_fake(monkeypatch)
    write_pair(project, "a.md", "How many orders?", "SELECT COUNT(*) FROM orders")
    write_pair(project, "b.md", "How many orders were paid?", "SELECT COUNT(*) FROM payments")
    Memory(project, backend="grep").verify([project / "knowledge/sql/b.md"], by="Bo")
    settings = settings_for(project)
    sync_pairs(settings)
    for backend in ("vector", "hybrid"):
        s = settings.__class__(**{**settings.__dict__, "backend": backend})
        [both] = recall_many(s, ["How many orders?"], 2, Filters())
        assert {h.path: h.verified for h in both.hits} == {
            "knowledge/sql/a.md": False, "knowledge/sql/b.md": True}
        [only] = recall_many(s, ["How many orders?"], 2, Filters(verified=True))
        assert [h.path for h in only.hits] == ["knowledge/sql/b.md"]


def test_pair_review_properties() -> None:
    agent = Pair("q", "SELECT 1", source="agent")
    assert agent.unreviewed and not agent.verified
    person = Pair("q", "SELECT 1")
    assert not person.unreviewed
    marked = Pair("q", "SELECT 1", extra={"reviewed": False})
    assert marked.unreviewed
    # Without the fingerprint of what was verified, nothing says what the name vouches for.
    by_hand = Pair("q", "SELECT 1", extra={"verified_by": "maria.lopez"})
    assert not by_hand.verified and by_hand.unreviewed and by_hand.old_fingerprint
    edited = Pair("q", "SELECT 2", extra={"verified_by": "bo", "verified_sql": "0" * 16})
    assert not edited.verified and edited.unreviewed


def test_a_hit_keeps_verified_and_its_twins_through_the_daemons_json() -> None:
    hit = Hit("q", "SELECT 1", "a.md", 0.9, "user", None, None, ("t",), "grep", 1.5,
              ("other phrasing",), ("b.md",), True)
    assert Hit.from_dict(hit.to_dict()) == hit
    assert Hit.from_dict({**hit.to_dict(), "verified": False}).verified is False
