"""`rules add` / `glossary add` and Memory.add_rule / add_term write knowledge files in the
format people write (read back by the same parser), served by `fetch` and `glossary`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_wrenmem
from wrenmem.api import Memory
from wrenmem.errors import WrenmemError


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "knowledge" / "sql").mkdir(parents=True)
    (root / "wrenmem.toml").write_text('backend = "grep"\n')
    return root


def test_cli_adds_a_rule_a_caveat_and_a_term(root: Path) -> None:
    done = run_wrenmem(["rules", "add", "Revenue excludes refunds",
                        "Revenue is SUM(payments.amount) minus refunds."], root)
    assert done.returncode == 0, done.stderr
    assert (root / "knowledge" / "rules" / "revenue-excludes-refunds.md").read_text() == (
        "## Revenue excludes refunds\nRevenue is SUM(payments.amount) minus refunds.\n")
    assert run_wrenmem(["rules", "add", "Store 3 closed", "No orders after 2023.",
                        "--caveat", "--file", "stores"], root).returncode == 0
    assert run_wrenmem(["glossary", "add", "GMV", "Gross merchandise value.",
                        "-s", "gross sales, gross merchandise value", "-c", "orders.amount"],
                       root).returncode == 0
    rules = json.loads(run_wrenmem(["rules", "--json"], root).stdout)["rules"]
    assert {(r["kind"], r["title"]) for r in rules} == {
        ("rule", "Revenue excludes refunds"), ("caveat", "Store 3 closed")}
    terms = json.loads(run_wrenmem(["glossary", "gross sales", "--json"], root).stdout)["terms"]
    assert terms[0]["title"] == "GMV" and terms[0]["columns"] == ["orders.amount"]
    assert terms[0]["synonyms"] == ["gross sales", "gross merchandise value"]


def test_api_appends_to_a_file_and_refuses_a_repeated_title(root: Path) -> None:
    memory = Memory(root)
    first = memory.add_rule("Fiscal year", "Starts on April 1st.", file="calendar")
    second = memory.add_rule("Week starts", "Weeks start on Monday.", file="calendar.md")
    assert (first.line, second.line) == (1, 4)
    assert [e.title for e in memory.rules().rules] == ["Fiscal year", "Week starts"]
    before = (root / "knowledge" / "rules" / "calendar.md").read_bytes()
    with pytest.raises(WrenmemError, match=r"calendar.md:1: there is already a rule"):
        memory.add_rule("fiscal YEAR", "Other text.", file="calendar")
    assert (root / "knowledge" / "rules" / "calendar.md").read_bytes() == before
    term = memory.add_term("AOV", "Average order value.", synonyms=["average basket"])
    assert [t.title for t in memory.glossary("average basket")] == ["AOV"] == [term.title]


def test_an_existing_hand_written_file_keeps_its_text(root: Path) -> None:
    folder = root / "knowledge" / "rules"
    folder.mkdir(parents=True)
    hand = "# Revenue rules\n\n## Test accounts\nLeave out customers.is_test.\n"
    (folder / "revenue.md").write_text(hand)
    Memory(root).add_rule("Currency", "Amounts are in USD.", file="revenue")
    text = (folder / "revenue.md").read_text()
    assert text.startswith(hand) and text.endswith("## Currency\nAmounts are in USD.\n")
    assert [e.title for e in Memory(root).rules().rules] == ["Test accounts", "Currency"]


@pytest.mark.parametrize("title, text, file", [
    ("", "x", None), ("# Heading", "x", None), ("Empty", "  ", None),
    ("Bad file", "x", "../escape")])
def test_bad_input_is_refused_and_writes_nothing(root: Path, title: str, text: str,
                                                 file: str | None) -> None:
    with pytest.raises(WrenmemError):
        Memory(root).add_rule(title, text, file=file)
    assert not (root / "knowledge" / "rules").exists() or not any(
        (root / "knowledge" / "rules").iterdir())
    assert not (root.parent / "escape.md").exists()
