"""wrenmem: memory for text-to-SQL agents, kept as Markdown files in git.

Start with :class:`Memory`::

    from wrenmem import Memory

    memory = Memory("path/to/project")          # or Memory() inside the project
    memory.store("How many orders are there?", "SELECT COUNT(*) FROM orders")
    for hit in memory.recall("number of orders", k=3):
        print(hit.score, hit.question, hit.sql)
    context = memory.fetch("revenue per month")  # schema context for the question

The names below are loaded on first use, so ``import wrenmem`` (and the CLI) stay fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> module that defines it.
_EXPORTS = {
    "Memory": "wrenmem.api",
    "Pair": "wrenmem.pairs.pairfile",
    "Hit": "wrenmem.recall.hits",
    "RecallResult": "wrenmem.recall.hits",
    "Filters": "wrenmem.recall.hits",
    "FetchResult": "wrenmem.schema.fetch",
    "RuleSelection": "wrenmem.knowledge.select",
    "Knowledge": "wrenmem.knowledge.files",
    "SyncReport": "wrenmem.index.sync",
    "Drift": "wrenmem.index.drift",
    "StoreResult": "wrenmem.pairs.store",
    "ImportReport": "wrenmem.pairs.exchange",
    "FmtReport": "wrenmem.pairs.fmt",
    "Problem": "wrenmem.checks.validate",
    "Settings": "wrenmem.settings",
    "Embedder": "wrenmem.embed.embedders",
    "WrenmemError": "wrenmem.errors",
    "PairError": "wrenmem.errors",
    "SqlCheckError": "wrenmem.errors",
    "SettingsError": "wrenmem.errors",
    "ManifestError": "wrenmem.errors",
    "ExtraMissingError": "wrenmem.errors",
    "LockTimeoutError": "wrenmem.errors",
}

__all__ = [
    "__version__", "Memory", "Pair", "Hit", "RecallResult", "Filters", "FetchResult",
    "RuleSelection", "Knowledge",
    "SyncReport", "Drift", "StoreResult", "ImportReport", "FmtReport", "Problem", "Settings",
    "Embedder", "WrenmemError", "PairError", "SqlCheckError", "SettingsError", "ManifestError",
    "ExtraMissingError", "LockTimeoutError",
]

if TYPE_CHECKING:
    from wrenmem.api import Memory
    from wrenmem.checks.validate import Problem
    from wrenmem.embed.embedders import Embedder
    from wrenmem.errors import (
        ExtraMissingError,
        LockTimeoutError,
        ManifestError,
        PairError,
        SettingsError,
        SqlCheckError,
        WrenmemError,
    )
    from wrenmem.index.drift import Drift
    from wrenmem.index.sync import SyncReport
    from wrenmem.knowledge.files import Knowledge
    from wrenmem.knowledge.select import RuleSelection
    from wrenmem.pairs.exchange import ImportReport
    from wrenmem.pairs.fmt import FmtReport
    from wrenmem.pairs.pairfile import Pair
    from wrenmem.pairs.store import StoreResult
    from wrenmem.recall.hits import Filters, Hit, RecallResult
    from wrenmem.schema.fetch import FetchResult
    from wrenmem.settings import Settings


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'wrenmem' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
