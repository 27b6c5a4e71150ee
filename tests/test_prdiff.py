"""`wrenmem diff` on real git repositories: added, changed, moved, removed; validation."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import PROCESS_TIMEOUT

from tests.conftest import write_pair

EDITED = "knowledge/sql/total-payment-amount-by-payment-method.md"
DELETED = "knowledge/sql/total-refunded-amount-by-month.md"
MOVED_FROM = "knowledge/sql/各种支付方式的支付总额.md"
MOVED_TO = "knowledge/sql/payments/按支付方式汇总.md"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True, timeout=PROCESS_TIMEOUT).stdout


@pytest.fixture
def branch(example_project: Path) -> Path:
    """The example project on `main`, and a `feature` branch (checked out) that adds a good
    and a bad pair, edits one question and SQL, edits only a note, moves and deletes one."""
    root = example_project
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "example")
    git(root, "checkout", "-q", "-b", "feature")
    write_pair(root, "stores.md", "How many stores are there?", "SELECT COUNT(*) FROM stores")
    write_pair(root, "typo.md", "Orders per store", "SELECT store_id, COUNT(*)\nFROM orderz\n"
               "GROUP BY store_id")
    edited = root / EDITED
    edited.write_text(edited.read_text()
                      .replace("nl: Total payment amount by payment method",
                               "nl: Payment totals per method")
                      .replace("ORDER BY total_amount DESC", "ORDER BY total_amount DESC\n"
                               "LIMIT 10"))
    noted = root / "knowledge/sql/which-sales-channel-brings-the-most-revenue.md"
    noted.write_text(noted.read_text() + "\nA reviewer's note.\n")
    (root / MOVED_TO).parent.mkdir(parents=True)
    git(root, "mv", MOVED_FROM, MOVED_TO)
    git(root, "rm", "-q", DELETED)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "feature pairs")
    return root


def test_json_lists_each_kind_of_change(branch: Path, cli) -> None:
    done = cli("diff", "main", "--json", root=branch)
    assert done.exit_code == 0, done.stderr
    data = json.loads(done.stdout)
    assert [e["path"] for e in data["added"]] == ["knowledge/sql/stores.md",
                                                 "knowledge/sql/typo.md"]
    assert [e["valid"] for e in data["added"]] == [True, False]
    assert data["added"][1]["problems"] == [{
        "path": "knowledge/sql/typo.md", "line": 7, "col": 6, "kind": "schema", "code": "WM003",
        "message": "unknown table 'orderz'; did you mean 'orders'?", "severity": "error"}]
    [changed] = data["changed"]
    assert changed["path"] == EDITED and changed["valid"]
    assert (changed["old_nl"], changed["nl"]) == ("Total payment amount by payment method",
                                                  "Payment totals per method")
    assert changed["question_changed"] and changed["sql_changed"]
    assert [line for line in changed["sql_diff"] if line[:1] in "+-"] == ["+LIMIT 10"]
    assert [(e["old_path"], e["path"]) for e in data["moved"]] == [(MOVED_FROM, MOVED_TO)]
    assert [(e["path"], e["nl"]) for e in data["removed"]] == [
        (DELETED, "Total refunded amount by month")]
    assert data["metadata_only"] == [
        "knowledge/sql/which-sales-channel-brings-the-most-revenue.md"]
    assert data["invalid"] == 1
    # Two revisions give the same answer as the checked-out working tree.
    two = json.loads(cli("diff", "main", "feature", "--json", root=branch).stdout)
    assert {k: v for k, v in two.items() if k != "head"} == {
        k: v for k, v in data.items() if k != "head"}
    assert two["head"]["commit"] == git(branch, "rev-parse", "feature").strip()


def test_markdown_for_a_pull_request(branch: Path, cli) -> None:
    done = cli("diff", "main", root=branch)  # Markdown is the default
    assert done.exit_code == 0
    text = done.stdout
    assert text.startswith("<!-- wrenmem-diff -->\n## wrenmem: NL→SQL pairs in this change\n")
    assert "**2 added, 1 changed, 1 removed, 1 moved** — ❌ 1 of 4" in text
    assert "#### ✅ How many stores are there?\n\n`knowledge/sql/stores.md`" in text
    assert ("#### ❌ Orders per store\n\n`knowledge/sql/typo.md` · source: `user`\n\n> ❌ "
            "`knowledge/sql/typo.md:7:6` WM003 unknown table 'orderz'") in text
    assert "Question was: ~~Total payment amount by payment method~~" in text
    assert "```diff\n@@" in text and "\n+LIMIT 10\n```" in text
    assert f"- ✅ `{MOVED_FROM}` → `{MOVED_TO}` — 各种支付方式的支付总额" in text
    assert f"### Removed (1)\n\n- `{DELETED}` — Total refunded amount by month" in text
    assert cli("diff", "main", "--fail-on-invalid", root=branch).exit_code == 1
    (branch / "knowledge/sql/typo.md").unlink()
    assert cli("diff", "main", "--fail-on-invalid", root=branch).exit_code == 0


def test_base_is_the_merge_base_unless_direct(branch: Path, cli) -> None:
    git(branch, "checkout", "-q", "main")
    write_pair(branch, "later-on-main.md", "Added on main later", "SELECT 1 AS one")
    git(branch, "add", "-A")
    git(branch, "commit", "-q", "-m", "main moves on")
    git(branch, "checkout", "-q", "feature")
    pr = json.loads(cli("diff", "main", "--json", root=branch).stdout)
    assert [e["path"] for e in pr["removed"]] == [DELETED]
    assert "merge base" in pr["base"]["rev"]
    direct = json.loads(cli("diff", "main", "--direct", "--json", root=branch).stdout)
    assert [e["path"] for e in direct["removed"]] == ["knowledge/sql/later-on-main.md", DELETED]


def test_working_tree_against_head(branch: Path, cli) -> None:
    done = cli("diff", root=branch)
    assert done.exit_code == 0
    assert "**0 added, 0 changed, 0 removed**" in done.stdout
    assert "No pair was added, changed or removed." in done.stdout
    write_pair(branch, "uncommitted.md", "Not committed yet", "SELECT 2 AS two")
    done = cli("diff", "--format", "text", root=branch)
    assert done.stdout.startswith("HEAD → working tree: 1 added, 0 changed, 0 removed")
    assert "A knowledge/sql/uncommitted.md  Not committed yet  ok" in done.stdout


def test_head_revision_is_validated_against_its_own_manifest(branch: Path,
                                                             cli) -> None:
    manifest = branch / "target" / "mdl.json"
    data = json.loads(manifest.read_text())
    stores = next(m for m in data["models"] if m["name"] == "stores")
    stores["columns"].append({"name": "region", "type": "VARCHAR"})
    manifest.write_text(json.dumps(data))
    write_pair(branch, "region.md", "Stores per region",
               "SELECT region, COUNT(*) FROM stores GROUP BY region")
    git(branch, "add", "-A")
    git(branch, "commit", "-q", "-m", "region")
    git(branch, "checkout", "-q", "main")  # the working tree's manifest has no region
    data = json.loads(cli("diff", "main", "feature", "--json", root=branch).stdout)
    region = next(e for e in data["added"] if e["path"].endswith("region.md"))
    assert region["valid"], region["problems"]


def test_errors(project: Path, cli) -> None:
    done = cli("diff", "main")
    assert done.exit_code == 1 and "not inside a git repository" in done.stderr
    git(project, "init", "-q", "-b", "main")
    write_pair(project, "a.md", "A", "SELECT 1")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "a")
    done = cli("diff", "nope")
    assert done.exit_code == 1
    assert done.stderr.strip() == "error: unknown revision 'nope'"


def test_a_rename_with_an_edit_is_one_moved_pair(project: Path, cli) -> None:
    root = project
    git(root, "init", "-q", "-b", "main")
    write_pair(root, "orders-per-store.md", "How many orders per store?",
               "SELECT store_id, COUNT(*) AS orders\nFROM orders\nGROUP BY store_id")
    write_pair(root, "revenue.md", "Total revenue in 2024",
               "SELECT SUM(amount) FROM orders WHERE year = 2024")
    write_pair(root, "gone.md", "Something unrelated", "SELECT 42")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    sql = root / "knowledge" / "sql"
    # Same question, new file, SQL edited.
    (sql / "orders-per-store.md").unlink()
    write_pair(root, "stores/orders.md", "How many orders per store?",
               "SELECT store_id, COUNT(*) AS orders\nFROM orders\nWHERE status <> 'void'\n"
               "GROUP BY store_id", source="agent", tags="[stores, kpi]")
    # Mostly the same text, new file, question reworded.
    (sql / "revenue.md").unlink()
    write_pair(root, "kpi/revenue-2024.md", "Total revenue for 2024",
               "SELECT SUM(amount) FROM orders WHERE year = 2024")
    (sql / "gone.md").unlink()
    write_pair(root, "new.md", "Completely different question", "SELECT name FROM stores")
    data = json.loads(cli("diff", "--json", "--no-schema", root=root).stdout)
    moved = {e["old_path"]: e for e in data["moved"]}
    assert set(moved) == {"knowledge/sql/orders-per-store.md", "knowledge/sql/revenue.md"}
    edited = moved["knowledge/sql/orders-per-store.md"]
    assert edited["path"] == "knowledge/sql/stores/orders.md" and edited["sql_changed"]
    assert "+WHERE status <> 'void'" in edited["sql_diff"]
    assert edited["source"] == "agent" and edited["tags"] == ["stores", "kpi"]
    assert edited["needs_review"] is True
    reworded = moved["knowledge/sql/revenue.md"]
    assert reworded["question_changed"] and not reworded["sql_changed"]
    assert not reworded["needs_review"]
    assert [e["path"] for e in data["added"]] == ["knowledge/sql/new.md"]
    assert [e["path"] for e in data["removed"]] == ["knowledge/sql/gone.md"]

    text = cli("diff", "--no-schema", root=root).stdout
    assert "### Moved and edited (2)" in text
    assert "source: `agent` · tags: `stores`, `kpi`" in text
    assert "🔍 **Review:** written by `agent`" in text
    assert "Question was: ~~Total revenue in 2024~~" in text
    assert "+WHERE status <> 'void'" in text
