"""Writing pairs: one file per question, found again by its question, never clobbering."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from wrenmem.errors import PairError, WrenmemError
from wrenmem.fs.fsutil import atomic_write_bytes, link_target, remove_stale_temps
from wrenmem.knowledge.slug import MAX_SUFFIX, numbered_names, slugify
from wrenmem.pairs.catalog import read_pair_file, require_listed_pair, scan, skipped_name
from wrenmem.pairs.pairfile import (
    REVIEWED,
    VERIFIED_AT,
    VERIFIED_BY,
    VERIFIED_PAIR,
    VERIFIED_SCHEMA,
    VERIFIED_SQL,
    Pair,
    checked_file_bytes,
    pair_fingerprint,
    render_pair,
    sql_fingerprint,
)
from wrenmem.pairs.swap import pair_temp_folder
from wrenmem.pairs.text import clean_question, clean_text, question_key
from wrenmem.settings import Settings

MAX_NAME_BYTES = 255  # of one file or folder name, on every common file system


@dataclass(frozen=True)
class StoreResult:
    """Where a pair went and whether the file was new."""

    path: str
    created: bool
    pair: Pair
    changed: bool = True  # False: the file already held exactly this, and was not written
    # Files of the question's own name that could not be read as pairs, so a free name
    # after them was taken: a hand-broken file of the same question, most likely.
    passed_over: tuple[PairError, ...] = ()


def utc_now() -> str:
    """Now, as every timestamp wrenmem writes: ``2026-11-29T12:00:00Z``."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def find_by_question(settings: Settings, nl: str, known: Sequence[Pair] | None = None
                     ) -> Pair | None:
    """The stored pair whose question is ``nl`` (by :func:`question_key`), if any;
    among ``known`` (the caller's scan) when given."""
    key = question_key(nl)
    for pair in scan(settings).pairs if known is None else known:
        if question_key(pair.nl) == key:
            return pair
    return None


def matching_pairs(pairs: Sequence[Pair], question: str) -> tuple[list[Pair], bool]:
    """The pairs a question names, and whether they matched only ignoring case (exact
    :func:`question_key` matches first, else case-folded ones)."""
    key = question_key(question)
    exact = [p for p in pairs if question_key(p.nl) == key]
    if exact:
        return exact, False
    folded = key.casefold()
    return [p for p in pairs if question_key(p.nl).casefold() == folded], True


def clean_pair(pair: Pair) -> Pair:
    """``pair`` as a file holds it (see :func:`wrenmem.pairs.text.clean_text`)."""
    for value, what in ((pair.datasource, "the datasource"), (pair.dialect, "the dialect"),
                        (pair.source, "the source"), *((t, f"tag {t!r}") for t in pair.tags),
                        *((a, f"the phrasing {a!r}") for a in pair.also)):
        if value:
            clean_text(value, what)
    return pair.with_changes(nl=clean_question(pair.nl), sql=clean_text(pair.sql, "the SQL"),
                             notes=clean_text(pair.notes, "the notes"))


def refuse_oversize(settings: Settings, *texts: str) -> None:
    """Refuse, before any work, text that cannot fit in one pair file: a file over
    ``max_pair_bytes`` is skipped by every read. The file's exact size is checked again."""
    size = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)
    if size > settings.max_pair_bytes:
        raise WrenmemError(f"not stored: the pair file would be over {size:,} bytes; the "
                           f"limit is the max_pair_bytes setting, {settings.max_pair_bytes:,}")


def write_pair_bytes(settings: Settings, path: Path, data: bytes, *,
                     exclusive: bool = False) -> None:
    """Write a pair file atomically, its temporary file in ``.wrenmem/tmp`` (stale ones
    removed first); through a symbolic link, the file it names is written."""
    if not exclusive:
        path = pair_write_target(settings, path)
    path.parent.mkdir(parents=True, exist_ok=True)  # first: the temporary folder is chosen by it
    tmp_dir = pair_temp_folder(settings, path.parent)
    remove_stale_temps(tmp_dir)
    atomic_write_bytes(path, data, exclusive=exclusive, tmp_dir=tmp_dir)


def pair_write_target(settings: Settings, path: Path) -> Path:
    """The file a rewrite of ``path`` writes: what a symbolic link names, when inside the
    project; a link leading out is refused, so a committed link cannot make ``fmt``, ``store``
    or ``import`` write elsewhere on the disk."""
    target = link_target(path)
    if target != path and not target.is_relative_to(settings.root):
        raise WrenmemError(f"{settings.relpath(path)} is a symbolic link to {target}, outside "
                           f"the project {settings.root}: not written through (replace the "
                           "link with the file)")
    return target


def default_dialect(settings: Settings, manifest_dialect: str | None) -> str:
    """The dialect of a pair that names none: an explicit ``dialect`` setting, then the
    manifest's, then the default."""
    if settings.origins.get("dialect", "default") != "default":
        return settings.dialect
    return manifest_dialect or settings.dialect


def store_pair(settings: Settings, pair: Pair, *, folder: str = "",
               known: Sequence[Pair] | None = None) -> StoreResult:
    """Write ``pair`` to the file of its question, else to a new one.

    Updating keeps the file's notes, ``created_at`` and unknown keys. A new file is claimed
    atomically (hard link of a finished temporary file), so two processes storing questions
    with the same slug both keep their pair. ``known``: the caller's scan, else scanned here."""
    pair = clean_pair(pair)
    existing = find_by_question(settings, pair.nl, known)
    if existing is not None:
        return _update(settings, existing, pair)
    check_folder(folder)
    base = settings.knowledge_path / folder if folder else settings.knowledge_path
    if not base.resolve().is_relative_to(settings.knowledge_path):
        raise WrenmemError(f"folder {folder!r} is outside {settings.knowledge_dir}")
    stem = slugify(pair.nl)
    new = pair.with_changes(created_at=pair.created_at or utc_now())
    passed: list[PairError] = []
    for target in numbered_names(base, stem):
        rel = settings.relpath(target)
        text = render_pair(new.with_changes(path=rel), settings.format)
        data = checked_file_bytes(text, rel, new, settings.max_pair_bytes)
        try:
            write_pair_bytes(settings, target, data, exclusive=True)
            return StoreResult(rel, True, new.with_changes(path=rel), passed_over=tuple(passed))
        except FileExistsError:
            # Somebody owns that name: if it holds our question (a concurrent store of the
            # same question), update it; otherwise try the next suffix.
            try:
                other, _digest = read_pair_file(target, rel, settings.max_pair_bytes,
                                                inside=settings.root)
            except PairError as e:
                passed.append(e)
                continue
            if question_key(other.nl) == question_key(pair.nl):
                return _update(settings, other, pair)
    raise WrenmemError(f"no free file name for {stem!r} after {MAX_SUFFIX} tries")


def check_folder(folder: str) -> None:
    """Refuse a ``store --folder`` the catalog would never read (hidden or backup) or no
    file system accepts."""
    clean_text(folder, "the folder")
    for part in PurePosixPath(folder.replace("\\", "/")).parts:
        if part == "/":
            raise WrenmemError(f"folder {folder!r} must be relative to the knowledge folder")
        if part == "..":
            raise WrenmemError(f"folder {folder!r} leads out of the knowledge folder: name a "
                               "sub-folder of it, without '..'")
        if skipped_name(part):
            raise WrenmemError(
                f"folder {folder!r}: {part!r} starts with '.' or ends with '~', and wrenmem "
                "skips such folders (hidden or backup): pairs stored there would never be "
                "listed, recalled or indexed")
        if len(part.encode("utf-8")) > MAX_NAME_BYTES:
            raise WrenmemError(f"folder {folder!r}: the name {part[:20]!r}… is longer than "
                               f"{MAX_NAME_BYTES} bytes")


def _update(settings: Settings, old: Pair, new: Pair) -> StoreResult:
    merged, text = merged_update(settings, old, new)
    if not would_change(settings, old, text):
        return StoreResult(old.path, False, merged, changed=False)
    data = checked_file_bytes(text, old.path, merged, settings.max_pair_bytes)
    write_pair_bytes(settings, settings.root / old.path, data)
    return StoreResult(old.path, False, merged)


def would_change(settings: Settings, old: Pair, text: str) -> bool:
    """Whether writing ``text`` over ``old``'s file would change a byte of it."""
    try:
        return (settings.root / old.path).read_bytes() != text.encode("utf-8")
    except OSError:
        return True


def merged_update(settings: Settings, old: Pair, new: Pair) -> tuple[Pair, str]:
    """(the pair, the file text) that storing ``new`` over ``old``'s file writes. New SQL
    over a verified pair drops the verification and marks it unreviewed; ``reviewed: false``
    with ``new`` is kept unless the pair stays verified."""
    extra = dict(old.extra)
    merged = old.with_changes(
        sql=new.sql,
        datasource=new.datasource if new.datasource is not None else old.datasource,
        dialect=new.dialect if new.dialect is not None else old.dialect,
        tags=new.tags or old.tags,
        source=new.source or old.source,
        created_at=old.created_at or new.created_at or utc_now(),
        notes=new.notes or old.notes,
        also=new.also or old.also,  # a re-store or an import keeps the file's phrasings
        wren_format=settings.format == "wren",
    )
    if extra.get(VERIFIED_BY) and (sql_fingerprint(old.sql) != sql_fingerprint(new.sql) or (
            old.verification_intact and pair_fingerprint(old) != pair_fingerprint(merged))):
        for key in (VERIFIED_BY, VERIFIED_AT, VERIFIED_PAIR, VERIFIED_SQL, VERIFIED_SCHEMA):
            extra.pop(key, None)  # what was verified is not what is stored
        extra[REVIEWED] = False
    if new.extra.get(REVIEWED) is False and not merged.with_changes(
            extra=extra).verification_intact:
        extra[REVIEWED] = False
    merged = merged.with_changes(extra=extra)
    return merged, render_pair(merged, settings.format)


def delete_pair_file(settings: Settings, rel: str) -> None:
    """Delete a pair file the catalog lists (:func:`require_listed_pair`); a symbolic
    link is deleted as a link."""
    require_listed_pair(settings, rel)
    given = settings.root / rel
    os.unlink(given.parent.resolve() / given.name)


def delete_listed(settings: Settings, paths: set[str]) -> list[str]:
    """Delete these pair files, sorted, all or none (each must be a listed pair)."""
    chosen = sorted(paths)
    for rel in chosen:
        require_listed_pair(settings, rel)
    for rel in chosen:
        delete_pair_file(settings, rel)
    return chosen
