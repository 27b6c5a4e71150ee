"""Wren's ``queries.yml`` exchange format: import writes pair files, export reads them."""

from __future__ import annotations

import datetime as dt
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wrenmem.errors import WrenmemError
from wrenmem.fs.fsutil import file_mode_for, read_text_file
from wrenmem.knowledge.slug import MAX_SUFFIX, numbered_names, slugify
from wrenmem.pairs.catalog import scan
from wrenmem.pairs.pairfile import (
    Pair,
    canonical_time,
    checked_file_bytes,
    load_yaml,
    render_pair,
    yaml_problem,
)
from wrenmem.pairs.store import (
    clean_pair,
    merged_update,
    pair_write_target,
    utc_now,
    would_change,
)
from wrenmem.pairs.swap import Planned, replace_set
from wrenmem.pairs.text import question_key
from wrenmem.settings import Settings

MODES = ("skip", "upsert", "overwrite")
MAX_EXCHANGE_BYTES = 256 * 1024 * 1024  # a queries.yml larger than this is not read


@dataclass
class ImportReport:
    """What an import did (or, with dry_run, would do)."""

    mode: str
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)  # existing files already saying this
    skipped: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    sources: dict[str, int] = field(default_factory=dict)
    read: int = 0  # pairs in the input

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "created": self.created, "updated": self.updated,
                "unchanged": self.unchanged, "skipped": self.skipped, "deleted": self.deleted,
                "sources": self.sources}


def read_queries_yml(path: Path) -> list[Pair]:
    """Parse and validate a ``queries.yml``; errors name the pair number and field."""
    import yaml

    text = read_text_file(path, MAX_EXCHANGE_BYTES)
    try:
        doc = load_yaml(text)
    except yaml.YAMLError as e:
        where, problem = yaml_problem(e)
        at = f":{where[0]}:{where[1]}" if where is not None else ""
        raise WrenmemError(f"{path}{at}: not valid YAML: {problem}") from e
    if not isinstance(doc, dict) or "pairs" not in doc:
        raise WrenmemError(f"{path}: expected a mapping with a 'pairs' list")
    if doc.get("version", 1) != 1:
        raise WrenmemError(f"{path}: unsupported version {doc.get('version')!r} (expected 1)")
    items = doc["pairs"] or []
    if not isinstance(items, list):
        raise WrenmemError(f"{path}: 'pairs' must be a list")
    pairs: list[Pair] = []
    for n, item in enumerate(items, 1):
        if not isinstance(item, dict):
            raise WrenmemError(f"{path}: pair #{n} is not a mapping")
        for key in ("nl", "sql", "source", "datasource", "dialect"):
            if item.get(key) is not None and not isinstance(item[key], str):
                raise WrenmemError(f"{path}: pair #{n} field {key!r} must be a string")
        if not (item.get("nl") or "").strip() or not (item.get("sql") or "").strip():
            raise WrenmemError(f"{path}: pair #{n} is missing 'nl' or 'sql'")
        tags = item.get("tags") or []
        if isinstance(tags, str):
            tags = [t.strip() for t in tags.replace(",", " ").split()
                    if t.strip() and not t.startswith("source:")]
        created = item.get("created_at")
        if isinstance(created, dt.datetime | dt.date):
            created = created.isoformat()
        created = canonical_time(str(created)) if created else None
        pair = Pair(
            nl=item["nl"].strip(), sql=item["sql"].strip(), datasource=item.get("datasource")
            or None, dialect=item.get("dialect") or None,
            tags=tuple(str(t) for t in tags), source=item.get("source") or "user",
            created_at=str(created) if created else None,
        )
        try:
            pairs.append(clean_pair(pair))
        except WrenmemError as e:
            raise WrenmemError(f"{path}: pair #{n}: {e}") from e
    return pairs


def import_pairs(settings: Settings, pairs: Sequence[Pair], mode: str = "skip",
                 dry_run: bool = False,
                 progress: Callable[[int, int], None] | None = None) -> ImportReport:
    """Write imported pairs (their SQL checked: :func:`wrenmem.checks.admit.check_import`)
    as files. ``skip`` keeps existing questions, ``upsert`` updates them, ``overwrite``
    replaces every file whose source appears in the input. The files are written as one
    change (:func:`wrenmem.pairs.swap.replace_set`). ``progress(done, total)``: files written.
    """
    if mode not in MODES:
        raise WrenmemError(f"unknown import mode {mode!r}")
    report = ImportReport(mode, sources=dict(Counter(p.source for p in pairs)))
    latest: dict[str, Pair] = {}
    for pair in pairs:
        key = question_key(pair.nl)
        if mode == "skip" and key in latest:
            report.skipped.append(pair.nl)
            continue
        latest[key] = pair  # upsert/overwrite: the last occurrence wins
    found = scan(settings)
    existing: dict[str, Pair] = {}
    for stored in found.pairs:
        existing.setdefault(question_key(stored.nl), stored)
    doomed: set[str] = set()
    renewed: dict[str, str] = {}  # question -> the file --overwrite replaces: its name kept
    if mode == "overwrite":
        sources = {p.source for p in latest.values()}
        report.deleted = [p.path for p in found.pairs if p.source in sources]
        doomed = set(report.deleted)
        for stored in found.pairs:
            if stored.path in doomed:
                renewed.setdefault(question_key(stored.nl), stored.path)
        existing = {k: p for k, p in existing.items() if p.path not in doomed}
    taken = set(found.file_hashes) - doomed
    writes: list[Planned] = []
    for key, pair in latest.items():
        old = existing.get(key)
        if old is not None and mode == "skip":
            report.skipped.append(old.path)
            continue
        incoming = clean_pair(pair.with_changes(source=pair.source or "import"))
        if old is None:
            rel = renewed.get(key, "")
            if not rel or rel in taken:
                rel = _free_name(settings, slugify(incoming.nl), taken, doomed)
            taken.add(rel)
            new = incoming.with_changes(created_at=incoming.created_at or utc_now(), path=rel)
            text = render_pair(new, settings.format)
            writes.append(Planned(settings.root / rel, checked_file_bytes(
                text, rel, new, settings.max_pair_bytes), create=rel not in doomed,
                mode=file_mode_for(settings.root / rel)))
            report.created.append(rel)
            continue
        merged, text = merged_update(settings, old, incoming)
        if says_the_same(old, merged, incoming) or not would_change(settings, old, text):
            report.unchanged.append(old.path)
            continue
        path = pair_write_target(settings, settings.root / old.path)
        writes.append(Planned(path, checked_file_bytes(text, old.path, merged,
                                                       settings.max_pair_bytes),
                              create=False, mode=file_mode_for(path)))
        report.updated.append(old.path)
    if not dry_run:
        planned = {settings.relpath(w.path) for w in writes}
        renamed = replace_set(settings, writes, [settings.root / rel for rel in report.deleted
                                                 if rel not in planned], progress)
        moved = {settings.relpath(a): settings.relpath(b) for a, b in renamed.items()}
        report.created = [moved.get(rel, rel) for rel in report.created]
    return report


def says_the_same(old: Pair, merged: Pair, incoming: Pair) -> bool:
    """Whether an imported pair only repeats its file (as ``export`` then ``import --upsert``
    does): the same fields, notes and dates. Such a file is left as it is, byte for byte,
    whatever its format (Wren's ``sql:`` in the front matter stays, and no ``created_at``
    is added or rewritten)."""
    if merged.content_hash != old.content_hash or merged.notes != old.notes:
        return False
    if merged.extra != old.extra:
        return False
    if incoming.created_at is None:
        return True
    return old.created_at is not None and (
        canonical_time(str(old.created_at)) == canonical_time(str(incoming.created_at)))


def _free_name(settings: Settings, stem: str, taken: set[str],
               doomed: frozenset[str] | set[str] = frozenset()) -> str:
    """The first ``stem.md``, ``stem-2.md``… in the knowledge folder that no file holds
    (as scanned, or on disk: a broken file or a link is never overwritten; a pair file this
    import deletes is free) and no earlier pair of this import was given."""
    for path in numbered_names(settings.knowledge_path, stem):
        rel = settings.relpath(path)
        if rel not in taken and (rel in doomed or not os.path.lexists(path)):
            return rel
    raise WrenmemError(f"no free file name for {stem!r} after {MAX_SUFFIX} tries")


class ImportRefused(WrenmemError):
    """An import with SQL that does not parse: nothing was written."""

    def __init__(self, problems: list[str], what: str = ""):
        reason = what or "SQL problem(s)"
        hint = "" if what else " (--force imports anyway)"
        super().__init__(f"{len(problems)} {reason} in the input, nothing imported{hint}:"
                         "\n  " + "\n  ".join(problems))
        self.problems = problems


def export_document(pairs: Sequence[Pair]) -> str:
    """``queries.yml`` text for ``pairs`` (tags and dialect kept as extra keys)."""
    import yaml

    items = []
    for pair in pairs:
        item: dict[str, Any] = {"nl": pair.nl, "sql": pair.sql, "source": pair.source}
        if pair.datasource:
            item["datasource"] = pair.datasource
        if pair.dialect:
            item["dialect"] = pair.dialect
        if pair.tags:
            item["tags"] = list(pair.tags)
        if pair.created_at:
            item["created_at"] = pair.created_at
        items.append(item)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
    doc = {"version": 1, "exported_at": now, "pairs": items}
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False, default_flow_style=False,
                          width=100)
