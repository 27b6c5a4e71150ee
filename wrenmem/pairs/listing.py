"""The stat walk of the pair files: one ``stat`` per file, no folder listed twice.

:func:`walk` answers every freshness check (a no-op sync, the catch-up before a one-shot
recall, grep's snapshot key): which pair files there are, and the stat key of each, by
the rules of :func:`wrenmem.pairs.catalog.iter_pair_files`. Every folder is listed and
every file stat'ed, so no edit is missed (a saved record of each folder's names, listed
again only when its key changed, was measured and removed: bench/studies/slim-2026-12.md).
Two walks of unchanged files compare
as two byte strings (:attr:`Listing.keys`); the same :attr:`Listing.id`, the same paths."""

from __future__ import annotations

import hashlib
import os
import time
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property, partial
from itertools import chain
from operator import attrgetter
from pathlib import Path

from wrenmem.fs.fsutil import (
    CHANGE_FIELD,
    RACY_SECONDS,
    stat_key,
    walk_files,
)
from wrenmem.pairs.catalog import SKIPPED_NAMES
from wrenmem.settings import Settings

MISSING = (-1, -1, -1)  # the key of a listed name whose stat failed (a dangling link)

Stats = dict[str, tuple[int, int, int]]


@dataclass(frozen=True)
class Listing:
    """Every pair file found by one walk, in walk order (see the module docstring)."""

    base: str  # the knowledge folder relative to the project root, with a trailing "/"
    dirs: tuple[str, ...]  # folders below it ("" for itself, "a/b/" below), walk order
    names: tuple[tuple[str, ...], ...]  # the candidate file names of each folder, in order
    keys: bytes  # (mtime_ns, size, inode) of each name, as int64s; MISSING: stat failed
    id: str  # names ``base``, ``dirs`` and ``names``: the same id, the same paths
    taken_at: float  # time.time() just before the walk began
    # Every folder could be listed and every name stat'ed (grep's snapshot needs it).
    complete: bool = True

    @property
    def newest_ns(self) -> int:
        """The newest change time of the files found (-1 when there are none)."""
        values = array("q")
        values.frombytes(self.keys)
        return max(values[0::3], default=-1)

    @cached_property
    def count(self) -> int:
        """How many files were found (names whose stat failed not counted)."""
        values = array("q")
        values.frombytes(self.keys)
        return len(values) // 3 - values[1::3].count(-1)

    @cached_property
    def _starts(self) -> list[int]:
        starts, at = [], 0
        for ns in self.names:
            starts.append(at)
            at += len(ns)
        return starts

    def path_at(self, n: int) -> str:
        """The relative path of the ``n``-th name in walk order."""
        d = bisect_right(self._starts, n) - 1
        return self.base + self.dirs[d] + self.names[d][n - self._starts[d]]

    def key_at(self, n: int) -> tuple[int, int, int]:
        values = array("q")
        values.frombytes(self.keys[n * 24:n * 24 + 24])
        return values[0], values[1], values[2]

    def paths(self) -> list[str]:
        """The relative path of every name, in walk order (a failed stat included)."""
        base = self.base
        return [base + d + n for d, ns in zip(self.dirs, self.names, strict=True) for n in ns]

    @cached_property
    def stats(self) -> Stats:
        """relative path -> (mtime_ns, size, inode) of every pair file found."""
        values = array("q")
        values.frombytes(self.keys)
        return {p: k for p, k in zip(self.paths(),
                                     zip(values[0::3], values[1::3], values[2::3],
                                         strict=True), strict=True) if k != MISSING}

    def racy(self, before: float) -> bool:
        """Some file's change time is too close to ``before`` for its stat to vouch for
        it."""
        return self.newest_ns >= (before - RACY_SECONDS) * 1e9


def differing(a: bytes, b: bytes) -> list[int]:
    """The positions of the (change time, size, inode) keys that differ between two key strings
    of one listing (the same length): compared by blocks, each block in C."""
    out: list[int] = []
    block = 24 * 512
    for start in range(0, len(a), block):
        if a[start:start + block] != b[start:start + block]:
            for at in range(start, min(start + block, len(a)), 24):
                if a[at:at + 24] != b[at:at + 24]:
                    out.append(at // 24)
    return out


def _list_folder(path: str) -> tuple[tuple[str, ...], tuple[str, ...], bool] | None:
    """(pair file names, subfolder names, whether every entry could be classified) of a
    folder, by the rules of :func:`wrenmem.pairs.catalog.iter_pair_files`; None when it
    cannot be listed."""
    try:
        with os.scandir(path) as listing:
            entries = list(listing)
    except OSError:
        return None
    names, subdirs, clean = [], [], True
    skipped = SKIPPED_NAMES
    for entry in entries:
        name = entry.name
        if name[0] == "." or name[-1] == "~":  # catalog.skipped_name
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(name)
                continue
        except OSError:
            clean = False
            continue
        if name.endswith(".md") and name.lower() not in skipped:
            names.append(name)
    return tuple(names), tuple(subdirs), clean


def walk(settings: Settings) -> Listing:
    """Every pair file below the knowledge folder and its stat key (see the module
    docstring). Never raises for the files: a folder that cannot be listed or a name
    that cannot be stat'ed is left out, and the listing says it is not ``complete``."""
    taken_at = time.time()
    folder = str(settings.knowledge_path)
    prefix = str(settings.root) + os.sep
    if os.sep != "/" or not folder.startswith(prefix):
        return _plain_walk(settings, taken_at)
    base = folder[len(prefix):] + "/"
    dirs: list[str] = []
    names: list[tuple[str, ...]] = []
    jobs: list[tuple[str, tuple[str, ...]]] = []  # (folder path, names to stat), walk order
    complete = True
    stack = [""] if os.path.isdir(folder) else []
    while stack:
        rel = stack.pop()
        path = folder + "/" + rel[:-1] if rel else folder
        listed = _list_folder(path)
        if listed is None:
            complete = False
            continue
        complete = complete and listed[2]
        dirs.append(rel)
        names.append(listed[0])
        jobs.append((path, listed[0]))
        stack.extend(rel + d + "/" for d in reversed(listed[1]))
    keys, clean = _stat_jobs(jobs)
    return Listing(base, tuple(dirs), tuple(names), keys, _identity(base, dirs, names),
                   taken_at, complete and clean)


def _stat_jobs(jobs: list[tuple[str, tuple[str, ...]]]) -> tuple[bytes, bool]:
    """The (change time, size, inode) keys of the names of each folder, in order, MISSING where a
    stat fails; whether every one could be taken."""
    keys = array("q")
    extend = keys.extend
    complete = True
    by_fd = os.stat in os.supports_dir_fd
    for path, names in jobs:
        if not names:
            continue
        if not by_fd:
            complete = _stat_each([path + "/" + n for n in names], os.stat, extend) and complete
            continue
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            complete = False
            extend(MISSING * len(names))
            continue
        try:
            start = len(keys)
            try:  # one C loop: stat, the three fields, into the array
                extend(chain.from_iterable(map(_KEY, map(partial(os.stat, dir_fd=fd), names))))
            except OSError:  # a name gone or dangling: name by name
                del keys[start:]
                complete = _stat_each(names, partial(os.stat, dir_fd=fd), extend) and complete
        finally:
            os.close(fd)
    return keys.tobytes(), complete


_KEY = attrgetter(CHANGE_FIELD, "st_size", "st_ino")  # fsutil.stat_key


def _stat_each(names: list[str] | tuple[str, ...], stat: Callable[[str], os.stat_result],
               extend: Callable[[Iterable[int]], None]) -> bool:
    """The keys of ``names`` one by one, MISSING for those that cannot be stat'ed; whether
    every one could be."""
    clean = True
    for name in names:
        try:
            st = stat(name)
        except OSError:
            clean = False
            extend(MISSING)
            continue
        extend(stat_key(st))
    return clean


def _identity(base: str, dirs: list[str], names: list[tuple[str, ...]]) -> str:
    h = hashlib.sha256(base.encode("utf-8", "surrogateescape"))
    for d, ns in zip(dirs, names, strict=True):
        h.update(b"\0" + d.encode("utf-8", "surrogateescape") + b"\0"
                 + "\n".join(ns).encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def _plain_walk(settings: Settings, taken_at: float) -> Listing:
    """The walk without the folder record, where paths are not plain strings below the
    root (Windows, a knowledge folder outside the project): one "folder" of paths."""
    from wrenmem.pairs.catalog import is_pair_name, skipped_name

    folder = str(settings.knowledge_path)
    found: list[str] = []
    keys = array("q")
    complete = True
    if os.path.isdir(folder):
        for entry in walk_files(folder, skipped_name):
            if not is_pair_name(entry.name):
                continue
            found.append(settings.relpath(Path(entry.path)))
            try:
                st = os.stat(entry.path)
            except OSError:
                complete = False
                keys.extend(MISSING)
                continue
            keys.extend(stat_key(st))
    names = [tuple(found)]
    return Listing("", ("",), tuple(names), keys.tobytes(), _identity("", [""], names),
                   taken_at, complete)
