"""Every pair file of a project, read through a stat-keyed cache.

A scan lists ``knowledge/sql/**/*.md``, and re-reads only the files whose (mtime, size,
inode) changed since the last scan; the rest come from ``.wrenmem/catalog.bin``. Files
modified within the last two seconds are re-hashed on the next scan too, because a
same-size edit in the same clock tick would otherwise be missed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wrenmem import statedir
from wrenmem.errors import PairError
from wrenmem.fsutil import is_racy, read_marshal, write_marshal
from wrenmem.pairs.pairfile import Pair, decode_file, parse_pair
from wrenmem.settings import Settings

log = logging.getLogger(__name__)
CACHE_VERSION = 3
SKIPPED_NAMES = {"readme.md"}


@dataclass(frozen=True)
class Scan:
    """The result of reading the knowledge folder: good pairs and per-file errors."""

    pairs: tuple[Pair, ...]
    errors: tuple[PairError, ...]
    file_hashes: dict[str, str]  # relative path -> sha256 of the raw bytes


def iter_pair_files(folder: Path) -> Iterator[Path]:
    """Every ``*.md`` under ``folder``, recursively, skipping hidden files and folders."""
    if not folder.is_dir():
        return
    stack = [folder]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError as e:
            log.warning("cannot list %s: %s", current, e)
            continue
        for entry in entries:
            if entry.name.startswith(".") or entry.name.endswith("~"):
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
            elif entry.name.endswith(".md") and entry.name.lower() not in SKIPPED_NAMES:
                yield Path(entry.path)


def read_pair_file(path: Path, rel: str) -> tuple[Pair, str]:
    """Read and parse one file; returns the pair and the sha256 of its bytes."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise PairError(rel, f"cannot read: {e.strerror or e}") from e
    digest = hashlib.sha256(data).hexdigest()
    return parse_pair(decode_file(data, rel), rel), digest


def scan(settings: Settings, *, use_cache: bool = True) -> Scan:
    """Read every pair file of the project. One bad file never stops the others."""
    cache_path = settings.state_dir / statedir.CATALOG
    cache = _load_cache(cache_path) if use_cache else {}
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
        try:
            st = os.stat(text)
        except OSError:
            continue  # deleted while we were listing
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        cached = cache.get(rel)
        racy = is_racy(st.st_mtime_ns, now)
        if cached is not None and tuple(cached[0]) == key and not cached[3]:
            entry = cached
        else:
            entry = _read_entry(path, rel, key, racy, cached)
            dirty = True
        fresh[rel] = entry
        hashes[rel] = entry[1]
        if entry[2][0] == "ok":
            pairs.append(_pair_from_record(rel, entry[2][1]))
        else:
            _kind, reason, line = entry[2]
            errors.append(PairError(rel, reason, line))
    if use_cache and (dirty or set(fresh) != set(cache)):
        _save_cache(cache_path, fresh)
    pairs.sort(key=lambda p: p.path)
    errors.sort(key=lambda e: e.path)
    return Scan(tuple(pairs), tuple(errors), hashes)


def _read_entry(path: Path, rel: str, key: tuple[int, int, int], racy: bool,
                cached: Any) -> tuple[Any, ...]:
    try:
        data = path.read_bytes()
    except OSError as e:
        return (key, "", ("error", f"cannot read: {e.strerror or e}", 1), True)
    digest = hashlib.sha256(data).hexdigest()
    if cached is not None and cached[1] == digest:
        return (key, digest, cached[2], racy)
    try:
        pair = parse_pair(decode_file(data, rel), rel)
        record: tuple[Any, ...] = ("ok", _pair_to_record(pair))
    except PairError as e:
        record = ("error", e.reason, e.line)
    return (key, digest, record, racy)


def _pair_to_record(pair: Pair) -> tuple[Any, ...]:
    return (pair.nl, pair.sql, pair.datasource, pair.dialect, pair.tags, pair.source,
            pair.created_at, pair.notes, marshal_safe(pair.extra), pair.sql_line,
            pair.wren_format)


def _pair_from_record(rel: str, rec: tuple[Any, ...]) -> Pair:
    return Pair(nl=rec[0], sql=rec[1], path=rel, datasource=rec[2], dialect=rec[3],
                tags=tuple(rec[4]), source=rec[5], created_at=rec[6], notes=rec[7],
                extra=dict(rec[8]), sql_line=rec[9], wren_format=rec[10])


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
