"""``fetch``: the schema context for one question.

When the whole ``describe`` text is at most the threshold, it is the answer (strategy
``full``). Otherwise the most relevant schema items are searched (strategy ``search``): the
schema index is brought up to date first (incremental, usually a no-op), then vector and
keyword rankings are fused. Without the ``index`` extra, or with ``backend = grep``, the
search is keyword-only over the current manifest's items, so it can never be stale.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wrenmem.describe import describe
from wrenmem.errors import ExtraMissingError, LockTimeoutError, WrenmemError
from wrenmem.manifest import Manifest, load_manifest
from wrenmem.schema_items import SchemaItem, normalize_types, schema_items
from wrenmem.settings import Settings

log = logging.getLogger(__name__)
RRF_K = 60
OVERFETCH = 4
NAME_WEIGHT = 3.0  # the item's own name and model count more than its sentence


@dataclass(frozen=True)
class ScoredItem:
    item: SchemaItem
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {**self.item.to_dict(), "score": round(self.score, 6)}


@dataclass(frozen=True)
class FetchResult:
    """The answer of ``fetch``; ``schema`` is set for ``full``, ``results`` for ``search``."""

    question: str
    strategy: str  # full | search
    method: str  # full | hybrid | vector | keyword
    manifest: str
    fingerprint: str
    characters: int
    threshold: int
    schema: str | None = None
    results: tuple[ScoredItem, ...] = ()
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"question": self.question, "strategy": self.strategy, "method": self.method,
                "manifest": self.manifest, "fingerprint": self.fingerprint,
                "characters": self.characters, "threshold": self.threshold,
                "schema": self.schema, "results": [r.to_dict() for r in self.results],
                "notes": list(self.notes)}

    def render(self) -> str:
        """Plain text for a reader or a prompt."""
        if self.schema is not None:
            return self.schema
        return render_results(self.question, self.results, self.method)


# In-process caches (the warm daemon calls fetch many times): manifest by file stat, items
# and keyword index by fingerprint.
_lock = threading.Lock()
_manifests: dict[str, tuple[tuple[int, int, int], Manifest]] = {}
_items: dict[str, tuple[list[SchemaItem], str]] = {}
_keyword: dict[str, Any] = {}


def cached_manifest(path: Path) -> Manifest:
    """``load_manifest`` with a one-entry cache keyed by the file's stat."""
    try:
        st = path.stat()
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        return load_manifest(path)  # raises the proper ManifestError
    with _lock:
        hit = _manifests.get(str(path))
        if hit is not None and hit[0] == key:
            return hit[1]
    manifest = load_manifest(path)
    with _lock:
        _manifests.clear()
        _manifests[str(path)] = (key, manifest)
    return manifest


def manifest_items(manifest: Manifest) -> list[SchemaItem]:
    """``schema_items(manifest)``, computed once per fingerprint in this process."""
    with _lock:
        hit = _items.get(manifest.fingerprint)
    if hit is not None:
        return hit[0]
    items = schema_items(manifest)
    with _lock:
        _items.clear()
        _items[manifest.fingerprint] = (items, describe(manifest))
    return items


def manifest_text(manifest: Manifest) -> str:
    manifest_items(manifest)
    with _lock:
        hit = _items.get(manifest.fingerprint)
    return hit[1] if hit is not None else describe(manifest)


def keyword_index(fingerprint: str, items: list[SchemaItem]) -> Any:
    """BM25 over the items' names (weighted up) and sentences, cached per fingerprint."""
    from wrenmem.textsearch import Bm25Index, tokenize

    with _lock:
        hit = _keyword.get(fingerprint)
    if hit is not None:
        return hit
    docs = []
    for item in items:
        terms: Counter[str] = Counter()
        for term in tokenize(f"{item.name} {item.model} {item.related}"):
            terms[term] += NAME_WEIGHT
        for term in tokenize(item.text):
            terms[term] += 1.0
        docs.append(dict(terms))
    index = Bm25Index(docs)
    with _lock:
        _keyword.clear()
        _keyword[fingerprint] = index
    return index


def keyword_search(items: list[SchemaItem], fingerprint: str, question: str, k: int,
                   types: tuple[str, ...], model: str | None) -> list[ScoredItem]:
    index = keyword_index(fingerprint, items)
    scores = index.scores(question)
    ranked = sorted(((s, i) for i, s in scores.items() if items[i].matches(types, model)),
                    key=lambda pair: (-pair[0], items[pair[1]].id))
    return [ScoredItem(items[i], s) for s, i in ranked[:k]]


def fetch(settings: Settings, question: str, *, types: tuple[str, ...] | list[str] = (),
          model: str | None = None, k: int = 10, threshold: int | None = None,
          manifest_path: Path | None = None) -> FetchResult:
    """Schema context for ``question``. Raises ManifestError when there is no usable manifest."""
    if k <= 0:
        raise WrenmemError(f"-k must be a positive number, got {k}")
    try:
        wanted = normalize_types(types)
    except ValueError as e:
        raise WrenmemError(str(e)) from e
    path = (manifest_path or settings.manifest_path).resolve()
    manifest = cached_manifest(path)
    text = manifest_text(manifest)
    limit = settings.fetch_threshold if threshold is None else threshold
    base = {"question": question, "manifest": str(path), "fingerprint": manifest.fingerprint,
            "characters": len(text), "threshold": limit, "warnings": manifest.warnings}
    if len(text) <= limit:
        notes = ()
        if wanted or model:
            notes = (f"the whole schema fits ({len(text)} <= {limit} characters), so "
                     "--type and --model are not applied; use --threshold 0 to search",)
        return FetchResult(strategy="full", method="full", schema=text, notes=notes, **base)
    items = manifest_items(manifest)
    if model and not any(i.model == model or i.related == model for i in items):
        raise WrenmemError(f"no model, view or cube named {model!r} in {path}")
    results, method, notes = _search(settings, path, manifest, items, question, k, wanted,
                                     model)
    return FetchResult(strategy="search", method=method, results=tuple(results),
                       notes=tuple(notes), **base)


def _search(settings: Settings, path: Path, manifest: Manifest, items: list[SchemaItem],
            question: str, k: int, types: tuple[str, ...], model: str | None
            ) -> tuple[list[ScoredItem], str, list[str]]:
    keyword = keyword_search(items, manifest.fingerprint, question, k * OVERFETCH, types, model)
    if settings.backend == "grep":
        return keyword[:k], "keyword", []
    try:
        vector = _vector_search(settings, path, manifest, items, question, k * OVERFETCH, types,
                                model)
    except ExtraMissingError as e:
        return keyword[:k], "keyword", [f"keyword search only: {e}"]
    except LockTimeoutError as e:
        return keyword[:k], "keyword", [f"keyword search only, the index is busy: {e}"]
    if settings.backend == "vector":
        return vector[:k], "vector", []
    return fuse(vector, keyword)[:k], "hybrid", []


def _vector_search(settings: Settings, path: Path, manifest: Manifest, items: list[SchemaItem],
                   question: str, limit: int, types: tuple[str, ...], model: str | None
                   ) -> list[ScoredItem]:
    from wrenmem.embedders import get_embedder
    from wrenmem.schema_index import sync_schema, vector_search

    embedder = get_embedder(settings.embedder, root=settings.root)
    sync_schema(settings, manifest_path=path, manifest=None, embedder=embedder)
    current = {item.id: item for item in items}
    out = []
    for item_id, item_hash, score in vector_search(settings, question, embedder=embedder,
                                                   limit=limit, types=types, model=model):
        item = current.get(item_id)
        # Rows of another manifest (a concurrent sync of a different file) never leak in.
        if item is not None and item.item_hash == item_hash:
            out.append(ScoredItem(item, score))
    return out


def fuse(*rankings: list[ScoredItem]) -> list[ScoredItem]:
    """Reciprocal rank fusion; ties broken by item id so the order is deterministic."""
    scores: dict[str, float] = {}
    by_id: dict[str, SchemaItem] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking):
            scores[hit.item.id] = scores.get(hit.item.id, 0.0) + 1.0 / (RRF_K + rank + 1)
            by_id[hit.item.id] = hit.item
    ordered = sorted(scores, key=lambda i: (-scores[i], i))
    return [ScoredItem(by_id[i], scores[i]) for i in ordered]


def render_results(question: str, results: tuple[ScoredItem, ...] | list[ScoredItem],
                   method: str) -> str:
    """Search hits grouped by the model (or view, or cube) they belong to, best group first."""
    if not results:
        return f"# Schema items for: {question}\nNo schema item matches ({method} search).\n"
    groups: dict[str, list[ScoredItem]] = {}
    for hit in results:
        item = hit.item
        if item.type == "relationship":
            key = "Relationships"
        elif item.type in ("cube", "measure", "dimension", "time_dimension"):
            key = f"Cube {item.related}"
        elif item.type == "view":
            key = f"View {item.name}"
        else:
            key = f"Model {item.model}"
        groups.setdefault(key, []).append(hit)
    lines = [f"# Schema items for: {question}",
             f"{len(results)} best matches ({method} search), grouped by model, best first."]
    for title, hits in groups.items():
        lines += ["", f"## {title}"]
        # The model's own summary first, then its columns in rank order.
        for hit in sorted(hits, key=lambda h: h.item.type not in ("model", "cube", "view")):
            solo = hit.item.type in ("model", "cube", "view")
            lines.append(hit.item.detail if solo else "- " + hit.item.detail)
    return "\n".join(lines) + "\n"
