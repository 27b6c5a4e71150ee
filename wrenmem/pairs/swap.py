"""Replace a set of pair files as one change: the old set or the new one, never half of each.

New files are written in full under temporary names and made durable (one ``syncfs`` of
their file system on Linux, else an fsync a file); then a journal of the moves and
deletions (``.wrenmem/import-swap.json``), then the moves. Killed before the journal: the
old set; after it: the next scan of the pairs finishes the journal."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wrenmem.errors import WrenmemError
from wrenmem.fs import statedir
from wrenmem.fs.fsutil import (
    atomic_write_text,
    fsync_path,
    remove_quietly,
    remove_stale_temps,
    sync_file_systems,
    temp_folder,
    write_temp_file,
)
from wrenmem.knowledge.slug import numbered_names
from wrenmem.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Planned:
    """One file of the new set: where it goes, its bytes, and whether it is a new file
    (claimed exclusively: a file that appeared meanwhile is never overwritten)."""

    path: Path
    data: bytes
    create: bool
    mode: int = 0o644


def pair_temp_folder(settings: Settings, target_folder: Path) -> Path:
    """Where a pair file's temporary file goes: ``.wrenmem/tmp`` (git ignores it) when it is
    on the file system of ``target_folder``, else that folder (the name is hidden)."""
    return temp_folder(target_folder, settings.state_dir / statedir.TMP)


def replace_set(settings: Settings, writes: Sequence[Planned], deletes: Sequence[Path],
                progress: Callable[[int, int], None] | None = None) -> dict[Path, Path]:
    """Write ``writes`` and delete ``deletes`` as one change; returns the final path of
    each created file whose name another writer took meanwhile (planned -> written). An
    OSError while writing (a full disk) is a :class:`WrenmemError` and changes nothing.
    ``progress(done, total)`` is told after each file written (under its temporary name)."""
    remove_stale_temps(settings.state_dir / statedir.TMP)
    staged: list[tuple[str, str, bool]] = []
    try:
        for item in writes:
            item.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = write_temp_file(pair_temp_folder(settings, item.path.parent), item.data,
                                  item.mode, fsync=False)
            staged.append((tmp, str(item.path), item.create))
            if progress is not None:
                progress(len(staged), len(writes))
        # Every new file on disk before the journal names it: one syncfs, not 5,000 fsyncs
        if not sync_file_systems({Path(tmp).parent for tmp, _p, _c in staged}):
            for tmp, _path, _create in staged:
                fsync_path(tmp)
        with _swap_lock(settings):
            root = str(settings.root)  # paths relative to it: a moved project still replays
            journal: dict[str, list[Any]] = {
                "moves": [[os.path.relpath(t, root), os.path.relpath(p, root), c]
                          for t, p, c in staged],
                "deletes": [os.path.relpath(p, root) for p in deletes]}
            atomic_write_text(_journal_path(settings), json.dumps(journal))
            renamed = _apply(settings.root, journal)
            os.unlink(_journal_path(settings))
    except OSError as e:
        if _journal_path(settings).exists():
            raise  # the moves began: the next scan finishes them
        for tmp, _rel, _create in staged:
            remove_quietly(tmp)
        where = getattr(e, "filename", None) or "the knowledge folder"
        raise WrenmemError(f"cannot write {where}: {e.strerror or e}; nothing changed") from e
    except BaseException:
        if not _journal_path(settings).exists():
            for tmp, _rel, _create in staged:
                remove_quietly(tmp)
        raise
    return renamed


def finish_interrupted(settings: Settings) -> None:
    """Finish the moves of a replacement a killed process began (a journal is left).
    Cheap when there is none: one stat. A journal that cannot be finished (a read-only
    checkout) is logged and left for a later command."""
    path = _journal_path(settings)
    if not path.exists():
        return
    try:
        with _swap_lock(settings):
            try:
                journal = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                return  # finished by the process that held the lock
            _apply(settings.root, journal)
            os.unlink(path)
            log.warning("finished an import that was interrupted (%d files moved into place)",
                        len(journal.get("moves", [])))
    except (OSError, ValueError, TypeError, KeyError) as e:
        log.warning("cannot finish an interrupted import (%s): %s", path, e)


def _apply(root: Path, journal: dict[str, list[Any]]) -> dict[Path, Path]:
    """Make the journal's moves, then its deletions (paths relative to ``root``); each step
    may have been made already (the journal is replayed after a kill)."""
    renamed: dict[Path, Path] = {}
    for tmp_rel, target_rel, create in journal["moves"]:
        tmp, target = root / tmp_rel, root / target_rel
        if not os.path.lexists(tmp):
            continue  # moved before the kill
        if create:
            final = _claim(tmp, target)
            if final != target:
                renamed[target] = final
        else:
            os.replace(tmp, target)
    for rel in journal["deletes"]:
        remove_quietly(root / rel)
    _sync_folders([root / m[1] for m in journal["moves"]])
    return renamed


def _claim(tmp: Path, target: Path) -> Path:
    """Link ``tmp`` to ``target``, or to the next free ``-N`` name if another writer took
    it since the plan; the temporary name is then removed."""
    for candidate in numbered_names(target.parent, target.stem, target.suffix):
        try:
            os.link(tmp, candidate)
        except FileExistsError:
            if os.path.samefile(tmp, candidate):  # linked before a kill
                break
            continue
        break
    else:
        raise WrenmemError(f"no free file name for {target}")
    os.unlink(tmp)
    return candidate


def _sync_folders(paths: Sequence[Path]) -> None:
    """fsync the folders that received files, so the moves survive a power cut."""
    for folder in {p.parent for p in paths}:
        with contextlib.suppress(OSError):
            fsync_path(folder)


def _journal_path(settings: Settings) -> Path:
    return settings.state_dir / statedir.IMPORT_SWAP


@contextlib.contextmanager
def _swap_lock(settings: Settings) -> Iterator[None]:
    """Held while moves are made: a scan that finds the journal waits for a live import
    to finish its moves instead of making them twice."""
    import fcntl  # here, as wrenmem.storage.lock does: the module imports everywhere

    path = settings.state_dir / statedir.IMPORT_SWAP_LOCK
    statedir.ensure_parent(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
