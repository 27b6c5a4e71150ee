"""Knowledge beyond pairs: business rules, glossary, caveats and metrics as Markdown files.

Wren's v5 layout: ``knowledge/rules/``, ``knowledge/glossary/``, ``knowledge/caveats/``,
``knowledge/metrics/`` beside ``knowledge/sql/``, plus the legacy ``instructions.md``. The
files are the truth; the ``knowledge`` table of the index is derived from them
(:mod:`wrenmem.knowledge.table`). ``fetch`` serves the rules that bear on a question and the
definitions of the glossary terms it uses (:mod:`wrenmem.knowledge.select`); recall searches
the glossary's synonyms too (:func:`expansions`).
"""

from __future__ import annotations

from wrenmem.knowledge.entries import KINDS, Entry, ParsedFile, parse_knowledge
from wrenmem.knowledge.files import Knowledge, knowledge_paths, load_knowledge
from wrenmem.knowledge.select import RuleSelection, select_rules
from wrenmem.knowledge.terms import Glossary, expansions, glossary_of

__all__ = ["KINDS", "Entry", "Glossary", "Knowledge", "ParsedFile", "RuleSelection",
           "expansions", "glossary_of", "knowledge_paths", "load_knowledge",
           "parse_knowledge", "select_rules"]
