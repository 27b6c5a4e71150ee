"""SQL checks with sqlglot: one well-formed statement in the pair's dialect.

sqlglot is a lenient parser: it reads ``SELECT , FROM t`` as ``SELECT FROM t``, ``SELECT * FROM
t ORDER`` as a table aliased ``ORDER``, and ``... JOIN u ON`` as a cross join. Beyond the parse,
``check_sql`` therefore rejects what it silently repairs: a clause or separator with nothing
after it, a SELECT without columns, and a SQL keyword read as an unquoted name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SqlProblem:
    """A problem in a SQL text; ``line``/``col`` are 1-based within the SQL text."""

    message: str
    line: int = 1
    col: int = 1


# Words no dialect accepts as an unquoted table, column or alias name.
RESERVED_NAMES = frozenset(
    "SELECT FROM WHERE GROUP ORDER BY HAVING LIMIT JOIN ON AND OR NOT UNION EXCEPT INTERSECT "
    "AS WITH CASE WHEN THEN ELSE DISTINCT INTO".split())
# Dialects that allow a trailing comma at the end of a SELECT list.
_TRAILING_COMMA_DIALECTS = frozenset({"bigquery", "duckdb", "snowflake", "databricks"})


def known_dialect(name: str) -> bool:
    return unknown_dialect(name) is None


def unknown_dialect(name: str) -> str | None:
    """Why ``name`` is no sqlglot dialect, with the close name sqlglot suggests
    (``unknown SQL dialect 'postgress' (…); did you mean 'postgres'?``); None when it is one."""
    from sqlglot.dialects.dialect import Dialect

    try:
        Dialect.get_or_raise(name)
    except ValueError as e:
        close = re.search(r"Did you mean ([\w-]+)\?", str(e))
        hint = f"; did you mean {close.group(1)!r}?" if close else ""
        return f"unknown SQL dialect {name!r} (a sqlglot dialect name is needed){hint}"
    return None


def position(sql: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of character ``offset`` in ``sql``."""
    offset = max(0, min(offset, len(sql)))
    line = sql.count("\n", 0, offset) + 1
    return line, offset - (sql.rfind("\n", 0, offset) + 1) + 1


def check_sql(sql: str, dialect: str | None) -> list[SqlProblem]:
    """Problems that make ``sql`` unusable as an example: empty list when it is fine."""
    return parse_checked(sql, dialect)[1]


def parse_checked(sql: str, dialect: str | None) -> tuple[Any, list[SqlProblem]]:
    """(the parsed statement, problems): the tree is None unless there is no problem."""
    problems = _check(sql, dialect)
    return (problems[0], []) if isinstance(problems, tuple) else (None, problems)


def _check(sql: str, dialect: str | None) -> list[SqlProblem] | tuple[Any]:
    from sqlglot import exp
    from sqlglot.errors import ParseError, TokenError

    from wrenmem.sqlbounds import SqlOutOfBounds, headroom, parse

    dialect = dialect or ""
    label = dialect or "generic"
    unknown = unknown_dialect(dialect) if dialect else None
    if unknown is not None:
        return [SqlProblem(unknown)]
    try:
        statements = [s for s in parse(sql, dialect) if s is not None]
    except SqlOutOfBounds as e:
        return [SqlProblem(e.reason, e.line, e.col)]
    except ParseError as e:
        return [_parse_problem(e, label)]
    except TokenError as e:
        return [_token_problem(sql, str(e), label)]
    if not statements:
        return [SqlProblem("the SQL is empty")]
    if len(statements) > 1:
        return [SqlProblem(f"expected one SQL statement, found {len(statements)}")]
    root = statements[0]
    if isinstance(root, exp.Command):
        return [SqlProblem(f"not a statement sqlglot understands: {sql.strip()[:60]!r}")]
    statement_types = (exp.Query, exp.DML, exp.DDL, exp.With, exp.Describe, exp.Pragma,
                       exp.Set, exp.Use, exp.Transaction, exp.Commit, exp.Rollback,
                       exp.Create, exp.Drop, exp.Alter)
    if not isinstance(root, statement_types):
        return [SqlProblem(f"not a SQL statement: parses as a bare {root.key} expression")]
    try:
        with headroom():
            return _dangling_tokens(sql, dialect) or _repaired_tree(sql, root) or (root,)
    except SqlOutOfBounds as e:
        return [SqlProblem(e.reason, e.line, e.col)]


def _parse_problem(e: Any, label: str) -> SqlProblem:
    first = e.errors[0] if e.errors else {}
    message = first.get("description") or str(e).splitlines()[0]
    highlight = (first.get("highlight") or "").strip()
    missing = re.match(r"Required keyword: '(\w+)' missing for <class '[\w.]+\.(\w+)'>", message)
    if missing:
        message = "incomplete expression" if highlight else (
            f"incomplete {missing.group(2).upper()} expression")
    message = re.sub(r"<Token token_type: TokenType\.SENTINEL[^>]*>", "the end of the SQL",
                     message)
    message = re.sub(r"<Token token_type: [\w.]+, text: (.*?), line: .*?>", r"'\1'", message)
    if highlight and "\n" not in highlight:
        message += f" near {highlight!r}"
    line = int(first.get("line") or 1)
    col = int(first.get("col") or 1)
    if highlight and "\n" not in highlight:  # sqlglot points at the end of the token
        col = max(1, col - len(highlight) + 1)
    return SqlProblem(f"SQL does not parse as {label} SQL: {message}", line, col)


def _token_problem(sql: str, message: str, label: str) -> SqlProblem:
    # "Error tokenizing '<the SQL up to the bad spot>'": point where that context ends.
    found = re.match(r"Error tokenizing '(.*)'$", message, re.S)
    line, col = 1, 1
    if found and found.group(1) and found.group(1) in sql:
        context = found.group(1)
        line, col = position(sql, sql.index(context) + len(context) - 1)
    quote = "an unterminated string or quoted name" if sql.count("'") % 2 or sql.count(
        '"') % 2 else "a character sqlglot cannot read"
    return SqlProblem(f"SQL does not tokenize as {label} SQL: {quote}", line, col)


def _dangling_tokens(sql: str, dialect: str) -> list[SqlProblem]:
    """A clause keyword or separator followed by nothing, or by another clause keyword."""
    from sqlglot.dialects.dialect import Dialect
    from sqlglot.tokens import TokenType as T

    needs_operand = {T.COMMA, T.ON, T.WHERE, T.HAVING, T.AND, T.OR, T.SELECT, T.GROUP_BY,
                     T.ORDER_BY, T.FROM, T.JOIN, T.LIMIT, T.USING, T.SET, T.UNION,
                     T.EXCEPT, T.INTERSECT}
    stoppers = {T.COMMA, T.FROM, T.WHERE, T.GROUP_BY, T.ORDER_BY, T.HAVING, T.LIMIT, T.JOIN,
                T.ON, T.R_PAREN, T.SEMICOLON, T.UNION, T.EXCEPT, T.INTERSECT, T.AND, T.OR}
    try:
        tokens = [t for t in Dialect.get_or_raise(dialect or None).tokenize(sql)]
    except Exception:  # parsing succeeded; a tokenizer quirk is no reason to fail the SQL
        return []
    for i, token in enumerate(tokens):
        if token.token_type not in needs_operand:
            continue
        after = tokens[i + 1] if i + 1 < len(tokens) else None
        if after is not None and after.token_type not in stoppers:
            continue
        if (token.token_type == T.COMMA and after is not None and after.token_type == T.FROM
                and dialect in _TRAILING_COMMA_DIALECTS):
            continue
        what = f"{token.text!r} is followed by {after.text!r}" if after is not None else (
            f"the SQL ends after {token.text!r}")
        line, col = position(sql, token.start)
        return [SqlProblem(f"incomplete SQL: {what}", line, col)]
    return []


def _repaired_tree(sql: str, root: Any) -> list[SqlProblem]:
    """What sqlglot read only by repairing: no select list, a keyword used as a name."""
    from sqlglot import exp

    for node in root.walk():
        if isinstance(node, exp.Select) and not node.expressions:
            return [SqlProblem("incomplete SQL: a SELECT without any column")]
        if (isinstance(node, exp.Identifier) and not node.quoted
                and str(node.this).upper() in RESERVED_NAMES):
            start = node.meta.get("start")
            line, col = position(sql, start) if isinstance(start, int) else (1, 1)
            return [SqlProblem(f"incomplete SQL: the keyword {node.this!r} is read as a name "
                               "(quote it if it really is one)", line, col)]
    return []


def write_problem(tree: Any, sql: str = "") -> SqlProblem | None:
    """Why the statement ``tree`` (parsed from ``sql``; None when it did not parse) is not a
    read-only query, or None when it is one (or does not parse as a write either).

    A pair is an example an agent copies: it must be one SELECT (``WITH … SELECT``, or a
    set operation of SELECTs), never DML, DDL or DCL, and never ``SELECT … INTO`` (which
    creates a table). A data-modifying CTE (``WITH d AS (DELETE …) SELECT …``) writes too.
    SQL that does not parse is still refused when its first word starts a write
    (``GRANT``, ``TRUNCATE``…), so that ``--force`` never lets one through.
    """
    from sqlglot import exp

    first = _first_word(sql)
    if tree is None or not isinstance(tree, exp.Query):
        if tree is None and first not in WRITE_WORDS:
            return None
        return SqlProblem(f"not a read-only query: {_statement_name(first)} changes the "
                          f"database; {_OPT_OUT}")
    for node in tree.walk():
        if isinstance(node, exp.Into):
            line, col = _node_position(sql, node)
            return SqlProblem(f"not a read-only query: SELECT … INTO creates a table; {_OPT_OUT}",
                              line, col)
        if node is not tree and isinstance(node, exp.DML | exp.DDL | exp.Create | exp.Drop
                                           | exp.Alter | exp.Command):
            line, col = _node_position(sql, node)
            word = type(node).__name__.upper()
            return SqlProblem(f"not a read-only query: it holds {_statement_name(word)} (a "
                              f"data-modifying WITH); {_OPT_OUT}", line, col)
    return None


# First words of statements that change a database, its schema or its permissions.
WRITE_WORDS = frozenset(
    "INSERT UPDATE DELETE MERGE UPSERT REPLACE CREATE DROP ALTER TRUNCATE RENAME GRANT REVOKE "
    "COPY LOAD VACUUM ANALYZE REINDEX CLUSTER COMMENT CALL EXEC EXECUTE DO SET RESET ATTACH "
    "DETACH INSTALL USE BEGIN COMMIT ROLLBACK SAVEPOINT LOCK UNLOCK PRAGMA OPTIMIZE REFRESH "
    "UNLOAD EXPORT IMPORT PUT REMOVE".split())
_OPT_OUT = ("a pair holds one SELECT (`allow-writes: true` in the pair, or the `allow_writes` "
            "setting, accepts it)")


def _first_word(sql: str) -> str:
    text = re.sub(r"^(\s+|--[^\n]*\n?|/\*.*?\*/)+", "", sql, flags=re.S)
    found = re.match(r"[A-Za-z_]+", text)
    return found.group(0).upper() if found else ""


def _statement_name(word: str) -> str:
    if not word:
        return "a statement that is not a query"
    return f"{'an' if word[0] in 'AEIOU' else 'a'} {word} statement"


def _offset(node: Any) -> int | None:
    for candidate in node.walk():
        start = candidate.meta.get("start") if hasattr(candidate, "meta") else None
        if isinstance(start, int):
            return start
    return None


def _node_position(sql: str, node: Any) -> tuple[int, int]:
    start = _offset(node)
    return position(sql, start) if start is not None else (1, 1)
