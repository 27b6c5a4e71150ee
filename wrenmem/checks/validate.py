"""Validate pair files: each parses, its SQL is one well-formed statement in its dialect, and
(when a manifest is present) names only tables and columns that exist.

What the ``wrenmem-validate`` pre-commit hook and ``wrenmem diff`` run. It needs neither the
index nor an embedding model. Problems point into the pair file (``path:line:col``), not into
the SQL string: a SQL position is mapped back to the line of the file that holds it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wrenmem.checks.knowledge import knowledge_problems, knowledge_targets
from wrenmem.checks.references import Schema, check_schema, sqlite_quoted_strings
from wrenmem.checks.rules import (
    IGNORE_KEY,
    WARNING_CODES,
    code_for,
    github_annotation,
    parse_codes,
)
from wrenmem.errors import PairError, SettingsError, WrenmemError
from wrenmem.lazy import lazy
from wrenmem.pairs.catalog import SKIPPED_NAMES, iter_pair_files, require_knowledge_dir
from wrenmem.pairs.pairfile import (
    VERIFIED_SCHEMA,
    Pair,
    decode_file,
    key_line,
    parse_pair,
    read_pair_bytes,
)
from wrenmem.pairs.store import default_dialect
from wrenmem.schema.manifest import Manifest, load_manifest
from wrenmem.settings import CONFIG_FILE, READ_ONLY_CODE, Settings
from wrenmem.sql.check import outside_problem, parse_checked, unknown_dialect, write_problem

if TYPE_CHECKING:
    from wrenmem.checks import engine as sql_engine
    from wrenmem.checks import uses as checks_uses
else:  # imported on first use (wrenmem/lazy.py)
    sql_engine = lazy("wrenmem.checks.engine")
    checks_uses = lazy("wrenmem.checks.uses")


@dataclass(frozen=True)
class Problem:
    """One finding, rendered as ``path:line:col: CODE message``."""

    path: str
    line: int
    col: int
    message: str
    # pair | sql | schema | manifest | duplicate | write | engine | engine-note | stale |
    # knowledge[-empty|-duplicate|-schema]
    kind: str

    @property
    def code(self) -> str:
        """The rule code (``WM001``…), see :mod:`wrenmem.checks.rules`."""
        return code_for(self.kind, self.message)

    @property
    def is_error(self) -> bool:
        """False for a note (WM010): reported, but no reason to fail."""
        return self.code not in WARNING_CODES

    def render(self) -> str:
        note = "" if self.is_error else "note: "
        return f"{self.path}:{self.line}:{self.col}: {self.code} {note}{self.message}"

    def github(self) -> str:
        """The finding as a GitHub Actions annotation on its file and line."""
        return github_annotation(self.path, self.line, self.col, self.code, self.message,
                                 "error" if self.is_error else "notice")

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "line": self.line, "col": self.col, "code": self.code,
                "message": self.message, "kind": self.kind,
                "severity": "error" if self.is_error else "note"}



def ignored_codes(settings: Settings) -> frozenset[str]:
    """Codes the ``ignore`` setting accepts project-wide; never the read-only rule (WM008)
    when the setting comes from wrenmem.toml, which a pull request can change (accepting
    writes is personal: ``allow_writes``)."""
    try:
        codes = parse_codes(list(settings.ignore))
    except ValueError as e:
        raise SettingsError(f"setting 'ignore': {e}") from e
    return codes - {READ_ONLY_CODE} if settings.origins.get("ignore") == CONFIG_FILE else codes


@dataclass
class Validator:
    """Validates pair texts of one project; loads the manifest once, on first use."""

    settings: Settings
    check_schema: bool = True
    tables: Mapping[str, Mapping[str, str]] | None = None
    manifest_dialect: str | None = None
    manifest_problem: Problem | None = None
    manifest: Manifest | None = None
    engine_note: Problem | None = None  # the engine check is off for a reason worth saying
    _loaded: bool = field(default=False, repr=False)
    _engine: Any = field(default=None, repr=False)
    _fingerprints: dict[str, str] | None = field(default=None, repr=False)
    _schema: Any = field(default=None, repr=False)
    ignored: frozenset[str] = field(default=frozenset(), repr=False)

    def __post_init__(self) -> None:
        self.ignored = ignored_codes(self.settings)

    def load_manifest(self) -> None:
        """Read the manifest if there is one; a broken one becomes ``manifest_problem``."""
        if self._loaded:
            return
        self._loaded = True
        path = self.settings.manifest_path
        if self.tables is not None or not path.is_file():
            return
        try:
            self.use(load_manifest(path, max_bytes=self.settings.max_manifest_bytes))
        except (WrenmemError, OSError, ValueError) as e:
            self.manifest_problem = Problem(
                _display(path), 1, 1, f"manifest not usable, tables and columns not checked: {e}",
                "manifest")

    def use(self, manifest: Manifest | None) -> Validator:
        """Check against ``manifest`` (None: none), not the project's file; returns self."""
        self._loaded = True
        self.tables = manifest.table_columns() if manifest is not None else {}
        self.manifest_dialect = manifest.dialect if manifest is not None else None
        self.manifest = manifest
        return self

    def dialect_of(self, pair: Pair) -> str:
        """The pair's own dialect, else :func:`wrenmem.pairs.store.default_dialect`."""
        if pair.dialect:
            return pair.dialect
        self.load_manifest()
        return default_dialect(self.settings, self.manifest_dialect)

    def check_text(self, text: str, path: str) -> tuple[Pair | None, list[Problem]]:
        """Parse and check one pair file's text; ``path`` is what problems are reported under."""
        try:
            pair = parse_pair(text, path)
        except PairError as e:
            return None, self.accepted([Problem(path, e.line, e.col or 1, e.reason, "pair")])
        return pair, self.check_pair(pair, text)

    def accepted(self, problems: list[Problem], pair: Pair | None = None,
                 lines: list[str] | None = None) -> list[Problem]:
        """``problems`` less those the ``ignore`` setting or the pair's ``wrenmem-ignore``
        accepts (an unknown code there is a WM001 finding). The pair's key never accepts WM008: a
        pull request writes it too; ``allow-writes: true``, flagged by ``diff``, is the opt-out."""
        ignored = self.ignored
        extra: list[Problem] = []
        if pair is not None and pair.extra.get(IGNORE_KEY) is not None:
            at = key_line(lines or [], IGNORE_KEY)
            try:
                own = parse_codes(pair.extra[IGNORE_KEY], f"{IGNORE_KEY}: ")
            except ValueError as e:
                extra.append(Problem(pair.path, at, 1, str(e), "pair"))
                own = frozenset()
            if READ_ONLY_CODE in own:
                extra.append(Problem(pair.path, at, 1, (
                    f"{IGNORE_KEY} cannot name {READ_ONLY_CODE} (the read-only rule): a "
                    "pair opts out of it only with `allow-writes: true`, which `diff` "
                    "flags; reading files or the network is never accepted"), "pair"))
            ignored = ignored | (own - {READ_ONLY_CODE})
        return extra + [p for p in problems if p.code not in ignored]

    def check_pair(self, pair: Pair, text: str) -> list[Problem]:
        """SQL and schema problems of a parsed pair, positioned in the file ``text``, less
        the accepted ones."""
        lines = text.split("\n")
        return self.accepted(self._check_pair(pair, lines), pair, lines)

    def _check_pair(self, pair: Pair, lines: list[str]) -> list[Problem]:
        dialect = self.dialect_of(pair)
        unknown = unknown_dialect(pair.dialect) if pair.dialect else None
        if unknown is not None:
            return [Problem(pair.path, key_line(lines, "dialect"), 1,
                            unknown, "pair")]
        to_file = sql_locator(pair, lines)
        problems = [Problem(pair.path, *to_file(p.line, p.col), p.message, kind)
                    for kind, p in self.sql_findings(pair.sql, dialect,
                                                     allow_writes=pair.allows_writes)]
        if self.check_schema and self.tables and not any(
                p.kind in ("pair", "sql", "write") for p in problems):
            problems += self.stale_problems(pair, lines)
        return problems

    def sql_findings(self, sql: str, dialect: str, *, allow_writes: bool = False
                     ) -> list[tuple[str, Any]]:
        """(kind, finding) for a SQL text, positions within it: the parse, read-only, the
        manifest's names and (with DuckDB) the engine's binding; what ``store``, ``import``
        and MCP ``store_query`` check before writing, and ``validate`` after."""
        tree, sql_problems = parse_checked(sql, dialect)
        found: list[tuple[str, Any]] = [("sql", p) for p in sql_problems]
        outside = outside_problem(tree, sql, dialect)  # no opt-out: a pair reads no file
        if outside is not None:
            return [*found, ("write", outside)]
        writes = write_problem(tree, sql, dialect)
        if writes is not None and not (self.settings.allow_writes or allow_writes):
            return [*found, ("write", writes)]
        if found or not self.check_schema:
            return found
        self.load_manifest()
        if not self.tables:
            return found
        if self._schema is None:
            self._schema = Schema(self.tables)
        if dialect == "sqlite":
            tree = sqlite_quoted_strings(tree, self._schema.known)
        found = [("schema", p) for p in check_schema(sql, dialect, self._schema, tree)]
        if not found and writes is None and self.engine() is not None:
            found = [("engine-note" if p.note else "engine", p)
                     for p in self.engine().check(sql, dialect, tree)]
        return found

    def engine(self) -> Any:
        """The DuckDB engine over the manifest's tables, or None (setting ``engine =
        "none"``, no manifest, or DuckDB not installed: then ``engine_note`` says so)."""
        if self._engine is None:
            self._engine = False
            if self.settings.engine == "duckdb" and self.tables:
                try:
                    tables = {t: dict(c) for t, c in self.tables.items()}
                    self._engine = sql_engine.Engine(self.manifest, tables)
                except sql_engine.EngineUnavailable as e:
                    self.engine_note = Problem(
                        self.settings.relpath(self.settings.manifest_path), 1, 1,
                        f"engine checks skipped: {e}, or set engine = \"none\"",
                        "engine-note")
        return self._engine or None

    def stale_problems(self, pair: Pair, lines: list[str]) -> list[Problem]:
        """The items a verified pair used that changed or went away since (WM011)."""
        self.load_manifest()
        recorded = pair.extra.get(VERIFIED_SCHEMA)
        if not isinstance(recorded, dict) or not pair.verified or self.manifest is None:
            return []

        if self._fingerprints is None:
            self._fingerprints = checks_uses.item_fingerprints(self.manifest)
        changed = checks_uses.changed_items(recorded, self._fingerprints)
        if not changed:
            return []
        return [Problem(pair.path, key_line(lines, VERIFIED_SCHEMA), 1,
                        "the schema changed since the pair was verified by "
                        f"{pair.extra.get('verified_by')}: {'; '.join(changed)} (check the "
                        "SQL, then `wrenmem verify` it again)", "stale")]

    def check_file(self, path: Path, shown: str) -> tuple[Pair | None, list[Problem]]:
        """Read and check one file, as every command reads one (a regular file, at most
        ``max_pair_bytes``, no link out of the project): unreadable is a problem."""
        try:
            data: bytes | PairError = read_pair_bytes(
                path, shown, self.settings.max_pair_bytes, inside=self.settings.root)
        except PairError as e:
            data = e
        return self.check_bytes(data, shown)

    def check_bytes(self, data: bytes | PairError, path: str
                    ) -> tuple[Pair | None, list[Problem]]:
        """:meth:`check_text` of a file's bytes (or of why they could not be read)."""
        try:
            if isinstance(data, PairError):
                raise data
            text = decode_file(data, path)
        except PairError as e:
            return None, self.accepted([Problem(path, e.line, e.col or 1, e.reason, "pair")])
        return self.check_text(text, path)


def validate_files(settings: Settings, paths: Iterable[Path] | None = None,
                   *, check_schema: bool = True,
                   progress: Callable[[int, int], None] | None = None
                   ) -> tuple[int, list[Problem]]:
    """Check ``paths`` (default: every pair file of the project): (files checked, problems).
    ``progress(done, total)`` is told after each pair file."""

    validator = Validator(settings, check_schema=check_schema)
    given = None if paths is None else list(paths)
    if given is not None and any(_same_file(p, settings.manifest_path) for p in given):
        given = None  # the manifest changed: every pair may now name a missing column
    knowledge: list[str] | None = None  # knowledge files to check (None: all of them)
    if given is None:
        require_knowledge_dir(settings)
        files = sorted(iter_pair_files(settings.knowledge_path))
    else:  # pre-commit passes what matched its `files`: skip what is not a pair file
        knowledge = knowledge_targets(settings, given)
        files = [p for p in given if p.name.lower() not in SKIPPED_NAMES
                 and not p.name.startswith(".") and settings.relpath(p) not in knowledge]
    problems: list[Problem] = []
    for done, path in enumerate(files, 1):
        problems += validator.check_file(path, _display(path))[1]
        if progress is not None:
            progress(done, len(files))
    if check_schema:
        validator.load_manifest()
    counted, found = knowledge_problems(settings, validator.tables if check_schema else None,
                                        Problem, knowledge)
    problems += [p for p in found if isinstance(p, Problem) and p.code not in validator.ignored]
    if validator.manifest_problem is not None:
        problems[:0] = validator.accepted([validator.manifest_problem])
    if validator.engine_note is not None:
        problems[:0] = validator.accepted([validator.engine_note])
    return len(files) + counted, problems


def sql_locator(pair: Pair, lines: list[str]) -> Callable[[int, int], tuple[int, int]]:
    """Map a 1-based (line, col) in ``pair.sql`` to the (line, col) in the file's
    ``lines``: each SQL line is found from ``pair.sql_line`` on (a fenced block, Wren's
    ``sql: |`` block, an inline ``sql:``)."""
    places: list[tuple[int, int]] = []
    cursor = max(pair.sql_line - 1, 0)
    for sql_line in pair.sql.split("\n"):
        found = None
        if sql_line.strip():
            for j in range(cursor, len(lines)):
                offset = lines[j].find(sql_line)
                if offset >= 0:
                    found = (j, offset)
                    break
        elif cursor < len(lines):
            found = (cursor, 0)
        if found is None:  # not verbatim in the file (a quoted YAML string): the SQL's line
            places.append((pair.sql_line - 1, 0))
            continue
        places.append(found)
        cursor = found[0] + 1

    def to_file(line: int, col: int) -> tuple[int, int]:
        if not 1 <= line <= len(places):
            return pair.sql_line, 1
        row, offset = places[line - 1]
        return row + 1, offset + col

    return to_file


def _same_file(path: Path, other: Path) -> bool:
    try:
        return path.resolve() == other.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a link loop (Python 3.11)
        return False


def _display(path: Path) -> str:
    """A path as the user typed it or relative to the current folder, for clickable output."""
    if not path.is_absolute():
        return path.as_posix()
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path.as_posix()
    return Path(rel).as_posix() if not rel.startswith("..") else path.as_posix()


def shown_path(root: Path, rel: str) -> str:
    """A project-relative path as seen from the current folder (project-relative when the
    current folder is outside the project)."""
    shown = os.path.relpath(root / rel)
    return rel if shown.startswith("..") else Path(shown).as_posix()
