"""The client's side of the warm daemon: ask the running watcher, or return None.

:func:`ask` is the one entry ``Memory`` uses (``recall``, ``fetch``, ``status``, a small
``sync``). Standard library only, so a recall the daemon answers never loads LanceDB,
numpy or a model. Every failure returns None and the caller works in-process.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wrenmem.fs import statedir
from wrenmem.lazy import lazy
from wrenmem.recall.hits import Hit, RecallResult, above

if TYPE_CHECKING:
    from wrenmem.index import report as index_report
else:  # imported on first use (wrenmem/lazy.py)
    index_report = lazy("wrenmem.index.report")

if TYPE_CHECKING:  # (socket, hashlib and tempfile: imported where used, 15 ms a start)
    import socket

PROTOCOL = 2  # 2: recall takes a draft "sql"; hits carry "also" and "also_paths"
SOCKET_NAME = statedir.DAEMON_SOCKET
# sun_path holds 108 bytes on Linux, 104 on macOS; keep a margin.
_MAX_SOCKET_PATH = 100
CONNECT_TIMEOUT = 0.5
REPLY_TIMEOUT = 20.0
DISABLE_ENV = "WRENMEM_NO_DAEMON"


def socket_path(root: Path) -> Path:
    """Where the daemon of the project at ``root`` listens: ``.wrenmem/daemon.sock``, or for
    a project path too long for a Unix socket, a per-user 0700 folder in the temp dir."""
    path = root / statedir.STATE_DIR / SOCKET_NAME
    if len(os.fsencode(str(path))) <= _MAX_SOCKET_PATH:
        return path
    import hashlib
    import tempfile

    digest = hashlib.sha256(os.fsencode(str(root))).hexdigest()[:20]
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir())
    return base / f"wrenmem-{os.getuid()}" / f"{digest}.sock"


def settings_payload(settings: Any) -> dict[str, Any]:
    """The resolved settings as plain JSON: the daemon refuses a request whose settings
    differ from its own, so a daemon never answers for another configuration."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(settings):
        if f.compare:
            value = getattr(settings, f.name)
            if isinstance(value, Path):
                value = str(value)
            elif isinstance(value, tuple):  # as JSON will carry it, so the two sides compare
                value = list(value)
            out[f.name] = value
    return out


def request(settings: Any, op: str, args: dict[str, Any] | None = None, *,
            timeout: float = REPLY_TIMEOUT) -> dict[str, Any] | None:
    """Send one request; the daemon's ``result`` reply, or None on any failure at all."""
    if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        return None
    path = socket_path(Path(settings.root))
    if _watcher_stopped(Path(settings.root)):
        return None  # a stopped (SIGSTOP, ^Z) watcher would hold every request for the timeout
    message = {"v": PROTOCOL, "op": op, "settings": settings_payload(settings),
               "args": args or {}}
    reply = _exchange(path, message, CONNECT_TIMEOUT, timeout)
    if reply is None or reply.get("v") != PROTOCOL or not reply.get("ok"):
        return None
    return reply


def _watcher_stopped(root: Path) -> bool:
    """Whether the watcher of ``root`` is stopped or a zombie (Linux /proc; else False)."""
    try:
        pid = int((root / statedir.STATE_DIR / statedir.WATCH_PID).read_text("ascii").strip())
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError, IndexError):
        return False
    return state in ("T", "t", "Z")


def _exchange(path: Path, message: dict[str, Any], connect_timeout: float,
              timeout: float) -> dict[str, Any] | None:
    """One JSON line out, one back; None on any failure."""
    import socket

    try:
        if os.stat(path).st_uid != os.getuid():
            return None  # someone else's socket: never send them our questions
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(connect_timeout)
            sock.connect(os.fspath(path))
            sock.settimeout(timeout)
            sock.sendall(json.dumps(message, ensure_ascii=False).encode() + b"\n")
            sock.shutdown(socket.SHUT_WR)
            reply = json.loads(_read_line(sock))
    except (OSError, ValueError):
        return None
    return reply if isinstance(reply, dict) else None


def _read_line(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
        if chunk.endswith(b"\n"):
            break
    return b"".join(chunks)


def remote_recall(settings: Any, queries: Sequence[str], k: int, filters: Any,
                  notify: Callable[[str], None] | None = None, *, sql: str | None = None
                  ) -> list[Any] | None:
    """``Recaller.recall`` answered by the daemon, or None (then recall in-process)."""
    args = {"queries": list(queries), "k": k, "sql": sql,
            "filters": {"datasource": filters.datasource, "tags": list(filters.tags),
                        "source": filters.source, "verified": filters.verified}}
    reply = request(settings, "recall", args, timeout=REPLY_TIMEOUT + 0.05 * len(queries))
    if reply is None:
        return None

    try:
        results = [RecallResult(r["query"], r["backend"],
                                tuple(Hit.from_dict(h) for h in r["hits"]))
                   for r in reply["result"]]
    except (KeyError, TypeError):
        return None
    if len(results) != len(queries):
        return None
    _replay_notes(reply, notify)
    return results


class RemoteFetch:
    """A ``FetchResult`` as the daemon sent it: what the ``fetch`` command prints."""

    def __init__(self, payload: dict[str, Any]):
        self._data = payload["data"]
        self._text = str(payload["text"])
        self.warnings = tuple(str(w) for w in payload["warnings"])
        self.notes = tuple(str(n) for n in payload["notes"])

    def to_dict(self) -> dict[str, Any]:
        return dict(self._data)

    def render(self) -> str:
        return self._text


def remote_fetch(settings: Any, question: str, *, types: Sequence[str] = (),
                 model: str | None = None, k: int = 10,
                 threshold: int | None = None) -> RemoteFetch | None:
    """``wrenmem.schema.fetch.fetch`` answered by the daemon, or None (then call it in-process)."""
    args = {"question": question, "types": list(types), "model": model, "k": k,
            "threshold": threshold}
    result = remote_call(settings, "fetch", args)
    try:
        return RemoteFetch(result) if isinstance(result, dict) else None
    except (KeyError, TypeError):
        return None


def remote_call(settings: Any, op: str, args: dict[str, Any],
                notify: Callable[[str], None] | None = None) -> Any | None:
    """Any other request (``fetch``, ``status``): the JSON result, or None."""
    reply = request(settings, op, args)
    if reply is None or "result" not in reply:
        return None
    _replay_notes(reply, notify)
    return reply["result"]


def remote_sync(settings: Any, paths: Sequence[str] | None = None) -> dict[str, Any] | None:
    """A sync of the pairs (all, or just ``paths``) run by the watcher with its model and
    LanceDB loaded: ``SyncReport.to_wire()``, or None (a big change, a first index, no
    watcher...: then sync in-process)."""
    result = remote_call(settings, "sync", {"paths": None if paths is None else list(paths)})
    return result if isinstance(result, dict) else None


def watcher_sync(settings: Any, paths: Sequence[str] | None = None) -> Any | None:
    """:func:`remote_sync` as the ``SyncReport`` an in-process sync returns, or None."""
    wire = remote_sync(settings, paths)
    if wire is None:
        return None

    try:
        return index_report.SyncReport.from_wire(wire)
    except (KeyError, TypeError, ValueError):  # another version's reply
        return None


def ask(settings: Any, op: str, args: dict[str, Any],
        notify: Callable[[str], None] | None = None) -> Any | None:
    """The watcher's answer to ``op`` as the in-process call returns it, or None (then the
    caller answers in-process): ``recall`` a list of ``RecallResult`` (``args``: queries,
    k, filters, sql, min_score), ``fetch`` a ``RemoteFetch`` (question, types, model, k,
    threshold), ``status`` its dict, ``sync`` a ``SyncReport`` (paths)."""
    if op == "recall":
        found = remote_recall(settings, args["queries"], args["k"], args["filters"],
                              notify, sql=args.get("sql"))
        return None if found is None else above(found, args.get("min_score", 0.0))
    if op == "fetch":
        return remote_fetch(settings, **args)
    if op == "sync":
        return watcher_sync(settings, args.get("paths"))
    result = remote_call(settings, op, args, notify)
    return result if isinstance(result, dict) else None


def _replay_notes(reply: dict[str, Any], notify: Callable[[str], None] | None) -> None:
    """Messages the in-process call would have given (e.g. which backend answered)."""
    if notify is not None:
        for note in reply.get("notes") or ():
            notify(str(note))


def ping(root: Path, timeout: float = 1.0) -> dict[str, Any] | None:
    """The daemon's ``ping`` reply (pid, mode, last sync…) for ``watch --status``."""
    reply = _exchange(socket_path(root), {"v": PROTOCOL, "op": "ping"}, timeout, timeout)
    if reply is None or not reply.get("ok") or not isinstance(reply.get("result"), dict):
        return None
    return reply["result"]
