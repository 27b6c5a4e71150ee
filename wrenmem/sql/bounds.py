"""The one way into sqlglot's parser: SQL past a length or nesting bound is refused first.

sqlglot recurses about twenty frames per nesting level and takes about 10 s a megabyte, so
:func:`parse` and :func:`parse_one` first scan the text (one regex pass) and raise
:class:`SqlOutOfBounds` with the reason and the spot past :data:`MAX_SQL_DEPTH` levels or
:data:`MAX_SQL_CHARS` characters. Work on a parsed tree runs inside :func:`headroom`, which
raises the recursion limit that 100 levels need."""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# Levels of parentheses (subqueries, function calls, IN lists) and CASE … END, counted
# together: a query a person reads nests a handful of levels, and 100 is where sqlglot
# still parses within the stack below (3,000 ended in a RecursionError).
MAX_SQL_DEPTH = 100
# Of those, calls named like a data type (``DATE(``, ``DECIMAL(``, ``INT(``): sqlglot tries
# each as a type first and backtracks, so the time doubles with every such level (14: 2 s,
# 18: over a minute). Real SQL nests them two or three deep.
MAX_TYPE_CALL_DEPTH = 8
# Characters of SQL: a pair is one query an agent copies (the bundled examples are under
# 1,000 characters); at this bound sqlglot takes about a second to parse.
MAX_SQL_CHARS = 100_000
# The recursion limit while sqlglot works: 100 levels need about 2,500 frames, and the
# limit (not the C stack, which pure-Python recursion does not use) is what stops them.
RECURSION_LIMIT = 8_000

_SCAN = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|`[^`]*`|--[^\n]*|/\*.*?\*/
                       |\b(?:CASE|END)\b|(?P<call>\b[A-Za-z_]\w*)\s*\(|[()]""",
                   re.S | re.I | re.X)
_TYPE_WORDS: set[str] = set()


class SqlOutOfBounds(ValueError):
    """SQL wrenmem does not give to sqlglot: ``reason``, at 1-based ``line``/``col``."""

    def __init__(self, reason: str, line: int = 1, col: int = 1):
        super().__init__(reason)
        self.reason = reason
        self.line = line
        self.col = col


def position(sql: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of character ``offset`` in ``sql``."""
    offset = max(0, min(offset, len(sql)))
    line = sql.count("\n", 0, offset) + 1
    return line, offset - (sql.rfind("\n", 0, offset) + 1) + 1


def check_bounds(sql: str, max_chars: int = MAX_SQL_CHARS) -> None:
    """Raise :class:`SqlOutOfBounds` when ``sql`` is too long (over ``max_chars``: a
    schema's flat ``CREATE TABLE`` may be longer than any pair) or nested too deep."""
    if len(sql) > max_chars:
        line, col = position(sql, max_chars)
        raise SqlOutOfBounds(
            f"the SQL is longer than {max_chars:,} characters ({len(sql):,}): too long "
            "to parse" + ("; a pair is one query an agent can copy"
                          if max_chars == MAX_SQL_CHARS else ""), line, col)
    open_: list[str] = []  # what is open: "(", "type(" (a call named like a type), "case"
    for found in _SCAN.finditer(sql):
        token, call = found.group(0), found.group("call")
        word = token.upper()
        if call is not None or token == "(" or word == "CASE":
            kind = "case" if word == "CASE" else "type(" if call is not None and (
                call.upper() in _type_words()) else "("
            open_.append(kind)
            too_many = (len(open_) > MAX_SQL_DEPTH and f"more than {MAX_SQL_DEPTH} levels of "
                        "parentheses, subqueries or CASE") or (
                kind == "type(" and open_.count("type(") > MAX_TYPE_CALL_DEPTH
                and f"more than {MAX_TYPE_CALL_DEPTH} levels of calls named like a data "
                "type, such as DATE( or DECIMAL(")
            if too_many:
                line, col = position(sql, found.start())
                raise SqlOutOfBounds(_too_deep(too_many), line, col)
        elif token == ")" or word == "END":
            _close(open_, ("case",) if word == "END" else ("(", "type("))


def _close(open_: list[str], kinds: tuple[str, ...]) -> None:
    for i in range(len(open_) - 1, -1, -1):
        if open_[i] in kinds:
            del open_[i]
            return


def _type_words() -> set[str]:
    """The words sqlglot reads as a data type (its own table, loaded once)."""
    if not _TYPE_WORDS:
        from sqlglot.parser import Parser
        from sqlglot.tokens import Tokenizer

        _TYPE_WORDS.update(word for word, kind in Tokenizer.KEYWORDS.items()
                           if kind in Parser.TYPE_TOKENS and " " not in word)
    return _TYPE_WORDS


def _too_deep(detail: str) -> str:
    return f"the SQL is nested too deep to parse ({detail}); flatten it, e.g. with WITH"


_lock = threading.Lock()
_users = [0, 0]  # (callers inside headroom(), the limit before the first of them)


@contextmanager
def headroom() -> Iterator[None]:
    """Run sqlglot with :data:`RECURSION_LIMIT` frames; a ``RecursionError`` left over
    (a chain the scan does not count, such as ``NOT NOT … NOT``) becomes
    :class:`SqlOutOfBounds`."""
    with _lock:
        if _users[0] == 0:
            _users[1] = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_users[1], RECURSION_LIMIT))
        _users[0] += 1
    try:
        yield
    except RecursionError as e:
        raise SqlOutOfBounds(_too_deep("the parser ran out of stack")) from e
    finally:
        with _lock:
            _users[0] -= 1
            if _users[0] == 0:
                try:
                    sys.setrecursionlimit(_users[1])
                except RecursionError:  # another thread is deeper still: keep the limit
                    pass


def parse(sql: str, dialect: str | None = None) -> list[Any]:
    """``sqlglot.parse`` of ``sql`` within the bounds (the statements; None for empty ones)."""
    import sqlglot

    check_bounds(sql)
    with headroom():
        return list(sqlglot.parse(sql, read=dialect or None))


def parse_one(sql: str, dialect: str | None = None) -> Any:
    """``sqlglot.parse_one`` of ``sql`` within the bounds."""
    import sqlglot

    check_bounds(sql)
    with headroom():
        return sqlglot.parse_one(sql, read=dialect or None)
