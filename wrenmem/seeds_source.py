"""Pairs that are not files but are recalled like them (seed queries from the manifest)."""

from __future__ import annotations

from wrenmem.pairs import Pair
from wrenmem.settings import Settings


def extra_pairs(settings: Settings) -> list[Pair]:
    """Derived pairs every backend recalls beside the files. Seeds are added here."""
    return []
