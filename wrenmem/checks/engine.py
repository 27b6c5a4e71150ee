"""Bind a pair's SQL in DuckDB over empty tables built from the manifest.

What a database rejects beyond names (a column neither grouped nor aggregated, ``SUM`` of
text, an ambiguous column): each model becomes an empty table with the manifest's types,
the SQL is transpiled to DuckDB by sqlglot and bound with ``EXPLAIN``, never run. The DuckDB
is sealed (:data:`SEALED`) and SQL that reads a file or the network never reaches it, so no
error it prints can quote a file. What DuckDB rejects but the pair's own database accepts,
SQL sqlglot cannot transpile faithfully and untyped columns are notes (WM010), not errors."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from wrenmem.schema.manifest import Manifest
from wrenmem.sql.bounds import SqlOutOfBounds, check_bounds, headroom, parse_one, position
from wrenmem.sql.check import outside_problem

log = logging.getLogger(__name__)

# Dialects whose engines convert between text and numbers where DuckDB refuses.
LOOSE_TYPES = frozenset({"sqlite", "mysql", "doris", "starrocks", "clickhouse"})
# Dialects that accept a column neither grouped nor aggregated beside an aggregate.
BARE_COLUMNS = frozenset({"sqlite", "mysql", "doris", "starrocks"})
# Dialects that accept one when the GROUP BY holds the table's primary key.
GROUPED_KEY = frozenset({"postgres", "mysql", "redshift", "sqlite", "doris", "starrocks"})
_GROUP_BY = re.compile(r"must appear in the GROUP BY clause|must be part of an aggregate")
_TYPES = re.compile(
    r"No function matches|Cannot compare|explicit cast|Cannot mix|Could not convert|"
    r"Conversion Error|cannot be cast|Type mismatch|No operator matches|Cannot deserialize|"
    r"type .* does not match|Cannot (?:add|subtract|multiply|divide)|implicit cast", re.I)
_QUOTED = re.compile(r"\"([^\"]+)\"|'([^']+)'")
_NO_FUNCTION = re.compile(r"Function with name \S+ does not exist|does not support|"
                          r"not implemented", re.I)
# Dialects whose engines refuse to compare a number column with a text column (DuckDB casts
# the text at run time, so binding alone would not say so).
STRICT_COMPARISONS = frozenset({"postgres", "redshift", "bigquery", "trino", "presto",
                                "athena", "materialize", "risingwave"})


# Sealed: no file, no network, no extension, the configuration locked. One thread and a
# small memory limit: DuckDB's default reserves more than a small process may.
SEALED: dict[str, str | int | bool] = {
    "threads": 1, "memory_limit": "256MB", "enable_external_access": False,
    "autoload_known_extensions": False, "autoinstall_known_extensions": False,
    "allow_community_extensions": False, "temp_directory": "", "lock_configuration": True}
# Planning one query takes milliseconds; one that takes longer is interrupted, so nothing a
# pair says can hold up validate, pre-commit or CI.
PLAN_SECONDS = 10.0


@dataclass(frozen=True)
class EngineProblem:
    """A finding of the engine; ``note`` marks what is not an error (rule WM010)."""

    message: str
    line: int = 1
    col: int = 1
    note: bool = False


class EngineUnavailable(Exception):
    """DuckDB is not installed or cannot start: the engine check is skipped, never a crash."""


class Engine:
    """One in-memory DuckDB with an empty table per model (and the manifest's views)."""

    def __init__(self, manifest: Manifest | None, tables: dict[str, dict[str, str]]):
        try:
            import duckdb
        except ImportError as e:
            raise EngineUnavailable("DuckDB is not installed (pip install 'wrenmem[engine]')"
                                    ) from e
        self._duckdb = duckdb
        try:
            self.con = duckdb.connect(":memory:", config=dict(SEALED))
        except duckdb.Error as e:
            raise EngineUnavailable(f"DuckDB could not start ({_first_line(str(e))})") from e
        self.untyped: set[str] = set()  # lower-case table names with a column of no known type
        self.types: dict[str, Any] = {}  # table -> column -> DuckDB type
        self._schema: Any = None
        self.names = {t.lower() for t in tables}
        self.keys: dict[str, set[str]] = {}
        try:
            self._build(manifest, tables)
        except duckdb.Error as e:  # a name or type DuckDB will not take: no engine, no crash
            self.con.close()
            raise EngineUnavailable(f"DuckDB cannot build the manifest's tables "
                                    f"({_first_line(str(e))})") from e

    def _build(self, manifest: Manifest | None, tables: dict[str, dict[str, str]]) -> None:
        dialect = manifest.dialect if manifest is not None else None
        views = {v.name: v.statement for v in manifest.views} if manifest is not None else {}
        models = {m.name for m in manifest.models} if manifest is not None else set(tables)
        if manifest is not None:
            self.keys = {m.name.lower(): {k.lower() for k in m.primary_key}
                         | {c.name.lower() for c in m.columns if c.is_primary_key}
                         for m in manifest.models}
        for name, columns in tables.items():
            if name in models or not views.get(name):
                self._create_table(name, columns, dialect, relationship_columns(manifest, name))
        pending = {n: s for n, s in views.items() if n not in models and s.strip()}
        while pending:  # a view may select from another: create those that bind, repeat
            made = [n for n, s in pending.items() if self._create_view(n, s, dialect)]
            for n in made:
                pending.pop(n)
            if not made:
                break
        for name in pending:  # a view that does not bind: its columns, of unknown type
            self._create_table(name, {c: "" for c in tables.get(name, {})}, None, set())

    def _create_table(self, name: str, columns: dict[str, str], dialect: str | None,
                      skip: set[str]) -> None:
        parts = []
        for column, kind in columns.items():
            if column in skip:
                continue
            duck = duck_type(kind, dialect)
            if duck is None or not self._type_ok(duck):
                self.untyped.add(name.lower())
                duck = "VARCHAR"
            else:
                self.types.setdefault(name, {})[column] = duck
            parts.append(f"{_quote(column)} {duck}")
        if not parts:
            parts = ['"__no_columns" INTEGER']
        self.con.execute(f"CREATE OR REPLACE TABLE {_quote(name)} ({', '.join(parts)})")

    def _type_ok(self, duck: str) -> bool:
        try:
            self.con.execute(f"SELECT CAST(NULL AS {duck})")
            return True
        except self._duckdb.Error:
            return False

    def _create_view(self, name: str, statement: str, dialect: str | None) -> bool:
        text, _note = transpile(statement, dialect)
        if text is None or _reaches_out(text):
            return False
        try:
            self.con.execute(f"CREATE OR REPLACE VIEW {_quote(name)} AS {text}")
            return True
        except self._duckdb.Error:
            return False

    def check(self, sql: str, dialect: str | None, tree: Any = None) -> list[EngineProblem]:
        """What DuckDB says binding ``sql`` (one read-only query in ``dialect``)."""
        text, note = transpile(sql, dialect, tree, self.names)
        if text is None:
            return [EngineProblem(f"not checked by the engine: {note}", note=True)]
        if _reaches_out(text, tree, dialect):  # refused before DuckDB sees it (validate says why)
            return [EngineProblem("not checked by the engine: the SQL reads a file or reaches "
                                  "the network", note=True)]
        try:
            with _deadline(self.con.interrupt, PLAN_SECONDS):
                self.con.execute("EXPLAIN\n" + text)
        except self._duckdb.Error as e:
            if "INTERRUPT" in str(e).upper():
                return [EngineProblem(f"not checked by the engine: planning took over "
                                      f"{PLAN_SECONDS:g} s", note=True)]
            return [self._problem(e, sql, text, dialect or "", tree)]
        if tree is not None:
            return self._type_clashes(sql, dialect or "", tree)
        return []

    def _type_clashes(self, sql: str, dialect: str, tree: Any) -> list[EngineProblem]:
        """A number column compared with (or joined on) a text column: PostgreSQL and the
        like have no such operator, where DuckDB would cast the text when the query runs."""
        from sqlglot import exp
        from sqlglot.errors import SqlglotError
        from sqlglot.optimizer.annotate_types import annotate_types
        from sqlglot.optimizer.qualify import qualify

        try:
            with headroom():
                typed = annotate_types(qualify(
                    tree.copy(), dialect=dialect, schema=self.schema(),
                    validate_qualify_columns=False, allow_partial_qualification=True,
                    quote_identifiers=False, identify=False),
                    schema=self.schema(), dialect=dialect)
        except (SqlglotError, ValueError, KeyError, TypeError, RecursionError):
            return []
        for node in typed.find_all(exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE):
            left, right = node.this, node.expression
            if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
                continue
            kinds = {_kind(left.type), _kind(right.type)}
            if kinds == {"number", "text"}:
                spot = _find(sql, left.sql())
                spot = _find(sql, left.name) if spot is None else spot
                line, col = position(sql, spot) if spot is not None else (1, 1)
                clash = (f"{left.sql()}, a {_kind(left.type)}, with {right.sql()}, a "
                         f"{_kind(right.type)}")
                if dialect in STRICT_COMPARISONS:
                    return [EngineProblem(f"{dialect} cannot compare {clash} (cast one side)",
                                          line, col)]
                return [EngineProblem(f"{dialect or 'the database'} converts one side here, a "
                                      f"strict engine would not compare {clash}", line, col,
                                      note=True)]
        return []

    def schema(self) -> Any:
        """The tables' column types, as sqlglot's schema (for its type annotation)."""
        if self._schema is None:
            from sqlglot.schema import MappingSchema

            self._schema = MappingSchema(self.types, dialect="duckdb")
        return self._schema

    def _problem(self, error: Exception, sql: str, text: str, dialect: str,
                 tree: Any) -> EngineProblem:
        from sqlglot import exp

        message = _first_line(str(error))
        line, col = _locate(str(error), sql, text)
        kind = type(error).__name__
        if kind not in ("BinderException", "CatalogException", "ConversionException") or (
                dialect != "duckdb" and _NO_FUNCTION.search(message)):
            # DuckDB cannot parse or does not implement what sqlglot wrote: not the pair's fault
            return EngineProblem(f"not checked by the engine: DuckDB cannot bind the {dialect} "
                                 f"SQL as transpiled ({message})", line, col, note=True)
        later = re.search(r'Referenced table "([^"]+)" not found', message)
        if later and dialect == "sqlite" and tree is not None and later.group(1).lower() in {
                (t.alias_or_name or "").lower() for t in tree.find_all(exp.Table)}:
            return EngineProblem(f"sqlite resolves a join condition against a table joined "
                                 f"later, a strict engine would not: {message}", line, col,
                                 note=True)
        if _GROUP_BY.search(message):
            if dialect in BARE_COLUMNS:
                return EngineProblem(f"{dialect} accepts this, a strict engine would not: "
                                     f"{message}", line, col, note=True)
            if dialect in GROUPED_KEY and self._groups_a_key(tree):
                return EngineProblem(f"accepted if the grouped key determines the column: "
                                     f"{message}", line, col, note=True)
        if _TYPES.search(message) or kind == "ConversionException":
            if dialect in LOOSE_TYPES:
                return EngineProblem(f"{dialect} converts types here, a strict engine would "
                                     f"not: {message}", line, col, note=True)
            if self._touches_untyped(tree):
                return EngineProblem(f"a column's type is unknown to the manifest, so this is "
                                     f"not decided: {message}", line, col, note=True)
        return EngineProblem(f"DuckDB rejects the SQL: {message}", line, col)

    def _groups_a_key(self, tree: Any) -> bool:
        from sqlglot import exp

        if tree is None:
            return False
        for group in tree.find_all(exp.Group):
            for column in group.find_all(exp.Column):
                if any(column.name.lower() in keys for keys in self.keys.values()):
                    return True
        return False

    def _touches_untyped(self, tree: Any) -> bool:
        from sqlglot import exp

        if tree is None:
            return bool(self.untyped)
        return any(t.name.lower() in self.untyped for t in tree.find_all(exp.Table))

    def close(self) -> None:
        self.con.close()


@contextmanager
def _deadline(interrupt: Any, seconds: float) -> Iterator[None]:
    """Call ``interrupt`` if the block is still running after ``seconds``."""
    timer = threading.Timer(seconds, interrupt)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()  # no timer thread outlives its plan (nor reaches interpreter exit)


def _reaches_out(text: str, tree: Any = None, dialect: str | None = None) -> bool:
    """Whether the SQL names a function or table that reads a file or the network: read
    from ``tree`` (the statement ``text`` was transpiled from, in ``dialect``) when there is
    one, else from the DuckDB ``text``'s tokens (DuckDB's own seal catches the rest)."""
    if tree is not None:
        return outside_problem(tree, "", dialect) is not None
    return outside_problem(None, text, "duckdb") is not None


def _kind(data_type: Any) -> str:
    """number, text or other, for a sqlglot DataType."""
    from sqlglot import exp

    if data_type is None:
        return "other"
    if data_type.is_type(*exp.DataType.NUMERIC_TYPES):
        return "number"
    if data_type.is_type(*exp.DataType.TEXT_TYPES):
        return "text"
    return "other"


def relationship_columns(manifest: Manifest | None, model: str) -> set[str]:
    """Columns of ``model`` that stand for a relationship (their type is a model name):
    Wren resolves them itself, no table has them."""
    if manifest is None:
        return set()
    found = manifest.model(model)
    return {c.name for c in found.columns if c.relationship} if found is not None else set()


def duck_type(kind: str, dialect: str | None) -> str | None:
    """The DuckDB spelling of a manifest column type, or None when it is not a SQL type."""
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    if not kind or not kind.strip():
        return None

    try:
        check_bounds(kind)  # out of bounds: a ValueError
        with headroom():
            data_type = exp.DataType.build(kind.strip(), dialect=dialect or None, udt=True)
    except (SqlglotError, ValueError, TypeError):
        return None
    if data_type.this in (exp.DataType.Type.USERDEFINED, exp.DataType.Type.UNKNOWN):
        return None
    return data_type.sql("duckdb")


def transpile(sql: str, dialect: str | None, tree: Any = None,
              known: set[str] | None = None) -> tuple[str | None, str]:
    """(DuckDB SQL, "") or (None, why it cannot be transpiled faithfully). DuckDB SQL is
    kept as written (positions stay true); a model's catalog or schema qualifier is dropped."""
    try:
        with headroom():
            return _transpile(sql, dialect, tree, known)
    except SqlOutOfBounds as e:
        return None, e.reason


def _transpile(sql: str, dialect: str | None, tree: Any,
               known: set[str] | None) -> tuple[str | None, str]:
    from sqlglot import exp
    from sqlglot.errors import ErrorLevel, SqlglotError

    try:
        parsed = tree.copy() if tree is not None else parse_one(sql, dialect)
    except SqlglotError as e:
        return None, f"sqlglot cannot read it: {_first_line(str(e))}"
    qualified = [t for t in parsed.find_all(exp.Table)
                 if (t.args.get("db") or t.args.get("catalog"))
                 and (known is None or t.name.lower() in known)]
    if dialect == "duckdb" and not qualified:
        return sql, ""
    for table in qualified:
        table.set("db", None)
        table.set("catalog", None)
    try:
        return parsed.sql(dialect="duckdb", unsupported_level=ErrorLevel.RAISE), ""
    except SqlglotError as e:
        return None, (f"sqlglot cannot transpile this {dialect or 'generic'} SQL to DuckDB "
                      f"faithfully: {_first_line(str(e))}")
    except RecursionError:
        raise
    except Exception as e:  # a generator bug in sqlglot: say so, never a false error
        log.debug("transpile failed", exc_info=True)
        return None, f"sqlglot failed to transpile it: {_first_line(str(e))}"


def _locate(error: str, sql: str, text: str) -> tuple[int, int]:
    """The 1-based (line, col) in ``sql`` of what DuckDB's caret marks in ``text``."""
    found = re.search(r"^LINE (\d+): (.*)\n( *)(\^+)", error, re.M)
    if found:
        line = int(found.group(1)) - 1  # the SQL follows "EXPLAIN\n"
        snippet, caret = found.group(2), len(found.group(3)) - len(f"LINE {found.group(1)}: ")
        marked = snippet[caret:caret + len(found.group(4))] if caret >= 0 else ""
        if text == sql and not snippet.startswith("...") and caret >= 0 and line >= 1:
            return line, caret + 1
        spot = _find(sql, marked)
        if spot is not None:
            return position(sql, spot)
    for match in _QUOTED.finditer(_first_line(error)):
        name = match.group(1) or match.group(2) or ""
        name = name.split("(")[0]
        spot = _find(sql, name)
        if spot is not None:
            return position(sql, spot)
    return 1, 1


def _find(sql: str, marked: str) -> int | None:
    marked = marked.strip().rstrip(".")
    if not marked:
        return None
    words = [re.escape(w) for w in re.split(r"\s+", marked) if w]
    pattern = r"\s*".join(words)
    if re.match(r"\w", marked):
        pattern = r"(?<!\w)" + pattern
    found = re.search(pattern, sql, re.I)
    return found.start() if found else None


def _first_line(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else text
    return re.sub(r"^(Binder|Catalog|Parser|Conversion|Not implemented) Error: ", "", first)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
