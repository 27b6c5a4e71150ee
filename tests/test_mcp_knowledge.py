"""The knowledge over MCP, driven by the SDK's own client: tools, resources, the prompt,
``--read-only`` and forgetting off unless enabled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.test_knowledge import RULES, knowledge_project
from tests.test_mcp import call, in_session

pytest.importorskip("mcp")

from mcp import ClientSession  # noqa: E402


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    return knowledge_project(tmp_path / "shop")


def text_of(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.contents)


def test_tools_resources_and_prompt(shop: Path) -> None:
    async def body(session: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["tools"] = {t.name for t in (await session.list_tools()).tools}
        out["resources"] = {str(r.uri): r for r in (await session.list_resources()).resources}
        out["templates"] = [t.uri_template for t in
                            (await session.list_resource_templates()).resource_templates]
        out["instructions"] = await call(session, "get_instructions")
        out["for_question"] = await call(session, "get_instructions",
                                         question="GMV of this fiscal year")
        out["glossary"] = await call(session, "lookup_glossary", term="gross merchandise value")
        out["context"] = await call(session, "get_schema_context",
                                    question="revenue this fiscal year")
        out["rule_file"] = text_of(await session.read_resource(
            "wrenmem://knowledge/rules/rules.md"))
        out["manifest"] = text_of(await session.read_resource("wrenmem://manifest"))
        out["all_rules"] = text_of(await session.read_resource("wrenmem://instructions"))
        # an edited rule and a new file, seen without a restart
        rules = shop / "knowledge" / "rules" / "rules.md"
        rules.write_text(RULES.replace("starts in April", "starts in July"), encoding="utf-8")
        (shop / "knowledge" / "metrics").mkdir()
        (shop / "knowledge" / "metrics" / "aov.md").write_text(
            "## Average order value\nSUM(amount) / COUNT(*) over completed orders.\n")
        out["edited"] = await call(session, "get_instructions")
        out["edited_file"] = text_of(await session.read_resource(
            "wrenmem://knowledge/rules/rules.md"))
        out["resources_after"] = {str(r.uri) for r in
                                  (await session.list_resources()).resources}
        out["prompts"] = [p.name for p in (await session.list_prompts()).prompts]
        prompt = await session.get_prompt("answer_with_sql",
                                          {"question": "GMV per country"})
        out["prompt"] = " ".join(getattr(m.content, "text", "") for m in prompt.messages)
        return out

    out = in_session(shop, body, "--backend", "grep")
    assert {"get_instructions", "lookup_glossary", "store_query"} <= out["tools"]
    assert "forget_query" not in out["tools"]  # off unless the mcp_forget setting is on
    assert set(out["resources"]) == {
        "wrenmem://manifest", "wrenmem://instructions", "wrenmem://knowledge/rules/rules.md",
        "wrenmem://knowledge/caveats/caveats.md", "wrenmem://knowledge/glossary/glossary.md"}
    assert out["templates"] == ["wrenmem://knowledge/{folder}/{name}"]
    titles = [r["title"] for r in out["instructions"]["rules"]]
    assert titles == ["Guest checkouts", "Stores before 2021", "Revenue", "Fiscal year"]
    assert [g["term"] for g in out["for_question"]["glossary"]] == ["GMV"]
    assert out["glossary"]["terms"][0]["columns"] == ["orders.amount"]
    assert "Fiscal year" in [r["title"] for r in out["context"]["rules"]]
    assert "## Business rules and caveats" in out["context"]["text"]
    assert out["rule_file"] == RULES
    assert json.loads(out["manifest"])["dataSource"] == "mysql"
    assert "Guest checkouts" in out["all_rules"] and "Fiscal year" in out["all_rules"]
    edited = {r["title"]: r["text"] for r in out["edited"]["rules"]}
    assert "starts in July" in edited["Fiscal year"] and "Average order value" in edited
    assert "starts in July" in out["edited_file"]
    assert "wrenmem://knowledge/metrics/aov.md" in out["resources_after"]
    assert out["prompts"] == ["answer_with_sql"]
    loop = out["prompt"]
    assert "GMV per country" in loop
    assert (loop.index("get_schema_context") < loop.index("recall_queries")
            < loop.index("store_query"))


def test_read_only_serves_no_writing_tool(shop: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WRENMEM_MCP_FORGET", "true")  # --read-only wins over the setting

    async def body(session: ClientSession) -> dict[str, Any]:
        prompt = await session.get_prompt("answer_with_sql", {"question": "x"})
        return {"tools": {t.name for t in (await session.list_tools()).tools},
                "instructions": (session.initialize_result.instructions or ""),
                "prompt": " ".join(getattr(m.content, "text", "") for m in prompt.messages)}

    out = in_session(shop, body, "--backend", "grep", "--read-only")
    assert out["tools"] == {"recall_queries", "get_schema_context", "describe_schema",
                            "list_queries", "get_instructions", "lookup_glossary",
                            "get_context", "list_stored_queries"}
    assert "read-only" in out["instructions"] and "store_query" not in out["prompt"]
    assert "store_query" not in out["instructions"] and "forget_query" not in out["instructions"]


def test_forget_query_when_enabled(shop: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def body(session: ClientSession) -> set[str]:
        return {t.name for t in (await session.list_tools()).tools}

    assert "forget_query" in in_session(shop, body, "--backend", "grep", "--forget")
    monkeypatch.setenv("WRENMEM_MCP_FORGET", "1")
    assert "forget_query" in in_session(shop, body, "--backend", "grep")


def test_a_committed_toml_cannot_turn_forgetting_on(shop: Path) -> None:
    """mcp_forget widens what an agent may do: a cloned project's own wrenmem.toml (what a
    pull request can change) is ignored for it, with a warning naming the file."""
    (shop / "wrenmem.toml").write_text("mcp_forget = true\n")

    async def body(session: ClientSession) -> set[str]:
        return {t.name for t in (await session.list_tools()).tools}

    assert "forget_query" not in in_session(shop, body, "--backend", "grep")


def test_a_resource_outside_the_knowledge_files_is_refused(shop: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("not yours")

    async def body(session: ClientSession) -> list[bool]:
        out = []
        for uri in ("wrenmem://knowledge/rules/..%2F..%2F..%2Fsecret.md",
                    "wrenmem://knowledge/sql/total-order-amount-per-country.md",
                    "wrenmem://knowledge/rules/missing.md"):
            try:
                result = await session.read_resource(uri)
                out.append("not yours" in text_of(result) or bool(text_of(result)))
            except Exception:
                out.append(False)
        return out

    assert in_session(shop, body, "--backend", "grep") == [False, False, False]
