"""The warm daemon: the running watcher answers ``recall``, ``fetch``, ``status`` and small
``sync`` requests, one JSON line in and one out, over a Unix socket only its owner can use
(0600 in a 0700 folder, the peer's uid checked with SO_PEERCRED).

Each request carries the settings the CLI resolved; the daemon answers only when they are its
own (:data:`PER_REQUEST` may differ), so its answer is the one the CLI would have computed.
Anything else is an ``ok: false`` reply, and the client does the work in-process. The
answers come from one local :class:`~wrenmem.api.Memory`, kept warm by the watcher's events.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wrenmem.api import Memory
from wrenmem.embed.embedders import get_embedder
from wrenmem.errors import LockTimeoutError, WrenmemError
from wrenmem.fs import statedir
from wrenmem.index.state import stat_delta
from wrenmem.index.sync import report_if_unchanged, sync_pairs
from wrenmem.recall import adapt as rank_adapt
from wrenmem.recall.daemon_client import PROTOCOL, settings_payload, socket_path
from wrenmem.recall.hits import Filters
from wrenmem.recall.recaller import BUSY_WAIT, Recaller, Refused
from wrenmem.settings import Settings
from wrenmem.storage.lock import index_lock
from wrenmem.watch.forward import code_stamp, newest_file, process_started
from wrenmem.watch.freshness import Freshness
from wrenmem.watch.maintainer import Maintainer

log = logging.getLogger(__name__)
# Settings a request may choose for itself: they pick a backend or a size, not the data.
PER_REQUEST = ("backend", "fetch_threshold")
# Settings that say how a client reaches a watcher, not what it answers: never compared.
NOT_COMPARED = ("daemon",)
MAX_REQUEST = 16 << 20
# A ``sync`` request is served when at most this many files changed (by their stats):
# seconds of work at most; a bigger one runs in the client, which shows its progress.
HANDOFF_MAX = 200
SYNC_LOCK_WAIT = 10.0  # the client's wait for a reply is REPLY_TIMEOUT (20 s)
ACK = b'{"ack": true}\n'  # the first line of the reply to a command line: taken, running
# Runs a command line here (wrenmem.cli.forwarded.run_forwarded, given by ``wrenmem watch``):
# (argv, root, the caller's WRENMEM_* variables, how its requests reach this daemon) ->
# (exit code, stdout, stderr), or None: declined.
RunCli = Callable[[list[str], Path, dict[str, str], Callable[[dict[str, Any]], Any]],
                  "tuple[int, str, str] | None"]
__all__ = ["DaemonServer", "Refused"]


def fit_recall(settings: Settings, memory: Memory) -> None:
    """After a sync of the watcher that wrote: ``recall-fit.json`` kept current (fitted
    again only when the pairs' questions changed, :func:`wrenmem.recall.adapt.refresh`)."""
    rank_adapt.fit_after_sync(settings, lambda: memory.recaller,
                              lambda m: log.warning("%s", m), indexed=True)


class DaemonServer:
    """Serves requests on ``socket_path(settings.root)`` from a background thread."""

    def __init__(self, settings: Settings, info: Callable[[], dict[str, Any]] | None = None,
                 *, poll: bool = False):
        self.settings = settings
        self.poll = poll  # the watcher polls (e.g. a network mount): so do our events
        self.info = info or dict
        self.path = socket_path(settings.root)
        self.started_at = time.time()
        self.requests = 0
        self.last_request = time.monotonic()  # of a request other than ping (idle exit)
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()
        self.freshness: Freshness | None = None
        # What the requests are answered with; its recaller syncs before every search until
        # ``start`` gives it the watcher's events (:meth:`Memory.keep_warm`).
        self.memory = Memory.from_settings(settings)
        # Held by whoever syncs the pairs in this process (the watcher's loop, the ``sync``
        # request): the other then finds the change synced, by the events, and walks no
        # file (see :meth:`pairs_fresh`).
        self.sync_turn = threading.Lock()
        self._payload: tuple[Settings, dict[str, Any]] | None = None  # settings_payload's
        self.warmed = False  # :meth:`warm` has finished
        self.maintainer: Maintainer | None = None  # the watcher's idle-time housekeeping
        self.run_cli: RunCli | None = None  # runs a forwarded command line (op "cli")
        # The code this process runs, as its files say: a file newer than the process may
        # not be what it imported, so then no command line is run here (the caller does).
        self.code = code_stamp()
        self.code_trusted = newest_file(self.code) < process_started() - 1.0

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> Path:
        """Bind the socket (replacing a stale one) and serve in a daemon thread."""
        self._closing = threading.Event()
        folder = self.path.parent
        statedir.ensure_parent(self.path)
        _make_private(folder)
        try:
            self.path.unlink()  # stale: the caller holds the watcher's singleton lock
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)  # the socket file is born 0600: no window for others
        try:
            sock.bind(os.fspath(self.path))
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)
        sock.listen(16)
        sock.settimeout(0.5)
        self._sock = sock
        if self.freshness is None:  # events say when a search must sync first
            self.freshness = Freshness(self.settings, poll=self.poll)
            self.memory.keep_warm(self.freshness)
        self._thread = threading.Thread(target=self._serve, name="wrenmem-daemon", daemon=True)
        self._thread.start()
        return self.path

    def close(self) -> None:
        self._closing.set()
        if self._sock is not None:
            try:  # a connection wakes the accept() at once
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as wake:
                    wake.settimeout(0.2)
                    wake.connect(os.fspath(self.path))
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        if self.freshness is not None:
            self.freshness.close()
            self.freshness = None
            self.memory.keep_warm(None)

    @property
    def recaller(self) -> Recaller:
        """The held Memory's recaller (the embedder, the backends it keeps warm)."""
        return self.memory.recaller

    def _memory(self, settings: Settings) -> Memory:
        """The held Memory, or for a request that chose another backend or fetch threshold
        (:data:`PER_REQUEST`), a Memory over those settings (what ``fetch`` and ``status``
        keep warm is the index's and the schema table's, not the Memory's)."""
        return self.memory if settings is self.settings else Memory.from_settings(settings)

    def _serve(self) -> None:
        assert self._sock is not None
        while not self._closing.is_set():
            try:
                conn, _addr = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._closing.is_set():
                    return
                time.sleep(0.05)
                continue
            if self._closing.is_set():
                conn.close()
                return
            threading.Thread(target=self._serve_one, args=(conn,), daemon=True).start()

    def _serve_one(self, conn: socket.socket) -> None:
        with conn:
            try:
                if not _same_user(conn):
                    return
                conn.settimeout(30)
                data = b""
                while not data.endswith(b"\n") and len(data) < MAX_REQUEST:
                    chunk = conn.recv(1 << 16)
                    if not chunk:
                        break
                    data += chunk
                reply = self.handle_line(data, ack=lambda: conn.sendall(ACK))
                conn.sendall(json.dumps(reply, ensure_ascii=False).encode() + b"\n")
            except OSError as e:
                log.debug("daemon: connection dropped: %s", e)

    # --- requests ---------------------------------------------------------------------------

    def handle_line(self, data: bytes, ack: Callable[[], None] | None = None
                    ) -> dict[str, Any]:
        """The reply to one request line (``ack`` is called first for a command line);
        raises only what ``ack`` does."""
        try:
            message = json.loads(data)
            if not isinstance(message, dict):
                raise ValueError("not an object")
        except ValueError as e:
            return {"v": PROTOCOL, "ok": False, "error": f"bad request: {e}"}
        except RecursionError:
            return {"v": PROTOCOL, "ok": False, "error": "bad request: nested too deeply"}
        if message.get("op") == "cli" and ack is not None:
            ack()  # the client knows this daemon is not hung, and waits for the run
        return self.handle(message)

    def handle(self, message: dict[str, Any]) -> dict[str, Any]:
        self.requests += 1
        if message.get("op") != "ping":  # a ping (a status check) does not keep it busy
            self.last_request = time.monotonic()
        if self.maintainer is not None and message.get("op") != "ping":
            self.maintainer.touch()  # housekeeping waits while requests come
        return self._reply(message)

    def _reply(self, message: dict[str, Any]) -> dict[str, Any]:
        """:meth:`handle` without counting the request (a forwarded command's own)."""
        if message.get("v") != PROTOCOL:
            return {"v": PROTOCOL, "ok": False,
                    "error": f"protocol {message.get('v')!r} is not {PROTOCOL}"}
        op = message.get("op")
        notes: list[str] = []
        try:
            if op == "ping":
                result: Any = self.ping()
            elif op == "cli":
                result = self.cli(message.get("args") or {})
            else:
                settings = self.settings_for(message.get("settings"))
                args = message.get("args") or {}
                if op == "recall":
                    result = self.recall(settings, args, notes)
                elif op == "fetch":
                    result = self.fetch(settings, args)
                elif op == "status":
                    result = self.status(settings, args)
                elif op == "sync":
                    result = self.sync(settings, args)
                else:
                    raise Refused(f"unknown request {op!r}")
        except Refused as e:
            return {"v": PROTOCOL, "ok": False, "error": str(e)}
        except WrenmemError as e:  # the CLI redoes it in-process and shows the same error
            return {"v": PROTOCOL, "ok": False, "error": str(e), "kind": type(e).__name__}
        except Exception as e:  # never kill the daemon over one request
            log.exception("daemon: %s failed", op)
            return {"v": PROTOCOL, "ok": False, "error": f"{type(e).__name__}: {e}"}
        return {"v": PROTOCOL, "ok": True, "result": result, "notes": notes}

    def settings_for(self, payload: Any) -> Settings:
        """The daemon's settings with the request's per-request choices; Refused if the
        request was resolved against anything else (another project, index or model)."""
        if not isinstance(payload, dict):
            raise Refused("no settings in request")
        if self._payload is None or self._payload[0] is not self.settings:
            self._payload = (self.settings, settings_payload(self.settings))  # once, not per call
        mine = self._payload[1]
        free = PER_REQUEST + NOT_COMPARED
        differ = sorted(k for k in set(mine) | set(payload)
                        if k not in free and mine.get(k) != payload.get(k))
        if differ:
            raise Refused(f"settings differ from the daemon's: {', '.join(differ)}")
        chosen = {k: payload[k] for k in PER_REQUEST if k in payload and payload[k] != mine[k]}
        return dataclasses.replace(self.settings, **chosen) if chosen else self.settings

    def ping(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "root": str(self.settings.root), "protocol": PROTOCOL,
                "socket": str(self.path), "started_at": self.started_at,
                "requests": self.requests, "warm": self.warmed, **self.info()}

    def recall(self, settings: Settings, args: dict[str, Any], notes: list[str]
               ) -> list[dict[str, Any]]:
        """Exactly what the client's own recall gives, answered warm
        (:meth:`wrenmem.recall.recaller.Recaller.recall_warm`)."""

        queries = args.get("queries")
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            raise Refused("recall needs a list of questions")
        k = int(args.get("k", 3))
        f = args.get("filters") or {}
        filters = Filters(datasource=f.get("datasource"), tags=tuple(f.get("tags") or ()),
                          source=f.get("source"), verified=bool(f.get("verified")))
        sql = args.get("sql")
        if sql is not None and not isinstance(sql, str):
            raise Refused("recall's draft sql must be text")
        results = self.recaller.recall_warm(queries, k, filters, sql=sql, notify=notes.append,
                                            settings=settings)
        return [r.to_dict() for r in results]

    def fetch(self, settings: Settings, args: dict[str, Any]) -> dict[str, Any]:
        """``wrenmem.schema.fetch.fetch`` (it brings the schema index up to date itself): its JSON,
        its text and its warnings, everything the CLI prints."""

        question = args.get("question")
        if not isinstance(question, str):
            raise Refused("fetch needs a question")
        threshold = args.get("threshold")
        result = self._memory(settings).fetch(
            question, types=tuple(args.get("types") or ()), model=args.get("model"),
            k=int(args.get("k", 10)), threshold=None if threshold is None else int(threshold))
        return {"data": result.to_dict(), "text": result.render(),
                "warnings": list(result.warnings), "notes": list(result.notes)}

    def cli(self, args: dict[str, Any]) -> dict[str, Any]:
        """A whole ``recall`` or ``fetch`` command line of a client in this project, run
        here with the same click command (:attr:`run_cli`); its requests are answered as
        the socket's are (:meth:`via`). Refused (the client runs it) for other code or
        another project, and whenever the runner declines."""
        argv, env = args.get("argv"), args.get("env")
        if self.run_cli is None:
            raise Refused("this daemon runs no command line")
        if not self.code_trusted or args.get("code") != self.code:
            raise Refused("the daemon runs other code than the caller's")
        if args.get("root") != str(self.settings.root):
            raise Refused("another project")
        if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)
                and isinstance(env, dict)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
            raise Refused("a command line is a list of strings")
        ran = self.run_cli(argv, self.settings.root, env, self.via)
        if ran is None:
            raise Refused("declined: the caller runs it")
        code, out, err = ran
        return {"exit": code, "stdout": out, "stderr": err}

    def via(self, message: dict[str, Any]) -> dict[str, Any]:
        """A forwarded command's request, answered as one on the socket would be (the
        reply through JSON, as it travels); a refusal raises :class:`Refused`, so that the
        command is declined, never answered by this process as if it were the client."""
        reply: dict[str, Any] = json.loads(json.dumps(self._reply(message), ensure_ascii=False))
        if not reply.get("ok"):
            raise Refused(str(reply.get("error")))
        return reply

    def status(self, settings: Settings, args: dict[str, Any]) -> dict[str, Any]:
        """What ``wrenmem status`` shows; refused while a writer is between commits."""

        try:
            with index_lock(settings, timeout=BUSY_WAIT):
                return self._memory(settings).status()
        except LockTimeoutError as e:
            raise Refused(f"the index is being written: {e}") from e

    def sync(self, settings: Settings, args: dict[str, Any]) -> dict[str, Any]:
        """A small sync of the pairs for a CLI process (``sync``, ``store``, ``forget``),
        which then never imports LanceDB nor loads the model: ``SyncReport.to_wire()``.

        Nothing changed since the last whole sync (the watcher's events say so): the
        report comes from the state mirror, no file is looked at. Otherwise the stat
        delta decides: more than ``HANDOFF_MAX`` files touched, no mirror (a first index,
        another embedder), a reader or a remote index is Refused, and the client syncs
        itself, with its progress shown. The index lock is held throughout, so the delta
        cannot go stale before the sync uses it; so is :attr:`sync_turn`, the loop's."""
        paths = args.get("paths")
        if paths is not None and not (isinstance(paths, list)
                                      and all(isinstance(p, str) for p in paths)):
            raise Refused("sync's paths must be a list of relative paths")
        if settings.is_reader or settings.remote_index:
            raise Refused("a shared index: the client syncs (or refuses) itself")
        embedder = get_embedder(settings.embedder, root=settings.root)
        if self.maintainer is not None:
            self.maintainer.pause()  # a compaction never delays a write
        # The loop may be syncing the very edit this request is about: wait for its turn.
        turn = self.sync_turn.acquire(timeout=SYNC_LOCK_WAIT)
        try:
            return self._sync(settings, embedder, paths)
        finally:
            if turn:
                self.sync_turn.release()

    def _sync(self, settings: Settings, embedder: Any, paths: list[str] | None
              ) -> dict[str, Any]:
        started = time.monotonic()
        with index_lock(settings, timeout=SYNC_LOCK_WAIT):
            known = self.unchanged_pairs(settings) if paths is None else None
            if known is not None:
                return known.to_wire()
            delta = stat_delta(settings, embedder.model_id, only=paths)
            if delta is None:
                raise Refused("no state mirror to sync against (a first index?)")
            if len(delta.touched) + len(delta.gone) > HANDOFF_MAX:
                raise Refused(f"{len(delta.touched) + len(delta.gone)} files touched: a big "
                              "sync runs in the client, with progress")
            report = sync_pairs(settings, paths=paths, embedder=embedder, delta=delta,
                                lock_timeout=SYNC_LOCK_WAIT)
            self.recaller.index_written(started if paths is None else None)
        if not report.noop:
            fit_recall(settings, self.memory)
        return report.to_wire()

    def unchanged_pairs(self, settings: Settings | None = None) -> Any | None:
        """The no-op report of the pairs, from the state mirror, when no file changed since
        the last whole sync of them in this process, as the events say (with their fence:
        :meth:`Freshness.needs_sync`); else None. Call it holding :attr:`sync_turn`."""
        settings = settings or self.settings
        if self.freshness is None or self.freshness.needs_sync():
            return None
        model_id = get_embedder(settings.embedder, root=settings.root).model_id
        return report_if_unchanged(settings, model_id)

    def pairs_synced(self, started: float) -> None:
        """The watcher's loop synced every pair file as of ``started`` (monotonic): the
        recaller drops its handles, and a ``sync`` request after it need not walk."""
        try:
            with index_lock(self.settings, timeout=SYNC_LOCK_WAIT):
                self.recaller.index_written(started)
        except LockTimeoutError:
            pass

    def warm(self) -> None:
        """Load the default backend (and its model) before the first request needs it;
        ``ping`` says ``warm`` once done (or failed: the requests then load it)."""
        try:
            self.recaller.warm_up()
        finally:
            self.warmed = True


def _same_user(conn: socket.socket) -> bool:
    """Only the owner may talk to the daemon (the file mode says so too; this is Linux's
    second opinion, and a no-op where SO_PEERCRED does not exist)."""
    peercred = getattr(socket, "SO_PEERCRED", None)
    if peercred is None:
        return True
    creds = conn.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid == os.getuid()


def _make_private(folder: Path) -> None:
    """0700 on a folder we own (``.wrenmem/`` or the per-user temp folder)."""
    try:
        st = folder.stat()
        if st.st_uid != os.getuid():
            raise WrenmemError(f"{folder} belongs to another user; not putting a socket there")
        if st.st_mode & 0o077:
            os.chmod(folder, 0o700)
    except FileNotFoundError:
        folder.mkdir(mode=0o700, parents=True)
