"""What ``fetch`` needs from the manifest, cached so a large manifest is not re-read per call.

A 2,500-model manifest takes seconds to parse, turn into 56,000 items and tokenize for
keyword search. ``prepare`` keeps the result in ``.wrenmem/schema_cache.bin`` (marshal),
keyed by the manifest file's stat, and in memory for the warm daemon. A manifest edited in
the last two seconds is always re-read, because a same-size edit within one clock tick
would otherwise look unchanged.
"""

from __future__ import annotations

import logging
import marshal
import threading
import time
from collections import Counter
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

from wrenmem.fsutil import atomic_write_bytes
from wrenmem.schema_items import SchemaItem, schema_items
from wrenmem.settings import Settings
from wrenmem.textsearch import TOKENIZER_VERSION, Bm25Index, tokenize

log = logging.getLogger(__name__)
CACHE_FILE = "schema_cache.bin"
CACHE_VERSION = 1
RACY_SECONDS = 2.0
NAME_WEIGHT = 3.0  # an item's own name and model count more than its sentence


@dataclass
class Prepared:
    """The manifest as fetch uses it. ``keyword`` is built on first use."""

    path: str
    fingerprint: str
    characters: int  # length of the describe text
    warnings: tuple[str, ...]
    items: list[SchemaItem]
    terms: list[dict[str, float]]
    _keyword: Bm25Index | None = None

    @property
    def keyword(self) -> Bm25Index:
        if self._keyword is None:
            self._keyword = Bm25Index(self.terms)
        return self._keyword


_lock = threading.Lock()
_memory: dict[str, tuple[tuple[int, int, int], Prepared]] = {}


def item_terms(item: SchemaItem) -> dict[str, float]:
    """Keyword-search terms of an item: name, model and related names weigh more."""
    terms: Counter[str] = Counter()
    for term in tokenize(f"{item.name} {item.model} {item.related}"):
        terms[term] += NAME_WEIGHT
    for term in tokenize(item.text):
        terms[term] += 1.0
    return dict(terms)


def prepare(settings: Settings, path: Path) -> Prepared:
    """The prepared manifest at ``path``; raises ManifestError when it cannot be used."""
    from wrenmem.manifest import load_manifest

    try:
        st = path.stat()
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        trusted = time.time() - st.st_mtime_ns / 1e9 >= RACY_SECONDS
    except OSError:
        return _build(load_manifest(path))  # raises the proper ManifestError
    if trusted:
        with _lock:
            hit = _memory.get(str(path))
        if hit is not None and hit[0] == key:
            return hit[1]
        cached = _read(settings, path, key)
        if cached is not None:
            _remember(path, key, cached)
            return cached
    prepared = _build(load_manifest(path))
    if trusted:
        _remember(path, key, prepared)
        _write(settings, path, key, prepared)
    return prepared


def _build(manifest: Any) -> Prepared:
    from wrenmem.describe import describe

    items = schema_items(manifest)
    return Prepared(str(manifest.path), manifest.fingerprint, len(describe(manifest)),
                    manifest.warnings, items, [item_terms(i) for i in items])


def _remember(path: Path, key: tuple[int, int, int], prepared: Prepared) -> None:
    with _lock:
        _memory.clear()  # one manifest per process is the normal case; bound the memory
        _memory[str(path)] = (key, prepared)


def _read(settings: Settings, path: Path, key: tuple[int, int, int]) -> Prepared | None:
    try:
        data = marshal.loads((settings.state_dir / CACHE_FILE).read_bytes())
        if (data.get("version") != (CACHE_VERSION, TOKENIZER_VERSION)
                or data.get("manifest") != str(path) or tuple(data.get("stat")) != key):
            return None
        return Prepared(str(path), data["fingerprint"], data["characters"],
                        tuple(data["warnings"]), [SchemaItem(*t) for t in data["items"]],
                        data["terms"])
    except (OSError, EOFError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _write(settings: Settings, path: Path, key: tuple[int, int, int], prepared: Prepared
           ) -> None:
    data = {"version": (CACHE_VERSION, TOKENIZER_VERSION), "manifest": str(path),
            "stat": key, "fingerprint": prepared.fingerprint,
            "characters": prepared.characters, "warnings": prepared.warnings,
            "items": [astuple(i) for i in prepared.items], "terms": prepared.terms}
    try:
        atomic_write_bytes(settings.state_dir / CACHE_FILE, marshal.dumps(data))
    except (OSError, ValueError) as e:  # a read-only checkout still fetches, just slower
        log.debug("cannot write the schema cache: %s", e)
