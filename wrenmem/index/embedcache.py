"""Vectors by (embedder, text): what was embedded once is never embedded again, so a
branch flip back embeds nothing. A bounded LRU marshal file in ``.wrenmem/``, keyed by model
id and the SHA-256 of the text, written atomically under the index lock; derived state.

Beside it, ``embed-cache-keys.bin`` holds the first 64 bits of each entry's key and the
stat of the cache file it describes: a ``store`` asking for one new text learns it is not
there without reading 40 MB (50-100 ms of CPU). Keys of another cache file are not used.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from wrenmem.fs import statedir
from wrenmem.fs.fsutil import is_racy, read_marshal, write_marshal
from wrenmem.settings import Settings

log = logging.getLogger(__name__)

FILE_NAME = statedir.EMBED_CACHE
KEYS_VERSION = 1
MAX_ENTRIES = 20_000  # about 40 MB of 512-dim float32 vectors
SAVE_MIN_NEW = 16  # fewer new vectors than this may wait in a long-lived process (save)
SAVE_EVERY_SECONDS = 60.0
VERSION = 1


def cache_path(settings: Settings) -> Path:
    return settings.state_dir / FILE_NAME


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def keys_path(path: Path) -> Path:
    """The keys file of the cache at ``path`` (``embed-cache-keys.bin`` beside
    ``embed-cache.bin``)."""
    return path.with_name(f"{path.stem}-keys{path.suffix}")


_HEX_KEY = re.compile(r"[0-9a-f]{64}")


def _short(key: str) -> int:
    """The first 64 bits of a text key (a SHA-256 in hex)."""
    return int(key[:16], 16)


class EmbedCache:
    """The cache of one embedder; ``lookup`` then ``store`` then ``save``."""

    def __init__(self, path: Path, model_id: str, max_entries: int = MAX_ENTRIES):
        self.path = path
        self.model_id = model_id
        self.max_entries = max_entries
        self.hits = 0
        self._dirty = False
        self._added = 0  # vectors stored since the cache was read
        # (model id, text hash) -> float32 bytes, oldest use first; read at the first use
        # that the keys file cannot answer
        self._loaded: dict[tuple[str, str], bytes] | None = None

    @property
    def _entries(self) -> dict[tuple[str, str], bytes]:
        if self._loaded is None:
            self._loaded = _load(self.path)
        return self._loaded

    def __len__(self) -> int:
        return len(self._entries)

    def _missing(self, keys: list[str], every: Any) -> bool:
        """Whether the keys file says (without the cache) that ``every`` (``all`` or
        ``any``) of ``keys`` is not cached."""
        if self._loaded is not None or not keys:
            return False
        held = _held_keys(self.path, self.model_id)
        return held is not None and every(_short(k) not in held for k in keys)

    def has_all(self, texts: Iterable[str]) -> bool:
        """Whether every one of ``texts`` has a cached vector (no use is recorded)."""
        keys = [text_key(t) for t in texts]
        if self._missing(keys, any):
            return False
        return all((self.model_id, k) in self._entries for k in keys)

    def lookup(self, texts: Iterable[str]) -> dict[str, Any]:
        """Cached vectors of ``texts`` (numpy float32), by text; a hit counts as a use."""
        import numpy as np

        texts = list(texts)
        keys = [text_key(t) for t in texts]
        if self._missing(keys, all):
            return {}  # none of them there: the cache is not read
        found: dict[str, Any] = {}
        for text, hashed in zip(texts, keys, strict=True):
            key = (self.model_id, hashed)
            raw = self._entries.pop(key, None)
            if raw is None:
                continue
            self._entries[key] = raw  # most recently used now
            self._dirty = True
            found[text] = np.frombuffer(raw, dtype=np.float32).copy()
        self.hits += len(found)
        return found

    def store(self, vectors: Mapping[str, Any]) -> None:
        import numpy as np

        for text, vector in vectors.items():
            key = (self.model_id, text_key(text))
            self._entries.pop(key, None)
            self._entries[key] = np.asarray(vector, dtype=np.float32).tobytes()
            self._dirty = True
            self._added += 1
        overflow = len(self._entries) - self.max_entries
        if overflow > 0:
            for key in list(self._entries)[:overflow]:
                del self._entries[key]

    def save(self) -> None:
        """Write the cache if it changed; a failure only costs re-embedding later. A process
        that wrote it less than ``SAVE_EVERY_SECONDS`` ago keeps a few new entries in memory
        (the daemon's one-file syncs) instead of writing 40 MB each time."""
        if not self._dirty:
            return
        if self._added < SAVE_MIN_NEW and _defer(self.path, self._entries):
            self._dirty = False
            return
        if write_marshal(self.path, {"version": VERSION, "entries": self._entries}):
            self._dirty = False
            _remember(self.path, self._entries)
            _write_keys(self.path, self._entries)
        else:
            log.debug("embedding cache not saved to %s", self.path)


# A long-lived process (the watcher's daemon) syncs one file at a time: the cache it read or
# wrote last is kept, by the file's stat, instead of reading 40 MB again for each sync.
# path -> (the file's stat key, its entries, whether this process wrote that file)
_KEPT: dict[str, tuple[tuple[int, int, int], dict[tuple[str, str], bytes], bool]] = {}
_KEPT_LOCK = threading.Lock()


def _stat_key(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def _write_keys(path: Path, entries: Mapping[tuple[str, str], bytes],
                key: tuple[int, int, int] | None = None) -> None:
    """Write the keys file of the cache file at ``path`` (of stat ``key``, by default as it
    is now) holding ``entries``; unwritable, the cache is read whole, as without keys."""
    key = key or _stat_key(path)
    if key is None:
        return
    models: dict[str, list[int]] = {}
    for model_id, text in entries:
        if not (isinstance(text, str) and _HEX_KEY.fullmatch(text)):
            continue  # not a text's SHA-256 (another writer's entry): no text looks it up
        models.setdefault(model_id, []).append(_short(text))
    write_marshal(keys_path(path), {"version": KEYS_VERSION, "cache": key, "models": models})


def _held_keys(path: Path, model_id: str) -> set[int] | None:
    """The short keys of ``model_id``'s entries in the cache file now at ``path``; None
    without a keys file of exactly that file."""
    key = _stat_key(path)
    if key is None:
        return None
    with _KEPT_LOCK:
        kept = _KEPT.get(str(path))
    if kept is not None and kept[0] == key:
        return None  # this process holds the cache already: no read to spare
    data = _keys_of(path, key)
    if data is None or not isinstance(data.get("models"), dict):
        return None
    held = data["models"].get(model_id, [])
    return set(held) if isinstance(held, list) else None


def _keys_of(path: Path, key: tuple[int, int, int]) -> dict[str, Any] | None:
    """The keys file of the cache file at ``path`` if it describes the file of stat ``key``."""
    data = read_marshal(keys_path(path))
    if isinstance(data, dict) and data.get("version") == KEYS_VERSION and (
            data.get("cache") == key):
        return data
    return None


def _load(path: Path) -> dict[tuple[str, str], bytes]:
    key = _stat_key(path)
    with _KEPT_LOCK:
        kept = _KEPT.get(str(path))
        # A file this process read is trusted once its stat can vouch for it; one it wrote
        # at once (every write is a new file: another writer's has another inode).
        if key is not None and kept is not None and kept[0] == key and (
                kept[2] or not is_racy(key[0])):
            return dict(kept[1])  # (a copy: each cache orders and drops entries itself)
    data = read_marshal(path)
    ok = isinstance(data, dict) and data.get("version") == VERSION and isinstance(
        data.get("entries"), dict)
    entries: dict[tuple[str, str], bytes] = dict(data["entries"]) if ok else {}
    if ok and key is not None and key == _stat_key(path):
        _remember(path, entries, key, written=False)
        if _keys_of(path, key) is None:  # (a cache an older version wrote): for the next
            _write_keys(path, entries, key)
    return entries


_WRITTEN: dict[str, float] = {}  # path -> when this process last wrote the cache (monotonic)


def _remember(path: Path, entries: dict[tuple[str, str], bytes],
              key: tuple[int, int, int] | None = None, written: bool = True) -> None:
    key = key or _stat_key(path)
    with _KEPT_LOCK:
        if key is None:
            _KEPT.pop(str(path), None)
        else:
            for other in [p for p in _KEPT if Path(p).parent != path.parent]:
                del _KEPT[other]  # one project's caches at a time
            _KEPT[str(path)] = (key, dict(entries), written)
        if written:
            _WRITTEN[str(path)] = time.monotonic()


def _defer(path: Path, entries: dict[tuple[str, str], bytes]) -> bool:
    """Keep ``entries`` in memory instead of writing them (see :meth:`EmbedCache.save`):
    only when this process wrote the file recently and it is still that file."""
    with _KEPT_LOCK:
        written = _WRITTEN.get(str(path))
        kept = _KEPT.get(str(path))
        if (written is None or time.monotonic() - written >= SAVE_EVERY_SECONDS
                or kept is None or kept[0] != _stat_key(path)):
            return False
        _KEPT[str(path)] = (kept[0], dict(entries), kept[2])
        return True
