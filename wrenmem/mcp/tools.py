"""What each MCP tool does, over one long-lived :class:`Memory`; no MCP SDK here.

Each method takes plain arguments and returns a ``TypedDict``: the SDK derives the tool's
output schema from the return annotation and sends the value as ``structured_content``.
Errors are :class:`WrenmemError` with a message written for the agent that called the tool.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

# pydantic (which turns these into the tools' output schemas) needs typing_extensions'
# TypedDict on Python < 3.12.
from typing_extensions import TypedDict

from wrenmem.api import Memory
from wrenmem.errors import ManifestNotFoundError, SqlCheckError, WrenmemError
from wrenmem.knowledge.entries import Entry
from wrenmem.pairs.catalog import require_listed_pair
from wrenmem.pairs.pairfile import Pair
from wrenmem.recall.hits import Hit
from wrenmem.sql.draft import draft_note


class RecalledPair(TypedDict):
    question: str
    sql: str
    path: str
    score: float
    source: str
    datasource: str | None
    dialect: str | None
    tags: list[str]
    also: list[str]
    verified: bool
    # a verification the file only claims (not committed): who it names; never trusted
    claimed_by: str | None
    # ``allow-writes: true``: this SQL is outside the read-only rule; do not run it blindly
    allows_writes: bool


class RecallOutput(TypedDict):
    question: str
    backend: str
    pairs: list[RecalledPair]
    notes: list[str]


class SchemaItemOutput(TypedDict):
    type: str
    name: str
    model: str
    detail: str
    score: float


class KnowledgeEntryOutput(TypedDict):
    kind: str
    title: str
    text: str
    path: str
    line: int
    tags: list[str]


class GlossaryTermOutput(TypedDict):
    term: str
    synonyms: list[str]
    columns: list[str]
    definition: str
    path: str
    line: int


class SchemaContextOutput(TypedDict):
    question: str
    strategy: str
    method: str
    text: str
    items: list[SchemaItemOutput]
    characters: int
    threshold: int
    notes: list[str]
    rules: list[KnowledgeEntryOutput]
    glossary: list[GlossaryTermOutput]


class InstructionsOutput(TypedDict):
    question: str | None
    strategy: str
    text: str
    rules: list[KnowledgeEntryOutput]
    glossary: list[GlossaryTermOutput]
    characters: int
    threshold: int
    notes: list[str]


class GlossaryOutput(TypedDict):
    term: str | None
    terms: list[GlossaryTermOutput]


class DescribeOutput(TypedDict):
    text: str
    data_source: str
    dialect: str | None
    models: list[str]
    views: list[str]
    warnings: list[str]


class StoreOutput(TypedDict):
    path: str
    created: bool
    question: str
    sql: str
    dialect: str | None
    notes: list[str]


class ListedPair(TypedDict):
    question: str
    sql: str
    path: str
    source: str
    datasource: str | None
    dialect: str | None
    tags: list[str]
    created_at: str | None
    verified: bool


class ListOutput(TypedDict):
    total: int
    offset: int
    limit: int
    pairs: list[ListedPair]


class ForgetOutput(TypedDict):
    deleted: list[str]
    notes: list[str]


class Tools:
    """The tools of one project's server. Calls are serialized: the SDK runs synchronous
    tools in worker threads, and one index writer at a time is what the library expects."""

    def __init__(self, memory: Memory):
        self.memory = memory
        self._lock = threading.Lock()
        self._notes: list[str] = []
        memory.notify = self._notes.append

    @contextmanager
    def _call(self) -> Iterator[list[str]]:
        """One tool call at a time, with the notes the library sends during it."""
        with self._lock:
            self._notes.clear()
            yield self._notes

    def recall_queries(self, question: str, k: int = 3, datasource: str | None = None,
                       tags: Sequence[str] = (), min_score: float | None = None,
                       sql: str | None = None) -> RecallOutput:
        """``Memory.recall_many``, kept warm by the server's freshness (the index's
        catch-up sync and grep's snapshot of the files are renewed only when files may
        have changed since the last call)."""
        with self._call() as notes:
            result = self.memory.recall_many([question], k, datasource=datasource,
                                             tags=tuple(tags or ()), min_score=min_score or 0.0,
                                             sql=sql or None)
            hits = result[0].hits
            drafted = draft_note(sql, result[0].backend)  # a draft unused, or not parsed
            if drafted is not None:
                notes.append(drafted.replace(" (--sql)", ""))
            return {"question": question, "backend": result[0].backend,
                    "pairs": [_recalled(h) for h in hits], "notes": list(notes)}

    def get_schema_context(self, question: str, threshold: int | None = None, k: int = 10
                           ) -> SchemaContextOutput:
        """``Memory.fetch``; with no manifest, an answer that says so and how to configure
        one, with the rules and glossary terms (still worth having), not an error."""
        with self._call() as notes:
            try:
                result = self.memory.fetch(question, threshold=threshold, k=k)
            except ManifestNotFoundError:
                return _without_schema(self.memory, question, threshold, notes)
            items: list[SchemaItemOutput] = [
                {"type": r.item.type, "name": r.item.name, "model": r.item.model,
                 "detail": r.item.detail, "score": round(r.score, 6)}
                for r in result.results]
            knowledge = result.knowledge
            return {"question": question, "strategy": result.strategy,
                    "method": result.method, "text": result.render(), "items": items,
                    "characters": result.characters, "threshold": result.threshold,
                    "notes": [*result.notes, *result.warnings],
                    "rules": [_rule(e) for e in knowledge.rules] if knowledge else [],
                    "glossary": [_term(e) for e in knowledge.glossary] if knowledge else []}

    def get_instructions(self, question: str | None = None) -> InstructionsOutput:
        with self._call() as notes:
            selection = self.memory.rules(question or None)
            text = selection.render().strip()
            return {"question": question, "strategy": selection.strategy,
                    "text": text or "This project has no business rules, caveats or metrics.",
                    "rules": [_rule(e) for e in selection.rules],
                    "glossary": [_term(e) for e in selection.glossary],
                    "characters": selection.characters, "threshold": selection.threshold,
                    "notes": [*notes, *selection.notes]}

    def lookup_glossary(self, term: str | None = None) -> GlossaryOutput:
        with self._call():
            return {"term": term, "terms": [_term(e) for e in self.memory.glossary(term)]}

    def describe_schema(self) -> DescribeOutput:
        with self._call():
            manifest = self.memory.manifest()
            return {"text": self.memory.describe(), "data_source": manifest.data_source,
                    "dialect": manifest.dialect,
                    "models": [m.name for m in manifest.models],
                    "views": [v.name for v in manifest.views],
                    "warnings": list(manifest.warnings)}

    def store_query(self, question: str, sql: str, datasource: str | None = None,
                    tags: Sequence[str] = (), note: str = "") -> StoreOutput:
        with self._call() as notes:
            try:
                result = self.memory.store(question, sql, datasource=datasource,
                                           tags=tuple(tags or ()), note=note,
                                           source="agent", check_schema=True)
            except SqlCheckError as e:
                raise WrenmemError(_refusal(e, self.memory)) from e
            return {"path": result.path, "created": result.created,
                    "question": result.pair.nl, "sql": result.pair.sql,
                    "dialect": result.pair.dialect, "notes": list(notes)}

    def list_queries(self, source: str | None = None, tag: str | None = None,
                     datasource: str | None = None, limit: int = 50, offset: int = 0
                     ) -> ListOutput:
        with self._call():
            pairs = self.memory.list(source=source, tags=(tag,) if tag else (),
                                     datasource=datasource)
            page = pairs[offset:offset + limit]
            return {"total": len(pairs), "offset": offset, "limit": limit,
                    "pairs": [_listed(p) for p in page]}

    def forget_query(self, path: str) -> ForgetOutput:
        with self._call() as notes:
            target = pair_file_in_knowledge(self.memory, path)
            deleted = self.memory.forget([str(target)])
            return {"deleted": deleted, "notes": list(notes)}


def no_manifest(memory: Memory) -> str:
    """What an agent is told when the project has no manifest: where it was looked for,
    how to configure one, and what to do meanwhile."""
    where = memory.settings.relpath(memory.settings.manifest_path)
    return (f"No schema: this project has no MDL manifest ({where} not found), so no tables "
            "or columns can be given. To configure one, build it with Wren's `wren` CLI into "
            "target/mdl.json, or point the `manifest` setting at it (manifest = "
            "\"path/to/mdl.json\" in wrenmem.toml, WRENMEM_MANIFEST, or `wrenmem --manifest "
            "PATH mcp`; a changed setting needs a server restart). Meanwhile, write SQL from "
            "the rules, the glossary and similar pairs (recall_queries).")


def _without_schema(memory: Memory, question: str, threshold: int | None,
                    notes: list[str]) -> SchemaContextOutput:
    """get_schema_context's answer when there is no manifest (strategy "none")."""
    selection = memory.rules(question)
    message = no_manifest(memory)
    return {"question": question, "strategy": "none", "method": "none",
            "text": message + "\n" + selection.render(), "items": [], "characters": 0,
            "threshold": memory.settings.fetch_threshold if threshold is None else threshold,
            "notes": [message, *notes, *selection.notes],
            "rules": [_rule(e) for e in selection.rules],
            "glossary": [_term(e) for e in selection.glossary]}


def pair_file_in_knowledge(memory: Memory, path: str) -> Path:
    """The path of the pair file ``path`` names (relative to the project root, or
    absolute; a path, never a question), refused unless the catalog lists it as a pair
    (:func:`wrenmem.pairs.catalog.require_listed_pair`) or when it is a symbolic link
    (wherever it points: deleting through one would remove its target, not the link)."""
    settings = memory.settings
    given = Path(path.strip())
    if str(given) in ("", "."):
        raise WrenmemError("give the pair file's path, e.g. knowledge/sql/<name>.md")
    require_listed_pair(settings, str(given))
    target = given if given.is_absolute() else settings.root / given
    if target.is_symlink():
        raise WrenmemError(f"refused: {path!r} is a symbolic link; forget the file it points "
                           "to, or remove the link by hand")
    if not target.is_file():
        raise WrenmemError(f"no pair file {path!r} (list_queries shows the paths)")
    return target


def _refusal(error: SqlCheckError, memory: Memory) -> str:
    where = memory.settings.relpath(memory.settings.manifest_path)
    lines = [f"{error.prefix}: {len(error.problems)} problem(s) in the SQL "
             f"(checked against {where}):"]
    lines += [f"  line {p.line}, column {p.col}: {p.message}" for p in error.problems]
    if "read-only" in error.prefix:
        lines.append("Only read-only queries (one SELECT) are stored as examples; nothing "
                     "was written.")
    else:
        lines.append("Fix the SQL (run it first if you can) and call store_query again.")
    return "\n".join(lines)


def _rule(entry: Entry) -> KnowledgeEntryOutput:
    return {"kind": entry.kind, "title": entry.title, "text": entry.body, "path": entry.path,
            "line": entry.line, "tags": list(entry.tags)}


def _term(entry: Entry) -> GlossaryTermOutput:
    return {"term": entry.title, "synonyms": list(entry.synonyms),
            "columns": list(entry.columns), "definition": entry.body, "path": entry.path,
            "line": entry.line}


def _recalled(hit: Hit) -> RecalledPair:
    return {"question": hit.question, "sql": hit.sql, "path": hit.path, "score": hit.score,
            "source": hit.source, "datasource": hit.datasource, "dialect": hit.dialect,
            "tags": list(hit.tags), "also": list(hit.also), "verified": hit.verified,
            "claimed_by": hit.claimed_by, "allows_writes": hit.allows_writes}


def _listed(pair: Pair) -> ListedPair:
    return {"question": pair.nl, "sql": pair.sql, "path": pair.path, "source": pair.source,
            "datasource": pair.datasource, "dialect": pair.dialect, "tags": list(pair.tags),
            "created_at": pair.created_at, "verified": pair.verified}

