"""The client's side of the warm daemon: ask the running watcher, or return None.

:func:`ask` is the one entry ``Memory`` uses (``recall``, ``fetch``, ``status``, a small
``sync``). Standard library only, so a recall the daemon answers never loads LanceDB,
numpy or a model. Every failure returns None and the caller works in-process. The socket
itself (where it is, when not to try it, a line each way) is :mod:`wrenmem.fs.daemonsock`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wrenmem.fs import daemonsock
from wrenmem.lazy import lazy
from wrenmem.recall.hits import Hit, RecallResult, above

if TYPE_CHECKING:
    from wrenmem.index import report as index_report
else:  # imported on first use (wrenmem/lazy.py)
    index_report = lazy("wrenmem.index.report")

PROTOCOL = daemonsock.PROTOCOL
CONNECT_TIMEOUT = daemonsock.CONNECT_TIMEOUT
REPLY_TIMEOUT = daemonsock.REPLY_TIMEOUT
DISABLE_ENV = daemonsock.DISABLE_ENV
socket_path = daemonsock.socket_path
_exchange = daemonsock.exchange
# Sends a request and returns the reply instead of the socket: the daemon's own, for a
# command line it runs (wrenmem.cli.forwarded), which asks it without a connection.
Via = Callable[[dict[str, Any]], "dict[str, Any] | None"]


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
            timeout: float = REPLY_TIMEOUT, via: Via | None = None) -> dict[str, Any] | None:
    """Send one request; the daemon's ``result`` reply, or None on any failure at all."""
    message = {"v": PROTOCOL, "op": op, "settings": settings_payload(settings),
               "args": args or {}}
    if via is not None:
        reply = via(message)
    elif not daemonsock.worth_asking(Path(settings.root)):
        return None  # disabled, a stopped watcher, a socket that hung a moment ago
    else:
        reply = _exchange(socket_path(Path(settings.root)), message, CONNECT_TIMEOUT, timeout)
    if reply is None or reply.get("v") != PROTOCOL or not reply.get("ok"):
        return None
    return reply


def remote_recall(settings: Any, queries: Sequence[str], k: int, filters: Any,
                  notify: Callable[[str], None] | None = None, *, sql: str | None = None,
                  via: Via | None = None) -> list[Any] | None:
    """``Recaller.recall`` answered by the daemon, or None (then recall in-process)."""
    args = {"queries": list(queries), "k": k, "sql": sql,
            "filters": {"datasource": filters.datasource, "tags": list(filters.tags),
                        "source": filters.source, "verified": filters.verified}}
    reply = request(settings, "recall", args, timeout=REPLY_TIMEOUT + 0.05 * len(queries),
                    via=via)
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
                 threshold: int | None = None, via: Via | None = None
                 ) -> RemoteFetch | None:
    """``wrenmem.schema.fetch.fetch`` answered by the daemon, or None (then call it in-process)."""
    args = {"question": question, "types": list(types), "model": model, "k": k,
            "threshold": threshold}
    result = remote_call(settings, "fetch", args, via=via)
    try:
        return RemoteFetch(result) if isinstance(result, dict) else None
    except (KeyError, TypeError):
        return None


def remote_call(settings: Any, op: str, args: dict[str, Any],
                notify: Callable[[str], None] | None = None, *, via: Via | None = None
                ) -> Any | None:
    """Any other request (``fetch``, ``status``): the JSON result, or None."""
    reply = request(settings, op, args, via=via)
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
        notify: Callable[[str], None] | None = None, *, via: Via | None = None
        ) -> Any | None:
    """The watcher's answer to ``op`` as the in-process call returns it, or None (then the
    caller answers in-process): ``recall`` a list of ``RecallResult`` (``args``: queries,
    k, filters, sql, min_score), ``fetch`` a ``RemoteFetch`` (question, types, model, k,
    threshold), ``status`` its dict, ``sync`` a ``SyncReport`` (paths). ``via``: instead
    of the socket (the daemon running a command line itself)."""
    if op == "recall":
        found = remote_recall(settings, args["queries"], args["k"], args["filters"],
                              notify, sql=args.get("sql"), via=via)
        return None if found is None else above(found, args.get("min_score", 0.0))
    if op == "fetch":
        return remote_fetch(settings, **args, via=via)
    if op == "sync":
        return watcher_sync(settings, args.get("paths"))
    result = remote_call(settings, op, args, notify, via=via)
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
