"""Knowledge beyond pairs: business rules, glossary, caveats and metrics as Markdown files.

Wren's v5 layout: ``knowledge/rules/``, ``knowledge/glossary/``, ``knowledge/caveats/``,
``knowledge/metrics/`` beside ``knowledge/sql/``, plus the legacy ``instructions.md``. The
files are the truth; the ``knowledge`` table of the index is derived from them
(:mod:`wrenmem.knowledge.table`). ``fetch`` serves the rules that bear on a question and the
definitions of the glossary terms it uses (:mod:`wrenmem.knowledge.select`); recall searches
the glossary's synonyms too (:func:`expansions`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Public name -> the module of this package that defines it, imported on first use: a
# module of the package (``slug``, ``entries``) is imported without the others (every pair
# write and every no-op sync imports ``slug``; only ``fetch`` needs ``select``).
_EXPORTS = {
    **dict.fromkeys(("KINDS", "Entry", "ParsedFile", "parse_knowledge"), "entries"),
    **dict.fromkeys(("Knowledge", "knowledge_paths", "load_knowledge"), "files"),
    **dict.fromkeys(("RuleSelection", "select_rules"), "select"),
    **dict.fromkeys(("Glossary", "expansions", "glossary_of"), "terms"),
}

__all__ = ["KINDS", "Entry", "Glossary", "Knowledge", "ParsedFile", "RuleSelection",
           "expansions", "glossary_of", "knowledge_paths", "load_knowledge",
           "parse_knowledge", "select_rules"]

if TYPE_CHECKING:
    from wrenmem.knowledge.entries import KINDS, Entry, ParsedFile, parse_knowledge
    from wrenmem.knowledge.files import Knowledge, knowledge_paths, load_knowledge
    from wrenmem.knowledge.select import RuleSelection, select_rules
    from wrenmem.knowledge.terms import Glossary, expansions, glossary_of


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'wrenmem.knowledge' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"wrenmem.knowledge.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
