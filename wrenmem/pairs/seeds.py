"""Pairs that are not files but are recalled like them: seed queries from the manifest.

Every recall calls :func:`extra_pairs`, so it must be nearly free when nothing changed: the
seeds are cached in ``.wrenmem/seeds.json`` keyed by the manifest file's stat and
fingerprint. A missing manifest gives no seeds; a broken one gives none and a warning, and
never breaks recall.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wrenmem.errors import WrenmemError
from wrenmem.fs import statedir
from wrenmem.fs.fsutil import is_racy, read_state, write_state
from wrenmem.fs.fsutil import stat_key as fs_stat_key
from wrenmem.lazy import lazy
from wrenmem.pairs.catalog import scan
from wrenmem.pairs.pairfile import Pair
from wrenmem.pairs.store import store_pair
from wrenmem.settings import Settings

if TYPE_CHECKING:
    from wrenmem.schema import manifest as schema_manifest
    from wrenmem.schema import seeds as schema_seeds
else:  # imported on first use (wrenmem/lazy.py)
    schema_manifest = lazy("wrenmem.schema.manifest")
    schema_seeds = lazy("wrenmem.schema.seeds")

log = logging.getLogger(__name__)
CACHE_VERSION = 1
CACHE_FILE = statedir.SEEDS


def extra_pairs(settings: Settings, *, exclude_questions: Iterable[str] | None = None
                ) -> list[Pair]:
    """Seed pairs of the project's manifest, minus questions that already have a file.

    ``exclude_questions`` saves a catalog scan when the caller has the stored questions.
    None at all with the setting ``seeds = false``.
    """
    if not settings.seeds:
        return []
    seeds = seed_pairs(settings)
    if not seeds:
        return []
    if exclude_questions is None:
        exclude_questions = [p.nl for p in scan(settings).pairs]
    taken = {q.strip().casefold() for q in exclude_questions}
    return [p for p in seeds if p.nl.casefold() not in taken]


def seed_pairs(settings: Settings) -> list[Pair]:
    """Every seed of the manifest as a Pair (``source: seed``, path ``seed:<key>``)."""
    path = settings.manifest_path
    try:
        st = path.stat()
    except OSError:
        return []
    stat_key = list(fs_stat_key(st))  # the change time: an mtime put back is seen
    cache_path = settings.state_dir / CACHE_FILE
    cache = read_state(cache_path, CACHE_VERSION)
    if not isinstance(cache.get("seeds"), list):
        cache = {}
    same_file = cache.get("manifest") == str(path)
    racy = is_racy(stat_key[0])
    if same_file and cache.get("stat") == stat_key and not racy:
        pairs = _pairs(cache["seeds"])
        if pairs is not None:
            return pairs
    # The manifest changed (or was never read): only now are the schema modules needed. Every
    # grep recall passes here, so with a fresh cache it must not pay for importing them.

    try:
        manifest = schema_manifest.load_manifest(path, max_bytes=settings.max_manifest_bytes)
    except WrenmemError as e:
        log.warning("no seed queries: %s", e)
        return []
    records = cache["seeds"] if same_file and cache.get("fingerprint") == \
        manifest.fingerprint and _pairs(cache["seeds"]) is not None else build_records(manifest)
    write_state(cache_path, {"version": CACHE_VERSION, "manifest": str(path),
                             "stat": stat_key, "fingerprint": manifest.fingerprint,
                             "seeds": records})
    return _pairs(records) or []


def build_records(manifest: Any) -> list[dict[str, Any]]:
    """Seeds of a loaded manifest as plain records (what the cache stores)."""
    datasource = manifest.data_source or None
    return [{"nl": s.nl, "sql": s.sql, "path": f"seed:{s.key}", "dialect": manifest.dialect,
             "datasource": datasource, "tags": ["seed", s.kind], "model": s.model}
            for s in schema_seeds.generate_seeds(manifest)]


def _pairs(records: list[Any]) -> list[Pair] | None:
    """Pairs from cached records; None when the cache holds something else (rebuild it)."""
    try:
        return [Pair(nl=r["nl"], sql=r["sql"], path=r["path"], datasource=r["datasource"],
                     dialect=r["dialect"], tags=tuple(r["tags"]), source="seed")
                for r in records]
    except (KeyError, TypeError):
        return None


@dataclass(frozen=True)
class SeedWrite:
    """What ``seed --write`` did: files written (new or updated) and seeds left alone."""

    written: tuple[dict[str, Any], ...]
    skipped: tuple[dict[str, Any], ...]

    @property
    def paths(self) -> list[str]:
        return [w["path"] for w in self.written]


def write_seeds(settings: Settings, records: list[dict[str, Any]]) -> SeedWrite:
    """Materialise seed records as pair files under ``seeds/`` (``source: seed``).

    A question that already has a file of another source is skipped: someone wrote it.
    """
    existing = {p.nl: p for p in scan(settings).pairs}
    written, skipped = [], []
    for r in records:
        other = existing.get(r["nl"])
        if other is not None and other.source != "seed":
            skipped.append({"nl": r["nl"], "path": other.path,
                            "reason": f"a {other.source} pair already answers it"})
            continue
        result = store_pair(settings, Pair(nl=r["nl"], sql=r["sql"], dialect=r["dialect"],
                                           datasource=r["datasource"], tags=tuple(r["tags"]),
                                           source="seed"), folder="seeds")
        written.append({"nl": r["nl"], "path": result.path, "created": result.created,
                        "changed": result.changed})
    return SeedWrite(tuple(written), tuple(skipped))
