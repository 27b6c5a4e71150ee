"""Small filesystem helpers: atomic writes that never leave a half-written file."""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from wrenmem.errors import UnreadableFileError, WrenmemError
from wrenmem.fs import pids
from wrenmem.fs.encoding import not_utf8
from wrenmem.fs.inside import opened_path, outside_reason
from wrenmem.fs.statedir import ensure_parent

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def user_cache_dir() -> Path:
    """Per-user cache of derived files (model files, the glossary):
    ``$XDG_CACHE_HOME/wrenmem``, else ``~/.cache/wrenmem``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "wrenmem"


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words, from its ``st_mode``."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_regular_file(path: str | Path, max_bytes: int,
                      setting: str = "max_pair_bytes", *,
                      inside: str | Path | None = None, walked: bool = False) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``: a FIFO, a device or a folder
    is refused before a byte is read (opened non-blocking, checked with fstat), and with
    ``inside`` (the project's root) a file reached through a link out of it
    (:mod:`wrenmem.fs.inside`). ``walked``: the path comes from the catalog's walk, so only
    its last part can be a link and ``O_NOFOLLOW`` settles it. Raises
    :class:`UnreadableFileError` for those, OSError when it cannot be opened."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    nofollow = getattr(os, "O_NOFOLLOW", 0) if inside is not None and walked else 0
    try:
        fd = os.open(path, flags | nofollow)
        settled = bool(nofollow)  # not a link, in a walked folder: inside
    except OSError as e:
        if not nofollow or e.errno != errno.ELOOP:
            raise
        fd = os.open(path, flags)  # a link (or a loop, which raises here)
        settled = False
    try:
        if inside is not None and not settled:
            reason = outside_reason(path, inside, opened_path(fd, path))
            if reason is not None:
                raise UnreadableFileError(reason)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnreadableFileError(f"not a regular file: {file_kind(st.st_mode)}")
        if st.st_size > max_bytes:
            raise _too_large(f"{st.st_size:,}", max_bytes, setting)
        chunks, total = [], 0
        while True:  # the file may grow after fstat: read no more than the limit
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise _too_large(f"over {max_bytes:,}", max_bytes, setting)
        return b"".join(chunks)
    finally:
        os.close(fd)


def os_error_reason(path: str | Path, error: OSError) -> str:
    """Why a file could not be opened, in words a user acts on (links named as such)."""
    if error.errno == errno.ELOOP:
        return "cannot read: a symbolic link loop"
    if error.errno == errno.ENOENT and os.path.islink(path):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return f"cannot read: a dangling symbolic link (to {target})"
    if error.errno == errno.ENAMETOOLONG:
        return "cannot read: the file name is too long"
    return f"cannot read: {error.strerror or error}"


def is_disk_full(error: BaseException | None) -> bool:
    """Whether ``error`` (or what caused it) is a full disk or quota: ``OSError`` ENOSPC or
    EDQUOT, or LanceDB's ``RuntimeError`` that quotes the OS error in its text."""
    for _ in range(8):
        if error is None:
            return False
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(error)
        if "No space left on device" in text or "os error 28" in text or (
                "Disk quota exceeded" in text):
            return True
        error = error.__cause__ or error.__context__
    return False


def disk_full_message(doing: str, where: str | Path, *, advice: bool = True) -> str:
    """One line for a write that ran out of space: what failed, the free space left (and
    with ``advice``, what to do)."""
    import shutil

    place = Path(where)
    while not place.exists() and place != place.parent:
        place = place.parent
    try:
        free = f"{_bytes(shutil.disk_usage(place).free)} free on {place}"
    except OSError:
        free = f"free space on {place} unknown"
    short = f"{doing} failed: no space left on device ({free})"
    if not advice:
        return short
    return (f"{short}; free some space and run `wrenmem sync` again (the index keeps its "
            "last complete version)")


def _bytes(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    raise AssertionError("unreachable")


def check_size(size: int, limit: int) -> None:
    """Raise :class:`UnreadableFileError` when ``size`` bytes (a file's, a git blob's,
    known before any is read) is over ``limit``."""
    if size > limit:
        raise _too_large(f"{size:,}", limit)


def _too_large(size: str, limit: int, setting: str = "max_pair_bytes") -> UnreadableFileError:
    return UnreadableFileError(f"file too large ({size} bytes; the limit is the "
                               f"{setting} setting, {limit:,})")


def walk_files(folder: str, skip: Callable[[str], bool] | None = None,
               on_error: Callable[[str, OSError], None] | None = None
               ) -> Iterator[os.DirEntry[str]]:
    """Every entry below ``folder`` that is not a folder, depth first, without following
    symlinked folders. Names ``skip`` accepts (files and folders) are passed over; a folder
    that cannot be listed is reported to ``on_error`` (if given) and passed over."""
    stack = [folder]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError as e:
            if on_error is not None:
                on_error(current, e)
            continue
        for entry in entries:
            if skip is not None and skip(entry.name):
                continue
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                stack.append(entry.path)
            else:
                yield entry


def atomic_write_text(path: Path, text: str, *, exclusive: bool = False,
                      tmp_dir: Path | None = None) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file (in ``tmp_dir``, when
    given) and a rename; with ``exclusive`` a hard link, which fails with FileExistsError
    when ``path`` exists, so two writers can never claim the same file."""
    atomic_write_bytes(link_target(path) if not exclusive else path, text.encode("utf-8"),
                       exclusive=exclusive, tmp_dir=tmp_dir)


def git_output(root: Path, *args: str) -> str | None:
    """``git -C root ARGS``'s output, stripped; None when it fails (or cannot run)."""
    import subprocess  # (here: a process that never runs git does not import it)

    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def read_state(path: Path, version: int) -> dict[str, Any]:
    """A JSON state or cache file when it is of this ``version``, else {}."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("version") == version else {}


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Write a state or cache file; one that cannot be written (a read-only checkout) costs
    the next command a comparison, nothing more."""
    try:
        atomic_write_text(path, json.dumps(state, ensure_ascii=False))
    except OSError as e:
        logging.getLogger(__name__).debug("cannot write %s: %s", path, e)


def link_target(path: Path) -> Path:
    """The file a rewrite of ``path`` writes: the one a symbolic link names (the link is
    kept), else ``path``."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def atomic_write_bytes(path: Path, data: bytes, *, exclusive: bool = False,
                       tmp_dir: Path | None = None) -> None:
    """Write ``data`` to ``path`` through a fsynced temporary file and a rename (a hard link
    with ``exclusive``: see :func:`atomic_write_text`)."""
    ensure_parent(path)
    tmp = write_temp_file(temp_folder(path.parent, tmp_dir), data, file_mode_for(path))
    try:
        if exclusive:
            os.link(tmp, path)
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise


TEMP_PREFIX = ".wrenmem-"
TEMP_SUFFIX = ".tmp"
STALE_TEMP_SECONDS = 24 * 3600  # a temporary file this old is stale whoever made it


def temp_folder(target_folder: Path, preferred: Path | None) -> Path:
    """Where the temporary file of a write into ``target_folder`` goes: ``preferred`` (a
    folder git ignores, such as ``.wrenmem/tmp``) when it is on the same file system, so the
    final rename stays atomic; else ``target_folder`` itself."""
    if preferred is None:
        return target_folder
    try:
        ensure_parent(preferred / "x")
        if os.stat(preferred).st_dev == os.stat(target_folder).st_dev:
            return preferred
    except OSError:
        pass
    return target_folder


def write_temp_file(folder: Path, data: bytes, mode: int = 0o600, fsync: bool = True) -> str:
    """A new file in ``folder`` holding ``data``, fsynced unless ``fsync`` is False (the
    caller syncs many at once); its name carries this process's id, so
    :func:`remove_stale_temps` can tell a dead writer's leftovers from live work."""
    fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-", suffix=TEMP_SUFFIX,
                               dir=folder)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
    except BaseException:
        remove_quietly(tmp)
        raise
    return tmp


def sync_file_systems(folders: Iterable[Path]) -> bool:
    """Write to disk all that the file systems of ``folders`` hold, with one ``syncfs`` a
    file system (Linux) instead of an fsync a file; its error (a full disk, EIO) is raised
    as OSError, as an fsync's would be. False where there is no ``syncfs``: the caller
    fsyncs its files."""
    if sys.platform != "linux":
        return False
    import ctypes  # here: a few milliseconds that only an import of many files pays

    syncfs = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    if syncfs is None:
        return False
    for folder in set(folders):
        fd = os.open(folder, os.O_RDONLY)
        try:
            if syncfs(fd) != 0:
                code = ctypes.get_errno()
                raise OSError(code, os.strerror(code), str(folder))
        finally:
            os.close(fd)
    return True


def fsync_path(path: str | Path) -> None:
    """fsync a file, or a folder (so the names moved into it survive a power cut)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def quiet_stdio() -> None:
    """In a forked child: standard input and output on /dev/null, so that a child that
    outlives its parent never holds the pipes the parent's caller reads to their end."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def remove_quietly(path: str | Path) -> None:
    """Delete a file that may already be gone."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def remove_stale_temps(folder: Path, now: float | None = None) -> int:
    """Delete the temporary files in ``folder`` that a killed writer left: those whose
    process is gone (and a minute old, for a writer on another machine), or a day old.
    Returns how many were deleted; a folder that cannot be listed is left alone."""
    now = time.time() if now is None else now
    removed = 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for entry in entries:
        name = entry.name
        if not (name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX)):
            continue
        try:
            age = now - entry.stat(follow_symlinks=False).st_mtime
            writer = _writer_pid(name)  # None: an older version's name, age decides
            if age > STALE_TEMP_SECONDS or (age > 60 and not (writer and pids.alive(writer))):
                os.unlink(entry.path)
                removed += 1
        except OSError:
            continue
    return removed


def _writer_pid(name: str) -> int | None:
    head = name[len(TEMP_PREFIX):].split("-", 1)[0]
    return int(head) if head.isdigit() else None


# Derived-state files start with this and a CRC-32 of the payload: one flipped byte makes a
# cache unreadable (so rebuilt) instead of silently trusted.
_MARSHAL_MAGIC = b"wrenmem1"


def file_mode_for(path: Path) -> int:
    """The permissions a rewritten file keeps (mkstemp makes 0600): the old file's, or
    what the umask gives a new file."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    try:  # Linux: read it without changing it (os.umask is process-wide, not thread-safe)
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def read_marshal(path: Path) -> Any:
    """A derived-state file written by :func:`write_marshal`, or None if it is missing,
    truncated, damaged or not marshal data: callers then rebuild what it held."""
    import mmap

    head = len(_MARSHAL_MAGIC) + 4
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size < head:
                return None
            # Mapped, not read: a 50 MB file is copied once, not three times. A writer
            # replaces the file by a rename, so the mapped one never changes.
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                with memoryview(mapped) as view:
                    return _decoded(view, head)
    except (OSError, ValueError):
        return None


def _decoded(view: memoryview, head: int) -> Any:
    import marshal
    import zlib

    if view[:len(_MARSHAL_MAGIC)] != _MARSHAL_MAGIC:
        return None
    with view[head:] as payload:
        if int.from_bytes(view[head - 4:head], "big") != zlib.crc32(payload):
            return None
        try:
            return marshal.loads(payload)
        except (EOFError, ValueError, TypeError):
            return None


def write_marshal(path: Path, data: Any) -> bool:
    """Atomically store derived state (a magic, a CRC-32, the marshal bytes); False (and a
    debug log) when it cannot be written, e.g. in a read-only checkout."""
    import marshal
    import zlib

    try:
        payload = marshal.dumps(data)
        atomic_write_bytes(path, _MARSHAL_MAGIC + zlib.crc32(payload).to_bytes(4, "big")
                           + payload)
    except (OSError, ValueError) as e:
        logging.getLogger(__name__).debug("cannot write %s: %s", path, e)
        return False
    return True


# A file changed within this many seconds of its stat may change again with the same key
# (coarse clocks): caches keyed by stat trust an entry only once the file is older.
RACY_SECONDS = 2.0


# The first field of a stat key: the change time, which no program can set back, unlike
# the mtime (`touch -d`, `cp -p`, editors restoring it); Windows has none: the mtime.
CHANGE_FIELD = "st_mtime_ns" if os.name == "nt" else "st_ctime_ns"


def change_ns(st: os.stat_result) -> int:
    """When the file of ``st`` last changed (see :data:`CHANGE_FIELD`)."""
    return int(getattr(st, CHANGE_FIELD))


def stat_key(st: os.stat_result) -> tuple[int, int, int]:
    """(change time, size, inode): what a stat-keyed cache of a user's file compares."""
    return getattr(st, CHANGE_FIELD), st.st_size, st.st_ino


def is_racy(mtime_ns: int, now: float | None = None) -> bool:
    """Whether a file with this mtime is too fresh for a stat-keyed cache to trust."""
    return (time.time() if now is None else now) - mtime_ns / 1e9 < RACY_SECONDS


def read_text_file(path: Path, max_bytes: int, *, inside: Path | None = None) -> str:
    """A user-named text file (UTF-8, BOM allowed) as text; anything that is not a regular
    file, too big, unreadable or not UTF-8 (or, with ``inside``, a link out of that folder)
    is a WrenmemError naming the file."""
    try:
        data = read_regular_file(path, max_bytes, inside=inside)
        return data.decode("utf-8-sig")
    except UnreadableFileError as e:
        raise WrenmemError(f"{path}: {e.reason}") from e
    except OSError as e:
        raise WrenmemError(f"{path}: {os_error_reason(path, e)}") from e
    except UnicodeDecodeError as e:
        raise WrenmemError(f"{path}: {not_utf8(data, e)}") from e
