"""Every pair file of a project, read through a stat-keyed cache (``.wrenmem/catalog.bin``).

A scan re-reads only the files whose stat key (:func:`wrenmem.fs.fsutil.stat_key`: ctime,
size, inode) changed; a file modified within the last two seconds is hashed again next time,
since a same-size edit in the same clock tick would not show."""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wrenmem.errors import PairError, WrenmemError
from wrenmem.fs import statedir
from wrenmem.fs.fsutil import (
    file_kind,
    is_racy,
    os_error_reason,
    read_marshal,
    stat_key,
    walk_files,
    write_marshal,
)
from wrenmem.pairs.pairfile import Pair, decode_file, parse_pair, read_pair_bytes
from wrenmem.pairs.swap import finish_interrupted
from wrenmem.pairs.trust import settle
from wrenmem.settings import MAX_PAIR_BYTES, Settings

log = logging.getLogger(__name__)
CACHE_VERSION = 6  # 5: the also: phrasings; 6: links out of the project refused
SKIPPED_NAMES = {"readme.md"}


@dataclass(frozen=True)
class Scan:
    """The result of reading the knowledge folder: good pairs and per-file errors."""

    pairs: tuple[Pair, ...]
    errors: tuple[PairError, ...]
    file_hashes: dict[str, str]  # relative path -> sha256 of the raw bytes


def skipped_name(name: str) -> bool:
    """Hidden files and folders and editors' backups: never pairs, never watched."""
    return name.startswith(".") or name.endswith("~")


def is_pair_name(name: str) -> bool:
    """Whether a file of this name (not a folder) is read as a pair file."""
    return (name.endswith(".md") and not skipped_name(name)
            and name.lower() not in SKIPPED_NAMES)


def require_listed_pair(settings: Settings, rel: str) -> None:
    """Refuse ``rel`` unless the catalog lists it as a pair: a ``*.md`` under the knowledge
    folder with no hidden or backup folder or name on the way (``forget`` deletes only
    pairs, never a draft, a README or a dotfile that happens to parse)."""
    given = settings.root / rel
    try:
        inner = (given.parent.resolve() / given.name).relative_to(settings.knowledge_path)
    except ValueError:
        raise WrenmemError(f"refused: {rel} is not inside {settings.knowledge_dir}") from None
    if (not inner.parts or not is_pair_name(inner.name)
            or any(skipped_name(part) for part in inner.parts[:-1])):
        raise WrenmemError(
            f"refused: {rel} is not a pair the catalog lists (a hidden or backup name, a "
            "README, or not *.md): wrenmem never reads it as a pair, so it never deletes it")


def iter_pair_files(folder: Path) -> Iterator[Path]:
    """Every ``*.md`` under ``folder``, recursively, skipping hidden files and folders."""
    if not folder.is_dir():
        return
    for entry in walk_files(str(folder), skipped_name,
                            lambda where, e: log.warning("cannot list %s: %s", where, e)):
        if is_pair_name(entry.name):
            yield Path(entry.path)


def read_pair_file(path: Path, rel: str, max_bytes: int = MAX_PAIR_BYTES, *,
                   inside: Path | None = None) -> tuple[Pair, str]:
    """Read and parse one file; returns the pair and the sha256 of its bytes (``inside``:
    the project's root, out of which no link is followed)."""
    data = read_pair_bytes(path, rel, max_bytes, inside=inside)
    digest = hashlib.sha256(data).hexdigest()
    return parse_pair(decode_file(data, rel), rel), digest


def require_knowledge_dir(settings: Settings) -> None:
    """Raise when the knowledge folder is missing: a mistyped ``knowledge_dir`` must be an
    error, not an empty knowledge base (a sync would then remove every row)."""
    if settings.knowledge_path.is_dir():
        return
    origin = settings.origins.get("knowledge_dir", "default")
    where = "" if origin == "default" else f" (setting knowledge_dir from {origin})"
    what = "is not a folder" if settings.knowledge_path.exists() else "does not exist"
    raise WrenmemError(f"the knowledge folder {settings.knowledge_dir}{where} {what} in "
                       f"{settings.root}: run `wrenmem init`, or fix the setting")


def scan(settings: Settings, *, use_cache: bool = True, refresh: bool = False) -> Scan:
    """Read every pair file of the project; one bad file never stops the others. ``refresh``
    reads every file again and rewrites the cache; without ``use_cache`` it is not used."""
    require_knowledge_dir(settings)
    finish_interrupted(settings)  # an import killed while moving its files into place
    cache_path = settings.state_dir / statedir.CATALOG
    cache = _load_cache(cache_path) if use_cache and not refresh else {}
    fresh: dict[str, Any] = {}
    pairs: list[Pair] = []
    errors: list[PairError] = []
    hashes: dict[str, str] = {}
    now = time.time()
    dirty = False
    root_prefix = str(settings.root) + os.sep
    for path in iter_pair_files(settings.knowledge_path):
        text = str(path)
        # String slicing, not Path.resolve(): this loop runs for every file on every call.
        rel = text[len(root_prefix):] if text.startswith(root_prefix) else settings.relpath(path)
        if os.sep != "/":
            rel = rel.replace(os.sep, "/")
        entry, read = _entry(settings, path, rel, cache.get(rel), now, errors)
        if entry is None:
            continue
        dirty = dirty or read
        fresh[rel] = entry
        _collect(rel, entry, pairs, errors, hashes)
    if use_cache and (dirty or set(fresh) != set(cache)):
        _save_cache(cache_path, fresh)
    pairs.sort(key=lambda p: p.path)
    errors.sort(key=lambda e: e.path)
    return Scan(settle(settings, pairs), tuple(errors), hashes)


def read_paths(settings: Settings, rels: Iterable[str]) -> Scan:
    """Read only these pair files (relative paths), as :func:`scan` would, without its
    cache: a sync that knows which few files changed reads just those. A path that is
    gone is left out (neither a pair nor an error)."""
    pairs: list[Pair] = []
    errors: list[PairError] = []
    hashes: dict[str, str] = {}
    now = time.time()
    for rel in sorted(set(rels)):
        entry, _read = _entry(settings, settings.root / rel, rel, None, now, errors)
        if entry is not None:
            _collect(rel, entry, pairs, errors, hashes)
    errors.sort(key=lambda e: e.path)
    return Scan(settle(settings, pairs), tuple(errors), hashes)


def _entry(settings: Settings, path: Path, rel: str, cached: Any, now: float,
           errors: list[PairError]) -> tuple[tuple[Any, ...] | None, bool]:
    """(cache entry, whether the file was read) of one file; (None, False) when it is not
    a readable regular file (an error is added) or is gone."""
    text = str(path)
    try:
        st = os.stat(text)
    except OSError as e:
        if os.path.lexists(text):  # a dangling link or a loop: say so, never skip silently
            errors.append(PairError(rel, os_error_reason(text, e)))
        return None, False  # else deleted while we were listing
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block, /dev/zero never end
        errors.append(PairError(rel, f"not a regular file: {file_kind(st.st_mode)}"))
        return None, False
    key = stat_key(st)
    cached = _valid_entry(cached)
    if st.st_size > settings.max_pair_bytes:
        return _read_entry(path, rel, key, True, None, settings.max_pair_bytes,
                           settings.root), False
    if cached is not None and tuple(cached[0]) == key and not cached[3]:
        return cached, False
    return _read_entry(path, rel, key, is_racy(key[0], now), cached,
                       settings.max_pair_bytes, settings.root), True


def _collect(rel: str, entry: tuple[Any, ...], pairs: list[Pair], errors: list[PairError],
             hashes: dict[str, str]) -> None:
    hashes[rel] = entry[1]
    if entry[2][0] == "ok":
        pairs.append(_pair_from_record(rel, entry[2][1]))
    else:
        _kind, reason, line = entry[2]
        errors.append(PairError(rel, reason, line))


def _read_entry(path: Path, rel: str, key: tuple[int, int, int], racy: bool,
                cached: Any, max_bytes: int, root: Path) -> tuple[Any, ...]:
    try:  # a link out of the project is an error entry: never read, never served (the
        # paths come from walks that follow no linked folder: only the file may be a link)
        data = read_pair_bytes(path, rel, max_bytes, inside=root, walked=True)
    except PairError as e:
        return (key, "", ("error", e.reason, e.line), True)
    digest = hashlib.sha256(data).hexdigest()
    if cached is not None and cached[1] == digest:
        return (key, digest, cached[2], racy)
    try:
        pair = parse_pair(decode_file(data, rel), rel)
        record: tuple[Any, ...] = ("ok", _pair_to_record(pair))
    except PairError as e:
        record = ("error", e.reason, e.line)
    return (key, digest, record, racy)


_OPT_STR: tuple[type, ...] = (str, type(None))
_RECORD_TYPES: tuple[type | tuple[type, ...], ...] = (
    str, str, _OPT_STR, _OPT_STR, (list, tuple), str, _OPT_STR, str, dict, int, bool,
    (list, tuple), (list, tuple))


def _valid_entry(entry: Any) -> Any:
    """A cache entry of the shape this module writes, or None (read the file again): a
    cache is derived state, and a damaged or crafted one must not become a traceback."""
    try:
        key, digest, record, racy = entry
        ok = (len(key) == 3 and all(type(k) is int for k in key) and isinstance(digest, str)
              and isinstance(racy, bool) and isinstance(record, tuple | list))
        if ok and record[0] == "ok":
            rec = record[1]
            ok = (len(record) == 2 and isinstance(rec, tuple | list)
                  and len(rec) == len(_RECORD_TYPES)
                  and all(isinstance(v, t) for v, t in zip(rec, _RECORD_TYPES, strict=True))
                  and all(isinstance(t, str) for t in rec[4]) and bool(rec[0]) and bool(rec[1])
                  and all(isinstance(c, tuple | list) and len(c) == 3
                          and isinstance(c[0], str) and isinstance(c[1], str)
                          and isinstance(c[2], bool) for c in rec[11])
                  and (not rec[12] or all(isinstance(a, str) for a in rec[12])))
        elif ok:
            ok = (len(record) == 3 and record[0] == "error" and isinstance(record[1], str)
                  and type(record[2]) is int)
    except (TypeError, ValueError):
        return None
    return entry if ok else None


def _pair_to_record(pair: Pair) -> tuple[Any, ...]:
    return (pair.nl, pair.sql, pair.datasource, pair.dialect, pair.tags, pair.source,
            pair.created_at, pair.notes, marshal_safe(pair.extra), pair.sql_line,
            pair.wren_format, pair.comments, pair.also)


def _pair_from_record(rel: str, rec: tuple[Any, ...]) -> Pair:
    return Pair(nl=rec[0], sql=rec[1], path=rel, datasource=rec[2], dialect=rec[3],
                tags=tuple(rec[4]), source=rec[5], created_at=rec[6], notes=rec[7],
                extra=dict(rec[8]), sql_line=rec[9], wren_format=rec[10],
                comments=tuple((c[0], c[1], c[2]) for c in rec[11]), also=tuple(rec[12]))


def marshal_safe(value: Any) -> Any:
    """Unknown front-matter values reduced to types marshal can store."""
    if isinstance(value, dict):
        return {str(k): marshal_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [marshal_safe(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _load_cache(path: Path) -> dict[str, Any]:
    data = read_marshal(path)
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return {}
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else {}


def _save_cache(path: Path, entries: dict[str, Any]) -> None:
    write_marshal(path, {"version": CACHE_VERSION, "entries": entries})
