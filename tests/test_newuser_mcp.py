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
