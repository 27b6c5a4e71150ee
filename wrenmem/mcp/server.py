"""``wrenmem mcp``: the tools of :mod:`wrenmem.mcp.tools` served with the official MCP SDK.

Built on ``MCPServer`` from the ``mcp`` package (the SDK's high-level server, FastMCP's
successor in 2.x): one dependency maintained with the protocol, typed tool signatures that
become JSON schemas, and ``TypedDict`` returns that become structured output. The process is
long-lived, so the embedding model, the parsed manifest and the parse cache stay warm
between calls; recall's catch-up sync (or grep's stat cache) sees files edited by hand.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from wrenmem import __version__
from wrenmem.api import Memory
from wrenmem.errors import WrenmemError
from wrenmem.mcp.tools import (
    DescribeOutput,
    ForgetOutput,
    ListOutput,
    RecallOutput,
    SchemaContextOutput,
    StoreOutput,
    Tools,
)
from wrenmem.watch.freshness import Freshness

log = logging.getLogger(__name__)

INSTRUCTIONS = """\
wrenmem is this project's memory for writing SQL: the schema of the database (a Wren MDL \
manifest) and NL→SQL pairs that answered earlier questions, kept as files in git.

For each question you must answer with SQL:
1. get_schema_context(question): the tables, columns and relationships that matter (the \
whole schema when it is small). Use only names that appear there.
2. recall_queries(question): similar questions answered before, with their SQL. Reuse their \
joins, filters and conventions; a high score means a very similar question.
3. Write the SQL in the dialect the context names and run it with your database tool.
4. Only after it ran and the user accepts the answer: store_query(question, sql). It checks \
the SQL against the schema (names, and DuckDB binding it over empty tables) and refuses with \
the line, column and a "did you mean" when a name is wrong; fix it and call again. Only \
read-only queries are stored; the pair is marked unreviewed until a person verifies it. \
Storing the same question again updates its pair.

describe_schema gives the whole schema as text; list_queries pages through the stored \
pairs; forget_query(path) deletes a wrong pair (a file under the knowledge folder)."""

def build_server(memory: Memory, *, freshness: Freshness | None = None,
                 warm: bool = True) -> MCPServer[Any]:
    """The server for ``memory``'s project, its six tools registered. ``freshness`` says
    when a recall must sync first (without it, before every recall)."""
    tools = Tools(memory, freshness)
    server: MCPServer[Any] = MCPServer(
        name="wrenmem", title="wrenmem: SQL memory", version=__version__,
        instructions=INSTRUCTIONS, log_level="WARNING")

    @server.tool(annotations=ToolAnnotations(title="Recall similar NL→SQL pairs",
                                             **_read_only()))
    def recall_queries(
        question: Annotated[str, Field(min_length=1,
                                       description="The question to answer, in any language.")],
        k: Annotated[int, Field(ge=1, le=50, description="How many pairs.")] = 3,
        datasource: Annotated[str | None, Field(
            description="Only pairs of this datasource.")] = None,
        tags: Annotated[list[str] | None, Field(
            description="Only pairs that have all these tags.")] = None,
        min_score: Annotated[float | None, Field(
            ge=0, description="Leave out pairs scoring below this.")] = None,
        sql: Annotated[str | None, Field(
            description="Your draft SQL for the question, if you have one: pairs whose "
                        "SQL is shaped like it can rank higher.")] = None,
    ) -> RecallOutput:
        """The stored NL→SQL pairs most similar to a question, best first: question, SQL,
        file path, score, and other phrasings of the same answer ("also"). Call before
        writing SQL, to follow how similar questions were answered."""
        return _answer(tools.recall_queries, question, k, datasource, tags or (), min_score,
                       sql)

    @server.tool(annotations=ToolAnnotations(title="Schema context for a question",
                                             **_read_only()))
    def get_schema_context(
        question: Annotated[str, Field(min_length=1, description="The question to answer.")],
        threshold: Annotated[int | None, Field(
            ge=0, description="Largest schema (characters) returned whole; 0 always "
                              "searches. Default: the project's setting (30,000).")] = None,
        k: Annotated[int, Field(ge=1, le=200,
                                description="How many schema items when searching.")] = 10,
    ) -> SchemaContextOutput:
        """The part of the database schema that matters for a question: the whole schema
        as text when it is small (strategy "full"), else the most relevant models, columns
        and relationships (strategy "search"). Call first, before writing SQL."""
        return _answer(tools.get_schema_context, question, threshold, k)

    @server.tool(annotations=ToolAnnotations(title="The whole schema", **_read_only()))
    def describe_schema() -> DescribeOutput:
        """The whole schema as plain text: models, columns (types, keys, descriptions),
        relationships, views and cubes, with the data source and its SQL dialect."""
        return _answer(tools.describe_schema)

    @server.tool(annotations=ToolAnnotations(
        title="Store a verified NL→SQL pair", read_only_hint=False, destructive_hint=False,
        idempotent_hint=True, open_world_hint=False))
    def store_query(
        question: Annotated[str, Field(min_length=1,
                                       description="The question, as the user asked it.")],
        sql: Annotated[str, Field(min_length=1,
                                  description="SQL that ran and answered it correctly.")],
        datasource: Annotated[str | None, Field(
            description="Datasource name (default: the project's setting).")] = None,
        tags: Annotated[list[str] | None, Field(description="Tags for the pair.")] = None,
        note: Annotated[str, Field(description="A note for reviewers.")] = "",
    ) -> StoreOutput:
        """Remember a question and the SQL that answered it, as a Markdown file in the
        project (the same question updates its file). The SQL is checked first: it must be
        one read-only query, parse in the manifest's dialect, name only its tables and
        columns and bind in DuckDB over empty tables of the schema; otherwise nothing is
        stored and the error gives each problem's line, column and a likely fix. The pair
        is marked unreviewed (source agent) until a person verifies it. Returns the path."""
        return _answer(tools.store_query, question, sql, datasource, tags or (), note)

    @server.tool(annotations=ToolAnnotations(title="List stored pairs", **_read_only()))
    def list_queries(
        source: Annotated[str | None, Field(
            description="Only pairs of this source: user, seed, import…")] = None,
        tag: Annotated[str | None, Field(description="Only pairs with this tag.")] = None,
        datasource: Annotated[str | None, Field(
            description="Only pairs of this datasource.")] = None,
        limit: Annotated[int, Field(ge=1, le=1000, description="Page size.")] = 50,
        offset: Annotated[int, Field(ge=0, description="Pairs to skip.")] = 0,
    ) -> ListOutput:
        """The stored pairs (and the seed pairs derived from the schema), a page at a time,
        with the total count."""
        return _answer(tools.list_queries, source, tag, datasource, limit, offset)

    @server.tool(annotations=ToolAnnotations(
        title="Forget a stored pair", read_only_hint=False, destructive_hint=True,
        idempotent_hint=False, open_world_hint=False))
    def forget_query(
        path: Annotated[str, Field(min_length=1, description=(
            "The pair file's path as recall_queries or list_queries give it, e.g. "
            "knowledge/sql/total-revenue.md"))],
    ) -> ForgetOutput:
        """Delete a wrong or outdated pair: its file under the knowledge folder (the change
        shows in git). Anything outside that folder is refused."""
        return _answer(tools.forget_query, path)

    if warm:
        threading.Thread(target=_warm, args=(tools,), name="wrenmem-warm", daemon=True).start()
    return server


T = TypeVar("T")


def _answer(tool: Callable[..., T], *args: Any) -> T:
    """Run a tool; a WrenmemError goes back to the agent as a tool error with its message
    (the SDK would hide any other exception's text behind "Error executing tool")."""
    try:
        return tool(*args)
    except WrenmemError as e:
        raise ToolError(str(e)) from e


def _read_only() -> dict[str, Any]:
    return {"read_only_hint": True, "destructive_hint": False, "idempotent_hint": True,
            "open_world_hint": False}


def _warm(tools: Tools) -> None:
    """Load the recall backend (and its model) before the first question needs it."""
    try:
        tools.recall_queries("warm up", 1)
    except Exception as e:  # a broken setting shows again, with its reason, on a real call
        log.debug("warm-up recall failed: %s", e)


def serve(memory: Memory, *, http: tuple[str, int] | None = None) -> None:
    """Serve on stdio, or on streamable HTTP at ``http`` (host, port); returns when the
    client disconnects or the process is interrupted."""
    freshness = Freshness(memory.settings)
    server = build_server(memory, freshness=freshness)
    try:
        if http is None:
            server.run()
        else:
            host, port = http
            server.run("streamable-http", host=host, port=port)
    finally:
        freshness.close()
