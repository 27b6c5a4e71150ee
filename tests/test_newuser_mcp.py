"""MCP resources that cannot be served say why, through the SDK's own client (the SDK
turned the ValueError they raised into a bare 'Error reading resource URI')."""

from __future__ import annotations

import os
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
    # the missing manifest is named, with how to configure one (as get_schema_context says)
    assert "no MDL manifest (target/mdl.json not found)" in manifest, manifest
    assert "point the `manifest` setting at it" in manifest, manifest
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


def test_knowledge_files_that_cannot_be_read_are_not_listed(project: Path) -> None:
    """The resource list named files no read could serve (not UTF-8, a FIFO, a link loop,
    no permission); they are left out, and reading one by its URI still says why."""
    rules = project / "knowledge" / "rules"
    rules.mkdir()
    (rules / "fine.md").write_text("## Fiscal year\nStarts in April.\n", encoding="utf-8")
    (rules / "latin1.md").write_bytes(b"## Caf\xe9\nOpen at nine.\n")
    os.mkfifo(rules / "fifo.md")
    (rules / "loop.md").symlink_to("loop.md")
    bad = ["latin1.md", "fifo.md", "loop.md"]
    if os.geteuid() != 0:  # root reads a file whatever its mode
        (rules / "closed.md").write_text("## Closed\nNo one may read this.\n")
        (rules / "closed.md").chmod(0)
        bad.append("closed.md")

    async def body(session: ClientSession) -> tuple[set[str], dict[str, str]]:
        listed = {str(r.uri) for r in (await session.list_resources()).resources}
        why = {}
        for name in bad:
            try:
                await session.read_resource(f"wrenmem://knowledge/rules/{name}")
                why[name] = "served"
            except Exception as e:  # the client raises the server's error
                why[name] = str(e)
        return listed, why

    listed, why = in_session(project, body, "--backend", "grep")
    knowledge = {uri for uri in listed if uri.startswith("wrenmem://knowledge/")}
    assert knowledge == {"wrenmem://knowledge/rules/fine.md"}, listed
    reasons = {"latin1.md": "not valid UTF-8 (byte 6)",
               "fifo.md": "not a regular file: a named pipe (FIFO)",
               "loop.md": "cannot read: a symbolic link loop",
               "closed.md": "cannot read: Permission denied"}
    for name in bad:
        assert f"knowledge file knowledge/rules/{name}: {reasons[name]}" in why[name], why


def test_describe_schema_without_a_manifest_names_it_and_how_to_configure_one(
        project: Path) -> None:
    write_pair(project, "q.md", "Question", "SELECT 1")

    async def body(session: ClientSession) -> Any:
        return await session.call_tool("describe_schema", {})

    result = in_session(project, body, "--backend", "grep")
    assert result.is_error
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert "target/mdl.json: manifest not found" in text, text
    assert "WRENMEM_MANIFEST" in text and "--manifest PATH" in text, text
