"""``wrenmem mcp`` driven by the MCP SDK's own client, over stdio, as an agent would."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, write_pair

pytest.importorskip("mcp")

from conftest import PROCESS_TIMEOUT
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "mysql-shop"
TOOLS = {"recall_queries", "get_schema_context", "describe_schema", "store_query",
         "list_queries", "forget_query", "get_instructions", "lookup_glossary",
         "get_context", "list_stored_queries"}  # the last two: Wren's names
READ_ONLY = {"recall_queries", "get_schema_context", "describe_schema", "list_queries",
             "get_instructions", "lookup_glossary", "get_context", "list_stored_queries"}


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    """A copy of the MySQL fixture project: a manifest with dataSource mysql, three pairs."""
    root = tmp_path / "shop"
    shutil.copytree(FIXTURE, root)
    return root


def in_session(root: Path, body: Callable[[ClientSession], Awaitable[Any]],
               *extra: str) -> Any:
    """Start ``python -m wrenmem --project ROOT mcp`` and run ``body`` in one session."""

    async def main() -> Any:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "wrenmem", "--project", str(root), "mcp", *extra],
            env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=str(root))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)

    return asyncio.run(asyncio.wait_for(main(), timeout=300))


async def call(session: ClientSession, tool: str, **args: Any) -> dict[str, Any]:
    """A tool's structured result; fails the test on a tool error."""
    result = await session.call_tool(tool, args)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def recall_until(session: ClientSession, question: str, path: str) -> dict[str, Any]:
    """Recall until ``path`` is the best hit. The server renews what it keeps warm when the
    file-system event of a change has arrived (milliseconds; more on a loaded machine), so a
    change is asked for again for up to 10 s; the answer says how many calls it took."""
    for attempt in range(1, 101):
        out = await call(session, "recall_queries", question=question, k=1)
        if out["pairs"] and out["pairs"][0]["path"] == path:
            return {**out, "attempts": attempt}
        await asyncio.sleep(0.1)
    return {**out, "attempts": attempt}


async def error_text(session: ClientSession, tool: str, **args: Any) -> str:
    result = await session.call_tool(tool, args)
    assert result.is_error, result.structured_content
    return " ".join(getattr(c, "text", "") for c in result.content)


def test_handshake_lists_typed_tools_with_hints(shop: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WRENMEM_MCP_FORGET", "true")  # forget_query is off by default

    async def body(session: ClientSession) -> Any:
        init = session.initialize_result
        listed = await session.list_tools()
        return init, {t.name: t for t in listed.tools}

    init, tools = in_session(shop, body, "--backend", "grep")
    assert init is not None and init.server_info.name == "wrenmem"
    steps = init.instructions or ""
    # The instructions give the loop in order: context, recall, write SQL, store.
    assert (steps.index("get_schema_context") < steps.index("recall_queries")
            < steps.index("store_query"))
    assert set(tools) == TOOLS
    for name, tool in tools.items():
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is (name in READ_ONLY), name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", name
        assert tool.description
    assert tools["forget_query"].annotations.destructive_hint is True
    recall = tools["recall_queries"].input_schema
    assert recall["required"] == ["question"]
    assert set(recall["properties"]) == {"question", "k", "datasource", "tags", "min_score",
                                         "sql"}
    assert recall["properties"]["k"]["minimum"] == 1
    assert tools["store_query"].input_schema["required"] == ["question", "sql"]
    assert set(tools["list_queries"].input_schema["properties"]) == {
        "source", "tag", "datasource", "limit", "offset"}
    assert tools["forget_query"].input_schema["required"] == ["path"]
    assert "pairs" in tools["recall_queries"].output_schema["properties"]


def test_mysql_project_agent_loop_in_one_session(shop: Path) -> None:
    """The acceptance test: context → recall → store validated MySQL → recalled; a hand
    edit is seen by the same server without a restart."""
    question = "What is the average order amount per customer name?"
    sql = ("SELECT c.`full name`, AVG(o.`amount`) AS avg_amount\n"
           "FROM `orders` AS o\nJOIN `customers` AS c ON o.`customer_id` = c.`id`\n"
           "GROUP BY c.`full name`")

    async def body(session: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["context"] = await call(session, "get_schema_context", question=question)
        out["before"] = await call(session, "recall_queries", question=question, k=3)
        out["typo"] = await error_text(session, "store_query", question=question,
                                       sql=sql.replace("o.`amount`", "o.`amout`"))
        out["typo_files"] = sorted(p.name for p in (shop / "knowledge/sql").iterdir())
        out["stored"] = await call(session, "store_query", question=question, sql=sql,
                                   tags=["revenue", "customers"])
        out["after"] = await call(session, "recall_queries",
                                  question="average amount of orders by customer name", k=3)
        # A hand edit while the server runs: a colleague rewrites a pair's question.
        write_pair(shop, "how-many-orders-were-shipped.md", "How many parcels went out?",
                   "SELECT COUNT(*) FROM `orders` WHERE `status` = 'shipped'",
                   dialect="mysql")
        out["edited"] = await recall_until(session, "parcels went out",
                                           "knowledge/sql/how-many-orders-were-shipped.md")
        return out

    out = in_session(shop, body, "--backend", "grep")
    context = out["context"]
    assert context["strategy"] == "full"
    assert "orders" in context["text"] and "full name" in context["text"]
    assert out["before"]["pairs"][0]["path"] == (
        "knowledge/sql/total-order-amount-per-country.md")
    assert all({"question", "sql", "path", "score"} <= set(p) for p in out["before"]["pairs"])
    # Refused with line, column and a suggestion; nothing written.
    assert "line 1, column 29" in out["typo"] and "did you mean 'amount'" in out["typo"]
    assert "mysql" in out["typo"]
    assert len(out["typo_files"]) == 3
    stored = out["stored"]
    assert stored["created"] is True and stored["dialect"] == "mysql"
    text = (shop / stored["path"]).read_text(encoding="utf-8")
    assert "dialect: mysql" in text and "c.`full name`" in text
    assert out["after"]["pairs"][0]["path"] == stored["path"]
    assert out["after"]["pairs"][0]["sql"] == sql
    assert out["edited"]["pairs"][0]["question"] == "How many parcels went out?"


def test_backticks_are_refused_in_a_postgres_project(shop: Path) -> None:
    """The dialect really comes from the manifest: the same SQL fails as PostgreSQL."""
    manifest = shop / "target" / "mdl.json"
    manifest.write_text(manifest.read_text().replace('"mysql"', '"postgres"'))

    async def body(session: ClientSession) -> str:
        return await error_text(session, "store_query", question="Names",
                                sql="SELECT `full name` FROM `customers`")

    message = in_session(shop, body, "--backend", "grep")
    assert "postgres" in message and "line 1, column" in message


def test_bad_arguments_are_tool_errors_and_the_server_keeps_going(shop: Path) -> None:
    async def body(session: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["k0"] = await error_text(session, "recall_queries", question="orders", k=0)
        out["empty"] = await error_text(session, "recall_queries", question="")
        out["missing"] = await error_text(session, "store_query", question="only a question")
        out["type"] = await error_text(session, "list_queries", limit="many")
        out["broken_sql"] = await error_text(session, "store_query", question="Broken",
                                             sql="SELEC * FROM")
        out["two"] = await error_text(session, "store_query", question="Two",
                                      sql="SELECT 1; SELECT 2")
        out["still_alive"] = await call(session, "list_queries", limit=2, offset=1)
        return out

    out = in_session(shop, body, "--backend", "grep")
    assert "argument 'k' must be at least 1 (got 0)" in out["k0"]
    assert "question" in out["empty"]
    assert "sql" in out["missing"]
    assert "limit" in out["type"]
    assert "line 1, column 9" in out["broken_sql"]  # at FROM
    assert "one SQL statement" in out["two"]
    page = out["still_alive"]
    # 3 pair files + the seeds derived from the manifest, paged.
    assert page["total"] > 3 and page["offset"] == 1 and len(page["pairs"]) == 2
    assert not any((shop / "knowledge/sql").glob("broken*"))


def test_list_filters_and_describe(shop: Path) -> None:
    async def body(session: ClientSession) -> dict[str, Any]:
        return {
            "user": await call(session, "list_queries", source="user"),
            "tag": await call(session, "list_queries", tag="revenue"),
            "seeds": await call(session, "list_queries", source="seed", limit=1000),
            "describe": await call(session, "describe_schema"),
        }

    out = in_session(shop, body, "--backend", "grep")
    assert out["user"]["total"] == 3
    assert {p["path"] for p in out["user"]["pairs"]} == {
        "knowledge/sql/how-many-orders-were-shipped.md",
        "knowledge/sql/total-order-amount-per-country.md",
        "knowledge/sql/customers-who-signed-up-in-2025.md"}
    assert [p["question"] for p in out["tag"]["pairs"]] == [
        "Total order amount per customer country"]
    assert out["seeds"]["total"] >= 4
    assert all(p["path"].startswith("seed:") for p in out["seeds"]["pairs"])
    describe = out["describe"]
    assert describe["data_source"] == "mysql" and describe["dialect"] == "mysql"
    assert describe["models"] == ["customers", "orders"]
    assert "orders_customer" in describe["text"]


def test_forget_only_inside_the_knowledge_folder(shop: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WRENMEM_MCP_FORGET", "true")
    outside = tmp_path / "precious.md"
    outside.write_text("---\nnl: not yours\n---\n\n```sql\nSELECT 1\n```\n")
    (shop / "knowledge/sql/link.md").symlink_to(outside)
    (shop / "knowledge/sql/notes.txt").write_text("not a pair")
    refused = ["../../precious.md", str(outside), "target/mdl.json", "knowledge/sql",
               "knowledge/sql/../../target/mdl.json", "knowledge/sql/link.md",
               "knowledge/sql/notes.txt", "knowledge/sql/nope.md"]

    async def body(session: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {"refused": [await error_text(session, "forget_query", path=p)
                                           for p in refused]}
        out["forgot"] = await call(session, "forget_query",
                                   path="knowledge/sql/how-many-orders-were-shipped.md")
        out["recall"] = await call(session, "recall_queries", question="orders shipped",
                                   k=5)
        return out

    out = in_session(shop, body, "--backend", "grep")
    for path, message in zip(refused, out["refused"], strict=True):
        assert ("refused" in message or "no pair file" in message), (path, message)
    assert outside.exists() and (shop / "target/mdl.json").exists()
    assert (shop / "knowledge/sql/link.md").is_symlink()
    assert out["forgot"]["deleted"] == ["knowledge/sql/how-many-orders-were-shipped.md"]
    assert not (shop / "knowledge/sql/how-many-orders-were-shipped.md").exists()
    assert "knowledge/sql/how-many-orders-were-shipped.md" not in {
        p["path"] for p in out["recall"]["pairs"]}


def test_min_score_and_filters(shop: Path) -> None:
    async def body(session: ClientSession) -> dict[str, Any]:
        return {
            "all": await call(session, "recall_queries", question="orders", k=10),
            "high": await call(session, "recall_queries", question="orders", k=10,
                               min_score=1e9),
            "tagged": await call(session, "recall_queries", question="orders", k=10,
                                 tags=["orders"]),
            "ds": await call(session, "recall_queries", question="orders", k=10,
                             datasource="shop"),
        }

    out = in_session(shop, body, "--backend", "grep")
    assert len(out["all"]["pairs"]) > 1
    assert out["high"]["pairs"] == []
    assert [p["path"] for p in out["tagged"]["pairs"]] == [
        "knowledge/sql/how-many-orders-were-shipped.md"]
    assert {p["datasource"] for p in out["ds"]["pairs"]} == {"shop"}


@pytest.mark.slow
def test_default_backend_with_the_real_model(shop: Path) -> None:
    """Hybrid recall (LanceDB + the default embedder) through MCP: store, recall, hand edit."""
    pytest.importorskip("lancedb")
    question = "Which customers ordered more than 1000 dollars in total?"
    sql = ("SELECT c.`full name`, SUM(o.`amount`) AS total\nFROM `customers` AS c\n"
           "JOIN `orders` AS o ON o.`customer_id` = c.`id`\nGROUP BY c.`full name`\n"
           "HAVING SUM(o.`amount`) > 1000")

    async def body(session: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {}
        out["stored"] = await call(session, "store_query", question=question, sql=sql)
        out["recall"] = await call(session, "recall_queries",
                                   question="big spenders: customers above $1000", k=3)
        write_pair(shop, "refunds.md", "How many orders were returned?",
                   "SELECT COUNT(*) FROM `orders` WHERE `status` = 'returned'",
                   dialect="mysql")
        out["edited"] = await recall_until(session, "number of returned orders",
                                           "knowledge/sql/refunds.md")
        return out

    out = in_session(shop, body)
    assert out["recall"]["backend"] == "hybrid"
    assert out["recall"]["pairs"][0]["path"] == out["stored"]["path"]
    assert out["edited"]["pairs"][0]["path"] == "knowledge/sql/refunds.md"


def test_http_transport_on_localhost(shop: Path) -> None:
    """``--http PORT`` serves streamable HTTP on 127.0.0.1 only."""
    import socket
    import subprocess
    import time

    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    token = "a-token-long-enough-for-the-server"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "wrenmem", "--project", str(shop), "mcp", "--http", str(port),
         "--backend", "grep"],
        env={**os.environ, "PYTHONPATH": str(REPO), "WRENMEM_MCP_TOKEN": token},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the HTTP server did not start"
            time.sleep(0.1)
        listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True,
                                   text=True, timeout=PROCESS_TIMEOUT).stdout if shutil.which("ss") else ""

        async def main() -> dict[str, Any]:
            headers = {"Authorization": f"Bearer {token}"}  # tests/test_mcp_http.py: without
            async with create_mcp_http_client(headers=headers) as client, \
                    streamable_http_client(f"http://127.0.0.1:{port}/mcp",
                                           http_client=client) as streams:
                read, write = streams[0], streams[1]
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    return await call(session, "recall_queries", question="shipped orders")

        out = asyncio.run(asyncio.wait_for(main(), timeout=120))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert out["pairs"][0]["path"] == "knowledge/sql/how-many-orders-were-shipped.md"
    if listening:
        local = {line.split()[3] for line in listening.splitlines()}  # Local Address:Port
        assert local == {f"127.0.0.1:{port}"}


def test_http_address_defaults_to_localhost() -> None:
    import click

    from wrenmem.cli.mcp_cmds import parse_http

    assert parse_http("8000") == ("127.0.0.1", 8000)
    assert parse_http(":8000") == ("127.0.0.1", 8000)
    assert parse_http("0.0.0.0:9000") == ("0.0.0.0", 9000)
    assert parse_http("[::1]:9000") == ("::1", 9000)
    assert parse_http("127.0.0.1:0") == ("127.0.0.1", 0)  # any free port
    for bad in ("host:", "x:99999", "nope", "-1"):
        with pytest.raises(click.BadParameter):
            parse_http(bad)


def test_store_query_refuses_control_characters_and_keeps_the_pair(shop: Path) -> None:
    """Issue 22: a NUL in an agent's SQL or note wrote a file that no longer parsed, over a
    good pair. Now the tool error names the field and the place, and no file changes."""
    before = {p.name: p.read_bytes() for p in (shop / "knowledge/sql").iterdir()}
    question = "How many orders were shipped?"

    async def body(session: ClientSession) -> list[str]:
        return [await error_text(session, "store_query", question=question,
                                 sql="SELECT COUNT(*) FROM orders\x00"),
                await error_text(session, "store_query", question=question,
                                 sql="SELECT COUNT(*) FROM orders", note="ok\x1b[2J")]

    sql_error, note_error = in_session(shop, body, "--backend", "grep")
    assert "the SQL contains a control character U+0000 (NUL) at line 1" in sql_error
    assert "the notes contain a control character U+001B (ESC)" in note_error
    assert {p.name: p.read_bytes() for p in (shop / "knowledge/sql").iterdir()} == before


def test_store_query_refuses_sql_nested_too_deep_in_a_line(shop: Path, tmp_path: Path) -> None:
    """Issue 22: 3,000 levels of subqueries were a generic error and 2,800 lines of log."""
    deep = "SELECT a FROM " + "(SELECT a FROM " * 3000 + "t" + ") s" * 3000
    log = tmp_path / "server.log"

    async def main() -> tuple[str, dict[str, Any]]:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "wrenmem", "--project", str(shop), "mcp", "--backend", "grep"],
            env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=str(shop))
        with log.open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    refused = await error_text(session, "store_query", question="How deep?",
                                               sql=deep)
                    return refused, await call(session, "list_queries", limit=1)

    refused, alive = asyncio.run(asyncio.wait_for(main(), timeout=300))
    assert "nested too deep to parse" in refused and "line 1, column" in refused, refused
    assert len(refused) < 1000
    assert alive["total"] > 0
    assert len(log.read_text().splitlines()) < 20, log.read_text()[-3000:]
