"""What an agent reads from the MCP server: tool descriptions without docstring indentation,
and one-line argument errors that name the argument and what it expects (issue 22)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp.server.mcpserver.exceptions import ToolError  # noqa: E402

from wrenmem.api import Memory  # noqa: E402
from wrenmem.mcp.server import build_server  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "mysql-shop"


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    root = tmp_path / "shop"
    shutil.copytree(FIXTURE, root)
    monkeypatch.setenv("WRENMEM_MCP_FORGET", "true")
    return build_server(Memory(root, backend="grep"), warm=False)


def refusal(server: Any, tool: str, **args: Any) -> str:
    with pytest.raises(ToolError) as refused:
        asyncio.run(server.call_tool(tool, args))
    return str(refused.value)


def test_tool_descriptions_are_clean_paragraphs(server: Any) -> None:
    tools = asyncio.run(server.list_tools())
    assert len(tools) == 10  # 8, and get_context, list_stored_queries (Wren's names)
    for tool in tools:
        text = tool.description or ""
        assert text and text == text.strip(), tool.name
        assert "  " not in text and "\n" not in text, (tool.name, text)
    store = next(t for t in tools if t.name == "store_query")
    assert "as a Markdown file in the project (the same question updates its file)" in (
        store.description or "")


@pytest.mark.parametrize("tool,args,expected", [
    ("recall_queries", {"question": "orders", "k": 0},
     "recall_queries: argument 'k' must be at least 1 (got 0)"),
    ("recall_queries", {"question": ""},
     "recall_queries: argument 'question' must not be empty (got '')"),
    ("store_query", {"question": "only a question"},
     "store_query: argument 'sql' is missing (SQL that ran and answered it correctly.)"),
    ("list_queries", {"limit": "many"},
     "list_queries: argument 'limit' must be an integer (got 'many')"),
    ("list_queries", {"limit": 5000, "offset": -1},
     "list_queries: argument 'limit' must be at most 1000 (got 5000); argument 'offset' "
     "must be at least 0 (got -1)"),
    ("recall_queries", {"question": "x", "tags": "a"},
     "recall_queries: argument 'tags' must be a list (got 'a')"),
])
def test_argument_errors_are_one_line(server: Any, tool: str, args: dict[str, Any],
                                      expected: str) -> None:
    message = refusal(server, tool, **args)
    assert message == expected


def test_other_tool_errors_are_untouched(server: Any) -> None:
    message = refusal(server, "store_query", question="Broken", sql="SELEC * FROM")
    assert "not stored (mysql SQL)" in message and "line 1, column" in message
