"""The team's glossary: which terms a question uses, and what recall should search for.

A question *uses* a glossary entry when the entry's term or one of its synonyms appears in
it (as consecutive search terms, after the tokenizer of keyword recall: case, plurals and
punctuation do not matter; in Chinese or Japanese, when all its characters and pairs of
characters are there). Recall's keyword expansion is the entry's other names and the
tables and columns it refers to: "GMV" then also searches "gross merchandise value",
"orders" and "amount", the words of the pair that sums order amounts.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from wrenmem.knowledge.entries import Entry, split_reference
from wrenmem.knowledge.files import Knowledge, load_knowledge
from wrenmem.settings import Settings
from wrenmem.textsearch import CJK_CHAR, tokenize


@dataclass(frozen=True)
class Glossary:
    """Glossary entries with the search terms of each of their names."""

    entries: tuple[Entry, ...]
    names: tuple[tuple[tuple[str, ...], ...], ...]  # per entry, per name: its terms

    @classmethod
    def of(cls, entries: Sequence[Entry]) -> Glossary:
        return cls(tuple(entries),
                   tuple(tuple(tuple(tokenize(n)) for n in e.names) for e in entries))

    def used_by(self, question: str) -> list[Entry]:
        """The entries whose term or a synonym appears in ``question``, in glossary order."""
        asked = tokenize(question)
        if not asked:
            return []
        asked_set = set(asked)
        cjk = CJK_CHAR.search(question) is not None
        found = []
        for entry, names in zip(self.entries, self.names, strict=True):
            if any(n and (_contains(asked, n) or (cjk and set(n) <= asked_set))
                   for n in names):
                found.append(entry)
        return found

    def expansions(self, question: str) -> list[str]:
        """Extra search terms for ``question``: the other names of the entries it uses
        and the tables and columns they mean, without what the question already says."""
        asked = set(tokenize(question))
        out: list[str] = []
        for entry in self.used_by(question):
            for name in entry.names:
                if not set(tokenize(name)) <= asked:
                    out.append(name)
            for ref in entry.columns:
                table, column = split_reference(ref)
                out += [w for w in (table, column) if w and w.casefold() not in asked]
        return list(dict.fromkeys(out))


def _contains(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    n = len(needle)
    return any(list(haystack[i:i + n]) == list(needle) for i in range(len(haystack) - n + 1))


# (root, knowledge_root) -> (the knowledge files' fingerprint, Glossary, its entries' hashes)
_glossaries: dict[tuple[str, str], tuple[str, Glossary, tuple[str, ...]]] = {}
_lock = threading.Lock()


def glossary_of(settings: Settings, knowledge: Knowledge | None = None) -> Glossary:
    """The project's glossary, rebuilt only when a glossary entry changed."""
    knowledge = knowledge or load_knowledge(settings)
    key = (str(settings.root), settings.knowledge_root)
    with _lock:
        cached = _glossaries.get(key)
    if cached is not None and cached[0] == knowledge.fingerprint:  # no file changed
        return cached[1]
    terms = tuple(e for e in knowledge.terms if not e.empty or e.synonyms or e.columns)
    hashes = tuple(e.entry_hash for e in terms)
    if cached is not None and cached[2] == hashes:  # files changed, not the glossary
        glossary = cached[1]
    else:
        glossary = Glossary.of(terms)
    with _lock:
        _glossaries[key] = (knowledge.fingerprint, glossary, hashes)
    return glossary


def expansions(settings: Settings, question: str) -> list[str]:
    """Extra keyword-search terms for ``question`` from the project's glossary (none
    without one). Cheap: the files are read again only when they changed."""
    try:
        return glossary_of(settings).expansions(question)
    except OSError:
        return []
