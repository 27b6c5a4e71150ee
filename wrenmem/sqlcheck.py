"""SQL checks with sqlglot: one well-formed statement in the pair's dialect."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SqlProblem:
    """A problem in a SQL text; ``line``/``col`` are 1-based within the SQL text."""

    message: str
    line: int = 1
    col: int = 1


def known_dialect(name: str) -> bool:
    from sqlglot.dialects.dialect import Dialect

    try:
        Dialect.get_or_raise(name)
    except ValueError:
        return False
    return True


def check_sql(sql: str, dialect: str | None) -> list[SqlProblem]:
    """Problems that make ``sql`` unusable as an example: empty list when it is fine."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError, TokenError

    dialect = dialect or ""
    if dialect and not known_dialect(dialect):
        return [SqlProblem(f"unknown SQL dialect {dialect!r}")]
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect or None) if s is not None]
    except ParseError as e:
        first = e.errors[0] if e.errors else {}
        message = first.get("description") or str(e).splitlines()[0]
        return [SqlProblem(f"SQL does not parse as {dialect or 'generic'} SQL: {message}",
                           int(first.get("line") or 1), int(first.get("col") or 1))]
    except TokenError as e:
        return [SqlProblem(f"SQL does not tokenize as {dialect or 'generic'} SQL: {e}")]
    if not statements:
        return [SqlProblem("the SQL is empty")]
    if len(statements) > 1:
        return [SqlProblem(f"expected one SQL statement, found {len(statements)}")]
    root = statements[0]
    if isinstance(root, exp.Command):
        return [SqlProblem(f"not a statement sqlglot understands: {root.sql()[:60]!r}")]
    statement_types = (exp.Query, exp.DML, exp.DDL, exp.With, exp.Describe, exp.Pragma,
                       exp.Set, exp.Use, exp.Transaction, exp.Commit, exp.Rollback,
                       exp.Create, exp.Drop, exp.Alter)
    if not isinstance(root, statement_types):
        return [SqlProblem(f"not a SQL statement: parses as a bare {root.key} expression")]
    return []
