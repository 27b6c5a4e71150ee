"""The Python API: one :class:`Memory` per project, the layer the CLI and agents call.

Every method returns a value or a small typed result and raises :class:`WrenmemError`
subclasses; nothing here prints, exits or imports click. The CLI, the watcher's daemon and
the MCP server each hold a Memory: it decides, in one place (:meth:`Memory._ask`), whether
the running watcher answers, and it owns the warm state of a long-lived process (the
recaller with its embedder and backends, the manifest and its validator).
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wrenmem.errors import WrenmemError
from wrenmem.lazy import lazies, lazy
from wrenmem.recall import daemon_client
from wrenmem.recall.hits import Filters, Hit, RecallResult, require_questions
from wrenmem.settings import Settings, find_project_root, load_settings

# What the methods call is imported on first use (:mod:`wrenmem.lazy`): an agent's one-shot
# recall builds a Memory (the CLI does) and must not pay for validation, git, the schema or
# the index writer (bench/recall_latency.py; tests/test_api.py pins what recall imports).
if TYPE_CHECKING:
    from wrenmem.checks import admit, review
    from wrenmem.checks import duplicates as checks_duplicates
    from wrenmem.checks import validate as checks_validate
    from wrenmem.checks.review import Verified
    from wrenmem.checks.validate import Problem, Validator
    from wrenmem.embed import embedders
    from wrenmem.embed.embedders import Embedder
    from wrenmem.fs import fsutil
    from wrenmem.git import diff as git_diff
    from wrenmem.git import hooks as git_hooks
    from wrenmem.git.diff import PairDiff
    from wrenmem.index import autosync, drift, fitjob
    from wrenmem.index import sync as index_sync
    from wrenmem.index.autosync import IndexUpdate
    from wrenmem.index.drift import Drift
    from wrenmem.index.sync import SyncReport
    from wrenmem.index.team import replica
    from wrenmem.knowledge import files as knowledge_files
    from wrenmem.knowledge import scaffold, select, terms, write
    from wrenmem.knowledge import table as knowledge_table
    from wrenmem.knowledge.entries import Entry
    from wrenmem.knowledge.files import Knowledge
    from wrenmem.knowledge.select import RuleSelection
    from wrenmem.knowledge.table import KnowledgeDrift, KnowledgeSyncReport
    from wrenmem.pairs import catalog, exchange, project, questions, wren_store
    from wrenmem.pairs import fmt as pair_fmt
    from wrenmem.pairs import seeds as pair_seeds
    from wrenmem.pairs import store as pair_store
    from wrenmem.pairs.exchange import ImportReport
    from wrenmem.pairs.fmt import FmtReport
    from wrenmem.pairs.pairfile import Pair
    from wrenmem.pairs.seeds import SeedWrite
    from wrenmem.pairs.store import StoreResult
    from wrenmem.pairs.wren_store import WrenStore
    from wrenmem.recall import adapt as rank_adapt
    from wrenmem.recall import backends as recall_backends
    from wrenmem.recall import bm25f, recaller
    from wrenmem.recall import evaluate as evaluation
    from wrenmem.recall import status as recall_status
    from wrenmem.recall.recaller import Freshness, Recaller
    from wrenmem.schema import describe as schema_describe
    from wrenmem.schema import fetch as schema_fetch
    from wrenmem.schema import manifest as schema_manifest
    from wrenmem.schema import table as schema_table
    from wrenmem.schema.fetch import FetchResult
    from wrenmem.schema.manifest import KeptManifest, Manifest
    from wrenmem.schema.table import SchemaDrift, SchemaSyncReport
    from wrenmem.storage import lance
else:
    admit, review, checks_duplicates, checks_validate = lazies(
        "wrenmem.checks", "admit review duplicates validate")
    embedders, fsutil, git_diff, git_hooks = lazies(
        "wrenmem", "embed.embedders fs.fsutil git.diff git.hooks")
    autosync, drift, fitjob, index_sync = lazies("wrenmem.index", "autosync drift fitjob sync")
    replica = lazy("wrenmem.index.team.replica")
    knowledge_files, scaffold, select, terms, write, knowledge_table = lazies(
        "wrenmem.knowledge", "files scaffold select terms write table")
    catalog, exchange, project, questions, pair_fmt, pair_seeds, pair_store, wren_store = \
        lazies("wrenmem.pairs", "catalog exchange project questions fmt seeds store wren_store")
    bm25f, recaller, recall_backends, evaluation, recall_status, rank_adapt = lazies(
        "wrenmem.recall", "bm25f recaller backends evaluate status adapt")
    schema_describe, schema_fetch, schema_manifest, schema_table = lazies(
        "wrenmem.schema", "describe fetch manifest table")
    lance = lazy("wrenmem.storage.lance")

Notify = Callable[[str], None]


class Memory:
    """The memory of one project: its pair files, its manifest and its derived index.

    ``root`` defaults to the nearest folder up with ``wrenmem.toml``, ``knowledge/`` or
    ``.git``. ``settings`` override ``wrenmem.toml`` and ``WRENMEM_*`` variables (the same
    names, e.g. ``backend="grep"``). ``embedder``: any object with ``model_id``, ``dim`` and
    ``embed(texts)``, used instead of the configured model. ``use_daemon``: recall, fetch,
    status and small syncs ask a running ``wrenmem watch`` first (:meth:`_ask`)."""

    def __init__(self, root: str | Path | None = None, *, embedder: Embedder | None = None,
                 use_daemon: bool = False, notify: Notify | None = None,
                 **settings: Any) -> None:
        overrides = {k: v for k, v in settings.items() if v is not None}
        base = Path(root).resolve() if root is not None else find_project_root()
        self._setup(load_settings(base, overrides), embedder, use_daemon, notify)

    def _setup(self, settings: Settings, embedder: Embedder | None, use_daemon: bool,
               notify: Notify | None) -> None:
        self.settings: Settings = settings
        self.embedder = embedder
        self.use_daemon = use_daemon
        self.notify = notify
        self._freshness: Freshness | None = None
        self._recaller: Recaller | None = None
        self.daemon_answered = False  # whether the watcher answered the last request asked
        self.via: daemon_client.Via | None = None  # not its socket: the daemon's own (cli)
        self.last_index: IndexUpdate | None = None  # what the last write did to the index

    @functools.cached_property
    def _manifest(self) -> KeptManifest:  # the manifest loaded, and its validator
        return schema_manifest.KeptManifest()

    @classmethod
    def from_settings(cls, settings: Settings, *, embedder: Embedder | None = None,
                      use_daemon: bool = False, notify: Notify | None = None) -> Memory:
        """A Memory over resolved ``settings``."""
        memory = cls.__new__(cls)
        memory._setup(settings, embedder, use_daemon, notify)
        return memory

    @property
    def recaller(self) -> Recaller:
        """This memory's read path, built on first use (importing nothing heavy)."""
        if self._recaller is None:
            self._recaller = recaller.Recaller(self.settings, embedder=self.embedder,
                                               freshness=self._freshness)
        return self._recaller

    def keep_warm(self, freshness: Freshness | None) -> None:
        """Keep recall warm between calls (a long-lived process: the MCP server, the daemon):
        the catch-up sync and grep's snapshot are renewed only when ``freshness`` says a file
        may have changed (:class:`wrenmem.watch.freshness.Freshness`; None: at every call)."""
        self._freshness = freshness
        self._recaller = None

    def _ask(self, op: str, **args: Any) -> Any | None:
        """The running watcher's answer to ``op`` (:func:`wrenmem.recall.daemon_client.ask`),
        or None: this process answers. The one place that decides to ask: only with
        ``use_daemon``, the settings' own embedder and manifest (not a flag's)."""
        remote = None
        if (self.use_daemon and self.embedder is None
                and self.settings.origins.get("manifest") != "flag"):
            remote = daemon_client.ask(self.settings, op, args, self.notify, via=self.via)
        self.daemon_answered = remote is not None
        return remote

    @property
    def root(self) -> Path:
        return self.settings.root

    # -- pairs ---------------------------------------------------------------------
    def init(self) -> list[str]:
        """Create ``knowledge/sql/``, ignore ``.wrenmem/`` in git, write ``wrenmem.toml``,
        and create the knowledge folders (rules, glossary, caveats, metrics) that are
        missing, each with one commented example."""
        return project.init_project(self.settings) + scaffold.scaffold_knowledge(self.settings)

    def store(self, question: str, sql: str, *, datasource: str | None = None,
              dialect: str | None = None, tags: Iterable[str] = (), note: str = "",
              source: str | None = None, folder: str = "", force: bool = False,
              check_schema: bool = False, allow_writes: bool = False) -> StoreResult:
        """Store an NL→SQL pair as a Markdown file; the same question updates its file.

        The SQL must parse in its dialect (one statement) unless ``force``; with
        ``check_schema`` it must also name only tables and columns of the manifest (when
        there is one) and bind in DuckDB over the manifest's tables (setting ``engine``).
        Otherwise :class:`SqlCheckError` lists each problem with its line and column in
        ``sql`` as given. SQL that writes (DML, DDL, DCL, ``SELECT … INTO``) is refused
        even with ``force``, unless ``allow_writes`` (written to the file as
        ``allow-writes: true``) or the ``allow_writes`` setting. A pair stored with
        ``source="agent"`` is marked ``reviewed: false`` until ``verify``.

        The dialect is ``dialect`` (or a ``dialect`` setting given to this Memory as a
        flag), else the existing file's, else a ``dialect`` set in the environment or
        ``wrenmem.toml``, else the manifest's data source, else the default. Re-storing a
        question keeps its file's dialect, source and ``created_at`` unless given.
        """
        result = admit.store_checked(
            self.settings, question, sql, manifest_of=self._manifest_if_any,
            validator_for=self._validator, notify=self.notify, datasource=datasource,
            dialect=dialect, tags=tags, note=note, source=source, folder=folder, force=force,
            check_schema=check_schema, allow_writes=allow_writes)
        self._after_write([result.path])
        return result

    def get(self, target: str) -> Pair:
        """One pair, by file path (relative to the cwd or the project) or question.

        A question names the pair whose question is exactly it (after NFC and white-space
        normalisation); failing that, the one pair equal to it ignoring case. Several
        candidates are a :class:`WrenmemError` that lists their paths."""
        return questions.find_pair(self.settings, target, lambda t: bm25f.GrepBackend(
            self.settings).search([t], 3, Filters())[0])

    def list(self, *, source: str | None = None, tags: Sequence[str] = (),
             datasource: str | None = None, seeds: bool = True, uses: Sequence[str] = (),
             verified: bool = False) -> builtins.list[Pair]:
        """Stored pairs (and, with ``seeds``, the manifest's seed pairs) that match; with
        ``uses`` (``orders``, ``orders.amount``…), only those whose SQL uses one of them;
        with ``verified``, only verified pairs."""
        found = catalog.scan(self.settings)
        self._report(found.errors)
        filters = Filters(datasource=datasource, tags=tuple(tags), source=source,
                          verified=verified)
        extra = pair_seeds.extra_pairs(self.settings) if seeds else []
        pairs = [p for p in (*found.pairs, *extra) if filters.accepts(p)]
        if uses:
            pairs = [p for p, _items in self.using(uses, pairs)]
        return pairs

    def using(self, items: Sequence[str], pairs: Sequence[Pair] | None = None
              ) -> builtins.list[tuple[Pair, tuple[str, ...]]]:
        """The pairs (default: every stored pair) whose SQL uses any of ``items``
        (``orders`` or ``orders.amount``), each with the items it uses, resolved against
        the manifest (aliases, CTEs and ``*`` included)."""
        return admit.pairs_using_items(self.settings, self.manifest(), items, pairs)

    def verify(self, paths: Iterable[str | Path], *, by: str | None = None,
               force: bool = False, progress: Callable[[int, int], None] | None = None
               ) -> builtins.list[Verified]:
        """Mark pair files verified by ``by`` (default: git config user.name and email),
        recording the SQL's and the used schema items' fingerprints. A pair that does not
        validate is refused unless ``force``. ``progress(done, total)``: files done."""
        targets = [Path(p) if Path(p).is_absolute() else self._pair_path(str(p))
                   for p in paths]
        results = review.verify_pairs(self.settings, targets, by or review.reviewer_name(self.root),
                                      force=force, progress=progress)
        self._after_write([r.path for r in results if r.changed])
        return results

    def stale(self) -> builtins.list[Problem]:
        """Verified pairs whose tables or columns changed in the manifest since (WM011):
        :func:`wrenmem.checks.review.stale_problems`."""
        return review.stale_problems(self.settings)

    def forget(self, targets: Sequence[str] = (), *, source: str | None = None
               ) -> builtins.list[str]:
        """Delete pair files (by path or question, as :meth:`get` finds them, or every
        file of ``source``); returns the deleted paths. A question that names several pairs
        refuses the whole call before anything is deleted."""
        pairs = [self.get(t) for t in targets]
        if source:
            pairs += [p for p in catalog.scan(self.settings).pairs if p.source == source]
        paths = pair_store.delete_listed(self.settings, {p.path for p in pairs})
        self._after_write(paths)
        return paths

    def fmt(self, paths: Iterable[str | Path] | None = None, *, check: bool = False
            ) -> FmtReport:
        """Rewrite pair files in the canonical format (``check``: report, change nothing)."""
        return pair_fmt.format_files(self.settings, self._named_files(paths), check=check)

    def import_(self, path: str | Path, *, mode: str = "skip", dry_run: bool = False,
                force: bool = False, progress: Callable[[int, int], None] | None = None,
                written: Callable[[int, int], None] | None = None) -> ImportReport:
        """Import Wren's ``queries.yml``: each pair becomes a file (``skip``, ``upsert`` or
        ``overwrite`` existing questions). SQL that does not parse refuses the import
        (:class:`ImportRefused`, nothing written) unless ``force``. A project without its
        knowledge folder is refused first, before any pair is read or checked.
        ``progress(done, total)``: pairs checked; ``written(done, total)``: files written."""
        catalog.require_knowledge_dir(self.settings)
        pairs = exchange.read_queries_yml(Path(path))
        return self._import(pairs, mode, dry_run, force, progress, written)

    def import_wren(self, path: str | Path, *, mode: str = "skip", dry_run: bool = False,
                    force: bool = False, include_seed: bool = False,
                    progress: Callable[[int, int], None] | None = None,
                    written: Callable[[int, int], None] | None = None
                    ) -> tuple[ImportReport, WrenStore]:
        """Migrate a Wren memory store (its LanceDB folder, e.g. ``.wren/memory``): each pair
        becomes a file, as :meth:`import_` does with a ``queries.yml`` (Wren's ``export``).
        Seed rows are left out unless ``include_seed``. A second run changes nothing."""
        catalog.require_knowledge_dir(self.settings)
        store = wren_store.read_wren_store(Path(path), include_seed=include_seed)
        return self._import(store.pairs, mode, dry_run, force, progress, written), store

    def export(self, path: str | Path | None = None, *, source: str | None = None,
               seeds: bool = False) -> str:
        """Wren's ``queries.yml`` text of the pairs (with ``seeds``, the manifest's seed
        pairs too); also written to ``path`` when given."""
        text = exchange.export_document(self.list(source=source, seeds=seeds))
        if path is not None:
            fsutil.atomic_write_text(Path(path), text)
        return text

    def validate(self, paths: Iterable[str | Path] | None = None, *, schema: bool = True
                 ) -> builtins.list[Problem]:
        """Every problem of the pair files: parse, SQL, and tables/columns of the manifest."""
        return self.validate_files(paths, schema=schema)[1]

    def validate_files(self, paths: Iterable[str | Path] | None = None, *, schema: bool = True,
                       progress: Callable[[int, int], None] | None = None
                       ) -> tuple[int, builtins.list[Problem]]:
        """(files checked, problems): what the ``wrenmem-validate`` hook reports.
        ``progress(done, total)``: pair files checked."""
        return checks_validate.validate_files(self.settings, self._named_files(paths),
                                              check_schema=schema, progress=progress)

    def _named_files(self, paths: Iterable[str | Path] | None) -> builtins.list[Path] | None:
        """Files a caller named, as ``verify``, ``forget`` and ``show`` take them: a relative
        path is the project's (``knowledge/sql/x.md``, as ``list`` prints it) unless it
        leads into the project from the current folder."""
        if paths is None:
            return None
        return [self.settings.root / self.settings.relpath(Path(p)) for p in paths]

    def duplicates(self, paths: Iterable[str | Path] | None = None
                   ) -> tuple[int, builtins.list[Problem]]:
        """(pairs compared, problems): the same question twice, or with two SQLs."""
        targets = None if paths is None else [Path(p) for p in paths]
        counted = checks_duplicates.duplicate_problems(self.settings, targets)
        # The files it could not read are named too (from the catalog cache: no re-read).
        found = catalog.scan(self.settings, use_cache=self.settings.state_dir.is_dir())
        wanted = None if targets is None else {self.settings.relpath(p) for p in targets}
        self._report(e for e in found.errors if wanted is None or e.path in wanted)
        return counted

    def diff(self, base: str | None = None, head: str | None = None, *,
             merge_base: bool = True, schema: bool = True) -> PairDiff:
        """Pairs added, changed and removed between two revisions (HEAD: the work tree)."""
        return git_diff.diff_pairs(self.settings, base, head, merge_base=merge_base,
                                   check_schema=schema)

    # -- recall --------------------------------------------------------------------
    def recall(self, question: str, k: int = 3, *, datasource: str | None = None,
               tags: Sequence[str] = (), source: str | None = None,
               min_score: float = 0.0, sql: str | None = None, verified: bool = False
               ) -> builtins.list[Hit]:
        """The ``k`` stored pairs most similar to ``question``, best first; only those
        scoring at least ``min_score`` (scores are in [0, 1], the same for every backend)
        and, with ``verified``, only pairs a person verified (``Hit.verified``).
        Pairs with the same SQL on the same datasource are one hit (the others' questions
        in its ``also``). ``sql``: a draft query for the question, read by the scorer."""
        return list(self.recall_many([question], k, datasource=datasource, tags=tags,
                                     source=source, min_score=min_score, sql=sql,
                                     verified=verified)[0].hits)

    def recall_many(self, questions: Sequence[str], k: int = 3, *,
                    datasource: str | None = None, tags: Sequence[str] = (),
                    source: str | None = None, sync: bool = True,
                    min_score: float = 0.0, sql: str | None = None, verified: bool = False
                    ) -> builtins.list[RecallResult]:
        """Recall for several questions in one batch (one model call), the index brought up
        to date first unless ``sync`` is False (the caller knows nothing changed). Hits
        below ``min_score`` (in [0, 1], one meaning for every backend) are left out.
        ``sql``: a draft query, the same for every question of the batch."""
        require_questions(questions)
        filters = Filters(datasource=datasource, tags=tuple(tags), source=source,
                          verified=verified)
        remote = self._ask("recall", queries=questions, k=k, filters=filters, sql=sql,
                           min_score=min_score)
        if remote is not None:
            return remote
        return self.recaller.recall(questions, k, filters, sql=sql, min_score=min_score,
                                    sync=sync, notify=self.notify)

    def default_run(self, *, notify: bool = True) -> str:
        """The name ``evaluate`` gives the run of the configured backend, the one ``recall``
        answers with: ``grep``, ``vector`` or ``hybrid:<fusion>`` (``notify``: say so when
        ``auto`` falls back to grep)."""
        backend = recall_backends.choose_backend(self.settings, self.notify if notify else None)
        return f"hybrid:{self.settings.fusion}" if backend == "hybrid" else backend

    def evaluate(self, *, backends: Sequence[str] = ("grep", "vector", "hybrid"),
                 fusions: Sequence[str] = ("learned", "rrf", "linear"), k: int = 5,
                 limit: int = 0, misses: bool = False,
                 progress: Callable[[int, int], None] | None = None,
                 embedded: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """The memory measured on its own pairs (``wrenmem eval``): leave-one-out per task,
        backend and fusion (:func:`wrenmem.recall.evaluate.measure` says what it returns).
        ``progress(done, total)``: questions asked; ``embedded``: texts the sync embeds."""
        return evaluation.measure(
            self.settings, self.recaller.recall,
            sync=lambda: self.sync(progress=embedded), default_run=self.default_run,
            notify=self.notify, backends=backends, fusions=fusions, k=k, limit=limit,
            misses=misses, progress=progress,
            fit=lambda pairs: self.fit_recall(pairs=pairs, measure=True))

    # -- knowledge -----------------------------------------------------------------
    def knowledge(self) -> Knowledge:
        """Every knowledge file (rules, glossary, caveats, metrics, ``instructions.md``),
        parsed into entries; unreadable files are in ``.errors`` (and reported)."""
        found = knowledge_files.load_knowledge(self.settings)
        self._report(found.errors)
        return found

    def rules(self, question: str | None = None, *, threshold: int | None = None
              ) -> RuleSelection:
        """The rules, caveats, metrics and instructions: all of them (``question`` None, or
        their text at most ``threshold``, default the ``knowledge_threshold`` setting),
        else those that bear on ``question`` within that many characters; with the
        glossary terms the question uses (every term when ``question`` is None)."""
        return select.select_rules(self.settings, question, threshold=threshold,
                                   knowledge=self.knowledge(), embedder=self.embedder)

    def glossary(self, term: str | None = None) -> builtins.list[Entry]:
        """The glossary entries (term, synonyms, columns, definition), or those that
        ``term`` names or uses (a word, a synonym, or a whole question)."""
        found = terms.glossary_of(self.settings, self.knowledge())
        return list(found.entries if term is None else found.used_by(term))

    def add_rule(self, title: str, text: str, *, kind: str = "rule",
                 file: str | None = None) -> Entry:
        """Write a business rule (``kind`` rule, caveat or metric) as a ``##`` entry of a
        file in ``knowledge/rules/`` (``caveats/``, ``metrics/``): its own file named after
        the title, or ``file`` of that folder appended to. Returns the entry as read back."""
        if kind == "glossary":
            raise WrenmemError("a glossary term is added with add_term")
        return write.add_entry(self.settings, kind, title, text, file=file)

    def add_term(self, term: str, definition: str, *, synonyms: Iterable[str] = (),
                 columns: Iterable[str] = (), file: str | None = None) -> Entry:
        """Write a glossary term (its synonyms, the ``table`` or ``table.column`` it means,
        its definition) as a ``##`` entry of a file in ``knowledge/glossary/``."""
        return write.add_entry(self.settings, "glossary", term, definition,
                               synonyms=tuple(synonyms), columns=tuple(columns), file=file)

    def sync_knowledge(self) -> KnowledgeSyncReport | None:
        """Bring the knowledge index to the knowledge files (only changed entries are
        embedded); None in a grep-only project."""
        if self.grep_only:
            return None
        return knowledge_table.sync_knowledge(self.settings, embedder=self.embedder)

    def check_knowledge(self) -> KnowledgeDrift:
        """Whether the knowledge index holds the current entries (read-only, no model)."""
        return knowledge_table.knowledge_drift(self.settings, self._model_id())

    # -- schema --------------------------------------------------------------------
    def manifest(self) -> Manifest:
        """The project's manifest, loaded and checked (warnings in ``.warnings``).

        Kept between calls while the file's size and mtime stay the same."""
        return self._manifest.load(self.settings.manifest_path,
                                   self.settings.max_manifest_bytes)

    def _manifest_if_any(self) -> Manifest | None:
        """The manifest, or None when the project has none (a broken one still raises)."""
        if not self.settings.manifest_path.is_file():
            return None
        return self.manifest()

    def _validator(self, manifest: Manifest | None, check_schema: bool) -> Validator:
        """A validator of SQL texts, kept with the manifest it checks against."""
        return admit.prepared_validator(self.settings, manifest, check_schema,
                                        self._manifest.derived(manifest))

    def _import(self, pairs: Sequence[Pair], mode: str, dry_run: bool, force: bool,
                progress: Callable[[int, int], None] | None = None,
                written: Callable[[int, int], None] | None = None) -> ImportReport:
        """``pairs`` written as files (:func:`wrenmem.checks.admit.import_checked`)."""
        manifest = self._manifest_if_any()
        report = admit.import_checked(self.settings, pairs, mode, manifest,
                                      self._validator(manifest, True), dry_run=dry_run,
                                      force=force, progress=progress, written=written)
        if not dry_run:
            self._after_write([*report.created, *report.updated, *report.deleted])
        return report

    def _pair_path(self, target: str) -> Path:
        """A pair file given relative to the current folder or to the project."""
        for candidate in (Path(target), self.root / target):
            if candidate.exists():
                return candidate.resolve()
        return self.root / target

    def describe(self) -> str:
        """The whole schema as plain text (models, columns, relationships, views, cubes)."""
        return schema_describe.describe(self.manifest())

    def fetch(self, question: str, *, types: Sequence[str] = (), model: str | None = None,
              k: int = 10, threshold: int | None = None,
              progress: Callable[[int, int], None] | None = None) -> FetchResult:
        """Schema context: the whole schema when small, else the items most relevant.
        The daemon's answer (``use_daemon``) is the same :class:`FetchResult`."""
        remote = self._ask("fetch", question=question, types=tuple(types), model=model, k=k,
                           threshold=threshold)
        if remote is not None:
            try:
                return schema_fetch.FetchResult.from_dict(remote.to_dict(), remote.warnings)
            except (KeyError, TypeError, ValueError):  # another version's reply
                pass
        read_copy = (replica.schema_read_copy(self.settings)  # a local index: read in place
                     if self.settings.remote_index else None)
        return schema_fetch.fetch(self.settings, question, types=tuple(types), model=model,
                                  k=k, threshold=threshold, progress=progress,
                                  read_copy=read_copy, embedder=self.embedder)

    def seeds(self) -> builtins.list[dict[str, Any]]:
        """The seed queries derived from the manifest, as records."""
        return pair_seeds.build_records(self.manifest())

    def write_seeds(self) -> SeedWrite:
        """Write the seeds as pair files under ``seeds/`` (a question someone wrote is kept)."""
        result = pair_seeds.write_seeds(self.settings, self.seeds())
        self._after_write(result.paths)
        return result

    # -- index ---------------------------------------------------------------------
    @property
    def grep_only(self) -> bool:
        """No index here: the ``backend`` setting is grep, or the index extra is missing.
        Recall then reads the files; nothing is synced and no model is ever loaded."""
        return (self.settings.backend == "grep"
                or lance.index_unavailable(self.settings) is not None)

    def sync(self, *, full: bool = False,
             progress: Callable[[int, int], None] | None = None) -> SyncReport:
        """Bring the index to the files' state, embedding only what changed. With
        ``use_daemon``, a small change is synced by the running watcher (LanceDB and the
        model loaded there); ``progress`` is then not called."""
        if not full:  # a small change: the watcher syncs it (it refuses a big one)
            handed: SyncReport | None = self._ask("sync", paths=None)
            if handed is not None:
                return handed
        report = index_sync.sync_pairs(self.settings, full=full, progress=progress,
                                       embedder=self.embedder)
        if not report.noop or fitjob.owed_path(self.settings.state_dir).exists():  # else none
            rank_adapt.after_sync(self.settings, report, lambda: self.recaller, self.notify,
                                  indexed=lambda: not self.grep_only, detach=self.embedder is None)
        return report

    def fit_recall(self, *, force: bool = False, pairs: Sequence[Pair] | None = None,
                   measure: bool = False) -> dict[str, Any] | None:
        """Fit hybrid recall to this project's own pairs when they changed since the last
        fit (:func:`wrenmem.recall.adapt.fit_project`); never at recall."""
        return rank_adapt.fit_project(self.settings, lambda: self.recaller, pairs,
                                      force=force, measure=measure, indexed=not self.grep_only)

    def sync_schema(self, progress: Callable[[int, int], None] | None = None
                    ) -> SchemaSyncReport | None:
        """Bring the schema index to the manifest (only changed items are embedded);
        None when there is no manifest."""
        if not self.settings.manifest_path.is_file():
            return None
        return schema_table.sync_schema(self.settings, progress=progress, embedder=self.embedder)

    def check(self) -> Drift:
        """How the index differs from the files (read-only)."""
        return drift.check_drift(self.settings, self.embedder)

    def check_schema(self) -> SchemaDrift:
        """Whether the schema index holds the current manifest (read-only, no model)."""
        return schema_table.schema_drift(self.settings, self._model_id())

    def status(self) -> dict[str, Any]:
        """Backend, embedder, counts and freshness, with stable keys."""
        remote = self._ask("status")
        if remote is not None:
            return remote
        return recall_status.status_data(self.settings, self.embedder)

    def reset(self) -> dict[str, bool]:
        """Drop the pairs, schema and knowledge indexes (the files are untouched): for each,
        whether there was one."""
        return {"pairs": drift.reset_index(self.settings),
                "schema": schema_table.reset_schema(self.settings),
                "knowledge": knowledge_table.reset_knowledge(self.settings)}

    def run_hook(self, name: str, args: Sequence[str]) -> str | None:
        """Sync after git hook ``name`` (:func:`wrenmem.git.hooks.run_hook`; the watcher
        syncs the pairs when :meth:`_ask` says so): None, or why it failed. Never raises."""
        return git_hooks.run_hook(self.settings, name, tuple(args),
                                  handoff=lambda: self._ask("sync", paths=None))

    # -- helpers -------------------------------------------------------------------
    def _after_write(self, paths: Sequence[str]) -> None:
        self.last_index = autosync.update_after_write(
            self.settings, paths, self.embedder,
            handoff=lambda paths: self._ask("sync", paths=paths))
        note = self.last_index.note()
        if note and self.notify is not None:
            self.notify(note)

    def _model_id(self) -> str:
        """The embedder's model id, the model left unloaded."""
        embedder = self.embedder or embedders.get_embedder(self.settings.embedder,
                                                           root=self.settings.root)
        return embedder.model_id

    def _report(self, errors: Iterable[Any]) -> None:
        if self.notify is None:
            return
        for error in errors:
            self.notify(f"{error.location()}: {error.reason} (skipped)")
