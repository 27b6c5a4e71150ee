"""``wrenmem mcp --http``: who may call the server over streamable HTTP.

Every request must carry ``Authorization: Bearer <token>`` (from ``WRENMEM_MCP_TOKEN``, or
generated at start and printed once), and a ``Host`` (and any ``Origin``) naming the bound
address or this machine: a web page whose own name resolves here (DNS rebinding) is
refused whatever address the server is bound to. The SDK's auth hooks are built for OAuth
(an issuer, protected-resource metadata); one shared secret needs only this small ASGI
layer in front of the SDK's app, whose own Host check gets the same lists.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from wrenmem.errors import SettingsError

TOKEN_ENV = "WRENMEM_MCP_TOKEN"
MIN_TOKEN_CHARS = 16
PATH = "/mcp"
WILDCARDS = ("0.0.0.0", "::", "")
LOCAL_NAMES = ("127.0.0.1", "localhost", "[::1]")


@dataclass(frozen=True)
class Access:
    """What an HTTP request must show: the token (None: none needed) and the Host values
    (``name:port``) it may name; an Origin must be ``http://`` one of them."""

    token: str | None
    hosts: frozenset[str]

    @property
    def origins(self) -> frozenset[str]:
        return frozenset("http://" + h for h in self.hosts)


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach ``host`` (127.0.0.0/8, ::1, ``localhost``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_token(environ: Mapping[str, str], require: bool
                  ) -> tuple[str | None, bool]:
    """(token, generated): ``WRENMEM_MCP_TOKEN`` when set, else a new random one; (None,
    False) when ``require`` is off."""
    if not require:
        return None, False
    given = environ.get(TOKEN_ENV, "")
    if given:
        if len(given.strip()) < MIN_TOKEN_CHARS or given != given.strip():
            raise SettingsError(f"{TOKEN_ENV} must be at least {MIN_TOKEN_CHARS} characters "
                                "without surrounding spaces (a guessable token lets anyone in)")
        return given, False
    return secrets.token_urlsafe(32), True


def check_bind(host: str, token: str | None) -> str | None:
    """Refuse a bind other machines can reach without a token; return the warning every
    such bind gets (None on loopback)."""
    if is_loopback(host):
        return None
    if token is None:
        raise SettingsError(f"refused: --no-token on {host or '*'}, which other machines can "
                            "reach: without a token anyone there could store and forget "
                            "pairs; serve on a loopback address (127.0.0.1) or drop --no-token")
    return (f"warning: bound to {host or '*'}, not a loopback address: other machines can "
            "reach this server; each request needs the token, and HTTP is not encrypted "
            "(put a TLS proxy in front beyond a trusted network)")


def allowed_hosts(host: str, port: int, extra: Iterable[str] = ()) -> frozenset[str]:
    """The Host values a request may carry: the bound address, this machine's loopback
    names, for a wildcard bind this machine's own names and addresses, and ``extra``
    (``--allow-host``; ``name`` or ``name:port``), all with the port."""
    names = set(LOCAL_NAMES)
    if host in WILDCARDS:
        names |= _own_names()
    else:
        names.add(_bracketed(host))
    found = {f"{n}:{port}" for n in names}
    found |= {e if _has_port(e) else f"{_bracketed(e)}:{port}" for e in extra}
    if port == 80:  # a client leaves the default port out of Host
        found |= {h.rsplit(":", 1)[0] for h in found if h.endswith(":80")}
    return frozenset(found)


def _own_names() -> set[str]:
    """This machine's host name, its fully qualified name and the addresses they resolve to
    (what another machine on the network puts in Host)."""
    names = {socket.gethostname(), socket.getfqdn()}
    for name in list(names):
        try:
            names |= {_bracketed(str(info[4][0])) for info in socket.getaddrinfo(name, None)}
        except OSError:
            continue
    return {n for n in names if n}


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _has_port(value: str) -> bool:
    return value.rsplit(":", 1)[-1].isdigit() and (
        value.startswith("[") or value.count(":") == 1)


class Guard:
    """ASGI middleware: Host and Origin first (421, 403), then the bearer token (401)."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access
        self._token = access.token.encode() if access.token is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # the SDK's session manager starts and stops
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # no WebSocket here: close before anything runs
            await send({"type": "websocket.close", "code": 1008})
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        if headers.get("host", "").lower() not in {h.lower() for h in self.access.hosts}:
            await _reply(send, 421, "Invalid Host header: this server answers only to "
                                    "its own address")
            return
        origin = headers.get("origin")
        if origin and origin.lower() not in {o.lower() for o in self.access.origins}:
            await _reply(send, 403, "Invalid Origin header")
            return
        if self._token is not None:
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                    given.strip().encode(), self._token):
                await _reply(send, 401, "Unauthorized: send Authorization: Bearer <token> "
                                        f"(the token wrenmem mcp printed, or {TOKEN_ENV})",
                             [(b"www-authenticate", b'Bearer realm="wrenmem"')])
                return
        # Host names are case-insensitive (RFC 9110): `LOCALHOST:PORT` passed here, so the
        # SDK's own (case-sensitive) check gets the lower-case spelling it was given too.
        scope = dict(scope, headers=[
            (k, v.lower()) if k.lower() in (b"host", b"origin") else (k, v)
            for k, v in scope.get("headers", [])])
        await self.app(scope, receive, send)


async def _reply(send: Send, status: int, text: str,
                 extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = (text + "\n").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), *(extra or [])]})
    await send({"type": "http.response.body", "body": body})


def bind(host: str, port: int) -> socket.socket:
    """A listening socket at ``host:port`` (port 0: any free port)."""
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as e:
        raise SettingsError(f"cannot serve on {host}:{port}: {e}") from e
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise SettingsError(f"cannot serve on {host}:{port}: {e.strerror or e}") from e
    return sock


def url(host: str, port: int) -> str:
    return f"http://{_bracketed(host or '0.0.0.0')}:{port}{PATH}"
