"""``wrenmem mcp --http``: a bearer token, Host/Origin checks for any bound address, and the
rule for addresses other machines can reach. The real server process, the MCP SDK's client
and raw HTTP requests (for what a client library would not send)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

pytest.importorskip("mcp")

import httpx2  # noqa: E402  (the MCP SDK's HTTP client)
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "mysql-shop"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "raw-test", "version": "1"}}}
HEADERS = {"Content-Type": "application/json",
           "Accept": "application/json, text/event-stream"}


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    shutil.copytree(FIXTURE, root)
    return root


@dataclass
class Server:
    proc: subprocess.Popen[str]
    url: str
    lines: list[str] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/")[0])

    def token(self) -> str:
        found = [m.group(1) for line in self.lines
                 if (m := re.search(r"token: (\S+)$", line))]
        assert len(found) == 1, self.lines
        return found[0]


def start(root: Path, *args: str, env: dict[str, str] | None = None) -> Server:
    """``wrenmem mcp --http ...`` until it prints the line saying where it listens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "wrenmem", "--project", str(root), "mcp", "--backend", "grep",
         *args], env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    found = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if "listening on " in line:
                found.set()
        found.set()

    threading.Thread(target=read, daemon=True).start()
    if not found.wait(60) or not any("listening on " in line for line in lines):
        proc.kill()
        raise AssertionError(f"no listening line: {lines}")
    url = next(line for line in lines if "listening on " in line).split("listening on ")[1]
    return Server(proc, url.split()[0], lines)


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.proc.terminate()
        try:
            server.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.proc.kill()


def post(url: str, token: str | None = None, **headers: str) -> httpx2.Response:
    auth = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx2.post(url, content=json.dumps(INITIALIZE),
                       headers={**HEADERS, **auth, **headers}, timeout=30)


def recall(url: str, token: str | None) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        async with create_mcp_http_client(headers=headers) as client:
            async with streamable_http_client(url, http_client=client) as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    await session.initialize()
                    result = await session.call_tool("recall_queries",
                                                     {"question": "shipped orders"})
                    assert not result.is_error, result.content
                    assert result.structured_content is not None
                    return result.structured_content

    return asyncio.run(asyncio.wait_for(main(), timeout=120))


def test_a_token_is_generated_printed_once_and_required(shop: Path,
                                                        servers: list[Server]) -> None:
    server = start(shop, "--http", "127.0.0.1:0")
    servers.append(server)
    assert server.url == f"http://127.0.0.1:{server.port}/mcp"
    token = server.token()
    assert len(token) >= 32
    assert sum(token in line for line in server.lines) == 1

    missing = post(server.url)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert post(server.url, "not-the-token").status_code == 401
    assert post(server.url, token + "x").status_code == 401
    with pytest.raises(Exception) as refused:  # noqa: B017  (the SDK: an ExceptionGroup)
        recall(server.url, None)
    assert "error response" in repr(refused.value)  # the 401, as the SDK's client reports it
    out = recall(server.url, token)
    assert out["pairs"][0]["path"] == "knowledge/sql/how-many-orders-were-shipped.md"


def test_the_token_from_the_environment_is_never_printed(shop: Path,
                                                         servers: list[Server]) -> None:
    secret = "a-long-enough-secret-for-this-test"
    server = start(shop, "--http", "0", env={"WRENMEM_MCP_TOKEN": secret})
    servers.append(server)
    assert not any(secret in line for line in server.lines)
    assert any("WRENMEM_MCP_TOKEN" in line for line in server.lines), server.lines
    assert post(server.url).status_code == 401
    assert post(server.url, secret).status_code == 200
    short = subprocess.run(
        [sys.executable, "-m", "wrenmem", "--project", str(shop), "mcp", "--http", "0"],
        env={**os.environ, "PYTHONPATH": str(REPO), "WRENMEM_MCP_TOKEN": "short"},
        capture_output=True, text=True, timeout=120)
    assert short.returncode != 0 and "WRENMEM_MCP_TOKEN" in short.stderr


@pytest.mark.parametrize("host", ["127.0.0.2", "0.0.0.0"])
def test_host_and_origin_checks_hold_for_any_bound_address(shop: Path, servers: list[Server],
                                                           host: str) -> None:
    """DNS rebinding: a page on another site that resolves its name to this machine sends
    its own name as Host (and Origin). Refused, whatever address the server is bound to."""
    server = start(shop, "--http", f"{host}:0")
    servers.append(server)
    token, port = server.token(), server.port
    target = server.url.replace("0.0.0.0", "127.0.0.1")
    assert post(target, token, Host=f"evil.example:{port}").status_code == 421
    assert post(target, token, Origin="http://evil.example").status_code == 403
    assert post(target, token).status_code == 200
    assert post(target, token, Host=f"localhost:{port}").status_code == 200
    assert post(target, token, Origin=f"http://localhost:{port}").status_code == 200
    warned = [line for line in server.lines if "warning" in line]
    if host == "0.0.0.0":
        assert warned and "other machines" in warned[0], server.lines
        assert server.url == f"http://0.0.0.0:{port}/mcp"
    else:
        assert not warned, server.lines
        assert post(target, token, Host=f"127.0.0.2:{port}").status_code == 200


def test_no_token_only_on_loopback(shop: Path, servers: list[Server]) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "wrenmem", "--project", str(shop), "mcp", "--http",
         "0.0.0.0:0", "--no-token"], env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0
    assert "--no-token" in refused.stderr and "loopback" in refused.stderr
    assert "Traceback" not in refused.stderr

    server = start(shop, "--http", "0", "--no-token")
    servers.append(server)
    assert not any("token: " in line for line in server.lines)
    assert any("no token" in line for line in server.lines), server.lines
    assert recall(server.url, None)["pairs"]
    assert post(server.url, Host="evil.example").status_code == 421


def test_the_host_values_a_request_may_carry() -> None:
    from wrenmem.mcp.http import allowed_hosts, is_loopback

    assert allowed_hosts("127.0.0.2", 8765) == {
        "127.0.0.2:8765", "127.0.0.1:8765", "localhost:8765", "[::1]:8765"}
    assert allowed_hosts("::1", 9000, ["proxy.internal", "wren.example:443", "fd00::5"]) == {
        "[::1]:9000", "127.0.0.1:9000", "localhost:9000", "proxy.internal:9000",
        "wren.example:443", "[fd00::5]:9000"}
    assert "localhost" in allowed_hosts("127.0.0.1", 80)  # port 80 goes unsaid
    wildcard = allowed_hosts("0.0.0.0", 8765)
    assert "localhost:8765" in wildcard and "0.0.0.0:8765" not in wildcard
    assert all(h.endswith(":8765") for h in wildcard)
    assert [is_loopback(h) for h in ("127.0.0.2", "::1", "localhost", "0.0.0.0", "::",
                                     "10.0.0.1", "example.com")] == [
        True, True, True, False, False, False, False]


def test_http_options_need_http(cli) -> None:
    for args in (["--no-token"], ["--allow-host", "example.com"]):
        result = cli("mcp", *args)
        assert result.exit_code == 2 and "--http" in result.output


def test_a_host_name_in_capitals_is_the_same_host(shop: Path, servers: list[Server]) -> None:
    """Issue 39 item 13: host names are case-insensitive; `LOCALHOST:PORT` got 421 from
    the SDK's own check behind wrenmem's. Another name is still refused."""
    server = start(shop, "--http", "0")
    servers.append(server)
    token, port = server.token(), server.port
    for spelling in ("LOCALHOST", "LocalHost"):
        assert post(server.url, token, Host=f"{spelling}:{port}").status_code == 200, spelling
    assert post(server.url, token, Host=f"LOCALHOST:{port}",
                Origin=f"HTTP://LOCALHOST:{port}").status_code == 200
    assert post(server.url, token, Host=f"EVIL.EXAMPLE:{port}").status_code == 421
