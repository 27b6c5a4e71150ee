"""Links are followed only inside the project.

A project's own files (pairs, knowledge files, the manifest) may be symbolic links, or sit
in a linked folder, when the file they reach is still inside the project. A link that leads
out of it (to ``~/.aws/credentials``, ``/etc/passwd``, another checkout) is a way for a
pull request or a cloned repository to have wrenmem read a file of the machine and serve it
to an agent, print it in ``validate`` or post it in a PR comment: such a file is never read.

:func:`outside_reason` says why a path must not be read; :func:`wrenmem.fs.fsutil.
read_regular_file` asks it (``inside=``) about the file it has opened, so what is checked is
what is read. Every reader of a project file goes through that one function.
"""

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
    """Why ``path`` must not be read (it is, or lies in, a symbolic link resolving outside
    ``root``), or None when it may (a path given outside the project is a local user's
    choice, never refused here). ``real``: its resolved path, when known. The reason
    names the link as the project wrote it, never the resolved place on this machine."""
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
