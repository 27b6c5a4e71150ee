"""The knowledge that bears on a question, for ``fetch`` and ``get_instructions``: every
rule while their text is small (strategy ``full``, as the schema is), else the most
relevant ones (keyword BM25 fused with the knowledge index's vectors), and the glossary
terms the question uses (docs/schema.md#fetch says the rules)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wrenmem.errors import LockTimeoutError, WrenmemError
from wrenmem.knowledge.entries import Entry
from wrenmem.knowledge.files import Knowledge, load_knowledge
from wrenmem.knowledge.terms import glossary_of
from wrenmem.lazy import lazy
from wrenmem.settings import Settings
from wrenmem.textsearch import Bm25Index, document_terms, rrf, tokenize

if TYPE_CHECKING:
    from wrenmem.embed import embedders
    from wrenmem.knowledge import table as knowledge_table
    from wrenmem.storage import lance
else:  # imported on first use (wrenmem/lazy.py)
    embedders = lazy("wrenmem.embed.embedders")
    knowledge_table = lazy("wrenmem.knowledge.table")
    lance = lazy("wrenmem.storage.lance")

if TYPE_CHECKING:
    from wrenmem.embed.embedders import Embedder

log = logging.getLogger(__name__)
VECTOR_TOP = 5  # entries the vector side may bring in without a shared word


@dataclass(frozen=True)
class RuleSelection:
    """The rules (and caveats, metrics, instructions) and glossary terms for a question."""

    strategy: str  # full | search | none
    method: str  # full | keyword | hybrid | none
    rules: tuple[Entry, ...] = ()
    glossary: tuple[Entry, ...] = ()
    characters: int = 0  # of every rule's text
    threshold: int = 0
    notes: tuple[str, ...] = field(default=(), compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "method": self.method,
                "characters": self.characters, "threshold": self.threshold,
                "rules": [e.to_dict() for e in self.rules],
                "glossary": [e.to_dict() for e in self.glossary]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RuleSelection:
        """The selection :meth:`to_dict` gave (the daemon's fetch reply); KeyError/TypeError/
        ValueError when it is not one."""
        return cls(str(data["strategy"]), str(data["method"]),
                   tuple(Entry.from_dict(e) for e in data["rules"]),
                   tuple(Entry.from_dict(e) for e in data["glossary"]),
                   int(data["characters"]), int(data["threshold"]))

    def render(self) -> str:
        """Markdown for a prompt: the rules, then the definitions; empty when neither."""
        blocks = [f"## {title}\n\n" + "\n\n".join(f"{e.text()}\n(from {e.path}:{e.line})"
                                                  for e in entries)
                  for title, entries in (("Business rules and caveats", self.rules),
                                         ("Glossary terms in this question", self.glossary))
                  if entries]
        return "\n" + "\n\n".join(blocks) + "\n" if blocks else ""


def select_rules(settings: Settings, question: str | None, *, threshold: int | None = None,
                 knowledge: Knowledge | None = None, embedder: Embedder | None = None
                 ) -> RuleSelection:
    """The knowledge for ``question`` (None: every rule, every glossary term). ``embedder``:
    the caller's (a Memory given one), else the setting's."""
    knowledge = knowledge or load_knowledge(settings)
    rules = list(knowledge.rules)
    limit = settings.knowledge_threshold if threshold is None else threshold
    glossary = glossary_of(settings, knowledge)
    terms = tuple(glossary.entries if question is None else glossary.used_by(question))
    size = sum(len(e.text()) for e in rules)
    if not rules:
        return RuleSelection("none", "none", (), terms, 0, limit)
    if question is None or size <= limit:
        return RuleSelection("full", "full", tuple(rules), terms, size, limit)
    expanded = " ".join([question, *glossary.expansions(question)])
    ranked = keyword_rank(rules, expanded)
    method = "keyword"
    notes: tuple[str, ...] = ()
    if settings.backend != "grep":
        try:
            vector = _vector_rank(settings, knowledge, rules, expanded, embedder)
        except (WrenmemError, ImportError, OSError) as e:
            vector, notes = None, (f"knowledge: keyword search only ({e})",)
        if vector is not None:
            ranked, method = _fuse(ranked, vector), "hybrid"
    chosen: list[Entry] = []
    spent = 0
    for entry in ranked:
        cost = len(entry.text())
        if chosen and spent + cost > limit:
            continue
        chosen.append(entry)
        spent += cost
    return RuleSelection("search", method, tuple(chosen), terms, size, limit, notes)


def keyword_rank(entries: Sequence[Entry], question: str) -> list[Entry]:
    """Entries sharing a search term with ``question``, by BM25 (titles weigh double)."""
    docs = [document_terms({"tags": e.title, "nl": "", "body": e.body}) for e in entries]
    scores = Bm25Index(docs).term_scores(tokenize(question))
    order = sorted((n for n, s in scores.items() if s > 0), key=lambda n: (-scores[n], n))
    return [entries[n] for n in order]


def _vector_rank(settings: Settings, knowledge: Knowledge, rules: Sequence[Entry],
                 question: str, embedder: Embedder | None = None) -> list[Entry] | None:
    """Rules by cosine to the question from the knowledge index (synced first); None when
    the index is not in use here."""
    if lance.index_unavailable(settings) is not None:
        return None
    embedder = embedder or embedders.get_embedder(settings.embedder, root=settings.root)
    try:
        knowledge_table.sync_knowledge(settings, knowledge=knowledge, embedder=embedder)
    except LockTimeoutError:
        pass  # a writer is busy: search the table as it is; hashes keep stale rows out
    by_id = {e.id: e for e in rules}
    found = knowledge_table.vector_search(settings, question, embedder, len(knowledge.entries) + 1)
    return [by_id[i] for i, h, _score in found
            if i in by_id and by_id[i].entry_hash == h][:VECTOR_TOP]


def _fuse(*rankings: list[Entry]) -> list[Entry]:
    by_id = {entry.id: entry for ranking in rankings for entry in ranking}
    return [by_id[i] for i, _ in rrf(*([e.id for e in r] for r in rankings))]
