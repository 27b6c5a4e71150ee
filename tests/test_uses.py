"""Pairs linked to the schema: `list --uses`, and the pairs a manifest change affects."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import PROCESS_TIMEOUT

from tests.conftest import write_pair
from wrenmem.checks.uses import item_fingerprints, used_items
from wrenmem.schema.manifest import load_manifest


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True, timeout=PROCESS_TIMEOUT).stdout


@pytest.fixture
def shop(example_project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example project with three pairs reading orders.amount in three ways."""
    write_pair(example_project, "aliased.md", "Revenue per store",
               "SELECT o.store_id, SUM(o.amount) FROM orders o GROUP BY o.store_id")
    write_pair(example_project, "cte.md", "Big spenders",
               "WITH totals AS (SELECT customer_id, SUM(amount) AS spent FROM orders\n"
               "GROUP BY customer_id)\nSELECT c.email FROM totals t JOIN customers c ON "
               "c.id = t.customer_id WHERE t.spent > 1000")
    write_pair(example_project, "star.md", "Every order", "SELECT * FROM orders")
    write_pair(example_project, "other.md", "Order count", "SELECT COUNT(id) FROM orders")
    monkeypatch.chdir(example_project)
    return example_project


def test_used_items_resolve_aliases_ctes_and_star(shop: Path) -> None:
    tables = load_manifest(shop / "target" / "mdl.json").table_columns()
    sql = ("WITH t AS (SELECT customer_id, SUM(amount) AS s FROM orders GROUP BY 1)\n"
           "SELECT c.email FROM t JOIN customers c ON c.id = t.customer_id")
    assert used_items(sql, "postgres", tables) == (
        "customers", "customers.email", "customers.id", "orders", "orders.amount",
        "orders.customer_id")
    assert "payments.card_fingerprint" in used_items("SELECT * FROM payments", "postgres",
                                                     tables)
    assert used_items("SELECT 1 FROM", "postgres", tables) == ()


def test_list_uses_names_the_pairs_that_read_a_column(shop: Path, cli) -> None:
    result = cli("list", "--uses", "orders.amount", root=shop)
    assert result.exit_code == 0
    listed = [line.split("\t")[0] for line in result.output.splitlines()
              if line.startswith("knowledge/sql/")]
    for name in ("aliased", "cte", "star"):
        assert f"knowledge/sql/{name}.md" in listed
    assert "knowledge/sql/other.md" not in listed
    data = json.loads(cli("list", "--uses", "ORDERS.Amount", "--json", root=shop).output)
    assert {"path": "knowledge/sql/cte.md", "uses": ["orders.amount"]}.items() <= {
        k: v for p in data if p["path"] == "knowledge/sql/cte.md" for k, v in p.items()}.items()
    table = json.loads(cli("list", "--uses", "customers", "--json", root=shop).output)
    assert "knowledge/sql/cte.md" in {p["path"] for p in table}
    assert "knowledge/sql/star.md" not in {p["path"] for p in table}
    assert (shop / ".wrenmem" / "uses.bin").is_file()


def test_list_uses_an_unknown_item_says_what_is_there(shop: Path, cli) -> None:
    result = cli("list", "--uses", "orders.amout", root=shop)
    assert result.exit_code == 1
    assert "no column 'amout' in 'orders'; did you mean 'amount'?" in result.output


def change_amount_type(root: Path) -> None:
    path = root / "target" / "mdl.json"
    doc = json.loads(path.read_text())
    orders = next(m for m in doc["models"] if m["name"] == "orders")
    next(c for c in orders["columns"] if c["name"] == "amount")["type"] = "VARCHAR"
    path.write_text(json.dumps(doc, indent=2))


def test_a_type_change_names_verified_pairs_in_validate_and_check(shop: Path, cli) -> None:
    assert cli("verify", "knowledge/sql/aliased.md", "knowledge/sql/other.md", "--by", "Bo",
               root=shop).exit_code == 0
    assert cli("check", root=shop).output.count("schema changed") == 0
    change_amount_type(shop)
    result = cli("validate", "knowledge/sql/aliased.md", "knowledge/sql/other.md", root=shop)
    assert result.exit_code == 1
    assert "knowledge/sql/aliased.md:14:20: WM009" in result.output  # SUM of a text now
    assert ("knowledge/sql/aliased.md:7:1: WM011 the schema changed since the pair was "
            "verified by Bo: orders.amount changed") in result.output
    assert "other.md" not in result.output
    (shop / "wrenmem.toml").write_text('backend = "grep"\n')
    checked = cli("check", root=shop)
    assert checked.exit_code == 1
    assert "schema changed: knowledge/sql/aliased.md:7:1: WM011" in checked.output
    assert "other.md" not in checked.output
    reverified = cli("verify", "knowledge/sql/aliased.md", "--by", "Bo", root=shop)
    assert "WM009" in reverified.output  # SUM of what is now a text: not verified again


def test_diff_names_every_pair_a_manifest_change_affects(shop: Path, cli) -> None:
    git(shop, "init", "-q", "-b", "main")
    git(shop, "add", "-A")
    git(shop, "commit", "-q", "-m", "base")
    change_amount_type(shop)
    text = cli("diff", "--format", "text", root=shop).output
    assert "schema: " in text and "pair(s) use tables or columns the manifest changed" in text
    for name in ("aliased", "cte", "star"):
        assert f"S knowledge/sql/{name}.md" in text
    assert "S knowledge/sql/other.md" not in text
    assert "(orders.amount changed)" in text
    data = json.loads(cli("diff", "--json", root=shop).output)
    affected = {a["path"]: a["changes"] for a in data["schema_affected"]}
    assert affected["knowledge/sql/star.md"] == ["orders.amount changed"]
    markdown = cli("diff", root=shop).output
    assert "### Affected by the schema change" in markdown


def test_fingerprints_follow_type_expression_and_relationship(shop: Path) -> None:
    path = shop / "target" / "mdl.json"
    before = item_fingerprints(load_manifest(path))
    doc = json.loads(path.read_text())
    doc["relationships"][0]["condition"] = "orders.store_id = customers.id"
    next(m for m in doc["models"] if m["name"] == "customers")["properties"] = {
        "description": "only words changed"}
    path.write_text(json.dumps(doc))
    after = item_fingerprints(load_manifest(path))
    changed = {k for k in before if after.get(k) != before[k]}
    # the relationship's condition named orders.customer_id and customers.id, now it names
    # orders.store_id and customers.id: the three columns it joins on; a description is no change
    assert changed == {"orders.customer_id", "orders.store_id", "customers.id"}


def test_a_same_size_edit_with_its_mtime_restored_is_seen(
        shop: Path, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """`cp -p`, `touch -d` and some editors put the old mtime back after an in-place edit of
    the same size: the change time (which no program can set back) must show it, to `check`
    and to `list --uses`, without `sync --full`."""
    import os
    import time

    from tests.conftest import short_racy_window
    from tests.index_helpers import install_fake

    install_fake(monkeypatch)
    (shop / "wrenmem.toml").write_text('embedder = "fake"\n')
    window = short_racy_window(monkeypatch, 0.05)  # ext4 ticks every few ms
    star = shop / "knowledge" / "sql" / "star.md"
    past = time.time() - 3600
    for path in (shop / "knowledge" / "sql").glob("*.md"):
        os.utime(path, (past, past))
    time.sleep(window * 2)  # every file's change time is past the racy window
    assert cli("sync", root=shop).exit_code == 0
    assert "knowledge/sql/star.md" in cli("list", "--uses", "orders.amount", root=shop).output
    time.sleep(window * 2)  # what was recorded is trusted by its stat from now on
    assert json.loads(cli("check", "--json", root=shop).output)["fresh"] is True
    st = star.stat()
    text = star.read_text(encoding="utf-8")
    star.write_text(text.replace("SELECT * FROM", "SELECT 1 FROM"), encoding="utf-8")
    os.utime(star, ns=(st.st_atime_ns, st.st_mtime_ns))  # as `touch -d` or `cp -p` does
    assert (star.stat().st_size, star.stat().st_mtime_ns, star.stat().st_ino) == (
        st.st_size, st.st_mtime_ns, st.st_ino)
    time.sleep(window * 2)  # not saved by the racy window: by the change time alone
    checked = cli("check", "--json", root=shop)
    assert checked.exit_code == 1, checked.output
    assert json.loads(checked.output)["changed"] == ["knowledge/sql/star.md"]
    listed = cli("list", "--uses", "orders.amount", root=shop).output
    assert "knowledge/sql/star.md" not in listed and "knowledge/sql/cte.md" in listed
    assert cli("sync", root=shop).exit_code == 0
    assert json.loads(cli("check", "--json", root=shop).output)["fresh"] is True
