"""``fetch``: the schema context for one question.

When the whole ``describe`` text is at most the threshold, it is the answer (strategy
``full``). Otherwise the most relevant schema items are searched (strategy ``search``): the
schema index is brought up to date first (incremental, usually a no-op), then vector and
keyword rankings are fused. Without the ``index`` extra, or with ``backend = grep``, the
search is keyword-only over the current manifest's items, so it can never be stale.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wrenmem.embed.embedders import Embedder, get_embedder
from wrenmem.errors import ExtraMissingError, LockTimeoutError, WrenmemError
from wrenmem.knowledge.select import RuleSelection, select_rules
from wrenmem.schema.describe import describe
from wrenmem.schema.items import SchemaItem, normalize_types
from wrenmem.schema.manifest import load_manifest
from wrenmem.settings import Settings
from wrenmem.textsearch import rrf

if TYPE_CHECKING:
    from wrenmem.schema import cache, table
    from wrenmem.schema.cache import Prepared
else:  # a reply the daemon gave (FetchResult.from_dict) needs neither the cache nor LanceDB
    from wrenmem.lazy import lazies
    cache, table = lazies("wrenmem.schema", "cache table")

log = logging.getLogger(__name__)
ReadCopy = Callable[[bool], str]
OVERFETCH = 4


@dataclass(frozen=True)
class ScoredItem:
    item: SchemaItem
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {**self.item.to_dict(), "score": round(self.score, 6)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScoredItem:
        """The item :meth:`to_dict` gave; KeyError/TypeError when it is not one."""
        names = {f.name for f in fields(SchemaItem)}
        return cls(SchemaItem(**{k: v for k, v in data.items() if k in names}),
                   float(data["score"]))


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
    index: dict[str, Any] | None = None  # what the schema index sync did (search mode)
    warnings: tuple[str, ...] = field(default=(), compare=False)
    # the rules, caveats and glossary terms for the question (wrenmem.knowledge)
    knowledge: RuleSelection | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"question": self.question, "strategy": self.strategy, "method": self.method,
                "manifest": self.manifest, "fingerprint": self.fingerprint,
                "characters": self.characters, "threshold": self.threshold,
                "schema": self.schema, "results": [r.to_dict() for r in self.results],
                "notes": list(self.notes), "index": self.index,
                "knowledge": self.knowledge.to_dict() if self.knowledge else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any], warnings: tuple[str, ...] = ()) -> FetchResult:
        """The result :meth:`to_dict` gave (e.g. the daemon's reply), with its warnings;
        KeyError/TypeError/ValueError when it is not one."""
        return cls(question=str(data["question"]), strategy=str(data["strategy"]),
                   method=str(data["method"]), manifest=str(data["manifest"]),
                   fingerprint=str(data["fingerprint"]), characters=int(data["characters"]),
                   threshold=int(data["threshold"]), schema=data["schema"],
                   results=tuple(ScoredItem.from_dict(r) for r in data["results"]),
                   notes=tuple(str(n) for n in data["notes"]), index=data["index"],
                   warnings=tuple(warnings),
                   knowledge=RuleSelection.from_dict(data["knowledge"])
                   if data.get("knowledge") else None)

    def render(self) -> str:
        """Plain text for a reader or a prompt."""
        text = (self.schema if self.schema is not None
                else render_results(self.question, self.results, self.method))
        return text + (self.knowledge.render() if self.knowledge else "")


def keyword_search(prepared: Prepared, question: str, k: int, types: tuple[str, ...],
                   model: str | None) -> list[ScoredItem]:
    """BM25 over the current manifest's items (names weigh more than sentences)."""
    scores = prepared.keyword_scores(question)
    ranked = sorted(((s, n) for n, s in scores.items() if prepared.matches(n, types, model)),
                    key=lambda pair: (-pair[0], prepared.records[pair[1]][0]))
    return [ScoredItem(prepared.item(n), s) for s, n in ranked[:k]]


def fetch(settings: Settings, question: str, *, types: tuple[str, ...] | list[str] = (),
          model: str | None = None, k: int = 10, threshold: int | None = None,
          manifest_path: Path | None = None,
          progress: Callable[[int, int], None] | None = None,
          read_copy: ReadCopy | None = None, embedder: Embedder | None = None) -> FetchResult:
    """Schema context for ``question``. Raises ManifestError when there is no usable manifest.
    ``embedder``: instead of the setting's. ``read_copy`` (a remote index) brings a local
    copy of the schema table up to date and returns where to search it; it is called with
    True when this call's sync just wrote the remote table."""
    if k <= 0:
        raise WrenmemError(f"-k must be a positive number, got {k}")
    try:
        wanted = normalize_types(types)
    except ValueError as e:
        raise WrenmemError(str(e)) from e
    path = (manifest_path or settings.manifest_path).resolve()
    prepared = cache.prepare(settings, path)
    limit = settings.fetch_threshold if threshold is None else threshold
    base = {"question": question, "manifest": str(path), "fingerprint": prepared.fingerprint,
            "characters": prepared.characters, "threshold": limit,
            "warnings": prepared.warnings}
    if prepared.characters <= limit:
        notes: tuple[str, ...] = ()
        if wanted or model:
            notes = (f"the whole schema fits ({prepared.characters} <= {limit} characters), "
                     "so --type and --model are not applied; use --threshold 0 to search",)
        text = describe(load_manifest(path, max_bytes=settings.max_manifest_bytes))
        knowledge, more = _knowledge(settings, question, embedder)
        return FetchResult(strategy="full", method="full", schema=text, notes=notes + more,
                           knowledge=knowledge, **base)  # type: ignore[arg-type]
    if model and not prepared.has_model(model):
        raise WrenmemError(f"no model, view or cube named {model!r} in {path}")
    results, method, notes_list, index = _search(settings, path, prepared, question, k,
                                                 wanted, model, progress, read_copy, embedder)
    knowledge, more = _knowledge(settings, question, embedder)
    return FetchResult(strategy="search", method=method, results=tuple(results),
                       notes=tuple(notes_list) + more, index=index, knowledge=knowledge,
                       **base)  # type: ignore[arg-type]


def _knowledge(settings: Settings, question: str, embedder: Embedder | None = None
               ) -> tuple[RuleSelection | None, tuple[str, ...]]:
    """The rules and glossary terms for the question; a problem with them is a note, never
    a failed fetch (the schema is still the answer)."""
    try:
        selection = select_rules(settings, question, embedder=embedder)
    except WrenmemError as e:
        return None, (f"knowledge files not served: {e}",)
    if selection.strategy == "none" and not selection.glossary:
        return None, selection.notes
    return selection, selection.notes


def _search(settings: Settings, path: Path, prepared: Prepared, question: str, k: int,
            types: tuple[str, ...], model: str | None,
            progress: Callable[[int, int], None] | None = None,
            read_copy: ReadCopy | None = None, embedder: Embedder | None = None
            ) -> tuple[list[ScoredItem], str, list[str], dict[str, Any] | None]:
    keyword = keyword_search(prepared, question, k * OVERFETCH, types, model)
    if settings.backend == "grep":
        return keyword[:k], "keyword", [], None
    try:
        vector, report = _vector_search(settings, path, prepared, question, k * OVERFETCH,
                                        types, model, progress, read_copy, embedder)
    except ExtraMissingError as e:
        return keyword[:k], "keyword", [f"keyword search only: {e}"], None
    except LockTimeoutError as e:
        return keyword[:k], "keyword", [f"keyword search only, the index is busy: {e}"], None
    if settings.backend == "vector":
        return vector[:k], "vector", [], report
    return fuse(vector, keyword)[:k], "hybrid", [], report


def _vector_search(settings: Settings, path: Path, prepared: Prepared, question: str,
                   limit: int, types: tuple[str, ...], model: str | None,
                   progress: Callable[[int, int], None] | None = None,
                   read_copy: ReadCopy | None = None, embedder: Embedder | None = None
                   ) -> tuple[list[ScoredItem], dict[str, Any]]:
    embedder = embedder or get_embedder(settings.embedder, root=settings.root)
    report = table.sync_items(settings, path, prepared.fingerprint, lambda: prepared.items,
                        embedder, count=len(prepared), progress=progress)
    for attempt in (1, 2):
        out, stale = [], 0
        uri = read_copy(not report.noop) if read_copy is not None else None
        try:
            rows = table.vector_search(settings, question, embedder=embedder, limit=limit,
                                 types=types, model=model, uri=uri)
        except table.SchemaIndexMissing:
            if attempt == 2:
                raise
            rows, stale = [], 1
        for item_id, item_hash, score in rows:
            n = prepared.position(item_id)
            # Rows of another manifest or an older item format never leak in.
            if n is not None and prepared.item(n).item_hash == item_hash:
                out.append(ScoredItem(prepared.item(n), score))
            else:
                stale += 1
        if not stale or attempt == 2:
            break
        # The index does not hold these items although its state said so: sync for real.
        log.info("schema index held %d rows of other items; syncing again", stale)
        table.forget_handles()
        report = table.sync_items(settings, path, prepared.fingerprint, lambda: prepared.items,
                            embedder, count=len(prepared), progress=progress, force=True)
    return out, report.to_dict()


def fuse(*rankings: list[ScoredItem]) -> list[ScoredItem]:
    """Reciprocal rank fusion; ties broken by item id so the order is deterministic."""
    by_id = {hit.item.id: hit.item for ranking in rankings for hit in ranking}
    return [ScoredItem(by_id[i], score)
            for i, score in rrf(*([hit.item.id for hit in r] for r in rankings))]


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
            key = f"Cube {item.related}" + (f" over {item.model}" if item.model else "")
        elif item.type == "view":
            key = f"View {item.name}"
        else:
            key = f"Model {item.model}"
        groups.setdefault(key, []).append(hit)
    lines = [f"# Schema items for: {question}",
             f"{len(results)} best match{'es' if len(results) > 1 else ''} ({method} search), "
             "grouped by model, best first."]
    for title, hits in groups.items():
        lines += ["", f"## {title}"]
        # The model's own summary first, then its columns in rank order.
        for hit in sorted(hits, key=lambda h: h.item.type not in ("model", "cube", "view")):
            if hit.item.type not in ("model", "cube", "view"):
                lines.append("- " + hit.item.detail)
                continue
            # the title names it: "Model orders: One row…" → "One row…"
            detail = hit.item.detail
            if detail.startswith(title + ": "):
                detail = detail[len(title) + 2:]
            elif detail.startswith(title):
                detail = detail[len(title):].lstrip(". \n")
            if detail:
                lines.append(detail[:1].upper() + detail[1:])
    return "\n".join(lines) + "\n"
