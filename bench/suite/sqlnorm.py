"""The two SQL identities the suite labels with: the same SQL, and the same skeleton.

- :func:`same_sql_key`: sqlglot's rendering of the parsed statement with identifiers
  lower-cased and unquoted (so the case of keywords and names, whitespace, a trailing ``;``,
  quoting and other formatting count as the same SQL); values are kept exactly.
- :func:`skeleton_key`: the same rendering with every literal (number, string; ``NULL``
  kept) replaced by ``?``: the structure of the query, with its tables, columns, aggregates,
  grouping and ordering, but not its values.
- the *shape* (third key of :func:`keys`): the skeleton with every column name replaced by
  ``_`` (tables, aliases, functions, operators and clauses kept): same tables and the same
  form of query over other columns.

Spider-family SQL writes string values in double quotes (``WHERE city = "Boston"``), which
SQLite and sqlglot read as identifiers; :func:`spider_values` turns them into single-quoted
strings first. When sqlglot cannot parse a statement, both keys fall back to a plain
normalisation (case, whitespace, ``;``; numbers and quoted strings masked for the skeleton),
so every item has keys and the labels stay deterministic.
"""

from __future__ import annotations

import functools
import re

_DOUBLE = re.compile(r'"((?:[^"]|"")*)"')
_SPACE = re.compile(r"\s+")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
_QUOTED = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"")


def spider_values(sql: str) -> str:
    """Double-quoted values of Spider-style SQL as single-quoted SQL strings."""
    return _DOUBLE.sub(lambda m: "'" + m.group(1).replace('""', '"').replace("'", "''") + "'",
                       sql)


def plain_norm(sql: str) -> str:
    """Case, whitespace and a trailing ``;``: the fallback identity."""
    return _SPACE.sub(" ", sql.strip().rstrip(";").strip()).lower()


def _plain_skeleton(sql: str) -> str:
    return _NUMBER.sub("?", _QUOTED.sub("?", plain_norm(sql)))


_KEYWORDS = frozenset("""select from where group by order having limit join on as and or not in
like between is null distinct count sum avg min max asc desc union intersect except inner left
right outer case when then else end exists cast""".split())
_NAME = re.compile(r"\b([a-z_][a-z0-9_]*)\b(?!\s*\()")


def _plain_shape(skeleton: str) -> str:
    """The fallback shape: names after a ``.`` or not after FROM/JOIN masked (rough)."""
    return _NAME.sub(lambda m: m.group(1) if m.group(1) in _KEYWORDS else "_", skeleton)


@functools.lru_cache(maxsize=200_000)
def _parsed_keys(sql: str, dialect: str) -> tuple[str, str, str] | None:
    import sqlglot
    from sqlglot import exp

    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except Exception:  # sqlglot raises several error types, all meaning "not parsed"
        return None
    if len(statements) != 1:
        return None
    tree = statements[0]

    def lower(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Identifier):
            return exp.Identifier(this=node.this.lower(), quoted=False)
        return node

    def mask(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Literal):
            return exp.Placeholder()
        return node

    def mask_columns(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and isinstance(node.this, exp.Identifier):
            return exp.Column(this=exp.Identifier(this="_"), table=node.args.get("table"))
        return node

    try:
        same = tree.transform(lower)
        skeleton = same.transform(mask)
        shape = skeleton.transform(mask_columns)
        return same.sql(dialect=dialect), skeleton.sql(dialect=dialect), shape.sql(dialect=dialect)
    except Exception:
        return None


def keys(sql: str, dialect: str = "sqlite", *, spider: bool = False) -> tuple[str, str, str]:
    """(same-SQL key, skeleton key, shape key) of one statement."""
    text = spider_values(sql) if spider else sql
    parsed = _parsed_keys(text.strip().rstrip(";"), dialect)
    if parsed is not None:
        return parsed
    skeleton = _plain_skeleton(text)
    return plain_norm(text), skeleton, _plain_shape(skeleton)


def same_sql_key(sql: str, dialect: str = "sqlite", *, spider: bool = False) -> str:
    return keys(sql, dialect, spider=spider)[0]


def skeleton_key(sql: str, dialect: str = "sqlite", *, spider: bool = False) -> str:
    return keys(sql, dialect, spider=spider)[1]
