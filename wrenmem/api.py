"""The Python API: one :class:`Memory` per project, the layer the CLI and agents call.

Every method returns a value or a small typed result and raises :class:`WrenmemError`
subclasses; nothing here prints, exits or imports click.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wrenmem.errors import SqlCheckError, WrenmemError
from wrenmem.recall.hits import Filters, Hit, RecallResult, above
from wrenmem.settings import Settings, find_project_root, load_settings
from wrenmem.watch.client import remote_call, remote_fetch, remote_recall, watcher_sync

# The rest is imported by the methods that use it: an agent's one-shot recall builds a
# Memory (the CLI's fast path does) and must not pay for validation, git, the schema or
# the index writer (bench/recall_latency.py; tests/test_api.py pins what recall imports).
if TYPE_CHECKING:
    from wrenmem.checks.review import Verified
    from wrenmem.checks.validate import Problem, Validator
    from wrenmem.embed.embedders import Embedder
    from wrenmem.git.diff import PairDiff
    from wrenmem.index.autosync import IndexUpdate
    from wrenmem.index.drift import Drift
    from wrenmem.index.sync import SyncReport
    from wrenmem.knowledge.entries import Entry
    from wrenmem.knowledge.files import Knowledge
    from wrenmem.knowledge.select import RuleSelection
    from wrenmem.knowledge.table import KnowledgeDrift, KnowledgeSyncReport
    from wrenmem.pairs.exchange import ImportReport
    from wrenmem.pairs.fmt import FmtReport
    from wrenmem.pairs.pairfile import Pair
    from wrenmem.pairs.seeds import SeedWrite
    from wrenmem.pairs.store import StoreResult
    from wrenmem.pairs.wren_store import WrenStore
    from wrenmem.recall.recaller import Freshness, Recaller
    from wrenmem.schema.fetch import FetchResult
    from wrenmem.schema.manifest import Manifest
    from wrenmem.schema.table import SchemaDrift, SchemaSyncReport

Notify = Callable[[str], None]


class Memory:
    """The memory of one project: its pair files, its manifest and its derived index.

    ``root`` defaults to the nearest folder up with ``wrenmem.toml``, ``knowledge/`` or
    ``.git``. ``settings`` override ``wrenmem.toml`` and ``WRENMEM_*`` variables (the same
    names, e.g. ``backend="grep"``). ``embedder`` is any object with ``model_id``, ``dim``
    and ``embed(texts)``, used instead of the configured model (for reading and writing the
    index; a Memory with its own embedder never asks the daemon). ``use_daemon`` lets
    recall and fetch ask a running ``wrenmem watch`` first (warm model, same answers).
    Recall goes through one :class:`~wrenmem.recall.recaller.Recaller`, built on the first
    recall and kept: it holds the embedder, the backends and what they keep warm.
    """

    # The manifest last loaded: (path, size, mtime), the Manifest, what was derived from it.
    _manifest_cache: tuple[tuple[Any, ...], Manifest, dict[str, Any]] | None = None

    def __init__(self, root: str | Path | None = None, *, embedder: Embedder | None = None,
                 use_daemon: bool = False, notify: Notify | None = None,
                 **settings: Any) -> None:
        overrides = {k: v for k, v in settings.items() if v is not None}
        base = Path(root).resolve() if root is not None else find_project_root()
        self._setup(load_settings(base, overrides), embedder, use_daemon, notify)

    def _setup(self, settings: Settings, embedder: Embedder | None, use_daemon: bool,
               notify: Notify | None, freshness: Freshness | None = None) -> None:
        self.settings: Settings = settings
        self.embedder = embedder
        self.use_daemon = use_daemon
        self.notify = notify
        self._freshness = freshness
        self._recaller: Recaller | None = None
        self.last_index: IndexUpdate | None = None  # what the last write did to the index

    @classmethod
    def from_settings(cls, settings: Settings, *, embedder: Embedder | None = None,
                      use_daemon: bool = False, notify: Notify | None = None,
                      freshness: Freshness | None = None) -> Memory:
        """A Memory over resolved ``settings``. ``freshness`` (a long-lived process: the
        MCP server, the daemon) keeps recall warm between calls (see ``Recaller``)."""
        memory = cls.__new__(cls)
        memory._setup(settings, embedder, use_daemon, notify, freshness)
        return memory

    @property
    def recaller(self) -> Recaller:
        """This memory's read path, built on first use (importing nothing heavy)."""
        if self._recaller is None:
            from wrenmem.recall.recaller import Recaller

            self._recaller = Recaller(self.settings, embedder=self.embedder,
                                      freshness=self._freshness)
        return self._recaller

    def keep_warm(self, freshness: Freshness) -> None:
        """Keep recall warm between calls (a long-lived process: the MCP server): the
        catch-up sync and grep's snapshot are renewed only when ``freshness`` says a file
        may have changed (:class:`wrenmem.watch.freshness.Freshness`)."""
        self._freshness = freshness
        self._recaller = None

    def _daemon(self) -> bool:
        """Whether to ask the running watcher: only with the settings' own embedder."""
        return self.use_daemon and self.embedder is None

    @property
    def root(self) -> Path:
        return self.settings.root

    # -- pairs ---------------------------------------------------------------------
    def init(self) -> list[str]:
        """Create ``knowledge/sql/``, ignore ``.wrenmem/`` in git, write ``wrenmem.toml``,
        and create the knowledge folders (rules, glossary, caveats, metrics) that are
        missing, each with one commented example."""
        from wrenmem.knowledge.scaffold import scaffold_knowledge
        from wrenmem.pairs.project import init_project

        return init_project(self.settings) + scaffold_knowledge(self.settings)

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
        from wrenmem.pairs.catalog import require_knowledge_dir
        from wrenmem.pairs.pairfile import ALLOW_WRITES, REVIEWED, Pair
        from wrenmem.pairs.questions import asking
        from wrenmem.pairs.store import (
            clean_pair,
            default_dialect,
            find_by_question,
            refuse_oversize,
            store_pair,
        )

        if not question.strip():
            raise WrenmemError("the question is empty")
        if not sql.strip():
            raise WrenmemError("the SQL is empty")
        refuse_oversize(self.settings, question, sql, note)  # before the SQL is parsed
        given = clean_pair(Pair(nl=question, sql=sql, notes=note, tags=tuple(_split_tags(tags)),
                                datasource=datasource, dialect=dialect, source=source or ""))
        question, sql, note = given.nl, given.sql, given.notes
        require_knowledge_dir(self.settings)  # (asking's first check: its error comes first)
        manifest = self._manifest_if_any()
        if dialect is None and self.settings.origins.get("dialect") == "flag":
            dialect = self.settings.dialect  # given for this call, like the argument
        # The SQL is checked first as it will be unless a file already asks the question
        # with another dialect or allows writes.
        validator = self._validator(manifest, check_schema)
        guess = (dialect or default_dialect(self.settings, manifest.dialect if manifest
                                            else None), allow_writes)
        early = validator.sql_findings(sql.strip(), guess[0], allow_writes=guess[1])
        # The pairs asking this question (the file to update, the duplicates to warn of),
        # found without reading every file; read once for the whole call.
        known = asking(self.settings, question)
        existing = find_by_question(self.settings, question, known)
        dialect = (dialect or (existing.dialect if existing else None)
                   or default_dialect(self.settings, manifest.dialect if manifest else None))
        allow_writes = allow_writes or bool(existing and existing.allows_writes)
        findings = early if (dialect, allow_writes) == guess else validator.sql_findings(
            sql.strip(), dialect, allow_writes=allow_writes)
        if validator.engine_note is not None and self.notify is not None:
            self.notify(f"note: {validator.engine_note.message}")
        writes = [p for kind, p in findings if kind == "write"]
        if writes:
            raise SqlCheckError(writes, prefix="not stored (read-only)")
        problems = [p for kind, p in findings if kind != "engine-note"]
        if problems and not force:
            raise SqlCheckError(problems, prefix=f"not stored ({dialect} SQL)")
        for kind, p in findings:
            if kind == "engine-note" and self.notify is not None:
                self.notify(f"note: {p.line}:{p.col}: {p.message}")
        if source is None:
            source = existing.source if existing else "user"
        extra: dict[str, Any] = {ALLOW_WRITES: True} if allow_writes and not (
            existing and existing.allows_writes) else {}
        if source == "agent":
            extra[REVIEWED] = False
        pair = Pair(nl=question.strip(), sql=sql.strip(),
                    datasource=datasource or self.settings.datasource, dialect=dialect,
                    tags=tuple(_split_tags(tags)), source=source, notes=note, extra=extra)
        result = store_pair(self.settings, pair, folder=folder, known=known)
        for broken in result.passed_over:
            if self.notify is not None:
                self.notify(f"warning: {broken.path}:{broken.line}: {broken.reason}: that "
                            f"file cannot be read as a pair, so this one went to "
                            f"{result.path}; fix it (then keep one of the two) or remove it")
        self._warn_duplicates(result.pair, known)
        self._after_write([result.path])
        return result

    def _warn_duplicates(self, pair: Pair, known: Sequence[Pair]) -> None:
        """Say at once when ``pair`` asks a question another file asks too: what
        ``duplicates`` (and its pre-commit hook) will reject. ``known``: the other files'
        pairs asking it, as read before ``pair`` was written (only its own file changed
        since; :func:`wrenmem.pairs.questions.asking`)."""
        if self.notify is None:
            return
        from wrenmem.checks.duplicates import find_duplicates, question_key

        key = question_key(pair)
        same = [p for p in known if p.path != pair.path and question_key(p) == key]
        for dup in find_duplicates([pair, *same], self.settings.dialect):
            if dup.pair.path == pair.path:
                self.notify(f"warning: {pair.path}: {dup.message} (`wrenmem duplicates` "
                            "reports it)")

    def get(self, target: str) -> Pair:
        """One pair, by file path (relative to the cwd or the project) or question.

        A question names the pair whose question is exactly it (after NFC and white-space
        normalisation); failing that, the one pair equal to it ignoring case. Several
        candidates are a :class:`WrenmemError` that lists their paths."""
        from wrenmem.pairs.catalog import read_pair_file
        from wrenmem.pairs.questions import asking
        from wrenmem.pairs.store import matching_pairs
        from wrenmem.recall.bm25f import GrepBackend

        for candidate in (Path(target), self.root / target):
            if os.path.lexists(candidate) and not candidate.is_dir():  # a FIFO: say so
                return read_pair_file(candidate, self.settings.relpath(candidate),
                                      self.settings.max_pair_bytes)[0]
        # Every pair asking this question, exactly or but for case, is among those
        # :func:`asking` reads (no scan of the catalog).
        found, by_case = matching_pairs(asking(self.settings, target), target)
        if len(found) == 1:
            return found[0]
        if found:
            how = " (they differ only in case)" if by_case else ""
            listing = "".join(f"\n  {p.path}  ({p.nl})" for p in found)
            raise WrenmemError(f"{target!r} matches {len(found)} stored questions{how}: "
                               f"nothing done; name one by its file path:{listing}")
        close = GrepBackend(self.settings).search([target], 3, Filters())[0]
        hint = ("; closest: " + "; ".join(f"{h.path} ({h.question})" for h in close)
                if close else "")
        raise WrenmemError(f"no pair file or stored question matches {target!r}{hint}")

    def list(self, *, source: str | None = None, tags: Sequence[str] = (),
             datasource: str | None = None, seeds: bool = True, uses: Sequence[str] = (),
             verified: bool = False) -> builtins.list[Pair]:
        """Stored pairs (and, with ``seeds``, the manifest's seed pairs) that match; with
        ``uses`` (``orders``, ``orders.amount``…), only those whose SQL uses one of them;
        with ``verified``, only verified pairs."""
        from wrenmem.pairs.catalog import scan
        from wrenmem.pairs.seeds import extra_pairs

        found = scan(self.settings)
        self._report(found.errors)
        filters = Filters(datasource=datasource, tags=tuple(tags), source=source,
                          verified=verified)
        extra = extra_pairs(self.settings) if seeds else []
        pairs = [p for p in (*found.pairs, *extra) if filters.accepts(p)]
        if uses:
            pairs = [p for p, _items in self.using(uses, pairs)]
        return pairs

    def using(self, items: Sequence[str], pairs: Sequence[Pair] | None = None
              ) -> builtins.list[tuple[Pair, tuple[str, ...]]]:
        """The pairs (default: every stored pair) whose SQL uses any of ``items``
        (``orders`` or ``orders.amount``), each with the items it uses, resolved against
        the manifest (aliases, CTEs and ``*`` included)."""
        from wrenmem.checks.uses import UsesIndex, pairs_using
        from wrenmem.checks.validate import Validator
        from wrenmem.pairs.catalog import scan

        manifest = self.manifest()
        validator = Validator(self.settings)
        index = UsesIndex(self.settings, manifest)
        chosen = builtins.list(pairs if pairs is not None else scan(self.settings).pairs)
        return pairs_using(index, chosen, builtins.list(items), validator.dialect_of)

    def verify(self, paths: Iterable[str | Path], *, by: str | None = None,
               force: bool = False) -> builtins.list[Verified]:
        """Mark pair files verified by ``by`` (default: git config user.name and email),
        recording the SQL's and the used schema items' fingerprints. A pair that does not
        validate is refused unless ``force``."""
        from wrenmem.checks.review import reviewer_name, verify_pairs

        targets = [Path(p) if Path(p).is_absolute() else self._pair_path(str(p))
                   for p in paths]
        results = verify_pairs(self.settings, targets, by or reviewer_name(self.root),
                               force=force)
        self._after_write([r.path for r in results if r.changed])
        return results

    def stale(self) -> builtins.list[Problem]:
        """Verified pairs whose tables or columns changed in the manifest since (WM011);
        reads only the verified pairs' files, binds nothing."""
        from wrenmem.checks.validate import Validator
        from wrenmem.pairs.catalog import scan
        from wrenmem.pairs.pairfile import VERIFIED_SCHEMA

        validator = Validator(self.settings)
        found: builtins.list[Problem] = []
        for pair in scan(self.settings).pairs:
            if pair.verified and pair.extra.get(VERIFIED_SCHEMA):
                text = (self.root / pair.path).read_text(encoding="utf-8-sig")
                found += validator.stale_problems(pair, text.split("\n"))
        return found

    def forget(self, targets: Sequence[str] = (), *, source: str | None = None
               ) -> builtins.list[str]:
        """Delete pair files (by path or question, as :meth:`get` finds them, or every
        file of ``source``); returns the deleted paths. A question that names several pairs
        refuses the whole call before anything is deleted."""
        from wrenmem.pairs.catalog import require_listed_pair, scan
        from wrenmem.pairs.store import delete_pair_file

        pairs = [self.get(t) for t in targets]
        if source:
            pairs += [p for p in scan(self.settings).pairs if p.source == source]
        paths = sorted({p.path for p in pairs})
        for rel in paths:  # every target is a listed pair, or nothing is deleted
            require_listed_pair(self.settings, rel)
        for rel in paths:
            delete_pair_file(self.settings, rel)
        self._after_write(paths)
        return paths

    def fmt(self, paths: Iterable[str | Path] | None = None, *, check: bool = False
            ) -> FmtReport:
        """Rewrite pair files in the canonical format (``check``: report, change nothing)."""
        from wrenmem.pairs.fmt import format_files

        return format_files(self.settings, self._named_files(paths), check=check)

    def import_(self, path: str | Path, *, mode: str = "skip", dry_run: bool = False,
                force: bool = False) -> ImportReport:
        """Import Wren's ``queries.yml``: each pair becomes a file (``skip``, ``upsert`` or
        ``overwrite`` existing questions). SQL that does not parse refuses the import
        (:class:`ImportRefused`, nothing written) unless ``force``."""
        from wrenmem.pairs.exchange import import_pairs, read_queries_yml

        pairs = read_queries_yml(Path(path))
        self._check_import(pairs, force)
        report = import_pairs(self.settings, pairs, mode, dry_run=dry_run, force=force)
        report.read = len(pairs)
        if not dry_run:
            self._after_write([*report.created, *report.updated, *report.deleted])
        return report

    def import_wren(self, path: str | Path, *, mode: str = "skip", dry_run: bool = False,
                    force: bool = False, include_seed: bool = False
                    ) -> tuple[ImportReport, WrenStore]:
        """Migrate a Wren memory store (its LanceDB folder, e.g. ``.wren/memory``): each pair
        becomes a file, as :meth:`import_` does with a ``queries.yml`` (Wren's ``export``).
        Seed rows are left out unless ``include_seed``. A second run changes nothing."""
        from wrenmem.pairs.exchange import import_pairs
        from wrenmem.pairs.wren_store import read_wren_store

        store = read_wren_store(Path(path), include_seed=include_seed)
        self._check_import(store.pairs, force)
        report = import_pairs(self.settings, store.pairs, mode, dry_run=dry_run, force=force)
        report.read = len(store.pairs)
        if not dry_run:
            self._after_write([*report.created, *report.updated, *report.deleted])
        return report, store

    def export(self, path: str | Path | None = None, *, source: str | None = None,
               seeds: bool = False) -> str:
        """Wren's ``queries.yml`` text of the pairs (with ``seeds``, the manifest's seed
        pairs too); also written to ``path`` when given."""
        from wrenmem.fs.fsutil import atomic_write_text
        from wrenmem.pairs.exchange import export_document

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
        from wrenmem.checks.validate import validate_files

        return validate_files(self.settings, self._named_files(paths), check_schema=schema)

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
        from wrenmem.checks.duplicates import duplicate_problems
        from wrenmem.pairs.catalog import scan

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
        from wrenmem.git.diff import diff_pairs

        return diff_pairs(self.settings, base, head, merge_base=merge_base, check_schema=schema)

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
        """Recall for several questions in one batch (one model call). The index is first
        brought up to date with the files, unless ``sync`` is False (the caller knows that
        nothing changed since its last recall). Hits scoring below ``min_score`` (in
        [0, 1], one meaning for every backend) are left out. ``sql``: a draft query, the
        same for every question of the batch."""
        from wrenmem.recall.hits import require_questions

        require_questions(questions)
        filters = Filters(datasource=datasource, tags=tuple(tags), source=source,
                          verified=verified)
        if self._daemon():
            remote = remote_recall(self.settings, questions, k, filters, notify=self.notify,
                                   sql=sql)
            if remote is not None:
                return above(remote, min_score)
            from wrenmem.watch.process import start_on_demand

            start_on_demand(self.settings)  # the next call is answered warm
        return self.recaller.recall(questions, k, filters, sql=sql, min_score=min_score,
                                    sync=sync, notify=self.notify)

    def default_run(self, *, notify: bool = True) -> str:
        """The name ``evaluate`` gives the run of the configured backend, the one ``recall``
        answers with: ``grep``, ``vector`` or ``hybrid:<fusion>`` (``notify``: say so when
        ``auto`` falls back to grep)."""
        from wrenmem.recall.backends import choose_backend

        backend = choose_backend(self.settings, self.notify if notify else None)
        return f"hybrid:{self.settings.fusion}" if backend == "hybrid" else backend

    def evaluate(self, *, backends: Sequence[str] = ("grep", "vector", "hybrid"),
                 fusions: Sequence[str] = ("learned", "rrf", "linear"), k: int = 5,
                 limit: int = 0, misses: bool = False) -> dict[str, Any]:
        """The memory measured on its own pairs (``wrenmem eval``): leave-one-out over
        phrasings that share a SQL (*answered before*) and over SQLs that share a skeleton
        (*new question*), and the questions of the gold file ``<knowledge_root>/eval.json``
        with their expected pair (*gold*), per backend and, for hybrid, per fusion. Returns
        ``{"probes": {task: n}, "runs": {name: {task: {"R@1", "R@5", "MRR", "ECE", ...}}},
        "default": name, "nothing_to_measure": why}`` (``why``: None, or the line that says
        why no question could be asked, :func:`wrenmem.recall.evaluate.nothing_to_measure`);
        ``limit`` caps the probes of each task (0: all); with ``misses``, ``"misses"`` lists
        the questions the default run did not answer right first
        (:func:`wrenmem.recall.evaluate.miss`). Writes nothing but the index (brought up to
        date first)."""
        from dataclasses import replace

        from wrenmem.pairs.catalog import scan
        from wrenmem.recall import evaluate
        from wrenmem.recall.backends import choose_backend

        found = scan(self.settings, use_cache=self.settings.state_dir.is_dir())
        self._report(found.errors)
        probes = evaluate.probes(found.pairs, limit=limit)
        gold, problems = evaluate.gold_probes(
            self.settings.root / self.settings.knowledge_root / evaluate.GOLD_FILE,
            found.pairs, self.settings.root)
        if self.notify is not None:
            for problem in problems:
                self.notify(problem)
        probes += gold
        counts = {task: sum(1 for p in probes if p.task == task) for task in evaluate.TASKS
                  if task != "gold" or gold}  # "gold": only with a gold file's questions
        if any(p.task == "none" for p in gold):
            counts["none"] = sum(1 for p in gold if p.task == "none")
        runs: dict[str, Any] = {}
        missed: list[dict[str, Any]] = []
        default = self.default_run()
        # the index backends, when this install has them, measured over a fresh index
        indexed = choose_backend(replace(self.settings, backend="auto")) != "grep"
        names = [n for n in backends if n == "grep" or indexed]
        if any(n != "grep" for n in names):
            self.sync()
        for name in names:
            for fusion in (fusions if name == "hybrid" else ("",)):
                settings = replace(self.settings, backend=name,
                                   fusion=fusion or self.settings.fusion)

                def search(probe: Any, settings: Settings = settings) -> list[tuple[float, Hit]]:
                    filters = Filters(exclude=probe.exclude)
                    [result] = self.recaller.recall([probe.question], k, filters,
                                                    settings=settings, sync=False)
                    return [(h.score, h) for h in result.hits]

                run_name = f"{name}:{fusion}" if fusion else name
                wanted = missed if misses and run_name == default else None
                runs[run_name] = evaluate.run(probes, search, wanted)
        report: dict[str, Any] = {
            "probes": counts, "runs": runs, "default": default,
            "nothing_to_measure": None if probes else evaluate.nothing_to_measure(found.pairs)}
        if misses:  # None: the configured backend was not among the runs asked for
            report["misses"] = missed if default in runs else None
        return report

    # -- knowledge -----------------------------------------------------------------
    def knowledge(self) -> Knowledge:
        """Every knowledge file (rules, glossary, caveats, metrics, ``instructions.md``),
        parsed into entries; unreadable files are in ``.errors`` (and reported)."""
        from wrenmem.knowledge.files import load_knowledge

        found = load_knowledge(self.settings)
        self._report(found.errors)
        return found

    def rules(self, question: str | None = None, *, threshold: int | None = None
              ) -> RuleSelection:
        """The rules, caveats, metrics and instructions: all of them (``question`` None, or
        their text at most ``threshold``, default the ``knowledge_threshold`` setting),
        else those that bear on ``question`` within that many characters; with the
        glossary terms the question uses (every term when ``question`` is None)."""
        from wrenmem.knowledge.select import select_rules

        return select_rules(self.settings, question, threshold=threshold,
                            knowledge=self.knowledge(), embedder=self.embedder)

    def glossary(self, term: str | None = None) -> builtins.list[Entry]:
        """The glossary entries (term, synonyms, columns, definition), or those that
        ``term`` names or uses (a word, a synonym, or a whole question)."""
        from wrenmem.knowledge.terms import glossary_of

        found = glossary_of(self.settings, self.knowledge())
        return list(found.entries if term is None else found.used_by(term))

    def add_rule(self, title: str, text: str, *, kind: str = "rule",
                 file: str | None = None) -> Entry:
        """Write a business rule (``kind`` rule, caveat or metric) as a ``##`` entry of a
        file in ``knowledge/rules/`` (``caveats/``, ``metrics/``): its own file named after
        the title, or ``file`` of that folder appended to. Returns the entry as read back."""
        from wrenmem.knowledge.write import add_entry

        if kind == "glossary":
            raise WrenmemError("a glossary term is added with add_term")
        return add_entry(self.settings, kind, title, text, file=file)

    def add_term(self, term: str, definition: str, *, synonyms: Iterable[str] = (),
                 columns: Iterable[str] = (), file: str | None = None) -> Entry:
        """Write a glossary term (its synonyms, the ``table`` or ``table.column`` it means,
        its definition) as a ``##`` entry of a file in ``knowledge/glossary/``."""
        from wrenmem.knowledge.write import add_entry

        return add_entry(self.settings, "glossary", term, definition,
                         synonyms=tuple(synonyms), columns=tuple(columns), file=file)

    def sync_knowledge(self) -> KnowledgeSyncReport | None:
        """Bring the knowledge index to the knowledge files (only changed entries are
        embedded); None in a grep-only project."""
        from wrenmem.knowledge.table import sync_knowledge

        if self.grep_only:
            return None
        return sync_knowledge(self.settings, embedder=self.embedder)

    def check_knowledge(self) -> KnowledgeDrift:
        """Whether the knowledge index holds the current entries (read-only, no model)."""
        from wrenmem.embed.embedders import get_embedder
        from wrenmem.knowledge.table import knowledge_drift

        embedder = self.embedder or get_embedder(self.settings.embedder, root=self.settings.root)
        return knowledge_drift(self.settings, embedder.model_id)

    def reset_knowledge(self) -> bool:
        """Drop the knowledge index; True when there was one."""
        from wrenmem.knowledge.table import reset_knowledge

        return reset_knowledge(self.settings)

    # -- schema --------------------------------------------------------------------
    def manifest(self) -> Manifest:
        """The project's manifest, loaded and checked (warnings in ``.warnings``).

        Kept between calls while the file's size and mtime stay the same."""
        from wrenmem.schema.manifest import load_manifest

        path = self.settings.manifest_path
        try:
            st = path.stat()
            key: tuple[Any, ...] = (str(path), st.st_size, st.st_mtime_ns)
        except OSError:
            return load_manifest(path, max_bytes=self.settings.max_manifest_bytes)
        cached = self._manifest_cache
        if cached is None or cached[0] != key:
            cached = (key, load_manifest(
                path, max_bytes=self.settings.max_manifest_bytes), {})
            self._manifest_cache = cached
        return cached[1]

    def _manifest_if_any(self) -> Manifest | None:
        """The manifest, or None when the project has none (a broken one still raises)."""
        if not self.settings.manifest_path.is_file():
            return None
        return self.manifest()

    def _validator(self, manifest: Manifest | None, check_schema: bool) -> Validator:
        """A validator of SQL texts (parse, read-only and, with ``check_schema``, names and
        the engine), kept with the manifest it checks against."""
        from wrenmem.checks.validate import Validator

        if manifest is None or not check_schema:
            return Validator(self.settings, check_schema=check_schema, tables={})
        cached = self._manifest_cache
        prepared: dict[str, Any] = cached[2] if cached and cached[1] is manifest else {}
        if "validator" not in prepared:
            validator = Validator(self.settings, tables=manifest.table_columns(),
                                  manifest_dialect=manifest.dialect, manifest=manifest)
            validator._loaded = True
            prepared["validator"] = validator
        found: Validator = prepared["validator"]
        return found

    def _check_import(self, pairs: Sequence[Pair], force: bool) -> None:
        """Refuse an import with SQL that writes (always), or that the manifest or the
        engine rejects (unless ``force``); parse problems are ``import_pairs``' to report."""
        from wrenmem.pairs.exchange import ImportRefused
        from wrenmem.pairs.store import default_dialect

        manifest = self._manifest_if_any()
        validator = self._validator(manifest, True)
        writes, rejected = [], []
        for n, pair in enumerate(pairs, 1):
            dialect = pair.dialect or default_dialect(
                self.settings, manifest.dialect if manifest else None)
            for kind, p in validator.sql_findings(pair.sql, dialect):
                line = f"pair #{n} ({pair.nl[:60]}): {p.line}:{p.col}: {p.message}"
                if kind == "write":
                    writes.append(line)
                elif kind in ("schema", "engine"):
                    rejected.append(line)
        if writes:
            raise ImportRefused(writes, "SQL that writes (the allow_writes setting accepts it)")
        if rejected and not force:
            raise ImportRefused(rejected)

    def _pair_path(self, target: str) -> Path:
        """A pair file given relative to the current folder or to the project."""
        for candidate in (Path(target), self.root / target):
            if candidate.exists():
                return candidate.resolve()
        return self.root / target

    def describe(self) -> str:
        """The whole schema as plain text (models, columns, relationships, views, cubes)."""
        from wrenmem.schema.describe import describe as describe_text

        return describe_text(self.manifest())

    def fetch(self, question: str, *, types: Sequence[str] = (), model: str | None = None,
              k: int = 10, threshold: int | None = None,
              progress: Callable[[int, int], None] | None = None) -> FetchResult:
        """Schema context: the whole schema when small, else the items most relevant.
        The daemon's answer (``use_daemon``) is the same :class:`FetchResult`."""
        from wrenmem.schema.fetch import FetchResult
        from wrenmem.schema.fetch import fetch as fetch_context

        if self._daemon():
            remote = remote_fetch(self.settings, question, types=tuple(types), model=model,
                                  k=k, threshold=threshold)
            if remote is not None:
                try:
                    return FetchResult.from_dict(remote.to_dict(), remote.warnings)
                except (KeyError, TypeError, ValueError):  # another version's reply
                    pass
        read_copy = None  # a local index is read where it is
        if self.settings.remote_index:  # (the replica module and its imports: only then)
            from wrenmem.index.team import replica

            read_copy = replica.schema_read_copy(self.settings)
        return fetch_context(self.settings, question, types=tuple(types), model=model, k=k,
                             threshold=threshold, progress=progress, read_copy=read_copy,
                             embedder=self.embedder)

    def seeds(self) -> builtins.list[dict[str, Any]]:
        """The seed queries derived from the manifest, as records."""
        from wrenmem.pairs.seeds import build_records

        return build_records(self.manifest())

    def write_seeds(self) -> SeedWrite:
        """Write the seeds as pair files under ``seeds/`` (a question someone wrote is kept)."""
        from wrenmem.pairs.seeds import write_seeds

        result = write_seeds(self.settings, self.seeds())
        self._after_write(result.paths)
        return result

    # -- index ---------------------------------------------------------------------
    @property
    def grep_only(self) -> bool:
        """No index here: the ``backend`` setting is grep, or the index extra is missing.
        Recall then reads the files; nothing is synced and no model is ever loaded."""
        from wrenmem.storage.lance import index_unavailable

        return self.settings.backend == "grep" or index_unavailable(self.settings) is not None

    def sync(self, *, full: bool = False,
             progress: Callable[[int, int], None] | None = None) -> SyncReport:
        """Bring the index to the files' state, embedding only what changed. With
        ``use_daemon``, a small change is synced by the running watcher (LanceDB and the
        model loaded there); ``progress`` is then not called."""
        from wrenmem.index.sync import sync_pairs

        if not full:
            handed = self._sync_in_watcher(None)
            if handed is not None:
                return handed
        return sync_pairs(self.settings, full=full, progress=progress, embedder=self.embedder)

    def sync_schema(self, progress: Callable[[int, int], None] | None = None
                    ) -> SchemaSyncReport | None:
        """Bring the schema index to the manifest (only changed items are embedded);
        None when there is no manifest."""
        from wrenmem.schema.table import sync_schema

        if not self.settings.manifest_path.is_file():
            return None
        return sync_schema(self.settings, progress=progress, embedder=self.embedder)

    def check(self) -> Drift:
        """How the index differs from the files (read-only)."""
        from wrenmem.index.drift import check_drift

        return check_drift(self.settings, self.embedder)

    def check_schema(self) -> SchemaDrift:
        """Whether the schema index holds the current manifest (read-only, no model)."""
        from wrenmem.embed.embedders import get_embedder
        from wrenmem.schema.table import schema_drift

        embedder = self.embedder or get_embedder(self.settings.embedder, root=self.settings.root)
        return schema_drift(self.settings, embedder.model_id)  # the model stays unloaded

    def status(self) -> dict[str, Any]:
        """Backend, embedder, counts and freshness, with stable keys."""
        from wrenmem.recall.status import status_data

        if self._daemon():
            remote = remote_call(self.settings, "status", {})
            if isinstance(remote, dict):
                return remote
        return status_data(self.settings, self.embedder)

    def reset(self) -> bool:
        """Drop the pairs index (the files are untouched); True when there was one."""
        from wrenmem.index.drift import reset_index

        return reset_index(self.settings)

    def reset_schema(self) -> bool:
        """Drop the schema index; True when there was one."""
        from wrenmem.schema.table import reset_schema

        return reset_schema(self.settings)

    # -- helpers -------------------------------------------------------------------
    def _after_write(self, paths: Sequence[str]) -> None:
        from wrenmem.index.autosync import update_after_write

        self.last_index = update_after_write(self.settings, paths, self.embedder,
                                             handoff=self._sync_in_watcher)
        note = self.last_index.note()
        if note and self.notify is not None:
            self.notify(note)

    def _sync_in_watcher(self, paths: Sequence[str] | None) -> SyncReport | None:
        """The sync of the pairs (all, or ``paths``) run by the running watcher, which has
        LanceDB and the model loaded (a small change only: the daemon refuses a big one);
        None: this process syncs itself."""
        if not self._daemon():
            return None
        report: SyncReport | None = watcher_sync(self.settings, paths)
        return report

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

