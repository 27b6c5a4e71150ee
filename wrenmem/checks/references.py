"""Do the tables and columns a SQL names exist? sqlglot's ``qualify`` against the manifest.

``qualify`` resolves every column to its source (through aliases, CTEs, subqueries and joins)
given a schema. Its own validation stops at the first problem and has no position for some;
here qualification is partial and the scopes are walked afterwards, so every unknown table and
column is reported, each at its place in the SQL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wrenmem.sql.bounds import headroom, parse_one
from wrenmem.sql.check import SqlProblem, position


class Schema:
    """Tables and columns to check against, prepared once for many SQLs."""

    def __init__(self, tables: Mapping[str, Mapping[str, str]]):
        self.known = {name.lower(): {c.lower() for c in cols} for name, cols in tables.items()}
        # sqlglot refuses a table of no columns (a dbt seed nobody documented, a model
        # whose columns are not declared): such a table is known, its columns are not
        self._tables: dict[str, object] = {name: {c: "TEXT" for c in cols}
                                           for name, cols in tables.items() if cols}
        self._mappings: dict[str, Any] = {}

    def mapping(self, dialect: str | None) -> Any:
        """sqlglot's ``MappingSchema`` for ``dialect`` (types do not matter for names)."""
        from sqlglot.schema import MappingSchema

        key = dialect or ""
        if key not in self._mappings:
            self._mappings[key] = MappingSchema(self._tables, dialect=dialect or None)
        return self._mappings[key]

    def scopes(self, sql: str, dialect: str | None, tree: Any = None, *,
               copy: bool = True) -> list[Any] | None:
        """The scopes of ``sql`` (or of its parsed ``tree``, qualified in place unless
        ``copy``) after sqlglot's partial ``qualify`` against these tables; None when it
        does not parse or qualify (out of bounds is a ValueError)."""
        from sqlglot.errors import SqlglotError
        from sqlglot.optimizer.qualify import qualify
        from sqlglot.optimizer.scope import traverse_scope

        try:
            with headroom():
                parsed = parse_one(sql, dialect) if tree is None else (
                    tree.copy() if copy else tree)
                return list(traverse_scope(qualify(
                    parsed, dialect=dialect or None, schema=self.mapping(dialect),
                    allow_partial_qualification=True, validate_qualify_columns=False,
                    quote_identifiers=False, identify=False)))
        except (SqlglotError, ValueError, KeyError, TypeError, RecursionError):
            return None


def check_schema(sql: str, dialect: str | None,
                 tables: Mapping[str, Mapping[str, str]] | Schema,
                 tree: Any = None) -> list[SqlProblem]:
    """Unknown tables and columns in ``sql`` (one statement; ``tree``, when the caller
    parsed it, is qualified in place) given ``tables`` (``Manifest.table_columns()``).
    Names compare case-insensitively; a table with no known columns is not checked for
    columns; SQL that does not parse yields nothing here (``check_sql`` reports it)."""
    prepared = tables if isinstance(tables, Schema) else Schema(tables)
    known = prepared.known
    scopes = prepared.scopes(sql, dialect, tree, copy=False)
    if scopes is None:
        return []
    problems: list[tuple[int, SqlProblem]] = []
    seen: set[tuple[str, int]] = set()

    def report(node: Any, message: str) -> None:
        start = node.meta.get("start") if hasattr(node, "meta") else None
        key = (message, start if isinstance(start, int) else -1)
        if key in seen:
            return
        seen.add(key)
        line, col = position(sql, start) if isinstance(start, int) else (1, 1)
        problems.append((key[1], SqlProblem(message, line, col)))

    for scope in scopes:
        unknown_sources: set[str] = set()
        for alias, source in scope.sources.items():
            table: Any = source
            if _is_table(table) and table.name.lower() not in known:
                unknown_sources.add(alias.lower())
                report(table.this, f"unknown table {table.name!r}" + _hint(table.name, known))
        for column in scope.columns:
            _check_column(scope, column, known, unknown_sources, report)
    return [p for _, p in sorted(problems, key=lambda item: item[0])]


def _is_table(source: Any) -> bool:
    from sqlglot import exp

    return isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier)


def _check_column(scope: Any, column: Any, known: dict[str, set[str]],
                  unknown_sources: set[str], report: Any) -> None:
    name = column.name.lower()
    if not name or name == "*":
        return
    if column.table:
        source = _source(scope, column.table)
        if source is None and not _outer_has(scope, column.table):
            report(column.args.get("table") or column.this,
                   f"unknown table or alias {column.table!r} for column "
                   f"{column.name!r}")
        if source is None or column.table.lower() in unknown_sources:
            return  # an outer query's column (correlated subquery), or a table already reported
        columns = _source_columns(source, known)
        if columns is not None and name not in columns:
            table = source.name if _is_table(source) else column.table
            report(column.this, f"unknown column {column.name!r} in {table!r}"
                   + _hint(column.name, {c: set() for c in columns}))
        return
    # Still unqualified after qualify: no source has it (or it is an alias sqlglot resolves).
    if unknown_sources or not scope.sources:
        return
    candidates = [_source_columns(s, known) for s in scope.sources.values()]
    if any(c is None for c in candidates):
        return  # a source whose columns are unknown might have it
    if any(name in c for c in candidates if c is not None):
        return  # ambiguous between sources: the database's error, not a missing column
    if name in {s.lower() for s in scope.expression.named_selects} and not _in_projection(
            scope, column):
        return  # ORDER BY / GROUP BY / HAVING naming an output column
    where = ", ".join(sorted({(s.name if _is_table(s) else a) for a, s in scope.sources.items()}))
    merged = {c for cs in candidates if cs for c in cs}
    report(column.this, f"unknown column {column.name!r} (not in {where})"
           + _hint(column.name, {c: set() for c in merged}))


def _source(scope: Any, table: str) -> Any:
    """The source ``table`` names in ``scope``; aliases compare case-insensitively, as in
    MySQL on case-insensitive file systems and in most other databases."""
    found = scope.sources.get(table)
    if found is None:
        wanted = table.lower()
        found = next((s for a, s in scope.sources.items() if a.lower() == wanted), None)
    return found


def _outer_has(scope: Any, table: str) -> bool:
    outer = scope.parent
    while outer is not None:
        if _source(outer, table) is not None:
            return True
        outer = outer.parent
    return False


def _in_projection(scope: Any, column: Any) -> bool:
    node = column
    while node.parent is not None and node.parent is not scope.expression:
        node = node.parent
    return node.parent is scope.expression and node.arg_key == "expressions"


def _source_columns(source: Any, known: dict[str, set[str]]) -> set[str] | None:
    """Column names a source offers, or None when they cannot be known."""
    from sqlglot.optimizer.scope import Scope

    if _is_table(source):
        columns = known.get(source.name.lower())
        return columns or None
    if isinstance(source, Scope):
        query: Any = source.expression
        selects = [s.lower() for s in query.named_selects]
        if not selects or "*" in selects:
            return None
        return set(selects)
    return None


def _hint(name: str, choices: Mapping[str, Any]) -> str:
    import difflib

    close = difflib.get_close_matches(name.lower(), list(choices), n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


def sqlite_quoted_strings(tree: Any, known: Mapping[str, set[str]]) -> Any:
    """``tree`` with each double-quoted name that is no column of any table read as the
    string it is in SQLite (``WHERE city = "San Jose"``: SQLite's legacy rule), or ``tree``
    itself when there is none. sqlglot reads such a name as a column."""
    from sqlglot import exp

    names = {c for cols in known.values() for c in cols}
    names |= {s.lower() for s in getattr(tree, "named_selects", [])}

    def is_string(column: Any) -> bool:
        return (not column.table and isinstance(column.this, exp.Identifier)
                and bool(column.this.quoted) and column.name.lower() not in names)

    if not any(is_string(c) for c in tree.find_all(exp.Column)):
        return tree
    tree = tree.copy()
    for column in [c for c in tree.find_all(exp.Column) if is_string(c)]:
        column.replace(exp.Literal.string(column.name))
    return tree
