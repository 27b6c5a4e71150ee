"""SQL DDL (``CREATE TABLE`` / ``CREATE VIEW``) read into a Wren MDL document with sqlglot,
statement by statement, so one it cannot read is a warning and the rest are still read.
Statements that cannot define a table, a key or a comment are skipped unparsed, so a dump
with its data reads quickly (docs/schema-sources.md says what becomes what)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from wrenmem.errors import ManifestError
from wrenmem.schema.sources import DDL, source_block
from wrenmem.sql.bounds import SqlOutOfBounds, check_bounds, headroom

# Characters of one statement given to sqlglot: a flat CREATE TABLE of 5,000 columns is
# 200,000 and parses in 0.7 s, linearly; a pair's SQL is held to a tenth of this.
MAX_STATEMENT_CHARS = 1_000_000
# A statement's pieces that may hold a ";" that does not end it; ";" itself, and T-SQL's
# batch separator GO on a line of its own.
_PIECES = re.compile(r"""'(?:[^'\\]|''|\\.)*'|"(?:[^"]|"")*"|`[^`]*`|\[[^\]\n]*\]
                        |--[^\n]*|/\*.*?\*/|\$(?P<tag>[A-Za-z_]*)\$.*?\$(?P=tag)\$|;
                        |(?P<go>(?:\A|(?<=\n))[ \t]*GO[ \t]*(?=\r?\n|\Z))""",
                     re.S | re.X | re.I)
_LEADING = re.compile(r"(?:\s+|--[^\n]*|/\*.*?\*/)*", re.S)
_WANTED = re.compile(
    r"(?:CREATE\s+(?:OR\s+REPLACE\s+)?(?:(?:GLOBAL|LOCAL)\s+)?(?:TEMP(?:ORARY)?\s+)?"
    r"(?:UNLOGGED\s+|TRANSIENT\s+|EXTERNAL\s+|VIRTUAL\s+)?(?:MATERIALIZED\s+)?"
    r"(?:TABLE|VIEW)\b|COMMENT\s+ON\s+(?:TABLE|COLUMN|VIEW)\b|ALTER\s+TABLE\b)", re.I)
# Comments pg_dump and similar tools write before each statement: not descriptions.
_TOOL_COMMENT = re.compile(r"^\s*(?:Name: .*; Type: |[-=*#\s]*$|TOC entry |Dumped |"
                           r"PostgreSQL database dump|Table structure for |Data for |"
                           r"Structure for )", re.I)


def statements(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line, text) of each statement that may define a table, a view, a comment
    or a key, split at semicolons outside quotes and comments."""
    start = 0
    for found in _PIECES.finditer(text):
        if found.group(0) == ";" or found.group("go") is not None:  # GO: T-SQL's batches
            yield from _wanted(text, start, found.start())
            start = found.end()
    yield from _wanted(text, start, len(text))


def _wanted(text: str, start: int, end: int) -> Iterator[tuple[int, str]]:
    lead = _LEADING.match(text, start, end)
    body = lead.end() if lead else start
    if body < end and _WANTED.match(text, body, end):
        # the comments just before the statement stay with it (a table's description)
        first = start + len(text[start:body]) - len(text[start:body].lstrip("\n\r "))
        yield text.count("\n", 0, first) + 1, text[first:end]


def ddl_document(text: str, path: str, *, dialect: str | None = None,
                 kind: str = DDL) -> dict[str, Any]:
    """The MDL document of the DDL ``text``; raises :class:`ManifestError` when it holds no
    ``CREATE TABLE`` or ``CREATE VIEW`` at all."""
    reader = _Reader(path, dialect)
    for line, statement in statements(text):
        reader.read(line, statement)
    if not reader.tables and not reader.views:
        why = "; ".join(reader.warnings[:3])
        raise ManifestError(
            f"{path}: not a manifest: not JSON (a Wren MDL or a dbt manifest.json), not a "
            "database file, and no CREATE TABLE or CREATE VIEW statement could be read "
            f"(SQL DDL){': ' + why if why else ''}")
    return reader.document(kind)


class _Reader:
    def __init__(self, path: str, dialect: str | None):
        self.path = path
        self.dialect = dialect
        self.tables: dict[str, dict[str, Any]] = {}  # lower-case name -> model document
        self.views: dict[str, dict[str, Any]] = {}
        self.keys: list[tuple[str, tuple[str, ...], str, tuple[str, ...], int]] = []
        self.warnings: list[str] = []
        self.schema = ""
        self.found: str | None = None  # the dialect that read a statement sqlglot's did not
        self.current: str | None = dialect  # the one that read the statement at hand

    def read(self, line: int, statement: str) -> None:
        from sqlglot import exp
        from sqlglot.errors import SqlglotError

        try:
            check_bounds(statement, MAX_STATEMENT_CHARS)
        except SqlOutOfBounds as e:
            self.warnings.append(f"line {line + e.line - 1}: statement skipped, {e.reason}")
            return
        first: Exception | None = None
        trees: list[Any] = []
        # The file's dialect when the caller knows it; else sqlglot's own, then the dialect
        # that read an earlier statement, then the others: the first that reads it wins.
        for dialect in self._dialects():
            try:
                trees = _parse(statement, dialect)
            except (SqlglotError, ValueError) as e:
                first = first or e
                trees = []
                continue
            if not any(isinstance(t, exp.Command) for t in trees):
                self.current = dialect
                if dialect and not self.dialect:
                    self.found = self.found or dialect
                break
            first = first or _Unsupported()
        else:
            if isinstance(first, _Unsupported) or first is None:
                words = " ".join(statement.split())[:60]
                self.warnings.append(f"line {line}: statement skipped, sqlglot cannot read "
                                     f"it (unsupported syntax): {words}")
            else:
                self.warnings.append(f"line {line + _error_line(first) - 1}: statement "
                                     f"skipped, sqlglot cannot read it: {_first_line(first)}")
            return
        for tree in trees:
            if isinstance(tree, exp.Create) and (tree.kind or "").upper() == "TABLE":
                self._table(tree, line)
            elif isinstance(tree, exp.Create) and (tree.kind or "").upper() == "VIEW":
                self._view(tree, line)
            elif isinstance(tree, exp.Comment):
                self._comment(tree, line)
            elif isinstance(tree, exp.Alter):
                self._alter(tree, line)

    def _dialects(self) -> list[str | None]:
        if self.dialect:
            return [self.dialect]
        return list(dict.fromkeys([self.found, None, *FALLBACK_DIALECTS]))

    def _table(self, tree: Any, line: int) -> None:
        from sqlglot import exp

        schema = tree.this
        table = schema.this if isinstance(schema, exp.Schema) else schema
        if not isinstance(table, exp.Table) or not table.name:
            self.warnings.append(f"line {line}: CREATE TABLE skipped, it names no table")
            return
        name = table.name
        if name.lower() in self.tables or name.lower() in self.views:
            self.warnings.append(f"line {line}: table '{name}' skipped, it is defined twice")
            return
        self.schema = self.schema or table.db
        columns: list[dict[str, Any]] = []
        primary: list[str] = []
        defs = schema.expressions if isinstance(schema, exp.Schema) else []
        if not defs and tree.expression is not None:  # CREATE TABLE … AS SELECT
            self.views[name.lower()] = {"name": name, "statement": tree.expression.sql(
                dialect=self.current), **_described(_comment_text(tree.comments))}
            return
        for item in defs:
            if isinstance(item, exp.ColumnDef):
                columns.append(self._column(name, item, primary, line))
            elif isinstance(item, exp.PrimaryKey):
                primary += [_ident(e) for e in item.expressions]
            elif isinstance(item, exp.ForeignKey):
                self._foreign(name, item, line)
            elif isinstance(item, exp.Constraint):
                for inner in item.expressions:
                    if isinstance(inner, exp.PrimaryKey):
                        primary += [_ident(e) for e in inner.expressions]
                    elif isinstance(inner, exp.ForeignKey):
                        self._foreign(name, inner, line)
                if any(isinstance(i, exp.PrimaryKeyColumnConstraint) for i in item.expressions):
                    # T-SQL: CONSTRAINT pk PRIMARY KEY CLUSTERED (a ASC, b ASC)
                    primary += [c.name for i in item.expressions for c in i.find_all(exp.Column)]
        description = _comment_text(tree.comments)
        props = tree.args.get("properties")
        for prop in (props.expressions if props is not None else []):
            if isinstance(prop, exp.SchemaCommentProperty):
                description = prop.this.name or description
        model: dict[str, Any] = {"name": name, "columns": columns, **_described(description)}
        if primary:
            model["primaryKey"] = list(dict.fromkeys(p for p in primary if p))
            for column in columns:
                column["isPrimaryKey"] = column["name"] in model["primaryKey"] or column.get(
                    "isPrimaryKey", False)
        self.tables[name.lower()] = model

    def _column(self, table: str, item: Any, primary: list[str], line: int) -> dict[str, Any]:
        from sqlglot import exp

        name = item.name
        kind = item.args.get("kind")
        column: dict[str, Any] = {"name": name,
                                  "type": kind.sql(dialect=self.current) if kind else ""}
        description = _comment_text(item.comments)
        for constraint in item.args.get("constraints") or []:
            what = constraint.args.get("kind")
            if isinstance(what, exp.NotNullColumnConstraint) and not what.args.get("allow_null"):
                column["notNull"] = True
            elif isinstance(what, exp.PrimaryKeyColumnConstraint):
                column["isPrimaryKey"] = True
                column["notNull"] = True
                primary.append(name)
            elif isinstance(what, exp.CommentColumnConstraint):
                description = what.this.name if isinstance(what.this, exp.Literal) else (
                    what.sql())
            elif isinstance(what, exp.Reference):
                self._reference(table, (name,), what, line)
            elif isinstance(constraint, exp.Reference):
                self._reference(table, (name,), constraint, line)
        column.update(_described(description))
        return column

    def _foreign(self, table: str, key: Any, line: int) -> None:
        reference = key.args.get("reference")
        if reference is not None:
            self._reference(table, tuple(_ident(e) for e in key.expressions), reference, line)

    def _reference(self, table: str, columns: tuple[str, ...], reference: Any,
                   line: int) -> None:
        from sqlglot import exp

        target = reference.this
        if isinstance(target, exp.Schema):
            other = target.this.name if target.this is not None else ""
            to = tuple(_ident(e) for e in target.expressions)
        else:
            other, to = (target.name if target is not None else ""), ()
        if other and columns:
            self.keys.append((table, columns, other, to, line))

    def _view(self, tree: Any, line: int) -> None:
        from sqlglot import exp

        target = tree.this
        table = target.this if isinstance(target, exp.Schema) else target
        name = table.name if isinstance(table, exp.Table) else ""
        query = tree.expression
        if not name or query is None:
            self.warnings.append(f"line {line}: CREATE VIEW skipped, it has no name or query")
            return
        if name.lower() in self.tables or name.lower() in self.views:
            self.warnings.append(f"line {line}: view '{name}' skipped, it is defined twice")
            return
        description = _comment_text(tree.comments)
        props = tree.args.get("properties")
        for prop in (props.expressions if props is not None else []):
            if isinstance(prop, exp.SchemaCommentProperty):
                description = prop.this.name or description
        statement = query.sql(dialect=self.current)
        if isinstance(target, exp.Schema) and target.expressions and isinstance(
                query, exp.Query):
            # CREATE VIEW v (a, b) AS …: the listed names are the view's columns
            names = [_ident(e) for e in target.expressions]
            if len(names) == len(query.selects):
                query = query.copy()
                query.set("expressions", [exp.alias_(s, n, quoted=True) if (
                    s.alias_or_name != n) else s for s, n in zip(query.selects, names,
                                                                strict=True)])
                statement = query.sql(dialect=self.current)
        self.views[name.lower()] = {"name": name, "statement": statement,
                                    **_described(description)}

    def _comment(self, tree: Any, line: int) -> None:
        from sqlglot import exp

        kind = (tree.args.get("kind") or "").upper()
        text = tree.expression.name if isinstance(tree.expression, exp.Literal) else ""
        target = tree.this
        if kind in ("TABLE", "VIEW"):
            name = target.name if target is not None else ""
            item = self.tables.get(name.lower()) or self.views.get(name.lower())
            if item is None:
                self.warnings.append(f"line {line}: COMMENT ON {kind} '{name}' ignored, "
                                     "no such table or view above it")
                return
            item.setdefault("properties", {})["description"] = text
        elif kind == "COLUMN" and isinstance(target, exp.Column):
            table, column = target.table, target.name
            model = self.tables.get(table.lower())
            found = next((c for c in (model or {}).get("columns", [])
                          if c["name"].lower() == column.lower()), None)
            if found is None:
                self.warnings.append(f"line {line}: COMMENT ON COLUMN '{table}.{column}' "
                                     "ignored, no such column above it")
                return
            found.setdefault("properties", {})["description"] = text

    def _alter(self, tree: Any, line: int) -> None:
        from sqlglot import exp

        table = tree.this.name if tree.this is not None else ""
        model = self.tables.get(table.lower())
        for action in tree.args.get("actions") or []:
            for constraint in (action.expressions if isinstance(action, exp.AddConstraint)
                               else [action]):
                inner = constraint.expressions if isinstance(constraint, exp.Constraint) \
                    else [constraint]
                for key in inner:
                    if isinstance(key, exp.ForeignKey):
                        self._foreign(table, key, line)
                    elif isinstance(key, exp.PrimaryKey) and model is not None:
                        names = [_ident(e) for e in key.expressions]
                        model["primaryKey"] = names
                        for column in model["columns"]:
                            if column["name"] in names:
                                column["isPrimaryKey"] = True
                                column["notNull"] = True

    def document(self, kind: str) -> dict[str, Any]:
        names = {**{k: m["name"] for k, m in self.tables.items()},
                 **{k: v["name"] for k, v in self.views.items()}}
        relationships = key_relationships(
            [(names.get(table.lower(), table), columns, other, to,
              f"line {line}: foreign key of '{table}'")
             for table, columns, other, to, line in self.keys], self.tables, self.warnings)
        document: dict[str, Any] = {
            "schema": self.schema, "models": list(self.tables.values()),
            "relationships": relationships, "views": list(self.views.values()),
            "schemaSource": source_block(kind, self.warnings)}
        if self.dialect or self.found:
            document["dataSource"] = self.dialect or self.found
        return document


# Tried, in this order, on a statement sqlglot's own dialect cannot read (MySQL's
# ``ENGINE=InnoDB``, T-SQL's ``[dbo].[t]``, BigQuery's ``ARRAY<STRING>``…).
FALLBACK_DIALECTS = ("mysql", "tsql", "bigquery", "postgres", "snowflake", "duckdb", "sqlite",
                     "oracle", "spark", "clickhouse", "trino")


class _Unsupported(Exception):
    """sqlglot read the statement only as a bare command."""


def _parse(statement: str, dialect: str | None) -> list[Any]:
    import sqlglot

    with _quiet_sqlglot(), headroom():
        return [t for t in sqlglot.parse(statement, read=dialect or None) if t is not None]


@contextmanager
def _quiet_sqlglot() -> Iterator[None]:
    """sqlglot logs a warning for each statement it falls back to reading as a bare
    command; the reader names those itself (with their line), once."""
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def key_relationships(keys: list[tuple[str, tuple[str, ...], str, tuple[str, ...], str]],
                      tables: dict[str, dict[str, Any]], warnings: list[str]
                      ) -> list[dict[str, Any]]:
    """The relationships of foreign keys ``(table, columns, other, to, where)`` to models
    of ``tables`` (by lower-case name); an empty ``to`` is the target's primary key. A key
    to no such table, or whose columns do not match, is a warning starting ``where``."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for table, columns, other, to, where in keys:
        target = tables.get(other.lower())
        if target is None:
            warnings.append(f"{where} to '{other}' ignored, that table is not defined")
            continue
        to = to or tuple(target.get("primaryKey") or ())
        if len(to) != len(columns):
            warnings.append(f"{where} to '{other}' ignored, its columns do not match the key")
            continue
        out.append(key_relationship(table, columns, target["name"], to,
                                     tables.get(table.lower(), {}), seen))
    return out


def key_relationship(table: str, columns: tuple[str, ...], other: str, to: tuple[str, ...],
                      model: dict[str, Any], seen: set[str]) -> dict[str, Any]:
    """The MDL relationship of a foreign key ``table(columns)`` → ``other(to)``: one to
    one when the columns are the table's whole primary key, else many to one."""
    name = f"{table}_{'_'.join(columns)}_{other}"
    base, n = name, 2
    while name.lower() in seen:
        name, n = f"{base}_{n}", n + 1
    seen.add(name.lower())
    whole_key = tuple(model.get("primaryKey") or ()) == columns
    condition = " AND ".join(f'{_quoted(table)}.{_quoted(c)} = {_quoted(other)}.{_quoted(t)}'
                             for c, t in zip(columns, to, strict=True))
    return {"name": name, "models": [table, other],
            "joinType": "ONE_TO_ONE" if whole_key else "MANY_TO_ONE", "condition": condition}


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _quoted(name: str) -> str:
    return name if _PLAIN.fullmatch(name) else '"' + name.replace('"', '""') + '"'


def _described(text: str) -> dict[str, Any]:
    return {"properties": {"description": text}} if text else {}


def _comment_text(comments: list[str] | None) -> str:
    """The comments sqlglot kept with a statement or column, less tools' banners."""
    parts = []
    for comment in comments or []:
        lines = [ln.strip().strip("*").strip() for ln in comment.splitlines()]
        lines = [ln for ln in lines if ln and not _TOOL_COMMENT.match(ln)]
        if lines:
            parts.append(" ".join(lines))
    return " ".join(parts)


def _ident(node: Any) -> str:
    from sqlglot import exp

    if isinstance(node, exp.Ordered):  # a key's column with its order: (id ASC)
        node = node.this
    return str(getattr(node, "name", "") or getattr(node, "this", "") or "")


def _error_line(error: Exception) -> int:
    errors = getattr(error, "errors", None) or []
    line = errors[0].get("line") if errors and isinstance(errors[0], dict) else None
    return line if isinstance(line, int) and line > 0 else 1


def _first_line(error: Exception) -> str:
    errors = getattr(error, "errors", None) or []
    if errors and isinstance(errors[0], dict) and errors[0].get("description"):
        return str(errors[0]["description"])
    text = str(error).strip().splitlines()
    return text[0][:200] if text else type(error).__name__
