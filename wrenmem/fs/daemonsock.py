"""The Unix socket of a project's warm daemon, from the client's side: where it is, whether
to try it, and one JSON line each way. Standard library only (and no ``dataclasses``): the
CLI's entry (``wrenmem/__main__.py``) uses it before it imports click or the settings.

Any failure is None, and the caller works in-process. A daemon that took a command line and
did not even acknowledge it within :data:`ACK_TIMEOUT` is *hung*: its socket is remembered
in ``.wrenmem/daemon-hung`` and skipped for :data:`HUNG_SKIP` seconds (by every process, and
for the life of this one), so a hung daemon costs that wait once, not on every call.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wrenmem.fs import pids, statedir

if TYPE_CHECKING:  # (socket, hashlib and tempfile: imported where used, 15 ms a start)
    import socket

PROTOCOL = 2  # 2: recall takes a draft "sql"; hits carry "also" and "also_paths"
# sun_path holds 108 bytes on Linux, 104 on macOS; keep a margin.
_MAX_SOCKET_PATH = 100
CONNECT_TIMEOUT = 0.5
REPLY_TIMEOUT = 20.0
ACK_TIMEOUT = 2.0  # a daemon says it took a command line at once (its reply may take longer)
HUNG_SKIP = 60.0
DISABLE_ENV = "WRENMEM_NO_DAEMON"
_hung_here: set[tuple[int, int]] = set()  # sockets (inode, mtime) this process saw hang


class Hung(OSError):
    """The daemon took the connection but did not acknowledge the request in time."""


def socket_path(root: Path) -> Path:
    """Where the daemon of the project at ``root`` listens: ``.wrenmem/daemon.sock``, or for
    a project path too long for a Unix socket, a per-user 0700 folder in the temp dir."""
    path = root / statedir.STATE_DIR / statedir.DAEMON_SOCKET
    if len(os.fsencode(str(path))) <= _MAX_SOCKET_PATH:
        return path
    import hashlib
    import tempfile

    digest = hashlib.sha256(os.fsencode(str(root))).hexdigest()[:20]
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir())
    return base / f"wrenmem-{os.getuid()}" / f"{digest}.sock"


def disabled() -> bool:
    """``WRENMEM_NO_DAEMON`` is set (to anything but 0)."""
    return os.environ.get(DISABLE_ENV, "") not in ("", "0")


def worth_asking(root: Path) -> bool:
    """Whether a request to the daemon of ``root`` may be answered: not disabled, its
    watcher neither stopped nor a zombie, its socket not one that hung a moment ago."""
    if disabled() or watcher_stopped(root):
        return False
    return not _marked_hung(root)


def watcher_stopped(root: Path) -> bool:
    """Whether the watcher of ``root`` is stopped (SIGSTOP, ^Z: it would hold every request
    for the timeout) or a zombie (Linux /proc; else False)."""
    try:
        pid = int((root / statedir.STATE_DIR / statedir.WATCH_PID).read_text("ascii").strip())
    except (OSError, ValueError):
        return False
    return pids.state(pid) in ("T", "t", "Z")


def _socket_key(path: Path) -> tuple[int, int] | None:
    """The socket file's inode and mtime: a daemon that starts again binds a new one."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _marked_hung(root: Path) -> bool:
    key = _socket_key(socket_path(root))
    if key is None:
        return False
    if key in _hung_here:
        return True
    marker = root / statedir.STATE_DIR / statedir.DAEMON_HUNG
    try:
        if time.time() - os.stat(marker).st_mtime > HUNG_SKIP:
            return False
        return marker.read_text("ascii").split() == [str(n) for n in key]
    except (OSError, ValueError):
        return False


def mark_hung(root: Path, path: Path) -> None:
    """Remember that the daemon on ``path`` hung (here, and for other processes a while)."""
    key = _socket_key(path)
    if key is None:
        return
    _hung_here.add(key)
    folder = root / statedir.STATE_DIR
    try:  # only into a .wrenmem/ that is there (the daemon made it): never create one
        if folder.is_dir() and not folder.is_symlink():
            (folder / statedir.DAEMON_HUNG).write_text(f"{key[0]} {key[1]}\n", "ascii")
    except OSError:
        pass


def exchange(path: Path, message: dict[str, Any], connect_timeout: float, timeout: float,
             *, ack_timeout: float | None = None) -> dict[str, Any] | None:
    """One JSON line out, one back; None on any failure. With ``ack_timeout`` the daemon
    first sends an acknowledgement line within that time, else :class:`Hung` is raised."""
    import socket

    try:
        if os.stat(path).st_uid != os.getuid():
            return None  # someone else's socket: never send them our questions
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(connect_timeout)
            sock.connect(os.fspath(path))
            sock.sendall(json.dumps(message, ensure_ascii=False).encode() + b"\n")
            sock.shutdown(socket.SHUT_WR)
            lines = _Lines(sock)
            if ack_timeout is not None:
                sock.settimeout(ack_timeout)
                try:
                    if json.loads(lines.next()) != {"ack": True}:
                        return None
                except TimeoutError as e:
                    raise Hung(f"{path}: no acknowledgement in {ack_timeout:g} s") from e
            sock.settimeout(timeout)
            reply = json.loads(lines.next())
    except Hung:
        raise
    except (OSError, ValueError):
        return None
    return reply if isinstance(reply, dict) else None


class _Lines:
    """The lines a socket sends, one at a time (two may come in one read)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buffer = b""

    def next(self) -> bytes:
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                line, self.buffer = self.buffer, b""
                return line
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line
