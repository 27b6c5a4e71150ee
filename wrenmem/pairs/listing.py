"""The stat walk of the pair files: one ``stat`` per file, and no folder listed twice.

Every freshness check (a no-op sync, the catch-up sync before a one-shot recall, the grep
snapshot's key) asks the same question: which pair files are there, and what is the stat
key (mtime, size, inode) of each? :func:`walk` answers it for all of them, with the same
rules as :func:`wrenmem.pairs.catalog.iter_pair_files` (hidden and ``~`` names skipped,
``*.md`` only, no README, symlinked folders not followed, a symlinked file stat'ed through
its link).

At 100,000 files, listing the folders costs as much again as the stats themselves. So the
names found in each folder are kept in ``.wrenmem/pair-listing.bin`` with the folder's own
key (ctime, mtime, inode), and a folder whose key is unchanged is not listed again: its
recorded names are stat'ed one by one. Adding, removing or renaming an entry changes the
folder's mtime and ctime; ``touch`` or a restored mtime still changes its ctime, which no
program can set back. A folder is trusted only when its ctime was older than the moment it
was listed by more than the clock's granularity (:data:`wrenmem.fsutil.RACY_SECONDS`), and
never when one of its entries could not be classified; an edit in place changes only the
file, and every file is stat'ed on every walk, so no edit is missed.

The result, :class:`Listing`, is compact: the folders, the names in each, and one array of
the files' keys in walk order, with an ``id`` that names the list of paths (the same id
means the same paths in the same order). Two walks of unchanged files compare as two byte
strings.

A one-shot process may start the walk in a forked child at its start
(:func:`start_early`), so the stats are taken on the other core while it imports and loads;
its first :func:`walk` then takes the child's listing, made by the same code.
"""

from __future__ import annotations

import hashlib
import marshal
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
from typing import Any

from wrenmem import statedir
from wrenmem.errors import WrenmemError
from wrenmem.fsutil import RACY_SECONDS, read_marshal, write_marshal
from wrenmem.pairs.catalog import SKIPPED_NAMES
from wrenmem.settings import Settings

FILE_NAME = statedir.PAIR_LISTING
VERSION = 1
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
        """The newest mtime of the files found (-1 when there are none)."""
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
        """Some file's mtime is too close to ``before`` for its stat to vouch for it."""
        return self.newest_ns >= (before - RACY_SECONDS) * 1e9


def differing(a: bytes, b: bytes) -> list[int]:
    """The positions of the (mtime, size, inode) keys that differ between two key strings
    of one listing (the same length): compared by blocks, each block in C."""
    out: list[int] = []
    block = 24 * 512
    for start in range(0, len(a), block):
        if a[start:start + block] != b[start:start + block]:
            for at in range(start, min(start + block, len(a)), 24):
                if a[at:at + 24] != b[at:at + 24]:
                    out.append(at // 24)
    return out


def _listing_path(settings: Settings) -> Path:
    return settings.state_dir / FILE_NAME


@dataclass
class _Folder:
    key: tuple[int, int, int]  # (ctime_ns, mtime_ns, inode) when it was listed
    trusted: bool  # listed long enough after its last change to vouch for the names
    names: tuple[str, ...]
    subdirs: tuple[str, ...]


def _load_folders(settings: Settings, base: str) -> tuple[dict[str, _Folder], str | None]:
    """The folders as last recorded (in the order of the walk that recorded them) and
    that walk's listing id; ({}, None) when there is no usable record."""
    data = read_marshal(_listing_path(settings))
    try:
        if (not isinstance(data, dict) or data.get("v") != VERSION
                or data.get("base") != base or data.get("root") != str(settings.root)):
            return {}, None
        out = {}
        for rel, key, trusted, names, subdirs in data["folders"]:
            ctime, mtime, inode = key
            out[str(rel)] = _Folder((int(ctime), int(mtime), int(inode)), bool(trusted),
                                    tuple(names.split("\n")) if names else (),
                                    tuple(subdirs.split("\n")) if subdirs else ())
        return out, str(data["id"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return {}, None


def _save_folders(settings: Settings, base: str, folders: dict[str, _Folder],
                  identity: str) -> None:
    record = {"v": VERSION, "root": str(settings.root), "base": base, "id": identity,
              "folders": [(rel, f.key, f.trusted, "\n".join(f.names), "\n".join(f.subdirs))
                          for rel, f in folders.items()]}
    try:
        write_marshal(_listing_path(settings), record)  # unwritable: every walk lists
    except (OSError, WrenmemError):  # (a .wrenmem that is not a folder)
        pass


def _list_folder(path: str, since: float) -> tuple[_Folder | None, bool]:
    """(the folder as listed now, whether every entry could be classified); None when it
    cannot be listed. Its key is taken before the listing: a change in between shows."""
    try:
        st = os.stat(path)
        with os.scandir(path) as listing:
            entries = list(listing)
    except OSError:
        return None, False
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
    key = (st.st_ctime_ns, st.st_mtime_ns, st.st_ino)
    trusted = clean and st.st_ctime_ns < (since - RACY_SECONDS) * 1e9
    return _Folder(key, trusted, tuple(names), tuple(subdirs)), clean


def walk(settings: Settings) -> Listing:
    """Every pair file below the knowledge folder and its stat key (see the module
    docstring). Never raises for the files: a folder that cannot be listed or a name
    that cannot be stat'ed is left out, and the listing says it is not ``complete``.
    The walk :func:`start_early` began for these settings, when there is one."""
    early = _take_early(settings)
    return early if early is not None else _walk_here(settings)


def _walk_here(settings: Settings, split: bool = False) -> Listing:
    """The walk in this process. ``split``: the files' stats are taken by this process and
    a forked one, half each (the early walk's child: see :func:`start_early`)."""
    taken_at = time.time()
    folder = str(settings.knowledge_path)
    prefix = str(settings.root) + os.sep
    if os.sep != "/" or not folder.startswith(prefix):
        return _plain_walk(settings, taken_at)
    base = folder[len(prefix):] + "/"
    if not os.path.isdir(folder):
        return Listing(base, (), (), b"", _identity(base, [], []), taken_at)
    try:
        prior, prior_id = _load_folders(settings, base)
    except WrenmemError:  # .wrenmem is not a folder: no record
        prior, prior_id = {}, None
    folders: dict[str, _Folder] = {}
    dirs: list[str] = []
    names: list[tuple[str, ...]] = []
    jobs: list[tuple[str, tuple[str, ...]]] = []  # (folder path, names to stat), walk order
    complete = True
    changed = False
    stack = [""]
    while stack:  # the folders, each checked against its record before its files' stats
        rel = stack.pop()
        path = folder + "/" + rel[:-1] if rel else folder
        known = prior.get(rel)
        current: _Folder | None = None
        if known is not None and known.trusted:
            try:
                st = os.stat(path)
            except OSError:
                st = None
            if st is not None and (st.st_ctime_ns, st.st_mtime_ns, st.st_ino) == known.key:
                current = known
        if current is None:
            current, clean = _list_folder(path, taken_at)
            changed = True
            if current is None:
                complete = False
                continue
            complete = complete and clean
        folders[rel] = current
        dirs.append(rel)
        names.append(current.names)
        jobs.append((path, current.names))
        stack.extend(rel + d + "/" for d in reversed(current.subdirs))
    keys, clean = _stat_split(jobs) if split else _stat_jobs(jobs)
    if changed or prior_id is None or folders.keys() != prior.keys():
        identity = _identity(base, dirs, names)
        _save_folders(settings, base, folders, identity)
    else:  # every folder as recorded, so walked in the recorded order: the same paths
        identity = prior_id
    return Listing(base, tuple(dirs), tuple(names), keys, identity, taken_at,
                   complete and clean)


def _stat_jobs(jobs: list[tuple[str, tuple[str, ...]]]) -> tuple[bytes, bool]:
    """The (mtime, size, inode) keys of the names of each folder, in order, MISSING where a
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


SPLIT_MIN = 20_000  # files from which the early walk's child shares the stats with another


def _stat_split(jobs: list[tuple[str, tuple[str, ...]]]) -> tuple[bytes, bool]:
    """:func:`_stat_jobs`, the later half of the files stat'ed by a forked process at the
    same time (the machine's other core); that half here if it fails."""
    total = sum(len(n) for _p, n in jobs)
    if total < SPLIT_MIN or _split_off():
        return _stat_jobs(jobs)
    at, count = 0, 0
    while at < len(jobs) and count < total // 2:
        count += len(jobs[at][1])
        at += 1
    try:
        later: _Child | None = _Child(lambda: _stat_jobs(jobs[at:]))
    except OSError:
        later = None
    keys, complete = _stat_jobs(jobs[:at])
    got = later.result() if later is not None else None
    size = 24 * (total - count)
    if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], bytes)
            and len(got[0]) == size and isinstance(got[1], bool)):
        got = _stat_jobs(jobs[at:])
    return keys + got[0], complete and got[1]


def _split_off() -> bool:
    return os.environ.get(SPLIT_ENV, "1").strip() == "0"


_KEY = attrgetter("st_mtime_ns", "st_size", "st_ino")


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
        extend((st.st_mtime_ns, st.st_size, st.st_ino))
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
    from wrenmem.fsutil import walk_files
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
            keys.extend((st.st_mtime_ns, st.st_size, st.st_ino))
    names = [tuple(found)]
    return Listing("", ("",), tuple(names), keys.tobytes(), _identity("", [""], names),
                   taken_at, complete)


# ------------------------------------------------------------------ the early walk ----
#
# At 100,000 files the walk is about 0.3 s of stat calls, and a one-shot process (a no-op
# `sync`, a `recall`) spends as long again importing its modules and loading what it
# answers from before it needs the walk. So such a process may fork a child at its start
# that walks the files (the same code, :func:`_walk_here`) on the other core and sends the
# listing back; the first :func:`walk` of these settings takes it. A listing taken earlier
# than asked is still exact for what it says (the stats as of its ``taken_at``, before any
# file is read): consumers compare against records older than it, and read files after it.

EARLY_ENV = "WRENMEM_EARLY_WALK"  # "0": never fork the early walk (walk in-process)
SPLIT_ENV = "WRENMEM_WALK_SPLIT"  # "0": the early walk's child takes every stat itself


class _Child:
    """A forked process that runs ``work`` and sends back what it returns (marshal), then
    leaves without any of this process's cleanup."""

    def __init__(self, work: Callable[[], Any]):
        read, write = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read)
            os.close(write)
            raise
        if pid == 0:
            code = 1
            try:
                os.close(read)
                view = memoryview(marshal.dumps(work()))
                while view:
                    view = view[os.write(write, view):]
                code = 0
            except BaseException:  # noqa: BLE001 - whatever it is, the parent does the work
                pass
            finally:
                os._exit(code)
        os.close(write)
        self.pid, self.fd = pid, read

    def result(self) -> Any:
        """What the work returned (waits for it); None when the child failed."""
        chunks = []
        try:
            while True:
                chunk = os.read(self.fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        except OSError:
            chunks = []
        status = self.drop()
        if status != 0 or not chunks:
            return None
        try:
            return marshal.loads(b"".join(chunks))
        except (ValueError, TypeError, EOFError):
            return None

    def drop(self) -> int:
        """Stop listening (a child still writing gets EPIPE and leaves) and reap it: its
        exit status, -1 if unknown."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        try:
            return os.waitpid(self.pid, 0)[1]
        except ChildProcessError:
            return -1


@dataclass
class _Early:
    key: tuple[str, str, str]
    child: _Child | None  # None when ``ready`` was handed back instead
    ready: Listing | None = None


_EARLY: _Early | None = None


def _settings_key(settings: Settings) -> tuple[str, str, str]:
    return (str(settings.root), str(settings.knowledge_path), str(settings.state_dir))


def can_fork_early() -> bool:
    """The platform forks, this is the only thread, and ``WRENMEM_EARLY_WALK`` is not 0."""
    import threading

    return (hasattr(os, "fork") and os.name == "posix"
            and threading.active_count() == 1
            and os.environ.get(EARLY_ENV, "1").strip() != "0")


def cores_busy() -> bool:
    """Whether the machine's cores are taken (the 1-minute load average reaches their
    count): a forked walk would then only queue for a core, at the cost of the fork and
    the pipe (as ``wrenmem.embedders.default_threads`` decides for BLAS threads)."""
    try:
        return os.getloadavg()[0] >= (os.cpu_count() or 1)
    except (OSError, AttributeError):
        return False


def start_early(settings: Settings, *, split: bool = True) -> bool:
    """Fork a child that walks the pair files now, while this process goes on; the next
    :func:`walk` of the same settings takes its listing (or, if the child failed, walks
    here). True when a child was started. Call it only at a process's start, before any
    thread, and only where this process writes no pair file before it walks. ``split``:
    the child shares the stats of many files with a process of its own (the other core)."""
    global _EARLY
    if _EARLY is not None or not can_fork_early():
        return False

    def work() -> tuple[Any, ...]:
        found = _walk_here(settings, split=split)
        return (found.base, found.dirs, found.names, found.keys, found.id, found.taken_at,
                found.complete)

    try:
        child = _Child(work)
    except OSError:
        return False
    _EARLY = _Early(_settings_key(settings), child)
    return True


def hand_back(settings: Settings, found: Listing) -> None:
    """Keep ``found`` for the next :func:`walk` of these settings in this process (a fast
    path that looked and found work to do hands its listing to the full path)."""
    global _EARLY
    drop_early()
    _EARLY = _Early(_settings_key(settings), None, found)


def drop_early() -> None:
    """Forget the early walk (its child is ended and reaped)."""
    global _EARLY
    early, _EARLY = _EARLY, None
    if early is not None and early.child is not None:
        early.child.drop()


def _take_early(settings: Settings) -> Listing | None:
    """The early walk's listing, once, if it was started for these settings and worked."""
    global _EARLY
    early = _EARLY
    if early is None or early.key != _settings_key(settings):
        return None
    _EARLY = None
    if early.child is None:
        return early.ready
    data: Any = early.child.result()
    try:
        base, dirs, names, keys, identity, taken_at, complete = data
        if (not isinstance(keys, bytes) or not isinstance(names, tuple)
                or len(keys) != 24 * sum(len(n) for n in names)):
            return None
        return Listing(str(base), tuple(dirs), tuple(tuple(n) for n in names), keys,
                       str(identity), float(taken_at), bool(complete))
    except (ValueError, TypeError):
        return None
