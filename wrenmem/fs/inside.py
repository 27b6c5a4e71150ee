"""Links are followed only inside the project: a link out of it (``~/.aws/credentials``)
would let a pull request have wrenmem read a file of the machine and serve it to an agent.
:func:`wrenmem.fs.fsutil.read_regular_file` (``inside=``) asks :func:`outside_reason` about
the file it opened, so what is checked is what is read."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

LINKS_RULE = "links are followed only inside the project"


def opened_path(fd: int, path: str | Path) -> str:
    """The real path of the file open at ``fd`` (opened from ``path``): what the kernel
    opened, where ``/proc/self/fd`` says it (one call, no race with a link swapped after the
    open); else ``path`` resolved."""
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
        if real.startswith("/") and not real.endswith(" (deleted)"):
            return real
    except OSError:
        pass
    return os.path.realpath(path)


@lru_cache(maxsize=16)
def _real_root(root: str) -> str:
    return os.path.realpath(root)


def is_inside(real: str, root: str | Path) -> bool:
    """Whether the resolved path ``real`` is ``root`` (resolved) or below it."""
    top = _real_root(str(root))
    return real.startswith(top) and (len(real) == len(top) or real[len(top)] == os.sep
                                     or top.endswith(os.sep))


def outside_reason(path: str | Path, root: str | Path, real: str | None = None) -> str | None:
    """Why ``path`` must not be read (it is, or lies in, a link resolving outside ``root``),
    or None (a path outside the project is the user's choice). ``real``: its resolved path,
    when known. The reason names the link, never the place it resolves to."""
    real = os.path.realpath(path) if real is None else real
    if is_inside(real, root):
        return None
    if not is_inside(os.path.abspath(path), root):
        return None  # a file named outside the project (by a local user): no link of its
    text = str(path)
    if os.path.islink(text):
        try:
            target = os.readlink(text)
        except OSError:
            target = "?"
        return f"a symbolic link to {target}, outside the project: not read ({LINKS_RULE})"
    return ("inside a symbolic link to a folder outside the project: not read "
            f"({LINKS_RULE})")
