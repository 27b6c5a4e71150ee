"""The Python API: one :class:`Memory` per project, the layer the CLI and agents call.

Every method returns a value or a small typed result and raises :class:`WrenmemError`
subclasses; nothing here prints, exits or imports click.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from wrenmem.checks.duplicates import duplicate_problems
from wrenmem.checks.references import Schema
from wrenmem.checks.references import check_schema as check_references
from wrenmem.checks.validate import Problem, validate_files
from wrenmem.embedders import Embedder, get_embedder, use_embedder
from wrenmem.errors import SqlCheckError, WrenmemError
from wrenmem.fsutil import atomic_write_text
from wrenmem.git.diff import PairDiff, diff_pairs
from wrenmem.index import replica
from wrenmem.index.autosync import after_write
from wrenmem.index.drift import Drift, check_drift, reset_index
from wrenmem.index.sync import SyncReport, sync_pairs
from wrenmem.knowledge.entries import Entry
from wrenmem.knowledge.files import Knowledge, load_knowledge
from wrenmem.knowledge.scaffold import scaffold_knowledge
from wrenmem.knowledge.select import RuleSelection, select_rules
from wrenmem.knowledge.table import (
    KnowledgeDrift,
    KnowledgeSyncReport,
    knowledge_drift,
    reset_knowledge,
    sync_knowledge,
)
from wrenmem.knowledge.terms import glossary_of
from wrenmem.lance import index_unavailable
from wrenmem.pairs.catalog import read_pair_file, scan
from wrenmem.pairs.exchange import ImportReport, export_document, import_pairs, read_queries_yml
from wrenmem.pairs.fmt import FmtReport, format_files
from wrenmem.pairs.pairfile import Pair
from wrenmem.pairs.project import init_project
from wrenmem.pairs.seeds import SeedWrite, build_records, extra_pairs, write_seeds
from wrenmem.pairs.store import (
    StoreResult,
    default_dialect,
    delete_pair_file,
    find_by_question,
    store_pair,
)
from wrenmem.recall.backends import recall_many, require_questions
from wrenmem.recall.bm25f import GrepBackend
from wrenmem.recall.hits import Filters, Hit, RecallResult, above
from wrenmem.recall.status import status_data
from wrenmem.schema.describe import describe as describe_text
from wrenmem.schema.fetch import FetchResult
from wrenmem.schema.fetch import fetch as fetch_context
from wrenmem.schema.manifest import Manifest, load_manifest
from wrenmem.schema.table import (
    SchemaDrift,
    SchemaSyncReport,
    reset_schema,
    schema_drift,
    sync_schema,
)
from wrenmem.settings import Settings, find_project_root, load_settings
from wrenmem.sqlcheck import parse_checked
from wrenmem.watch.client import remote_call, remote_fetch, remote_recall

Notify = Callable[[str], None]


class Memory:
    """The memory of one project: its pair files, its manifest and its derived index.

    ``root`` defaults to the nearest folder up with ``wrenmem.toml``, ``knowledge/`` or
    ``.git``. ``settings`` override ``wrenmem.toml`` and ``WRENMEM_*`` variables (the same
    names, e.g. ``backend="grep"``). ``embedder`` is any object with ``model_id``, ``dim``
    and ``embed(texts)``, used instead of the configured model. ``use_daemon`` lets recall
    and fetch ask a running ``wrenmem watch`` first (warm model, same answers).
    """

    # The manifest last loaded: (path, size, mtime), the Manifest, what was derived from it.
    _manifest_cache: tuple[tuple[Any, ...], Manifest, dict[str, Any]] | None = None

    def __init__(self, root: str | Path | None = None, *, embedder: Embedder | None = None,
                 use_daemon: bool = False, notify: Notify | None = None,
                 **settings: Any) -> None:
        overrides = {k: v for k, v in settings.items() if v is not None}
        if embedder is not None:
            overrides["embedder"] = use_embedder(embedder)
        base = Path(root).resolve() if root is not None else find_project_root()
        self.settings: Settings = load_settings(base, overrides)
        self.use_daemon = use_daemon
        self.notify = notify

    @classmethod
    def from_settings(cls, settings: Settings, *, use_daemon: bool = False,
                      notify: Notify | None = None) -> Memory:
        memory = cls.__new__(cls)
        memory.settings, memory.use_daemon, memory.notify = settings, use_daemon, notify
        return memory

    @property
    def root(self) -> Path:
        return self.settings.root

    # -- pairs ---------------------------------------------------------------------
    def init(self) -> list[str]:
        """Create ``knowledge/sql/``, ignore ``.wrenmem/`` in git, write ``wrenmem.toml``,
        and create the knowledge folders (rules, glossary, caveats, metrics) that are
        missing, each with one commented example."""
        return init_project(self.settings) + scaffold_knowledge(self.settings)

    def store(self, question: str, sql: str, *, datasource: str | None = None,
              dialect: str | None = None, tags: Iterable[str] = (), note: str = "",
              source: str | None = None, folder: str = "", force: bool = False,
              check_schema: bool = False) -> StoreResult:
        """Store an NL→SQL pair as a Markdown file; the same question updates its file.

        The SQL must parse in its dialect (one statement) unless ``force``; with
        ``check_schema`` it must also name only tables and columns of the manifest (when
        there is one). Otherwise :class:`SqlCheckError` lists each problem with its line
        and column in ``sql`` as given. The dialect is ``dialect`` (or a ``dialect`` setting
        given to this Memory as a flag), else the existing file's, else a ``dialect`` set in
        the environment or ``wrenmem.toml``, else the manifest's data source, else the
        default. Re-storing a question keeps its file's dialect, source and ``created_at``
        unless given.
        """
        if not question.strip():
            raise WrenmemError("the question is empty")
        if not sql.strip():
            raise WrenmemError("the SQL is empty")
        existing = find_by_question(self.settings, question)
        manifest = self._manifest_if_any()
        if dialect is None and self.settings.origins.get("dialect") == "flag":
            dialect = self.settings.dialect  # given for this call, like the argument
        dialect = (dialect or (existing.dialect if existing else None)
                   or default_dialect(self.settings, manifest.dialect if manifest else None))
        tree, problems = parse_checked(sql, dialect)
        if not problems and check_schema and manifest is not None:
            problems = check_references(sql, dialect, self._schema(manifest), tree)
        if problems and not force:
            raise SqlCheckError(problems, prefix=f"not stored ({dialect} SQL)")
        if source is None:
            source = existing.source if existing else "user"
        pair = Pair(nl=question.strip(), sql=sql.strip(),
                    datasource=datasource or self.settings.datasource, dialect=dialect,
                    tags=tuple(_split_tags(tags)), source=source, notes=note)
        result = store_pair(self.settings, pair, folder=folder)
        self._after_write([result.path])
        return result

    def get(self, target: str) -> Pair:
        """One pair, by file path (relative to the cwd or the project) or exact question."""
        for candidate in (Path(target), self.root / target):
            if os.path.lexists(candidate) and not candidate.is_dir():  # a FIFO: say so
                return read_pair_file(candidate, self.settings.relpath(candidate),
                                      self.settings.max_pair_bytes)[0]
        wanted = target.strip().casefold()
        for pair in scan(self.settings).pairs:
            if pair.nl.casefold() == wanted:
                return pair
        close = GrepBackend(self.settings).search([target], 3, Filters())[0]
        hint = ("; closest: " + "; ".join(f"{h.path} ({h.question})" for h in close)
                if close else "")
        raise WrenmemError(f"no pair file or stored question matches {target!r}{hint}")

    def list(self, *, source: str | None = None, tags: Sequence[str] = (),
             datasource: str | None = None, seeds: bool = True) -> builtins.list[Pair]:
        """Stored pairs (and, with ``seeds``, the manifest's seed pairs) that match."""
        found = scan(self.settings)
        self._report(found.errors)
        filters = Filters(datasource=datasource, tags=tuple(tags), source=source)
        extra = extra_pairs(self.settings) if seeds else []
        return [p for p in (*found.pairs, *extra) if filters.accepts(p)]

    def forget(self, targets: Sequence[str] = (), *, source: str | None = None
               ) -> builtins.list[str]:
        """Delete pair files (by path or exact question, or every file of ``source``);
        returns the deleted paths."""
        pairs = [self.get(t) for t in targets]
        if source:
            pairs += [p for p in scan(self.settings).pairs if p.source == source]
        paths = sorted({p.path for p in pairs})
        for rel in paths:
            delete_pair_file(self.settings, rel)
        self._after_write(paths)
        return paths

    def fmt(self, paths: Iterable[str | Path] | None = None, *, check: bool = False
            ) -> FmtReport:
        """Rewrite pair files in the canonical format (``check``: report, change nothing)."""
        targets = None if paths is None else [Path(p) for p in paths]
        return format_files(self.settings, targets, check=check)

    def import_(self, path: str | Path, *, mode: str = "skip", dry_run: bool = False,
                force: bool = False) -> ImportReport:
        """Import Wren's ``queries.yml``: each pair becomes a file (``skip``, ``upsert`` or
        ``overwrite`` existing questions). SQL that does not parse refuses the import
        (:class:`ImportRefused`, nothing written) unless ``force``."""
        pairs = read_queries_yml(Path(path))
        report = import_pairs(self.settings, pairs, mode, dry_run=dry_run, force=force)
        report.read = len(pairs)
        if not dry_run:
            self._after_write([*report.created, *report.updated, *report.deleted])
        return report

    def export(self, path: str | Path | None = None, *, source: str | None = None,
               seeds: bool = False) -> str:
        """Wren's ``queries.yml`` text of the pairs (with ``seeds``, the manifest's seed
        pairs too); also written to ``path`` when given."""
        text = export_document(self.list(source=source, seeds=seeds))
        if path is not None:
            atomic_write_text(Path(path), text)
        return text

    def validate(self, paths: Iterable[str | Path] | None = None, *, schema: bool = True
                 ) -> builtins.list[Problem]:
        """Every problem of the pair files: parse, SQL, and tables/columns of the manifest."""
        return self.validate_files(paths, schema=schema)[1]

    def validate_files(self, paths: Iterable[str | Path] | None = None, *, schema: bool = True
                       ) -> tuple[int, builtins.list[Problem]]:
        """(files checked, problems): what the ``wrenmem-validate`` hook reports."""
        targets = None if paths is None else [Path(p) for p in paths]
        return validate_files(self.settings, targets, check_schema=schema)

    def duplicates(self, paths: Iterable[str | Path] | None = None
                   ) -> tuple[int, builtins.list[Problem]]:
        """(pairs compared, problems): the same question twice, or with two SQLs."""
        targets = None if paths is None else [Path(p) for p in paths]
        counted = duplicate_problems(self.settings, targets)
        # The files it could not read are named too (from the catalog cache: no re-read).
        found = scan(self.settings, use_cache=self.settings.state_dir.is_dir())
        wanted = None if targets is None else {self.settings.relpath(p) for p in targets}
        self._report(e for e in found.errors if wanted is None or e.path in wanted)
        return counted

    def diff(self, base: str | None = None, head: str | None = None, *,
             merge_base: bool = True, schema: bool = True) -> PairDiff:
        """Pairs added, changed and removed between two revisions (HEAD: the work tree)."""
        return diff_pairs(self.settings, base, head, merge_base=merge_base, check_schema=schema)

    # -- recall --------------------------------------------------------------------
    def recall(self, question: str, k: int = 3, *, datasource: str | None = None,
               tags: Sequence[str] = (), source: str | None = None,
               min_score: float = 0.0) -> builtins.list[Hit]:
        """The ``k`` stored pairs most similar to ``question``, best first; only those
        scoring at least ``min_score`` (scores are in [0, 1], the same for every backend)."""
        return list(self.recall_many([question], k, datasource=datasource, tags=tags,
                                     source=source, min_score=min_score)[0].hits)

    def recall_many(self, questions: Sequence[str], k: int = 3, *,
                    datasource: str | None = None, tags: Sequence[str] = (),
                    source: str | None = None, sync: bool = True,
                    min_score: float = 0.0) -> builtins.list[RecallResult]:
        """Recall for several questions in one batch (one model call). The index is first
        brought up to date with the files, unless ``sync`` is False (the caller knows that
        nothing changed since its last recall). Hits scoring below ``min_score`` (in
        [0, 1], one meaning for every backend) are left out."""
        require_questions(questions)
        filters = Filters(datasource=datasource, tags=tuple(tags), source=source)
        if self.use_daemon:
            remote = remote_recall(self.settings, questions, k, filters, notify=self.notify)
            if remote is not None:
                return above(remote, min_score)
        return recall_many(self.settings, questions, k, filters, notify=self.notify, sync=sync,
                           min_score=min_score)

    # -- knowledge -----------------------------------------------------------------
    def knowledge(self) -> Knowledge:
        """Every knowledge file (rules, glossary, caveats, metrics, ``instructions.md``),
        parsed into entries; unreadable files are in ``.errors`` (and reported)."""
        found = load_knowledge(self.settings)
        self._report(found.errors)
        return found

    def rules(self, question: str | None = None, *, threshold: int | None = None
              ) -> RuleSelection:
        """The rules, caveats, metrics and instructions: all of them (``question`` None, or
        their text at most ``threshold``, default the ``knowledge_threshold`` setting),
        else those that bear on ``question`` within that many characters; with the
        glossary terms the question uses (every term when ``question`` is None)."""
        return select_rules(self.settings, question, threshold=threshold,
                            knowledge=self.knowledge())

    def glossary(self, term: str | None = None) -> builtins.list[Entry]:
        """The glossary entries (term, synonyms, columns, definition), or those that
        ``term`` names or uses (a word, a synonym, or a whole question)."""
        found = glossary_of(self.settings, self.knowledge())
        return list(found.entries if term is None else found.used_by(term))

    def sync_knowledge(self) -> KnowledgeSyncReport | None:
        """Bring the knowledge index to the knowledge files (only changed entries are
        embedded); None in a grep-only project."""
        if self.grep_only:
            return None
        return sync_knowledge(self.settings)

    def check_knowledge(self) -> KnowledgeDrift:
        """Whether the knowledge index holds the current entries (read-only, no model)."""
        embedder = get_embedder(self.settings.embedder, root=self.settings.root)
        return knowledge_drift(self.settings, embedder.model_id)

    def reset_knowledge(self) -> bool:
        """Drop the knowledge index; True when there was one."""
        return reset_knowledge(self.settings)

    # -- schema --------------------------------------------------------------------
    def manifest(self) -> Manifest:
        """The project's manifest, loaded and checked (warnings in ``.warnings``).

        Kept between calls while the file's size and mtime stay the same."""
        path = self.settings.manifest_path
        try:
            st = path.stat()
            key: tuple[Any, ...] = (str(path), st.st_size, st.st_mtime_ns)
        except OSError:
            return load_manifest(path)  # raises ManifestError naming the problem
        cached = self._manifest_cache
        if cached is None or cached[0] != key:
            cached = (key, load_manifest(path), {})
            self._manifest_cache = cached
        return cached[1]

    def _manifest_if_any(self) -> Manifest | None:
        """The manifest, or None when the project has none (a broken one still raises)."""
        if not self.settings.manifest_path.is_file():
            return None
        return self.manifest()

    def _schema(self, manifest: Manifest) -> Schema:
        """Tables and columns of ``manifest`` prepared for reference checks, kept with it."""
        cached = self._manifest_cache
        prepared: dict[str, Any] = cached[2] if cached and cached[1] is manifest else {}
        if "schema" not in prepared:
            prepared["schema"] = Schema(manifest.table_columns())
        schema: Schema = prepared["schema"]
        return schema

    def describe(self) -> str:
        """The whole schema as plain text (models, columns, relationships, views, cubes)."""
        return describe_text(self.manifest())

    def fetch(self, question: str, *, types: Sequence[str] = (), model: str | None = None,
              k: int = 10, threshold: int | None = None,
              progress: Callable[[int, int], None] | None = None) -> FetchResult:
        """Schema context: the whole schema when small, else the items most relevant."""
        if self.use_daemon:
            remote = remote_fetch(self.settings, question, types=tuple(types), model=model,
                                  k=k, threshold=threshold)
            if remote is not None:
                return remote  # type: ignore[return-value]
        return fetch_context(self.settings, question, types=tuple(types), model=model, k=k,
                             threshold=threshold, progress=progress,
                             read_copy=replica.schema_read_copy(self.settings))

    def seeds(self) -> builtins.list[dict[str, Any]]:
        """The seed queries derived from the manifest, as records."""
        return build_records(self.manifest())

    def write_seeds(self) -> SeedWrite:
        """Write the seeds as pair files under ``seeds/`` (a question someone wrote is kept)."""
        result = write_seeds(self.settings, self.seeds())
        self._after_write(result.paths)
        return result

    # -- index ---------------------------------------------------------------------
    @property
    def grep_only(self) -> bool:
        """No index here: the ``backend`` setting is grep, or the index extra is missing.
        Recall then reads the files; nothing is synced and no model is ever loaded."""
        return self.settings.backend == "grep" or index_unavailable(self.settings) is not None

    def sync(self, *, full: bool = False,
             progress: Callable[[int, int], None] | None = None) -> SyncReport:
        """Bring the index to the files' state, embedding only what changed."""
        return sync_pairs(self.settings, full=full, progress=progress)

    def sync_schema(self, progress: Callable[[int, int], None] | None = None
                    ) -> SchemaSyncReport | None:
        """Bring the schema index to the manifest (only changed items are embedded);
        None when there is no manifest."""
        if not self.settings.manifest_path.is_file():
            return None
        return sync_schema(self.settings, progress=progress)

    def check(self) -> Drift:
        """How the index differs from the files (read-only)."""
        return check_drift(self.settings)

    def check_schema(self) -> SchemaDrift:
        """Whether the schema index holds the current manifest (read-only, no model)."""
        embedder = get_embedder(self.settings.embedder, root=self.settings.root)
        return schema_drift(self.settings, embedder.model_id)  # the model stays unloaded

    def status(self) -> dict[str, Any]:
        """Backend, embedder, counts and freshness, with stable keys."""
        if self.use_daemon:
            remote = remote_call(self.settings, "status", {})
            if isinstance(remote, dict):
                return remote
        return status_data(self.settings)

    def reset(self) -> bool:
        """Drop the pairs index (the files are untouched); True when there was one."""
        return reset_index(self.settings)

    def reset_schema(self) -> bool:
        """Drop the schema index; True when there was one."""
        return reset_schema(self.settings)

    # -- helpers -------------------------------------------------------------------
    def _after_write(self, paths: Sequence[str]) -> None:
        note = after_write(self.settings, paths)
        if note and self.notify is not None:
            self.notify(note)

    def _report(self, errors: Iterable[Any]) -> None:
        if self.notify is None:
            return
        for error in errors:
            self.notify(f"{error.location()}: {error.reason} (skipped)")


def _split_tags(tags: Iterable[str] | str) -> builtins.list[str]:
    """Tags from a list, repeated values or ``"a,b"`` strings, in order, without blanks."""
    if isinstance(tags, str):
        tags = [tags]
    return list(dict.fromkeys(t.strip() for raw in tags for t in raw.split(",") if t.strip()))

