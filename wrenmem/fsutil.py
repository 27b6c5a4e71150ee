"""Small filesystem helpers: atomic writes that never leave a half-written file."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from wrenmem.statedir import ensure_parent


def atomic_write_text(path: Path, text: str, *, exclusive: bool = False) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename.

    With ``exclusive`` the final step is a hard link, which fails with FileExistsError
    when ``path`` already exists, so two writers can never claim the same file.
    """
    ensure_parent(path)
    fd, tmp = tempfile.mkstemp(prefix=".wrenmem-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if exclusive:
            os.link(tmp, path)
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Byte version of :func:`atomic_write_text` (no exclusive mode)."""
    ensure_parent(path)
    fd, tmp = tempfile.mkstemp(prefix=".wrenmem-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_marshal(path: Path) -> Any:
    """A derived-state file written by :func:`write_marshal`, or None if it is missing,
    truncated or not marshal data: callers then rebuild what it held."""
    import marshal

    try:
        return marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return None


def write_marshal(path: Path, data: Any) -> bool:
    """Atomically store derived state; False (and a debug log) when it cannot be written,
    e.g. in a read-only checkout, where wrenmem still works, only slower."""
    import marshal

    try:
        atomic_write_bytes(path, marshal.dumps(data))
    except (OSError, ValueError) as e:
        logging.getLogger(__name__).debug("cannot write %s: %s", path, e)
        return False
    return True


# A file changed within this many seconds of its stat may change again without its
# (mtime, size) key changing (coarse clocks, writes within one tick): caches keyed by stat
# trust an entry only once the file is older than this.
RACY_SECONDS = 2.0


def is_racy(mtime_ns: int, now: float | None = None) -> bool:
    """Whether a file with this mtime is too fresh for a stat-keyed cache to trust."""
    return (time.time() if now is None else now) - mtime_ns / 1e9 < RACY_SECONDS
