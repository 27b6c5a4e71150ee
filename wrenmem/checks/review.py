"""Review status: ``wrenmem verify`` marks pairs verified, recording what it verified.

It writes ``verified_by``, ``verified_at``, ``verified_pair`` (fingerprint of the question,
phrasings, SQL, dialect and datasource) and ``verified_schema`` (of each item the SQL uses:
a later change is WM011), drops ``reviewed: false`` and the old ``verified_sql``, and records
the verification as made here (:mod:`wrenmem.pairs.trust`). A pair that does not validate
is not verified."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from wrenmem.checks.uses import item_fingerprints, used_items
from wrenmem.checks.validate import Problem, Validator
from wrenmem.errors import WrenmemError
from wrenmem.fs.fsutil import git_output
from wrenmem.pairs.catalog import read_pair_file, scan
from wrenmem.pairs.pairfile import (
    REVIEW_KEYS,
    VERIFIED_AT,
    VERIFIED_BY,
    VERIFIED_PAIR,
    VERIFIED_SCHEMA,
    Pair,
    checked_file_bytes,
    pair_fingerprint,
    render_pair,
)
from wrenmem.pairs.store import utc_now, write_pair_bytes
from wrenmem.pairs.trust import record_verified
from wrenmem.settings import Settings


@dataclass(frozen=True)
class Verified:
    """One pair given to ``verify``: marked (``changed``), already so, or refused."""

    path: str
    pair: Pair | None
    changed: bool = False
    problems: tuple[Problem, ...] = ()
    # the earlier verification this one replaced (verified_by, verified_at), if another's
    replaced: tuple[str, str | None] | None = None

    @property
    def ok(self) -> bool:
        return not any(p.is_error for p in self.problems)

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "verified": self.ok, "changed": self.changed,
                "verified_by": self.pair.extra.get(VERIFIED_BY) if self.pair else None,
                "uses": sorted(self.pair.extra.get(VERIFIED_SCHEMA) or {}) if self.pair else [],
                "replaced": {"verified_by": self.replaced[0], "verified_at": self.replaced[1]}
                if self.replaced else None,
                "problems": [p.to_dict() for p in self.problems]}


def reviewer_name(root: Path) -> str:
    """``user.name`` (with ``<user.email>`` when set) from git config, as a commit's author."""
    name = git_output(root, "config", "user.name") or ""
    email = git_output(root, "config", "user.email") or ""
    if not name:
        raise WrenmemError("who verifies? git config user.name is not set: pass --by NAME")
    return f"{name} <{email}>" if email else name


def verify_pairs(settings: Settings, paths: list[Path], by: str, *, force: bool = False,
                 now: str | None = None,
                 progress: Callable[[int, int], None] | None = None) -> list[Verified]:
    """Mark the pair files ``paths`` verified by ``by``. A pair with a validation error is
    refused (and left as it is) unless ``force``; a file that cannot be read is reported.
    ``progress(done, total)`` is told the files done before each one and at the end."""
    if not by.strip():
        raise WrenmemError("the reviewer's name is empty")
    validator = Validator(settings)
    validator.load_manifest()
    fingerprints = item_fingerprints(validator.manifest) if validator.manifest else {}
    stamp = now or utc_now()
    out: list[Verified] = []
    for done, path in enumerate(paths):
        if progress is not None:
            progress(done, len(paths))
        rel = settings.relpath(path)
        try:
            absolute = (settings.root / rel).resolve()
        except (OSError, RuntimeError):  # a link loop: read as the catalog reads it, to say so
            out.append(Verified(rel, None, False, tuple(_checked(
                validator, settings.root / rel, rel)[1])))
            continue
        if not absolute.is_relative_to(settings.knowledge_path):  # reported; the rest go on
            out.append(Verified(rel, None, False, (Problem(
                rel, 1, 1, f"not a pair file inside {settings.knowledge_dir}", "pair"),)))
            continue
        pair, problems = _checked(validator, absolute, rel)
        problems = [p for p in problems if p.kind != "stale"]  # verifying is the answer
        if pair is None or (not force and any(p.is_error for p in problems)):
            out.append(Verified(rel, pair, False, tuple(problems)))
            continue
        dialect = validator.dialect_of(pair)
        items = used_items(pair.sql, dialect, validator.tables or {}) if validator.tables else ()
        extra = {k: v for k, v in pair.extra.items() if k not in REVIEW_KEYS}
        extra[VERIFIED_BY] = by.strip()
        extra[VERIFIED_AT] = stamp
        extra[VERIFIED_PAIR] = pair_fingerprint(pair)
        if items:
            extra[VERIFIED_SCHEMA] = {i: fingerprints.get(i.lower(), "") for i in items}
        marked = pair.with_changes(extra=extra)
        earlier = pair.extra.get(VERIFIED_BY)
        already = pair.verification_intact and pair.extra.get(VERIFIED_SCHEMA) == extra.get(
            VERIFIED_SCHEMA) and str(earlier) == by.strip()
        replaced = None
        if earlier and str(earlier).strip() != by.strip():  # said, never silently replaced
            at = pair.extra.get(VERIFIED_AT)
            replaced = (str(earlier), None if at is None else str(at))
        if not already:
            text = render_pair(marked, settings.format)
            write_pair_bytes(settings, absolute,
                             checked_file_bytes(text, rel, marked, settings.max_pair_bytes))
        reread = read_pair_file(absolute, rel, settings.max_pair_bytes,
                                inside=settings.root)[0]
        record_verified(settings, [reread])
        out.append(Verified(rel, reread, not already, tuple(problems), replaced))
    if progress is not None:
        progress(len(paths), len(paths))
    return out


def _checked(validator: Validator, absolute: Path, rel: str) -> tuple[Pair | None, list[Problem]]:
    """The pair file read as every command reads one and validated; a file that cannot be
    read (or is missing) is one problem saying why."""
    if not os.path.lexists(absolute):
        return None, [Problem(rel, 1, 1, "no such pair file", "pair")]
    return validator.check_file(absolute, rel)


def stale_problems(settings: Settings) -> list[Problem]:
    """Verified pairs whose tables or columns changed in the manifest since they were
    verified (WM011); reads only the verified pairs' files, binds nothing."""
    validator = Validator(settings)
    found: list[Problem] = []
    for pair in scan(settings).pairs:
        if pair.verified and pair.extra.get(VERIFIED_SCHEMA):
            text = (settings.root / pair.path).read_text(encoding="utf-8-sig")
            found += validator.stale_problems(pair, text.split("\n"))
    return found
