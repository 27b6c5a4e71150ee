"""What the index should hold: a snapshot of the pair files and seeds, and the state mirror
that says when the index already holds exactly that."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from wrenmem.errors import PairError, WrenmemError
from wrenmem.index.state import (
    IndexState,
    Stats,
    save_state,
    seeds_digest,
    state_matches,
    walk_listing,
    walk_matches,
)
from wrenmem.pairs import questions
from wrenmem.pairs.catalog import scan
from wrenmem.pairs.listing import Listing
from wrenmem.pairs.pairfile import Pair
from wrenmem.pairs.seeds import extra_pairs
from wrenmem.settings import Settings

log = logging.getLogger(__name__)

SEED_PREFIX = "seed:"


@dataclass(frozen=True)
class Snapshot:
    """The pairs the index should hold, read from the files and the seeds."""

    pairs: dict[str, Pair]  # id -> pair
    file_hashes: dict[str, str]  # relative path -> raw sha256 (bad files too)
    extra_hashes: dict[str, str]  # seed id -> content hash
    errors: tuple[PairError, ...]
    warnings: tuple[str, ...] = ()
    extras_ok: bool = True
    stats: Stats | None = None  # taken before the files were read
    stats_at: float = 0.0
    seeds: str | None = None
    walk: Listing | None = None  # the walk ``stats`` come from

    def desired(self) -> dict[str, str]:
        return {row_id: pair.content_hash for row_id, pair in self.pairs.items()}


def seed_id(pair: Pair) -> str:
    """Seeds are not files: an id no relative path takes (``seed:<key>``, or by content)."""
    if pair.path.startswith(SEED_PREFIX):
        return pair.path
    return SEED_PREFIX + pair.content_hash[:24]


def take_snapshot(settings: Settings, *, reread: bool = False) -> Snapshot:
    """``reread`` reads every file again instead of trusting the parse cache (full syncs)."""
    stats_at = time.time()
    walk = walk_listing(settings)
    stats_at = min(stats_at, walk.taken_at)  # an early walk (listing.start_early)
    stats = walk.stats
    try:
        seeds: str | None = seeds_digest(settings)
    except WrenmemError:
        seeds = None
    found = scan(settings, refresh=reread)
    pairs = {p.path: p for p in found.pairs}
    questions.record_scan(settings, walk, pairs)  # the first ``store`` then reads no catalog
    warnings: list[str] = []
    extras: dict[str, str] = {}
    extras_ok = True
    try:
        for pair in extra_pairs(settings, exclude_questions=[p.nl for p in found.pairs]):
            row_id = seed_id(pair)
            pairs.setdefault(row_id, pair)
            extras[row_id] = pair.content_hash
    except WrenmemError as e:  # a broken manifest must not block the pair files
        extras_ok = False
        warnings.append(f"seed pairs left as they were: {e}")
    return Snapshot(pairs, dict(found.file_hashes), extras, found.errors, tuple(warnings),
                    extras_ok, stats, stats_at, seeds, walk)


def mirror_matches(settings: Settings, state: IndexState | None, model_id: str,
             snap: Snapshot) -> bool:
    return snap.extras_ok and state_matches(settings, state, model_id, snap.file_hashes,
                                            snap.extra_hashes)


def save_mirror(settings: Settings, model_id: str, snap: Snapshot, rows: int,
                version: int | None = None) -> None:
    save_state(settings, model_id=model_id, files=snap.file_hashes, extras=snap.extra_hashes,
               rows=rows,
               errors=[(e.path, e.reason, e.line) for e in snap.errors], stats=snap.stats,
               stats_at=snap.stats_at, seeds=snap.seeds, version=version,
               walk=snap.walk if walk_matches(snap.walk, snap.file_hashes, snap.stats)
               else None)
