"""The index's state mirror: what the index holds, so that a no-op sync costs almost nothing.

``.wrenmem/index-state.bin`` records, for the pairs table as last written, the raw hash and
stat key (:func:`wrenmem.fs.fsutil.stat_key`) of every pair file, the content hash of every
seed, the embedder, the table schema and the URI. :func:`stat_delta` compares one ``stat``
per file with it (no read, no LanceDB, no model), trusting a file only when its key is
unchanged and older than the stats by more than the clock's granularity;
:func:`state_matches` compares a full snapshot's hashes. The mirror is deleted before any
index write and rewritten after it, so it is either true or absent; stats are taken
*before* the files are read, so a file edited in between takes the slow path.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from array import array
from bisect import bisect_left
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from wrenmem.errors import PairError, WrenmemError
from wrenmem.fs import statedir
from wrenmem.fs.fsutil import RACY_SECONDS, read_marshal, stat_key, write_marshal
from wrenmem.index import table as index
from wrenmem.index.report import SyncReport
from wrenmem.pairs import listing
from wrenmem.pairs.catalog import is_pair_name, skipped_name
from wrenmem.pairs.listing import Listing
from wrenmem.pairs.seeds import seed_pairs
from wrenmem.settings import Settings

log = logging.getLogger(__name__)

STATE_NAME = statedir.INDEX_STATE
# 7: no pairs journal beside it (an older mirror may record rows only the journal held)
STATE_VERSION = 7

Stats = dict[str, tuple[int, int, int]]


def walk_listing(settings: Settings) -> Listing:
    """Every pair file and its stat key (:func:`wrenmem.pairs.listing.walk`)."""
    return listing.walk(settings)


def stat_some(settings: Settings, paths: Iterable[str]) -> Stats:
    """The stat keys of those of ``paths`` the walk would list, one ``stat`` each, for a
    sync limited to them (``store``, ``forget``)."""
    knowledge = settings.knowledge_path
    out: Stats = {}
    for rel in paths:
        path = settings.root / rel
        try:
            inner = path.relative_to(knowledge).parts
        except ValueError:
            continue
        if not inner or not is_pair_name(inner[-1]) or any(skipped_name(p) for p in inner):
            continue
        folder, linked = knowledge, False
        for part in inner[:-1]:
            folder = folder / part
            linked = linked or folder.is_symlink()
        if linked:
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        if not os.path.isdir(path):
            out[rel] = stat_key(st)
    return out


def seeds_digest(settings: Settings) -> str:
    """One hash over every seed of the manifest (before files shadow any of them)."""
    h = hashlib.sha256()
    for pair in seed_pairs(settings):
        h.update(pair.path.encode() + b"\0" + pair.content_hash.encode() + b"\n")
    return h.hexdigest()


@dataclass(frozen=True)
class IndexState:
    """What the pairs table held when it was last written, packed because every no-op
    loads it: sorted paths as one string, raw hashes 32 bytes each, stat keys as int64s.
    ``files``, ``stats`` and ``ids`` are the same data as mappings, built on first use."""

    schema: str  # the table layout version (``index.SCHEMA_VERSION``)
    uri: str
    model_id: str
    paths: tuple[str, ...]  # every pair file recorded, sorted
    hashes: bytes  # the raw sha256 of each of ``paths``, 32 bytes each (zeros: unreadable)
    extras: dict[str, str]  # seed id -> content hash
    rows: int
    errors: tuple[tuple[str, str, int], ...]  # (path, reason, line) of unreadable files
    stat_keys: bytes | None  # (change time ns, size, inode) of each of ``paths``, as int64s
    stats_at: float  # the stats were taken before the files were read, at this time
    seeds: str | None  # :func:`seeds_digest` when recorded
    root: str = ""  # the project it was written for: a mirror copied elsewhere is not trusted
    disk: dict[str, tuple[int, int]] | None = None  # the table's files (local indexes)
    version: int | None = None  # the table version this process left (object storage)
    # The walk the stats are exactly, when they are: a no-op then compares bytes.
    walk_id: str | None = None
    walk_keys: bytes | None = None

    @cached_property
    def files(self) -> dict[str, str]:
        """pair path -> raw file hash ("" for a file that could not be read)."""
        h = self.hashes
        return {p: ("" if h[n * 32:n * 32 + 32] == _NO_HASH else h[n * 32:n * 32 + 32].hex())
                for n, p in enumerate(self.paths)}

    @cached_property
    def stats(self) -> Stats | None:
        """pair path -> (change time ns, size, inode), taken before the files were read."""
        if self.stat_keys is None:
            return None
        keys = array("q")
        keys.frombytes(self.stat_keys)
        return dict(zip(self.paths, zip(keys[0::3], keys[1::3], keys[2::3], strict=True),
                        strict=True))

    def hash_of(self, path: str) -> str | None:
        """The recorded raw hash of one path ("" unreadable, None: not recorded)."""
        at = bisect_left(self.paths, path)
        if at == len(self.paths) or self.paths[at] != path:
            return None
        raw = self.hashes[at * 32:at * 32 + 32]
        return "" if raw == _NO_HASH else raw.hex()

    def stat_of(self, path: str) -> tuple[int, int, int] | None:
        """The recorded stat key of one path (None: not recorded)."""
        at = bisect_left(self.paths, path)
        if self.stat_keys is None or at == len(self.paths) or self.paths[at] != path:
            return None
        keys = array("q")
        keys.frombytes(self.stat_keys[at * 24:at * 24 + 24])
        return keys[0], keys[1], keys[2]

    @cached_property
    def ids(self) -> tuple[str, ...]:
        """The table's row ids: every recorded file that parsed, and every seed."""
        bad = {e[0] for e in self.errors}
        return tuple(sorted([p for p in self.paths if p not in bad] + list(self.extras)))

    def to_record(self) -> dict[str, Any]:
        return {"v": STATE_VERSION, "schema": self.schema, "uri": self.uri,
                "model_id": self.model_id, "paths": "\n".join(self.paths),
                "hashes": self.hashes, "extras": self.extras, "rows": self.rows,
                "errors": list(self.errors), "stats": self.stat_keys,
                "stats_at": self.stats_at, "seeds": self.seeds, "root": self.root,
                "disk": self.disk, "version": self.version, "walk_id": self.walk_id,
                "walk_keys": self.walk_keys}

    @classmethod
    def from_record(cls, data: Any) -> IndexState | None:
        """The state in a record read back; None for anything of the wrong shape (the slow
        path then decides)."""
        try:
            if not isinstance(data, dict) or data.get("v") != STATE_VERSION:
                return None
            text, hashes, extras, stats = (data["paths"], data["hashes"], data["extras"],
                                           data["stats"])
            if not (isinstance(text, str) and isinstance(hashes, bytes) and _str_map(extras)):
                return None
            paths = tuple(text.split("\n")) if text else ()
            if len(hashes) != 32 * len(paths) or (stats is not None and not (
                    isinstance(stats, bytes) and len(stats) == 24 * len(paths))):
                return None
            errors = tuple((str(p), str(r), int(n)) for p, r, n in data["errors"])
            disk = data["disk"]
            if disk is not None and not (isinstance(disk, dict) and all(
                    isinstance(k, str) and isinstance(v, tuple) and len(v) == 2
                    for k, v in disk.items())):
                return None
            walk_id, walk_keys = data.get("walk_id"), data.get("walk_keys")
            if not (walk_id is None and walk_keys is None or isinstance(walk_id, str)
                    and isinstance(walk_keys, bytes) and len(walk_keys) % 24 == 0):
                walk_id = walk_keys = None
            return cls(str(data["schema"]), str(data["uri"]), str(data["model_id"]), paths,
                       hashes, extras, int(data["rows"]), errors, stats,
                       float(data["stats_at"]),
                       None if data["seeds"] is None else str(data["seeds"]),
                       str(data["root"]), disk,
                       None if data.get("version") is None else int(data["version"]),
                       walk_id, walk_keys)
        except (KeyError, TypeError, ValueError):
            return None


_NO_HASH = bytes(32)


def pack_files(files: dict[str, str], stats: Stats | None
               ) -> tuple[tuple[str, ...], bytes, bytes | None]:
    """(sorted paths, raw hashes, stat keys) as :class:`IndexState` keeps them; a path
    without a stat gets a key no file has (it is read again next time)."""
    paths = tuple(sorted(files))
    hashes = b"".join(bytes.fromhex(files[p]) if files[p] else _NO_HASH for p in paths)
    if stats is None:
        return paths, hashes, None
    keys = array("q")
    missing = (-1, -1, -1)
    for p in paths:
        keys.extend(stats.get(p, missing))
    return paths, hashes, keys.tobytes()


def _str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _path(settings: Settings) -> Path:
    return settings.state_dir / STATE_NAME


def load_state(settings: Settings) -> IndexState | None:
    return IndexState.from_record(read_marshal(_path(settings)))


def save_state(settings: Settings, *, model_id: str, files: dict[str, str],
               extras: dict[str, str], rows: int, errors: list[tuple[str, str, int]],
               stats: Stats | None, stats_at: float, seeds: str | None,
               version: int | None = None, walk: Listing | None = None) -> IndexState:
    """Record what the index now holds (call only right after it was made so). ``walk``:
    the walk ``stats`` are exactly, for every file of ``files`` and no other."""
    paths, hashes, keys = pack_files(files, stats)
    return _write(settings, model_id, paths, hashes, extras, rows, errors, keys, stats_at,
                  seeds, version, walk)


def _write(settings: Settings, model_id: str, paths: tuple[str, ...], hashes: bytes,
           extras: dict[str, str], rows: int, errors: list[tuple[str, str, int]],
           keys: bytes | None, stats_at: float, seeds: str | None, version: int | None,
           walk: Listing | None) -> IndexState:
    state = IndexState(index.SCHEMA_VERSION, settings.index_uri, model_id, paths, hashes,
                       extras, rows, tuple(errors), keys, stats_at, seeds, str(settings.root),
                       index.disk_listing(settings), version,
                       None if walk is None else walk.id, None if walk is None else walk.keys)
    write_marshal(_path(settings), state.to_record())  # unwritable: syncs stay on the slow path
    return state


PATCH_MAX = 256  # a mirror is patched in place for up to this many changed paths


def patch_state(settings: Settings, prior: IndexState,
                changes: dict[str, tuple[str, tuple[int, int, int]] | None], *, rows: int,
                errors: list[tuple[str, str, int]], stats_at: float,
                walk: Listing | None = None, found: int = -1) -> IndexState:
    """Record the mirror ``prior`` with ``changes`` made (path -> (raw hash or "", stat),
    or None: no longer recorded), splicing its packed records where the changed paths sort.
    ``walk``: the walk the stats now are, if it found ``found`` files (checked)."""
    if prior.stat_keys is None or len(changes) > PATCH_MAX:
        files = dict(prior.files)
        stats = dict(prior.stats or {})
        for path, change in changes.items():
            files.pop(path, None)
            stats.pop(path, None)
            if change is not None:
                files[path], stats[path] = change
        return save_state(settings, model_id=prior.model_id, files=files,
                          extras=dict(prior.extras), rows=rows, errors=errors,
                          stats=stats if prior.stat_keys is not None else None,
                          stats_at=stats_at, seeds=prior.seeds, version=prior.version,
                          walk=walk if walk is not None and len(files) == found else None)
    paths = list(prior.paths)
    hashes = bytearray(prior.hashes)
    keys = bytearray(prior.stat_keys)
    for path in sorted(changes):
        change = changes[path]
        at = bisect_left(paths, path)
        there = at < len(paths) and paths[at] == path
        if change is None:
            if there:
                del paths[at]
                del hashes[at * 32:at * 32 + 32]
                del keys[at * 24:at * 24 + 24]
            continue
        raw = bytes.fromhex(change[0]) if change[0] else _NO_HASH
        packed = array("q", change[1]).tobytes()
        if there:
            hashes[at * 32:at * 32 + 32] = raw
            keys[at * 24:at * 24 + 24] = packed
        else:
            paths.insert(at, path)
            hashes[at * 32:at * 32] = raw
            keys[at * 24:at * 24] = packed
    return _write(settings, prior.model_id, tuple(paths), bytes(hashes), dict(prior.extras),
                  rows, errors, bytes(keys), stats_at, prior.seeds, prior.version,
                  walk if len(paths) == found else None)


def walk_matches(walk: Listing | None, files: Collection[str], stats: Stats | None) -> bool:
    """Whether ``stats`` of exactly the paths ``files`` are the stats ``walk`` found."""
    if walk is None or stats is None:
        return False
    found = walk.stats
    return len(found) == len(files) and all(stats.get(p) == k for p, k in found.items())


def record_walk(settings: Settings, state: IndexState, walk: Listing) -> IndexState:
    """The mirror ``state`` with ``walk`` recorded as its stats' walk (a no-op found every
    stat as recorded), written only if the lock is free and nobody wrote meanwhile."""
    from wrenmem.errors import LockTimeoutError
    from wrenmem.storage.lock import index_lock

    updated = replace(state, walk_id=walk.id, walk_keys=walk.keys)
    try:
        with index_lock(settings, timeout=0):
            if load_state(settings) == state and write_marshal(_path(settings),
                                                               updated.to_record()):
                return updated
    except LockTimeoutError:
        pass
    return state


def record_disk(settings: Settings, state: IndexState,
                disk: dict[str, tuple[int, int]] | None) -> IndexState:
    """The mirror ``state`` with the table's files recorded as ``disk`` (after a
    compaction, under the index lock)."""
    updated = replace(state, disk=disk)
    write_marshal(_path(settings), updated.to_record())
    return updated


def invalidate_state(settings: Settings) -> None:
    _path(settings).unlink(missing_ok=True)


def same_target(settings: Settings, state: IndexState | None, model_id: str) -> bool:
    """The mirror describes this project, URI, embedder and table schema, and the table
    has exactly the files it had then (:func:`wrenmem.storage.lance.disk_listing`); a
    remote table must still be at the version this process left."""
    if (state is None or state.schema != index.SCHEMA_VERSION
            or state.uri != settings.index_uri or state.root != str(settings.root)
            or state.model_id != model_id or not index.index_exists(settings)):
        return False
    if settings.remote_index:  # another machine may have written it: one round trip
        return state.version is not None and index.remote_version(settings) == state.version
    disk = index.disk_listing(settings)
    return disk is None or (bool(disk) and disk == state.disk)


def disk_changes(settings: Settings, state: IndexState | None) -> str | None:
    """Which files of the table changed since this project's mirror was written, in words
    (None when none did, or nothing can be said)."""
    if (state is None or state.root != str(settings.root) or state.uri != settings.index_uri
            or state.disk is None):
        return None
    now = index.disk_listing(settings)
    if now is None or now == state.disk:
        return None
    missing = sorted(set(state.disk) - set(now))
    modified = sorted(k for k in set(state.disk) & set(now) if state.disk[k] != now[k])
    added = sorted(set(now) - set(state.disk))
    parts = [f"{label}: {', '.join(names[:3])}{' …' if len(names) > 3 else ''}"
             for label, names in (("missing", missing), ("modified", modified),
                                  ("new", added)) if names]
    return ("the index's files changed since wrenmem last wrote them (" + "; ".join(parts)
            + "): `wrenmem sync` checks and repairs it")


def state_matches(settings: Settings, state: IndexState | None, model_id: str,
                  files: dict[str, str], extras: dict[str, str]) -> bool:
    """True when the index provably holds exactly these file and seed hashes."""
    return (same_target(settings, state, model_id) and state is not None
            and state.files == files and state.extras == extras)


def usable_state(settings: Settings, model_id: str) -> IndexState | None:
    """The mirror, when it describes this index, recorded stats, and the seeds are as it
    recorded; else None."""
    state = load_state(settings)
    if not same_target(settings, state, model_id) or state is None or state.stat_keys is None:
        return None
    try:
        return state if seeds_digest(settings) == state.seeds else None
    except WrenmemError:
        return None


@dataclass(frozen=True)
class StatDelta:
    """How the pair files differ from the mirror by their stats alone (one walk)."""

    state: IndexState
    found: Listing | Stats  # every pair file now (the walk), or the paths looked at
    stats_at: float  # taken just before the walk
    touched: tuple[str, ...]  # new files, and files whose stat changed or is too recent
    gone: tuple[str, ...]  # recorded files no longer there
    partial: bool = False  # only some paths were looked at (``stat_delta(only=...)``)
    quick: bool = False  # answered by comparing the walk's keys with the recorded walk's
    keys: Stats | None = None  # the touched paths' stats, when found without :attr:`stats`

    @property
    def empty(self) -> bool:
        return not (self.touched or self.gone)

    @property
    def stats(self) -> Stats:
        """path -> (change time ns, size, inode) of every file found (or looked at)."""
        return self.found.stats if isinstance(self.found, Listing) else self.found

    @property
    def walk(self) -> Listing | None:
        return self.found if isinstance(self.found, Listing) else None

    def key_of(self, path: str) -> tuple[int, int, int] | None:
        """The stat found for ``path`` (None: not found)."""
        if self.keys is not None and path in self.keys:
            return self.keys[path]
        return self.stats.get(path)

    @property
    def count(self) -> int:
        """How many files were found (or looked at)."""
        return self.found.count if isinstance(self.found, Listing) else len(self.found)


def stat_delta(settings: Settings, model_id: str, only: Collection[str] | None = None
               ) -> StatDelta | None:
    """Which files may have changed since the mirror was written, by one ``stat`` each;
    None when the mirror cannot be used (:func:`usable_state`). ``only``: look at just
    these relative paths (:func:`stat_some`), not the whole walk."""
    state = usable_state(settings, model_id)
    if state is None or state.stat_keys is None:
        return None
    stats_at = time.time()
    limit = (state.stats_at - RACY_SECONDS) * 1e9
    if only is None and state.walk_id is not None:  # the common no-op builds no mapping
        walk = walk_listing(settings)
        stats_at = min(stats_at, walk.taken_at)  # an early walk (listing.start_early)
        if (state.walk_id == walk.id and state.walk_keys == walk.keys
                and walk.newest_ns < limit):
            return StatDelta(state, walk, stats_at, (), (), quick=True)  # two byte strings
    else:
        walk = None
    if only is not None:  # a few paths: their records looked up, no mapping built
        some = stat_some(settings, only)
        return StatDelta(state, some, stats_at,
                         tuple(sorted(p for p, st in some.items()
                                      if state.stat_of(p) != st or st[0] >= limit)),
                         tuple(sorted(p for p in set(only)
                                      if p not in some and state.stat_of(p) is not None)),
                         partial=True)
    if walk is None:
        walk = walk_listing(settings)
        stats_at = min(stats_at, walk.taken_at)
    if (state.walk_id == walk.id and state.walk_keys is not None
            and len(state.walk_keys) == len(walk.keys)):
        return _same_paths_delta(state, walk, stats_at, limit)
    recorded = state.stats
    assert recorded is not None
    now = walk.stats
    if now == recorded and (not now or max(st[0] for st in now.values()) < limit):
        return StatDelta(state, walk, stats_at, (), ())  # the same, compared as mappings
    get = recorded.get
    touched = tuple(sorted(p for p, st in now.items() if get(p) != st or st[0] >= limit))
    gone = tuple(sorted(p for p in recorded if p not in now)) if len(now) != len(
        recorded) or touched else ()
    return StatDelta(state, walk, stats_at, touched, gone)


def _same_paths_delta(state: IndexState, walk: Listing, stats_at: float, limit: float
                      ) -> StatDelta:
    """The delta of a walk of the same paths as the recorded walk's: only the keys that
    differ, or are too recent, are looked at."""
    assert state.walk_keys is not None
    positions = set(listing.differing(state.walk_keys, walk.keys))
    if walk.newest_ns >= limit:
        values = array("q")
        values.frombytes(walk.keys)
        positions.update(n for n, m in enumerate(values[0::3]) if m >= limit)
    touched, gone, keys = [], [], {}
    for n in sorted(positions):
        path, key = walk.path_at(n), walk.key_at(n)
        if key != listing.MISSING:
            touched.append(path)
            keys[path] = key
        elif state.walk_keys[n * 24:n * 24 + 24] != walk.keys[n * 24:n * 24 + 24]:
            gone.append(path)  # recorded, and its stat fails now
    return StatDelta(state, walk, stats_at, tuple(sorted(touched)), tuple(sorted(gone)),
                     keys=keys)


def quick_noop(settings: Settings, model_id: str) -> IndexState | None:
    """The mirror, when every file's stat and every seed is as recorded; else None."""
    delta = stat_delta(settings, model_id)
    return delta.state if delta is not None and delta.empty else None


def report_from_state(state: IndexState, model_id: str) -> SyncReport:
    """The no-op report of the index the mirror ``state`` describes."""
    errors = tuple(PairError(p, reason, line) for p, reason, line in state.errors)
    return SyncReport(unchanged=state.ids, errors=errors, noop=True, model_id=model_id,
                      rows=state.rows)
