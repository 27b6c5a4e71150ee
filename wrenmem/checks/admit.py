"""What a pair must pass to be written: the SQL checks of ``store`` and of an import, and
the warning of a question another file asks too. ``Memory.store`` and ``Memory.import_``
(:mod:`wrenmem.api`) call these with the manifest and the validator they keep warm.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from wrenmem.checks.duplicates import find_duplicates, question_key
from wrenmem.checks.uses import UsesIndex, pairs_using
from wrenmem.checks.validate import Validator
from wrenmem.errors import SqlCheckError, WrenmemError
from wrenmem.pairs.catalog import require_knowledge_dir, scan
from wrenmem.pairs.exchange import ImportRefused, ImportReport, import_pairs
from wrenmem.pairs.pairfile import ALLOW_WRITES, REVIEWED, Pair
from wrenmem.pairs.questions import asking
from wrenmem.pairs.store import (
    StoreResult,
    clean_pair,
    default_dialect,
    find_by_question,
    refuse_oversize,
    store_pair,
)
from wrenmem.schema.manifest import Manifest
from wrenmem.settings import Settings

Notify = Callable[[str], None]


def split_tags(tags: Iterable[str] | str) -> list[str]:
    """Tags from a list, repeated values or ``"a,b"`` strings, in order, without blanks."""
    if isinstance(tags, str):
        tags = [tags]
    return list(dict.fromkeys(t.strip() for raw in tags for t in raw.split(",") if t.strip()))


def prepared_validator(settings: Settings, manifest: Manifest | None, check_schema: bool,
                       prepared: dict[str, Any]) -> Validator:
    """A validator of SQL texts (parse, read-only and, with ``check_schema``, names and
    the engine), kept in ``prepared`` (what the caller derived from ``manifest``)."""
    if manifest is None or not check_schema:
        return Validator(settings, check_schema=check_schema, tables={})
    if "validator" not in prepared:
        prepared["validator"] = Validator(settings).use(manifest)
    found: Validator = prepared["validator"]
    return found


def store_checked(settings: Settings, question: str, sql: str, *,
                  manifest_of: Callable[[], Manifest | None],
                  validator_for: Callable[[Manifest | None, bool], Validator],
                  notify: Notify | None, datasource: str | None, dialect: str | None,
                  tags: Iterable[str], note: str, source: str | None, folder: str,
                  force: bool, check_schema: bool, allow_writes: bool) -> StoreResult:
    """``Memory.store``: the pair checked, then written (see its docstring); the caller
    syncs the index after."""
    if not question.strip():
        raise WrenmemError("the question is empty")
    if not sql.strip():
        raise WrenmemError("the SQL is empty")
    refuse_oversize(settings, question, sql, note)  # before the SQL is parsed
    given = clean_pair(Pair(nl=question, sql=sql, notes=note, tags=tuple(split_tags(tags)),
                            datasource=datasource, dialect=dialect, source=source or ""))
    question, sql, note = given.nl, given.sql, given.notes
    require_knowledge_dir(settings)  # (asking's first check: its error comes first)
    manifest = manifest_of()
    if dialect is None and settings.origins.get("dialect") == "flag":
        dialect = settings.dialect  # given for this call, like the argument
    # The SQL is checked first as it will be unless a file already asks the question
    # with another dialect or allows writes.
    validator = validator_for(manifest, check_schema)
    guess = (dialect or default_dialect(settings, manifest.dialect if manifest
                                        else None), allow_writes)
    early = validator.sql_findings(sql.strip(), guess[0], allow_writes=guess[1])
    # The pairs asking this question (the file to update, the duplicates to warn of),
    # found without reading every file; read once for the whole call.
    known = asking(settings, question)
    existing = find_by_question(settings, question, known)
    dialect = (dialect or (existing.dialect if existing else None)
               or default_dialect(settings, manifest.dialect if manifest else None))
    allow_writes = allow_writes or bool(existing and existing.allows_writes)
    findings = early if (dialect, allow_writes) == guess else validator.sql_findings(
        sql.strip(), dialect, allow_writes=allow_writes)
    if validator.engine_note is not None and notify is not None:
        notify(f"note: {validator.engine_note.message}")
    writes = [p for kind, p in findings if kind == "write"]
    if writes:
        raise SqlCheckError(writes, prefix="not stored (read-only)")
    problems = [p for kind, p in findings if kind != "engine-note"]
    if problems and not force:
        raise SqlCheckError(problems, prefix=f"not stored ({dialect} SQL)")
    for kind, p in findings:
        if kind == "engine-note" and notify is not None:
            notify(f"note: {p.line}:{p.col}: {p.message}")
    if source is None:
        source = existing.source if existing else "user"
    extra: dict[str, Any] = {ALLOW_WRITES: True} if allow_writes and not (
        existing and existing.allows_writes) else {}
    if source == "agent":
        extra[REVIEWED] = False
    pair = Pair(nl=question.strip(), sql=sql.strip(),
                datasource=datasource or settings.datasource, dialect=dialect,
                tags=tuple(split_tags(tags)), source=source, notes=note, extra=extra)
    result = store_pair(settings, pair, folder=folder, known=known)
    for broken in result.passed_over:
        if notify is not None:
            notify(f"warning: {broken.path}:{broken.line}: {broken.reason}: that "
                   f"file cannot be read as a pair, so this one went to "
                   f"{result.path}; fix it (then keep one of the two) or remove it")
    warn_duplicates(settings, result.pair, known, notify)
    return result


def warn_duplicates(settings: Settings, pair: Pair, known: Sequence[Pair],
                    notify: Notify | None) -> None:
    """Warn at once when ``pair`` asks a question another file asks too (what
    ``duplicates`` will reject). ``known``: the pairs asking it, read before the write."""
    if notify is None:
        return
    key = question_key(pair)
    same = [p for p in known if p.path != pair.path and question_key(p) == key]
    for dup in find_duplicates([pair, *same], settings.dialect):
        if dup.pair.path == pair.path:
            notify(f"warning: {pair.path}: {dup.message} (`wrenmem duplicates` reports it)")


def check_import(settings: Settings, pairs: Sequence[Pair], force: bool,
                 manifest: Manifest | None, validator: Validator,
                 progress: Callable[[int, int], None] | None = None) -> None:
    """Refuse an import with SQL that writes (always), or that does not parse or that the
    manifest or the engine rejects (unless ``force``): one parse of each pair's SQL.
    ``progress(done, total)``: pairs checked."""
    writes, rejected = [], []
    for n, pair in enumerate(pairs, 1):
        dialect = pair.dialect or default_dialect(
            settings, manifest.dialect if manifest else None)
        for kind, p in validator.sql_findings(pair.sql, dialect):
            line = f"pair #{n} ({pair.nl[:60]}): {p.line}:{p.col}: {p.message}"
            if kind == "write":
                writes.append(line)
            elif kind in ("sql", "schema", "engine"):
                rejected.append(line)
        if progress is not None:
            progress(n, len(pairs))
    if writes:
        raise ImportRefused(writes, "SQL that writes (the allow_writes setting accepts it)")
    if rejected and not force:
        raise ImportRefused(rejected)


def import_checked(settings: Settings, pairs: Sequence[Pair], mode: str,
                   manifest: Manifest | None, validator: Validator, *, dry_run: bool,
                   force: bool, progress: Callable[[int, int], None] | None = None,
                   written: Callable[[int, int], None] | None = None) -> ImportReport:
    """``pairs`` written as files (``Memory.import_``) once :func:`check_import` passes;
    ``progress``: pairs checked, ``written``: files written (done, total)."""
    check_import(settings, pairs, force, manifest, validator, progress)
    report = import_pairs(settings, pairs, mode, dry_run=dry_run, progress=written)
    report.read = len(pairs)
    return report


def pairs_using_items(settings: Settings, manifest: Manifest, items: Sequence[str],
                      pairs: Sequence[Pair] | None) -> list[tuple[Pair, tuple[str, ...]]]:
    """``Memory.using``: the pairs (default: every stored pair) whose SQL uses any of
    ``items``, each with the items it uses, resolved against ``manifest``."""
    index = UsesIndex(settings, manifest)
    chosen = list(pairs if pairs is not None else scan(settings).pairs)
    return pairs_using(index, chosen, list(items), Validator(settings).dialect_of)
