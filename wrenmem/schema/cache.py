"""What ``fetch`` needs from the manifest, cached so a large manifest is not re-read per call.

A 2,500-model manifest takes seconds to parse, turn into 56,000 items and tokenize.
``prepare`` keeps the result in ``.wrenmem/schema_cache.bin`` (marshal), keyed by the
manifest file's stat and the content hash of its bytes, and in memory for a warm process.
The keyword index is stored as postings (packed arrays), items as plain tuples that become
:class:`SchemaItem` objects only when used.
"""

from __future__ import annotations

import gc
import hashlib
import logging
import threading
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from functools import partial
from operator import attrgetter
from pathlib import Path
from typing import Any

from wrenmem.fs import statedir
from wrenmem.fs.fsutil import is_racy, read_marshal, stat_key, write_marshal
from wrenmem.schema import items as item_format
from wrenmem.schema import later
from wrenmem.schema.describe import describe
from wrenmem.schema.items import SchemaItem, schema_items
from wrenmem.schema.manifest import Manifest, Model, load_manifest, read_manifest_bytes
from wrenmem.settings import Settings
from wrenmem.textsearch import TOKENIZER_VERSION, add_term_scores, tokenize

log = logging.getLogger(__name__)
CACHE_FILE = statedir.SCHEMA_CACHE
CACHE_VERSION = 4
PATCH_LIMIT = 2000  # changed items past which the keyword index is built again in full
NAME_WEIGHT = 3.0  # an item's own name and model count more than its sentence
FIELD = {f.name: n for n, f in enumerate(fields(SchemaItem))}
_FIELDS_OF = attrgetter(*FIELD)  # an item's fields as a tuple, in field order


@dataclass
class ModelMemo:
    """What one read made of each model, by its key (``Manifest.model_keys``): a warm
    re-read of a changed manifest redoes only the models whose JSON changed."""

    models: dict[str, Model] = field(default_factory=dict)
    items: dict[str, list[SchemaItem]] = field(default_factory=dict)
    lines: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Prepared:
    """The manifest as fetch uses it: item records and a BM25 keyword index over them."""

    path: str
    fingerprint: str
    characters: int  # length of the describe text
    warnings: tuple[str, ...]
    records: list[tuple[Any, ...]]  # SchemaItem fields, in field order
    postings: dict[str, tuple[bytes, bytes]]  # term -> (doc numbers int32, weights float32)
    lengths: bytes  # float32 weighted length of each record
    digest: str = ""  # content hash of the manifest file's bytes (see content_digest)
    hashes: list[str] = field(default_factory=list)  # item_hash of each record
    version: tuple[int, int, int] = field(default_factory=lambda: _version())
    _items: list[SchemaItem] | None = field(default=None, repr=False)
    _index: dict[str, int] | None = field(default=None, repr=False)
    _memo: ModelMemo | None = field(default=None, repr=False)  # in memory only

    def __len__(self) -> int:
        return len(self.records)

    @property
    def items(self) -> list[SchemaItem]:
        """Every item (built on first use: a sync needs them all, a search does not)."""
        if self._items is None:
            self._items = [self._new_item(n) for n in range(len(self.records))]
        return self._items

    def item(self, n: int) -> SchemaItem:
        return self._items[n] if self._items is not None else self._new_item(n)

    def _new_item(self, n: int) -> SchemaItem:
        item = SchemaItem(*self.records[n])
        if len(self.hashes) == len(self.records):  # stored: no need to hash every item again
            item.__dict__["item_hash"] = self.hashes[n]
        return item

    def position(self, item_id: str) -> int | None:
        if self._index is None:
            self._index = {r[0]: n for n, r in enumerate(self.records)}
        return self._index.get(item_id)

    def matches(self, n: int, types: tuple[str, ...], model: str | None) -> bool:
        """``SchemaItem.matches`` without building the item."""
        record = self.records[n]
        if types and record[FIELD["type"]] not in types:
            return False
        return model is None or model in (record[FIELD["model"]], record[FIELD["related"]])

    def has_model(self, model: str) -> bool:
        m, r = FIELD["model"], FIELD["related"]
        return any(rec[m] == model or rec[r] == model for rec in self.records)

    def keyword_scores(self, query: str) -> dict[int, float]:
        """Record number → BM25 score (same formula as :class:`textsearch.Bm25Index`)."""
        lengths = array("f")
        lengths.frombytes(self.lengths)
        n = len(lengths)
        if not n:
            return {}
        average = sum(lengths) / n
        out: dict[int, float] = {}
        for term in dict.fromkeys(tokenize(query)):
            entry = self.postings.get(term)
            if entry is None:
                continue
            docs, weights = array("i"), array("f")
            docs.frombytes(entry[0])
            weights.frombytes(entry[1])
            add_term_scores(out, zip(docs, weights, strict=True), len(docs), n, lengths,
                            average)
        return out


_lock = threading.Lock()
_memory: dict[str, tuple[tuple[int, int, int] | None, Prepared]] = {}


def _in_memory(name: str) -> tuple[tuple[int, int, int] | None, Prepared] | None:
    with _lock:
        hit = _memory.get(name)
    return hit if hit is not None and hit[1].version == _version() else None


def item_terms(item: SchemaItem, memo: dict[str, list[str]] | None = None
               ) -> dict[str, float]:
    """Keyword-search terms of an item: name, model and related names weigh more.
    ``memo``: the tokens of each word (tokens never span whitespace; items repeat words)."""
    memo = {} if memo is None else memo
    terms: dict[str, float] = {}
    for text, weight in ((f"{item.name} {item.model} {item.related}", NAME_WEIGHT),
                         (item.text, 1.0)):
        for word in text.split():
            tokens = memo.get(word)
            if tokens is None:
                tokens = memo[word] = tokenize(word)
            for term in tokens:
                terms[term] = terms.get(term, 0.0) + weight
    return terms


def prepare(settings: Settings, path: Path) -> Prepared:
    """The prepared manifest at ``path``; raises ManifestError when it cannot be used.
    The file's stat decides first; when it differs or is too recent to trust, the content
    hash of the bytes (~30 ms for 10 MB): an unchanged manifest is never parsed again."""

    try:
        st = path.stat()
        key: tuple[int, int, int] | None = stat_key(st)  # ctime: an mtime put back is seen
        if is_racy(stat_key(st)[0]):
            key = None  # a same-size edit within the clock tick would look unchanged
    except OSError:
        # raises the proper ManifestError
        return _build(load_manifest(path, max_bytes=settings.max_manifest_bytes))
    name = str(path)
    hit = _in_memory(name)
    if key is not None and hit is not None and hit[0] == key:
        return hit[1]
    # A warm process holding this manifest compares the content with what it holds and
    # does not read the cache file (the next process that does records the new stat).
    stored = read_marshal(settings.state_dir / CACHE_FILE) if hit is None else None
    if key is not None and hit is None:
        cached = _from_cache(stored, name, stat=key)
        if cached is not None:
            _remember(name, key, cached)
            return cached
    data = read_manifest_bytes(path, settings.max_manifest_bytes)
    digest = content_digest(data)
    if hit is not None and hit[1].digest == digest:
        _remember(name, key, hit[1])
        return hit[1]
    memo = hit[1]._memo if hit is not None else None
    prepared = _from_cache(stored, name, digest=digest)
    if prepared is None:
        with no_cyclic_gc():
            prepared = _build(
                load_manifest(path, data, max_bytes=settings.max_manifest_bytes,
                              reuse=memo.models if memo is not None else None), digest,
                previous=hit[1] if hit is not None else _from_cache(stored, name), memo=memo)
    _remember(name, key, prepared)
    old = _cache_key(stored)
    if old is None or old[0] != name or old[2] != digest or (key is not None and old[1] != key):
        # (queued in a warm process: later.py)
        later.write(partial(_write, settings, path, key, prepared))
    return prepared


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Decoding 10 MB of JSON makes millions of objects and no cycles: the cyclic collector
    would scan a warm process's memory several times over (a third of a re-read)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def content_digest(data: bytes) -> str:
    """Hash of a manifest file's bytes: what decides that the file changed."""
    return hashlib.sha256(data).hexdigest()[:32]


def _build(manifest: Any, digest: str = "", previous: Prepared | None = None,
           memo: ModelMemo | None = None) -> Prepared:
    """Prepare ``manifest``; with the ``previous`` version of the file, only changed items
    are tokenized again (when the others kept their places); with the ``memo`` of an
    earlier read, only models whose JSON changed are made into items again."""
    memo = ModelMemo(items=dict(memo.items), lines=dict(memo.lines)) if memo else ModelMemo()
    items = schema_items(manifest, memo.items)
    records = [_record(i) for i in items]
    changed = _changed(previous, records) if previous is not None else None
    if previous is not None and changed is not None:
        postings, lengths = _patch(previous, items, changed)
        old = previous.hashes
        hashes = list(old)
        for n in changed:
            hashes[n] = items[n].item_hash
        for n, item in enumerate(items):  # the unchanged items keep their hash
            if n not in changed:
                item.__dict__["item_hash"] = old[n]
    else:
        postings, lengths = _postings(items)
        hashes = [i.item_hash for i in items]
    memo.models = _models_by_key(manifest)
    return Prepared(str(manifest.path), manifest.fingerprint,
                    len(describe(manifest, memo.lines)), manifest.warnings, records, postings,
                    lengths, digest, hashes, _items=items, _memo=memo)


def _models_by_key(manifest: Manifest) -> dict[str, Model]:
    return {k: m for m, k in zip(manifest.models, manifest.model_keys, strict=False) if k}


def hold(settings: Settings, path: Path) -> Prepared:
    """:func:`prepare` for a long-lived process (the watcher), with what each model was
    made into, so the next change is read again model by model."""
    prepared = prepare(settings, path)
    if prepared._memo is None:
        memo = ModelMemo()
        with no_cyclic_gc():
            manifest = load_manifest(path, max_bytes=settings.max_manifest_bytes)
            schema_items(manifest, memo.items)
            describe(manifest, memo.lines)
            memo.models = _models_by_key(manifest)
        prepared._memo = memo  # keyed by each model's JSON: right for any later version
    return prepared


def _changed(previous: Prepared, records: list[tuple[Any, ...]]) -> set[int] | None:
    """Positions of the records that differ from ``previous``'s when the items kept their
    places and few changed; else None (a full build)."""
    old = previous.records
    if (len(old) != len(records) or len(previous.hashes) != len(records)
            or len(previous.lengths) != 4 * len(records)):
        return None
    changed = {n for n, (a, b) in enumerate(zip(old, records, strict=True)) if a != b}
    return changed if len(changed) <= PATCH_LIMIT else None


def _postings(items: list[SchemaItem]) -> tuple[dict[str, tuple[bytes, bytes]], bytes]:
    """The keyword index of ``items``: term -> (doc numbers, weights), and doc lengths."""
    postings: dict[str, tuple[array, array]] = {}
    lengths = array("f")
    memo: dict[str, list[str]] = {}
    for n, item in enumerate(items):
        terms = item_terms(item, memo)
        lengths.append(sum(terms.values()))
        for term, weight in terms.items():
            entry = postings.get(term)
            if entry is None:
                entry = postings[term] = (array("i"), array("f"))
            entry[0].append(n)
            entry[1].append(weight)
    return ({t: (d.tobytes(), w.tobytes()) for t, (d, w) in postings.items()},
            lengths.tobytes())


def _patch(previous: Prepared, items: list[SchemaItem], changed: set[int]
           ) -> tuple[dict[str, tuple[bytes, bytes]], bytes]:
    """The keyword index of ``items`` from ``previous``'s, re-tokenizing only ``changed``
    positions; it equals a full build's."""
    old = previous.records
    lengths = array("f")
    lengths.frombytes(previous.lengths)
    memo: dict[str, list[str]] = {}
    edits: dict[str, dict[int, float | None]] = {}  # term -> doc -> new weight, None: gone
    for n in sorted(changed):
        for term in item_terms(SchemaItem(*old[n]), memo):
            edits.setdefault(term, {})[n] = None
        terms = item_terms(items[n], memo)
        lengths[n] = sum(terms.values())
        for term, weight in terms.items():
            edits.setdefault(term, {})[n] = weight
    postings = dict(previous.postings)
    for term, docs_edit in edits.items():
        docs, weights = array("i"), array("f")
        entry = postings.get(term)
        if entry is not None:
            docs.frombytes(entry[0])
            weights.frombytes(entry[1])
        for n in sorted(docs_edit):  # doc numbers are ascending in every posting list
            new_weight = docs_edit[n]
            i = bisect_left(docs, n)
            present = i < len(docs) and docs[i] == n
            if new_weight is None:
                if present:
                    del docs[i], weights[i]
            elif present:
                weights[i] = new_weight
            else:
                docs.insert(i, n)
                weights.insert(i, new_weight)
        if docs:
            postings[term] = (docs.tobytes(), weights.tobytes())
        else:
            postings.pop(term, None)
    return postings, lengths.tobytes()


def _record(item: SchemaItem) -> tuple[Any, ...]:
    # Not dataclasses.astuple: it deep-copies every field, a quarter of the build time.
    # Kept on the item: a warm re-read reuses the items of unchanged models (ModelMemo).
    record = item.__dict__.get("_record")
    if record is None:
        record = item.__dict__["_record"] = _FIELDS_OF(item)
    return record


def _version() -> tuple[int, int, int]:
    """What the cache's content depends on: its layout, the tokenizer, the item format."""
    return CACHE_VERSION, TOKENIZER_VERSION, item_format.ITEMS_VERSION


def _remember(name: str, key: tuple[int, int, int] | None, prepared: Prepared) -> None:
    with _lock:
        _memory.clear()  # one manifest per process is the normal case; bound the memory
        _memory[name] = (key, prepared)


def _cache_key(data: Any) -> tuple[Any, Any, Any] | None:
    """(manifest, stat, digest) a cache file was written for; None when it is unusable."""
    if not isinstance(data, dict) or data.get("version") != _version():
        return None
    stat = data.get("stat")
    return data.get("manifest"), tuple(stat) if stat else None, data.get("digest")


def _from_cache(data: Any, name: str, *, stat: tuple[int, int, int] | None = None,
                digest: str | None = None) -> Prepared | None:
    """The cached prepared manifest when it is of ``name`` with this stat or digest."""
    key = _cache_key(data)
    if key is None or key[0] != name:
        return None
    if (stat is not None and key[1] != stat) or (digest is not None and key[2] != digest):
        return None
    try:
        return Prepared(name, data["fingerprint"], data["characters"],
                        tuple(data["warnings"]), data["records"], data["postings"],
                        data["lengths"], data["digest"], data["hashes"])
    except (TypeError, KeyError, AttributeError):
        return None


def _write(settings: Settings, path: Path, key: tuple[int, int, int] | None,
           prepared: Prepared) -> None:
    data = {"version": _version(), "manifest": str(path),
            "stat": key, "digest": prepared.digest, "fingerprint": prepared.fingerprint,
            "characters": prepared.characters, "warnings": prepared.warnings,
            "records": prepared.records, "postings": prepared.postings,
            "lengths": prepared.lengths, "hashes": prepared.hashes}
    write_marshal(settings.state_dir / CACHE_FILE, data)  # read-only: fetch is just slower
