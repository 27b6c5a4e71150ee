"""mcp: serve the project's memory to agents over the Model Context Protocol."""

from __future__ import annotations

import click

from wrenmem.api import Memory
from wrenmem.cli.common import get_settings, warn
from wrenmem.errors import ExtraMissingError
from wrenmem.settings import BACKENDS


def parse_http(value: str) -> tuple[str, int]:
    """``PORT``, ``:PORT`` or ``HOST:PORT`` (``[v6]:PORT``); the host defaults to 127.0.0.1,
    port 0 picks a free port."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "", value
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise click.BadParameter(f"expected HOST:PORT or PORT, got {value!r}",
                                 param_hint="--http") from None
    if not 0 <= number < 65536:
        raise click.BadParameter(f"port {number} is out of range", param_hint="--http")
    return host, number


@click.command()
@click.option("--http", "http", metavar="[HOST:]PORT",
              help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (host "
                   "default 127.0.0.1: only this machine; port 0: any free port). Each "
                   "request needs the bearer token: WRENMEM_MCP_TOKEN, or one generated and "
                   "printed at start.")
@click.option("--no-token", is_flag=True,
              help="With --http on a loopback address only: accept requests without a token.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME[:PORT]",
              help="With --http: also accept this Host header (a proxy's or DNS name); "
                   "repeatable.")
@click.option("--backend", "-b", type=click.Choice(BACKENDS),
              help="Recall backend (default: setting `backend`).")
@click.option("--read-only", is_flag=True,
              help="Serve no tool that writes: no store_query, no forget_query.")
@click.option("--forget", is_flag=True,
              help="Offer forget_query (agents may delete pair files): the mcp_forget "
                   "setting, which only this flag or WRENMEM_MCP_FORGET turns on.")
@click.pass_context
def mcp(ctx: click.Context, http: str | None, no_token: bool, allow_hosts: tuple[str, ...],
        backend: str | None, read_only: bool, forget: bool) -> None:
    """Serve the memory to agents over MCP (stdio, or HTTP with --http): tools
    recall_queries, get_schema_context, describe_schema, get_instructions, lookup_glossary,
    list_queries and store_query (not with --read-only), forget_query (only with --forget
    or WRENMEM_MCP_FORGET=1); resources for the manifest and every knowledge file; the prompt
    answer_with_sql. Over HTTP every request needs the bearer token and a Host naming this
    server (see docs/mcp.md). Needs the `mcp` extra."""

    address = parse_http(http) if http else None
    if address is None and (no_token or allow_hosts):
        raise click.UsageError("--no-token and --allow-host apply to --http only")
    settings = get_settings(ctx, backend=backend, mcp_forget=True if forget else None)
    try:  # the SDK takes a second to import: only when serving
        from wrenmem.mcp.server import serve
    except ImportError as e:
        raise ExtraMissingError(
            f"the MCP server needs the mcp extra: pip install 'wrenmem[mcp]' ({e})") from e
    serve(Memory.from_settings(settings), http=address, read_only=read_only,
          token=not no_token, allow_hosts=allow_hosts, announce=warn)


COMMANDS = [mcp]
