"""A one-shot ``wrenmem recall`` or ``wrenmem fetch`` handed whole to the project's warm
daemon, before this process imports click or the settings (``wrenmem/__main__.py``).

The daemon parses the command line with the same click command and runs it with what it
keeps warm (:func:`wrenmem.cli.forwarded.run_forwarded`); its output and exit code are this
process's. It declines whenever the answer could differ from this process's own, and then
this process runs the command itself, as if no daemon were there: for help, an option naming
a path (relative to this process's folder), an error, a warning to print, another project,
another version of the code (:func:`code_stamp`), or any failure to reach it. Standard
library only, besides :mod:`wrenmem.fs`.
"""

from __future__ import annotations

import os
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from wrenmem.fs import daemonsock, statedir

FORWARDED = ("recall", "fetch")
HELP = ("-h", "--help")
PACKAGE = Path(__file__).resolve().parent.parent
_IMPORTED = time.time()


def forward(argv: Sequence[str], *, stdout: IO[str] | None = None,
            stderr: IO[str] | None = None) -> int | None:
    """Run ``wrenmem ARGV`` in the project's daemon: its exit code, its output written
    here; or None (not a command it runs, no daemon, declined: run it in this process)."""
    if not forwardable(argv):
        return None
    try:
        root = statedir.find_project_root()
    except (OSError, RuntimeError):
        return None
    if not daemonsock.worth_asking(root):
        return None
    path = daemonsock.socket_path(root)
    message = {"v": daemonsock.PROTOCOL, "op": "cli",
               "args": {"argv": list(argv), "root": str(root), "code": code_stamp(),
                        "env": {k: v for k, v in os.environ.items()
                                if k.startswith("WRENMEM_")}}}
    try:
        reply = daemonsock.exchange(path, message, daemonsock.CONNECT_TIMEOUT,
                                    daemonsock.REPLY_TIMEOUT,
                                    ack_timeout=daemonsock.ACK_TIMEOUT)
    except daemonsock.Hung:
        daemonsock.mark_hung(root, path)
        return None
    ran = _ran(reply)
    if ran is None:
        return None
    code, out, err = ran
    (stdout or sys.stdout).write(out)
    (stderr or sys.stderr).write(err)
    return code


def forwardable(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is a command the daemon may run: ``recall`` or ``fetch``, no help."""
    return bool(argv) and argv[0] in FORWARDED and not any(a in HELP for a in argv[1:])


def _ran(reply: dict[str, Any] | None) -> tuple[int, str, str] | None:
    if reply is None or reply.get("v") != daemonsock.PROTOCOL or not reply.get("ok"):
        return None
    result = reply.get("result")
    if not isinstance(result, dict):
        return None
    code, out, err = result.get("exit"), result.get("stdout"), result.get("stderr")
    if not (isinstance(code, int) and isinstance(out, str) and isinstance(err, str)):
        return None
    return code, out, err


def code_stamp(package: Path = PACKAGE) -> str:
    """The package's files as they are now (count, newest mtime, a checksum of every
    file's path, mtime and size): a daemon whose stamp differs runs other code than this
    process would, and declines. About 160 ``stat`` calls, under a millisecond."""
    entries: list[str] = []
    newest = 0
    folders = [package]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as found:
                for entry in found:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name != "__pycache__":
                            folders.append(Path(entry.path))
                        continue
                    st = entry.stat()
                    newest = max(newest, st.st_mtime_ns)
                    entries.append(f"{entry.path}\0{st.st_mtime_ns}\0{st.st_size}")
        except OSError:
            continue
    entries.sort()
    checksum = zlib.crc32("\n".join(entries).encode("utf-8", "surrogateescape"))
    return f"{len(entries)}-{newest}-{checksum:08x}"


def newest_file(stamp: str) -> float:
    """The newest file's mtime (Unix time) in a :func:`code_stamp`."""
    try:
        return int(stamp.split("-")[1]) / 1e9
    except (IndexError, ValueError):
        return float("inf")


def process_started() -> float:
    """When this process started (Unix time): from /proc on Linux, else when this module
    was imported (the watcher imports it before it serves)."""
    try:
        with open("/proc/self/stat", encoding="ascii", errors="replace") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat", encoding="ascii") as fh:
            boot = next(int(line.split()[1]) for line in fh if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return _IMPORTED
