"""MCP resources that cannot be served say why, through the SDK's own client (the SDK
turned the ValueError they raised into a bare 'Error reading resource URI')."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write_pair
from tests.test_mcp import in_session

pytest.importorskip("mcp")

from mcp import ClientSession  # noqa: E402


def test_a_missing_manifest_and_knowledge_file_are_named(project: Path) -> None:
    write_pair(project, "q.md", "Question", "SELECT 1")

    async def body(session: ClientSession) -> list[str]:
        out = []
        for uri in ("wrenmem://manifest", "wrenmem://knowledge/rules/missing.md"):
            try:
                result: Any = await session.read_resource(uri)
                out.append("served: " + str(result))
            except Exception as e:  # the client raises the server's error
                out.append(str(e))
        return out

    manifest, missing = in_session(project, body, "--backend", "grep")
    assert "target/mdl.json: cannot read: No such file or directory" in manifest, manifest
    assert "knowledge/rules/missing.md is not a knowledge file of this project" in missing, \
        missing


def test_schema_context_without_a_manifest_says_how_to_configure_one(project: Path) -> None:
    """get_schema_context was a tool error when there was no manifest; it answers that there
    is none and how to configure one, with the rules it still has."""
    write_pair(project, "q.md", "Question", "SELECT 1")
    (project / "knowledge" / "rules").mkdir()
    (project / "knowledge" / "rules" / "fiscal.md").write_text(
        "## Fiscal year\nThe fiscal year starts in April.\n", encoding="utf-8")

    async def body(session: ClientSession) -> Any:
        return await session.call_tool("get_schema_context", {"question": "revenue per year"})

    result = in_session(project, body, "--backend", "grep")
    assert not result.is_error, result.content
    out = result.structured_content
    assert out["strategy"] == "none" and out["items"] == []
    said = ("No schema: this project has no MDL manifest (target/mdl.json not found)")
    assert out["text"].startswith(said) and out["notes"][0].startswith(said), out
    assert "point the `manifest` setting at it" in out["text"]
    assert "WRENMEM_MANIFEST" in out["text"]
    assert [r["title"] for r in out["rules"]] == ["Fiscal year"]
    assert "The fiscal year starts in April." in out["text"]
