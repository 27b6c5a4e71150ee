"""The index's state mirror: what the index holds, so that a no-op sync costs almost nothing.

``.wrenmem/index-state.bin`` records, for the pairs table as last written: the raw hash and
the stat key (mtime, size, inode) of every pair file, the content hash of every seed, the
embedder, the table schema and the URI. Two checks use it:

- :func:`quick_noop`: one ``stat`` per file and nothing else (no file read, no parse, no
  LanceDB, no model). Trusts a file only when its stat key is unchanged and its mtime is
  older than the moment the stats were taken by more than the clock's granularity.
- :func:`state_matches`: compares a full snapshot's hashes (the catalog re-read the files).

The mirror is deleted before any index write and rewritten after it, so it is either true
or absent. Stats are taken *before* the files are read, so a file edited in between shows
a newer stat than recorded and takes the slow path.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

from wrenmem.fsutil import read_marshal, write_marshal
from wrenmem.index import table as index
from wrenmem.pairs.catalog import SKIPPED_NAMES
from wrenmem.pairs.seeds import seed_pairs
from wrenmem.settings import Settings

log = logging.getLogger(__name__)

STATE_NAME = "index-state.bin"
STATE_VERSION = 2
RACY_SECONDS = 2.0

Stats = dict[str, tuple[int, int, int]]


def walk_stats(settings: Settings) -> Stats:
    """``relative path -> (mtime_ns, size, inode)`` of every pair file.

    The same files as :func:`wrenmem.pairs.catalog.iter_pair_files` (same rules: hidden and
    ``~`` names skipped, ``*.md`` only, no README, symlinked folders not followed), with
    plain strings because this runs for every file on every no-op.
    """

    folder = str(settings.knowledge_path)
    out: Stats = {}
    if not os.path.isdir(folder):
        return out
    prefix = str(settings.root) + os.sep
    stack = [folder]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            name = entry.name
            if name.startswith(".") or name.endswith("~"):
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif name.endswith(".md") and name.lower() not in SKIPPED_NAMES:
                text = entry.path
                rel = (text[len(prefix):] if text.startswith(prefix)
                       else settings.relpath(Path(text)))
                if os.sep != "/":
                    rel = rel.replace(os.sep, "/")
                try:
                    st = os.stat(text)
                except OSError:
                    continue
                out[rel] = (st.st_mtime_ns, st.st_size, st.st_ino)
    return out


def seeds_digest(settings: Settings) -> str:
    """One hash over every seed of the manifest (before files shadow any of them)."""

    h = hashlib.sha256()
    for pair in seed_pairs(settings):
        h.update(pair.path.encode() + b"\0" + pair.content_hash.encode() + b"\n")
    return h.hexdigest()


def _path(settings: Settings) -> Path:
    return settings.state_dir / STATE_NAME


def load_state(settings: Settings) -> dict[str, Any] | None:
    data = read_marshal(_path(settings))
    if not isinstance(data, dict) or data.get("v") != STATE_VERSION:
        return None
    return data


def save_state(settings: Settings, *, model_id: str, files: dict[str, str],
               extras: dict[str, str], rows: int, ids: list[str],
               errors: list[tuple[str, str, int]], stats: Stats | None, stats_at: float,
               seeds: str | None) -> None:
    """Record what the index now holds (call only right after it was made so)."""

    state = {"v": STATE_VERSION, "schema": index.SCHEMA_VERSION, "uri": settings.index_uri,
             "model_id": model_id, "files": files, "extras": extras, "rows": rows,
             "ids": ids, "errors": errors, "stats": stats, "stats_at": stats_at,
             "seeds": seeds}
    write_marshal(_path(settings), state)  # unwritable: syncs just stay on the slow path


def invalidate_state(settings: Settings) -> None:
    _path(settings).unlink(missing_ok=True)


def same_target(settings: Settings, state: dict[str, Any] | None, model_id: str) -> bool:
    """The mirror describes this URI, embedder and table schema, and the table exists."""

    return (state is not None and state.get("schema") == index.SCHEMA_VERSION
            and state.get("uri") == settings.index_uri
            and state.get("model_id") == model_id and index.index_exists(settings))


def state_matches(settings: Settings, state: dict[str, Any] | None, model_id: str,
                  files: dict[str, str], extras: dict[str, str]) -> bool:
    """True when the index provably holds exactly these file and seed hashes."""
    return (same_target(settings, state, model_id) and state is not None
            and state.get("files") == files and state.get("extras") == extras)


def quick_noop(settings: Settings, model_id: str) -> dict[str, Any] | None:
    """The mirror, when every file's stat and every seed is as recorded; else None."""
    state = load_state(settings)
    if not same_target(settings, state, model_id) or state is None:
        return None
    recorded, stats_at = state.get("stats"), state.get("stats_at")
    if recorded is None or stats_at is None:
        return None
    now = walk_stats(settings)
    if now != recorded:
        return None
    limit = (stats_at - RACY_SECONDS) * 1e9
    if any(st[0] >= limit for st in now.values()):
        return None  # modified too close to the recording to trust the stat alone
    if seeds_digest(settings) != state.get("seeds"):
        return None
    return state
