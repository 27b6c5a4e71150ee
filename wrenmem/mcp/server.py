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
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.server.mcpserver.resources import FunctionResource
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError

from wrenmem import __version__
from wrenmem.api import Memory
from wrenmem.errors import WrenmemError
from wrenmem.fs.fsutil import read_text_file
from wrenmem.knowledge.files import load_knowledge, read_knowledge_text
from wrenmem.mcp.tools import (
    DescribeOutput,
    ForgetOutput,
    GlossaryOutput,
    InstructionsOutput,
    ListOutput,
    RecallOutput,
    SchemaContextOutput,
    StoreOutput,
    Tools,
    no_manifest,
)
from wrenmem.watch.freshness import Freshness

log = logging.getLogger(__name__)

INSTRUCTIONS = """\
wrenmem is this project's memory for writing SQL: the schema of the database (a Wren MDL \
manifest), the team's business rules, caveats and glossary, and NL→SQL pairs that answered \
earlier questions, kept as files in git.

For each question you must answer with SQL:
1. get_schema_context(question): the tables, columns and relationships that matter (the \
whole schema when it is small), with the business rules and caveats that bear on the \
question and the glossary's definitions of its terms. Use only names that appear there, and \
follow the rules.
2. recall_queries(question): similar questions answered before, with their SQL. Reuse their \
joins, filters and conventions. A score is the chance the pair answers the question: when \
every pair scores below 0.5, nothing stored answers it (write the SQL from the schema).
3. Write the SQL in the dialect the context names and run it with your database tool.
4. Only after it ran and the user accepts the answer: store_query(question, sql). It checks \
the SQL against the schema (names, and DuckDB binding it over empty tables) and refuses with \
the line, column and a "did you mean" when a name is wrong; fix it and call again. Only \
read-only queries are stored; the pair is marked unreviewed until a person verifies it. \
Storing the same question again updates its pair.

describe_schema gives the whole schema as text; get_instructions every rule (or those for \
a question); lookup_glossary what a term means; list_queries pages through the stored pairs. \
Resources: wrenmem://manifest (the MDL), wrenmem://instructions (every rule) and each \
knowledge file as wrenmem://knowledge/<folder>/<file>.md."""

FORGET_NOTE = " forget_query(path) deletes a wrong pair (a file under the knowledge folder)."
READ_ONLY_NOTE = (" This server is read-only: it cannot store or forget pairs; tell the user "
                  "the question and SQL worth keeping instead.")

WORKFLOW = """\
Answer this question with SQL, using the project's memory (wrenmem):

{question}

1. Call get_schema_context with the question: the tables and columns to use, the business \
rules and caveats that apply, and what the glossary says its terms mean.
2. Call recall_queries with the question: how similar questions were answered before. Reuse \
their joins, filters and conventions.
3. Write one SQL statement in the dialect the context names, using only tables and columns \
from the context and following every rule; run it with your database tool and fix it until \
it runs.
4. {store}"""
STORE_STEP = ("When the user accepts the answer, call store_query with the question and the "
              "SQL, so the next question like it is answered from memory.")
NO_STORE_STEP = ("Show the user the SQL and its result. This server is read-only: it cannot "
                 "store the pair.")


class _Server(MCPServer[Any]):
    """``MCPServer`` whose resource list follows the knowledge files as they are now (a
    file added, renamed or removed while the server runs is listed as it is), whose tool and
    prompt descriptions are their docstrings as one paragraph (no source indentation), and
    whose argument errors are one line naming each argument and what it expects."""

    refresh_resources: Callable[[], None] | None = None
    # Write tools this server does not offer -> why, and how to turn them on: a call to one
    # is answered with that, not "Unknown tool".
    withheld: dict[str, str] = {}

    async def list_resources(self) -> Any:
        if self.refresh_resources is not None:
            self.refresh_resources()
        return await super().list_resources()

    def tool(self, *args: Any, **kwargs: Any) -> Callable[[F], F]:
        return _described(MCPServer.tool, self, args, kwargs)

    def prompt(self, *args: Any, **kwargs: Any) -> Callable[[F], F]:
        return _described(MCPServer.prompt, self, args, kwargs)

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Any = None) -> Any:
        if name in self.withheld and self._tool_manager.get_tool(name) is None:
            raise ToolError(self.withheld[name])
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as e:
            if not isinstance(e.__cause__, ValidationError):
                raise
            tool = self._tool_manager.get_tool(name)
            fields = tool.fn_metadata.arg_model.model_fields if tool else {}
            raise ToolError(argument_errors(name, e.__cause__, fields)) from e.__cause__


F = TypeVar("F", bound=Callable[..., Any])


def _described(decorator: Any, server: _Server, args: Any, kwargs: dict[str, Any]
               ) -> Callable[[F], F]:
    """``decorator`` (the SDK's tool or prompt), the description the function's docstring."""
    def register(fn: F) -> F:
        kwargs.setdefault("description", paragraph(fn.__doc__))
        return decorator(server, *args, **kwargs)(fn)
    return register


def paragraph(doc: str | None) -> str | None:
    """A docstring as one line of text: what an agent reads as the tool's description."""
    return " ".join(doc.split()) if doc else None


def argument_errors(tool: str, error: ValidationError, fields: dict[str, Any]) -> str:
    """pydantic's report on a tool's arguments as one line: ``tool: argument 'k' must be at
    least 1 (got 0); ...``, each argument with what it expects."""
    parts = []
    for item in error.errors():
        name = ".".join(str(x) for x in item["loc"]) or "arguments"
        kind, ctx = item["type"], item.get("ctx") or {}
        if kind == "missing":
            description = getattr(fields.get(name), "description", None)
            parts.append(f"argument '{name}' is missing"
                         + (f" ({description})" if description else ""))
            continue
        parts.append(f"argument '{name}' {_expected(kind, ctx, item['msg'])} "
                     f"(got {_shown(item.get('input'))})")
    return f"{tool}: " + "; ".join(parts)


def _expected(kind: str, ctx: dict[str, Any], message: str) -> str:
    bounds = {"greater_than_equal": ("at least", "ge"), "less_than_equal": ("at most", "le"),
              "greater_than": ("greater than", "gt"), "less_than": ("less than", "lt")}
    if kind in bounds:
        words, key = bounds[kind]
        return f"must be {words} {ctx.get(key)}"
    if kind == "string_too_short":
        least = ctx.get("min_length", 1)
        return "must not be empty" if least == 1 else f"must have at least {least} characters"
    types = {"int": "an integer", "float": "a number", "string": "a string", "list": "a list",
             "bool": "true or false", "dict": "an object"}
    for prefix, expected in types.items():
        if kind.startswith(prefix + "_") or kind == prefix:
            return f"must be {expected}"
    return message[:1].lower() + message[1:]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _instructions(read_only: bool, forget: bool) -> str:
    """The server's instructions; a read-only server's loop ends by showing the SQL."""
    text = INSTRUCTIONS
    if read_only:
        start = text.index("4. Only after")
        end = text.index("\n\n", start)
        text = text[:start] + "4. " + NO_STORE_STEP + text[end:] + READ_ONLY_NOTE
    return text + (FORGET_NOTE if forget else "")


def build_server(memory: Memory, *, freshness: Freshness | None = None,
                 warm: bool = True, read_only: bool = False) -> MCPServer[Any]:
    """The server for ``memory``'s project, its tools, resources and prompt registered.
    ``freshness`` says when a recall must sync first (without it, before every recall).
    ``read_only``: no store_query and no forget_query; forget_query is there only when the
    ``mcp_forget`` setting is on."""
    if freshness is not None:
        memory.keep_warm(freshness)
    tools = Tools(memory)
    forget = memory.settings.mcp_forget and not read_only
    server = _Server(
        name="wrenmem", title="wrenmem: SQL memory", version=__version__,
        instructions=_instructions(read_only, forget), log_level="WARNING")
    server.withheld = _withheld(read_only, forget)

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

    @server.tool(annotations=ToolAnnotations(title="Schema context (Wren's name)",
                                             **_read_only()))
    def get_context(
        question: Annotated[str, Field(min_length=1, description="The question to answer.")],
        limit: Annotated[int, Field(ge=1, le=200,
                                    description="How many schema items when searching.")] = 5,
    ) -> SchemaContextOutput:
        """Wren's name for get_schema_context (same answer; `limit` is its `k`): the schema
        that matters for a question, whole when it is small, else the most relevant items."""
        return _answer(tools.get_schema_context, question, None, limit)

    @server.tool(annotations=ToolAnnotations(title="The whole schema", **_read_only()))
    def describe_schema() -> DescribeOutput:
        """The whole schema as plain text: models, columns (types, keys, descriptions),
        relationships, views and cubes, with the data source and its SQL dialect."""
        return _answer(tools.describe_schema)

    if not read_only:
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
            project (the same question updates its file). The SQL is checked first: it must
            be one read-only query, parse in the manifest's dialect, name only its tables and
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

    @server.tool(annotations=ToolAnnotations(title="List stored pairs (Wren's name)",
                                             **_read_only()))
    def list_stored_queries(
        source: Annotated[str | None, Field(
            description="Only pairs of this source: user, seed, import…")] = None,
        limit: Annotated[int, Field(ge=1, le=10000, description="At most this many.")] = 10000,
    ) -> ListOutput:
        """Wren's name for list_queries: the stored pairs (and the seed pairs), up to
        `limit`, with the total count."""
        return _answer(tools.list_queries, source, None, None, limit, 0)

    if forget:
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

    @server.tool(annotations=ToolAnnotations(title="Business rules and caveats",
                                             **_read_only()))
    def get_instructions(
        question: Annotated[str | None, Field(description=(
            "Only the rules that bear on this question (all of them while they are "
            "short). Leave out for every rule."))] = None,
    ) -> InstructionsOutput:
        """The team's business rules, caveats, metric definitions and instructions
        (knowledge/rules/, caveats/, metrics/, instructions.md), with the glossary terms
        the question uses. Follow them when writing SQL."""
        return _answer(tools.get_instructions, question)

    @server.tool(annotations=ToolAnnotations(title="Look up the glossary", **_read_only()))
    def lookup_glossary(
        term: Annotated[str | None, Field(description=(
            "A term, a synonym or a whole question; leave out for the whole glossary."))
        ] = None,
    ) -> GlossaryOutput:
        """What the team's words mean: each glossary term with its synonyms, the tables and
        columns it refers to, and its definition."""
        return _answer(tools.lookup_glossary, term)

    _register_resources(server, memory)

    @server.prompt(name="answer_with_sql", title="Answer a question with SQL")
    def answer_with_sql(
        question: Annotated[str, Field(description="The question to answer.")],
    ) -> str:
        """The loop for a question: schema context and rules, similar pairs, write and run
        the SQL, then store the pair the user accepted."""
        return WORKFLOW.format(question=question,
                               store=NO_STORE_STEP if read_only else STORE_STEP)

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


def _register_resources(server: _Server, memory: Memory) -> None:
    """The manifest, every rule as one text, and each knowledge file that can be read, as
    resources; the files are read when a client reads them, so an edit shows without a
    restart."""
    settings = memory.settings

    @server.resource("wrenmem://manifest", name="manifest", title="The Wren MDL manifest",
                     mime_type="application/json")
    def manifest() -> str:
        """The project's MDL manifest (models, columns, relationships, views, cubes)."""
        if not settings.manifest_path.exists() and not settings.manifest_path.is_symlink():
            raise ResourceError(no_manifest(memory))  # and how to configure one
        try:
            return read_text_file(settings.manifest_path, MAX_MANIFEST_BYTES)
        except WrenmemError as e:  # the SDK passes a ResourceError's message to the client
            raise ResourceError(str(e)) from e

    @server.resource("wrenmem://instructions", name="instructions",
                     title="Business rules, caveats and metrics", mime_type="text/markdown")
    def instructions() -> str:
        """Every business rule, caveat, metric and instruction of the project, as Markdown."""
        return memory.rules().render().strip() + "\n"

    def reader(rel: str) -> Callable[[], str]:
        def read() -> str:
            try:
                return read_knowledge_text(settings, rel)
            except FileNotFoundError as e:
                raise ResourceNotFoundError(f"{rel} is not a knowledge file of this project "
                                            "(rules, glossary, caveats, metrics)") from e
            except (OSError, UnicodeDecodeError, WrenmemError) as e:
                raise ResourceError(f"knowledge file {rel}: {e}") from e
        return read

    def refresh() -> None:
        # only the files that can be read: one that cannot (not UTF-8, a FIFO, a link loop,
        # no permission) is left out of the list, and reading it by its URI says why
        current = {_uri(settings, f.path): f.path for f in load_knowledge(settings).files}
        registered = server._resource_manager._resources  # the SDK has no remove
        for uri in [u for u in registered if u.endswith(".md") and u not in current]:
            registered.pop(uri, None)
        for uri, rel in current.items():
            if uri not in registered:
                server.add_resource(FunctionResource.from_function(
                    reader(rel), uri=uri, name=rel, title=rel, mime_type="text/markdown",
                    description=f"The knowledge file {rel} as it is now."))

    @server.resource(KNOWLEDGE_URI + "{folder}/{name}", name="knowledge-file",
                     mime_type="text/markdown")
    def knowledge_file(folder: str, name: str) -> str:
        """A knowledge file: knowledge/<folder>/<name> (rules, glossary, caveats, metrics)."""
        return reader(f"{settings.knowledge_root.strip('/')}/{folder}/{name}")()

    server.refresh_resources = refresh
    refresh()


KNOWLEDGE_URI = "wrenmem://knowledge/"
MAX_MANIFEST_BYTES = 200_000_000


def _uri(settings: Any, rel: str) -> str:
    """``knowledge/rules/x.md`` -> ``wrenmem://knowledge/rules/x.md`` (its path inside the
    knowledge folder); ``instructions.md`` -> ``wrenmem://instructions.md``."""
    root = settings.knowledge_root.strip("/") + "/"
    return KNOWLEDGE_URI + rel[len(root):] if rel.startswith(root) else "wrenmem://" + rel


def _withheld(read_only: bool, forget: bool) -> dict[str, str]:
    """The write tools a server started this way does not offer, each with why and how to
    offer it (only the person starting the server can)."""
    out: dict[str, str] = {}
    if read_only:
        out["store_query"] = ("store_query is not available: this server is read-only (it "
                              "was started with `wrenmem mcp --read-only`); to let agents "
                              "store pairs, start it without --read-only")
    if not forget:
        how = ("start it without --read-only and with --forget (or WRENMEM_MCP_FORGET=1)"
               if read_only else "start it with --forget (or WRENMEM_MCP_FORGET=1)")
        what = "this server is read-only" if read_only else "forgetting is off by default"
        out["forget_query"] = (f"forget_query is not available: {what}; to let agents "
                               f"delete pairs, {how}")
    return out


def _read_only() -> dict[str, Any]:
    return {"read_only_hint": True, "destructive_hint": False, "idempotent_hint": True,
            "open_world_hint": False}


def _warm(tools: Tools) -> None:
    """Load the recall backend (and its model) before the first question needs it."""
    try:
        tools.recall_queries("warm up", 1)
    except Exception as e:  # a broken setting shows again, with its reason, on a real call
        log.debug("warm-up recall failed: %s", e)


def serve(memory: Memory, *, http: tuple[str, int] | None = None,
          read_only: bool = False, token: bool = True, allow_hosts: tuple[str, ...] = (),
          announce: Callable[[str], None] | None = None) -> None:
    """Serve on stdio, or on streamable HTTP at ``http`` (host, port; port 0 picks a free
    one); returns when the client disconnects or the process is interrupted. ``read_only``:
    no tool writes. Over HTTP every request needs the bearer token unless ``token`` is off
    (refused on an address other machines reach), and a Host of the bound address, this
    machine or ``allow_hosts``; ``announce`` gets the lines to show (where it listens)."""
    freshness = Freshness(memory.settings)
    try:
        server = build_server(memory, freshness=freshness, read_only=read_only)
        if http is None:
            server.run()
        else:
            _serve_http(server, http, token, allow_hosts, announce or log.warning)
    finally:
        freshness.close()


def _serve_http(server: MCPServer[Any], address: tuple[str, int], token_on: bool,
                allow_hosts: tuple[str, ...], announce: Callable[[str], None]) -> None:
    import os

    import anyio
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    from wrenmem.mcp import http

    host, port = address
    token, generated = http.resolve_token(os.environ, token_on)
    warning = http.check_bind(host, token)
    sock = http.bind(host, port)
    port = sock.getsockname()[1]
    access = http.Access(token, http.allowed_hosts(host, port, allow_hosts))
    try:
        app = server.streamable_http_app(
            streamable_http_path=http.PATH, host=host,
            transport_security=TransportSecuritySettings(
                enable_dns_rebinding_protection=True, allowed_hosts=sorted(access.hosts),
                allowed_origins=sorted(access.origins)))
        if warning:
            announce(f"wrenmem mcp: {warning}")
        if token is None:
            announce("wrenmem mcp: no token (--no-token): any process on this machine can "
                     "call the tools")
        elif generated:
            announce(f"wrenmem mcp: token: {token}")
        else:
            announce(f"wrenmem mcp: token from {http.TOKEN_ENV}")
        how = "" if token is None else " (send Authorization: Bearer <token>)"
        announce(f"wrenmem mcp: listening on {http.url(host, port)}{how}")
        config = uvicorn.Config(http.Guard(app, access), log_level="warning")
        anyio.run(uvicorn.Server(config).serve, [sock])
    finally:
        sock.close()
