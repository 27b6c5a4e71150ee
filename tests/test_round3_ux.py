"""Issue 39 item 13: what was accepted or done silently is now said, through the real doors.

``eval --fail-under nan`` (a gate that could never fail) is a usage error; a ``recall --sql``
draft the scorer cannot read, or that the grep backend never reads, is said; a knowledge
file with a NUL byte or front matter that does not read is not served (the rest is); a
read-only MCP server says it is read-only when a write tool is called.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_wrenmem
from tests.test_knowledge import knowledge_project


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    return knowledge_project(tmp_path / "shop")


def _run(root: Path, *args: str) -> Any:
    return run_wrenmem(["--project", str(root), *args], root)


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1.5", "-0.1"])
def test_eval_fail_under_must_be_a_fraction(shop: Path, value: str) -> None:
    done = _run(shop, "eval", "--backends", "grep", "--fail-under", value)
    assert done.returncode == 2, (done.stdout, done.stderr)  # a usage error, nothing run
    assert "Invalid value for '--fail-under'" in done.stderr and "0.0<=x<=1.0" in done.stderr
    assert "R@1" not in done.stdout


def test_eval_fail_under_a_fraction_still_gates(shop: Path) -> None:
    (shop / "wrenmem.toml").write_text('backend = "grep"\n', encoding="utf-8")
    done = _run(shop, "eval", "--backends", "grep", "--fail-under", "0.5")
    assert done.returncode == 1  # nothing to measure in three pairs: the gate fails
    assert "--fail-under 0.5 not met" in done.stderr


def test_a_draft_the_grep_backend_never_reads_is_said(shop: Path) -> None:
    draft = "SELECT COUNT(*) FROM `orders`"
    done = _run(shop, "recall", "--backend", "grep", "-q", "orders shipped", "--sql", draft)
    assert done.returncode == 0
    assert "not used by the grep backend" in done.stderr
    plain = _run(shop, "recall", "--backend", "grep", "-q", "orders shipped")
    assert "draft" not in plain.stderr  # no draft, no word about one


def test_a_draft_that_does_not_parse_is_said_under_hybrid(shop: Path) -> None:
    assert _run(shop, "sync").returncode == 0  # the real model and LanceDB
    bad = _run(shop, "recall", "--backend", "hybrid", "-q", "orders shipped",
               "--sql", "SELEC id FRM orders WHERE (")
    assert bad.returncode == 0, bad.stderr
    line = next(x for x in bad.stderr.splitlines() if "draft SQL" in x)
    assert "does not parse as one statement" in line and "Line 1" in line
    assert "only its words are compared" in line
    two = _run(shop, "recall", "--backend", "hybrid", "-q", "orders shipped",
               "--sql", "SELECT 1; SELECT 2")
    assert "it holds 2 statements" in two.stderr
    good = _run(shop, "recall", "--backend", "hybrid", "-q", "orders shipped",
                "--sql", 'SELECT COUNT(*) FROM orders WHERE status = \'shipped\'')
    assert good.returncode == 0 and "draft SQL" not in good.stderr


BROKEN_YAML = "---\ntags: [finance\ntitle: Broken\n---\n## Secret rule\nDo not serve me.\n"
UNCLOSED = "---\ntags: [finance]\n## Unclosed rule\nNo closing line.\n"
WITH_NUL = "## Hidden rule\nLooks fine\x00 but hides\n## Second\nthis text.\n"


def _break_knowledge(root: Path) -> None:
    rules = root / "knowledge" / "rules"
    (rules / "broken.md").write_text(BROKEN_YAML, encoding="utf-8")
    (rules / "unclosed.md").write_text(UNCLOSED, encoding="utf-8")
    (rules / "nul.md").write_text(WITH_NUL, encoding="utf-8")


def test_knowledge_files_with_a_nul_or_bad_front_matter_are_not_served(shop: Path) -> None:
    _break_knowledge(shop)
    rules = _run(shop, "rules", "--json")
    assert rules.returncode == 0, rules.stderr
    served = rules.stdout
    for hidden in ("Secret rule", "Do not serve me", "Hidden rule", "hides", "Unclosed rule"):
        assert hidden not in served, hidden
    assert "Fiscal year" in served and "Guest checkouts" in served  # the rest still served
    fetched = _run(shop, "fetch", "--json", "-q", "secret rule hidden")
    assert "Do not serve me" not in fetched.stdout and "hides" not in fetched.stdout
    checked = _run(shop, "validate")
    assert checked.returncode != 0
    said = checked.stdout + checked.stderr
    broken = next(x for x in said.splitlines() if x.startswith("knowledge/rules/broken.md:"))
    assert "front matter is not valid YAML" in broken and "not served" in broken
    assert broken.startswith("knowledge/rules/broken.md:3:")  # the line YAML stopped at
    nul = next(x for x in said.splitlines() if x.startswith("knowledge/rules/nul.md:"))
    assert nul.startswith("knowledge/rules/nul.md:2:") and "NUL byte" in nul
    unclosed = next(x for x in said.splitlines()
                    if x.startswith("knowledge/rules/unclosed.md:"))
    assert "not closed" in unclosed and "not served" in unclosed


def test_over_mcp_bad_knowledge_files_are_not_served_and_writes_say_read_only(
        shop: Path) -> None:
    pytest.importorskip("mcp")
    from mcp import ClientSession

    from tests.test_mcp import call, error_text, in_session

    _break_knowledge(shop)

    async def body(session: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["resources"] = [str(r.uri) for r in (await session.list_resources()).resources]
        out["instructions"] = await call(session, "get_instructions")
        try:
            got = await session.read_resource(
                "wrenmem://knowledge/rules/nul.md")  # type: ignore[arg-type]
            out["nul"] = "".join(getattr(c, "text", "") for c in got.contents)
        except Exception as e:  # noqa: BLE001 - the SDK raises the server's error
            out["nul"] = f"error: {e}"
        out["store"] = await error_text(session, "store_query", question="How many orders?",
                                        sql="SELECT COUNT(*) FROM `orders`")
        out["forget"] = await error_text(session, "forget_query",
                                         path="knowledge/sql/how-many-orders-were-shipped.md")
        out["draft"] = await call(session, "recall_queries", question="orders shipped",
                                  sql="SELECT COUNT(*) FROM `orders`")
        return out

    out = in_session(shop, body, "--backend", "grep", "--read-only")
    assert "Hidden rule" not in json.dumps(out["instructions"])
    assert "Fiscal year" in json.dumps(out["instructions"])
    assert not any(u.endswith(("nul.md", "broken.md", "unclosed.md")) for u in out["resources"])
    assert out["nul"].startswith("error:") and "NUL byte" in out["nul"]
    assert "read-only" in out["store"] and "without --read-only" in out["store"]
    assert "Unknown tool" not in out["store"]
    assert "read-only" in out["forget"] and "--forget" in out["forget"]
    assert any("not used by the grep backend" in n for n in out["draft"]["notes"])
    assert (shop / "knowledge" / "sql" / "how-many-orders-were-shipped.md").exists()
