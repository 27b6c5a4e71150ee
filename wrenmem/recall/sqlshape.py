"""The shape of a pair's SQL, read from sqlglot's syntax tree.

Two pairs answer the same kind of question when their SQL has the same *skeleton* (the tree
with its values masked), and exactly the same question when the SQL is the same up to
formatting. A *value* is a literal the query compares with (``city = 'Oslo'``, ``LIMIT 3``);
a function's literal argument (``DATE_TRUNC('month', ...)``) is structure. SQL sqlglot
cannot parse falls back to its tokens. Shapes are memoized per process, and
:class:`ShapeCache` keeps a project's in ``.wrenmem/`` (a parse costs about a millisecond,
and a recall scores about a hundred candidates).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from wrenmem.fs.fsutil import read_marshal, write_marshal
from wrenmem.sql.bounds import MAX_SQL_CHARS, headroom, parse

VALUE = "?"  # what a masked value reads as in a skeleton
NAME = "_"  # what a masked identifier reads as in an identifier-free skeleton
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Shape:
    """One SQL text's structure.

    ``key``: the SQL up to formatting (case of keywords and identifiers, spaces, quotes,
    a trailing ``;``): two pairs with one key are the same answer. ``skeleton``: the key
    with every value masked. ``frame``: the skeleton with identifiers masked too (the
    query's form whatever it reads). ``values``: the values, lower-cased, in order.
    ``tokens``: the frame's tokens (for a graded structural similarity).
    """

    key: str
    skeleton: str
    frame: str
    values: tuple[str, ...]
    tokens: tuple[str, ...]
    parsed: bool


def _is_value(node: object) -> bool:
    from sqlglot import exp

    parent = getattr(node, "parent", None)
    while isinstance(parent, exp.Paren | exp.Neg | exp.Cast | exp.Tuple):
        parent = parent.parent
    # a function's literal arguments are part of its structure, and so are positions
    # (GROUP BY 1, ORDER BY 2); predicates and LIMIT hold values
    if isinstance(parent, exp.Func) and not isinstance(parent, exp.Predicate | exp.Binary):
        return False
    return not isinstance(parent, exp.Group | exp.Ordered | exp.Order)


def _quoted_value(column: object) -> bool:
    """A double-quoted name compared with a column (``WHERE city = "Boston"``): SQLite,
    and SQL written for it, read it as a string when no column has that name, and so do
    the public sets; a value, not a column."""
    from sqlglot import exp

    if not isinstance(column, exp.Column) or column.table:
        return False
    ident = column.this
    if not (isinstance(ident, exp.Identifier) and ident.quoted):
        return False
    parent = column.parent
    if isinstance(parent, exp.In):
        return column is not parent.this
    if isinstance(parent, exp.EQ | exp.NEQ | exp.Like | exp.ILike | exp.GT | exp.GTE
                  | exp.LT | exp.LTE):
        other = parent.left if parent.right is column else parent.right
        return isinstance(other, exp.Column) and not (
            isinstance(other.this, exp.Identifier) and other.this.quoted)
    return False


def _fallback(sql: str) -> Shape:
    from sqlglot.tokens import Tokenizer, TokenType

    text = sql.strip().rstrip(";").strip()
    try:
        tokens = Tokenizer().tokenize(text)
    except Exception:  # untokenizable text: its words are its shape
        return _words(text)
    key, skel, frame, values = [], [], [], []
    for t in tokens:
        word = t.text.lower()
        key.append(word)
        if t.token_type in (TokenType.NUMBER, TokenType.STRING):
            values.append(word)
            skel.append(VALUE)
            frame.append(VALUE)
        elif t.token_type in (TokenType.VAR, TokenType.IDENTIFIER):
            skel.append(word)
            frame.append(NAME)
        else:
            skel.append(word)
            frame.append(word)
    return Shape(" ".join(key), " ".join(skel), " ".join(frame), tuple(sorted(values)),
                 tuple(frame), False)


def _words(text: str) -> Shape:
    words = tuple(_SPACE.split(text.lower())) if text else ()
    joined = " ".join(words)
    return Shape(joined, joined, joined, (), words, False)


VERSION = 1  # of the shapes computed here; a saved cache of another version is not read
MEMO_MAX = 200_000  # shapes a process keeps (loaded or computed); past it the memo restarts
_KNOWN: dict[tuple[str, str], Shape] = {}
_COMPUTED = [0]  # shapes computed (not loaded) by this process: a ShapeCache saves them


def shape(sql: str, dialect: str | None = None) -> Shape:
    """The :class:`Shape` of ``sql`` read in ``dialect`` (sqlglot's name; None: generic)."""
    key = (sql, dialect or "")
    known = _KNOWN.get(key)
    if known is None:
        if len(_KNOWN) >= MEMO_MAX:
            _KNOWN.clear()
        known = _KNOWN[key] = _shape(sql, dialect or None)
        _COMPUTED[0] += 1
    return known


def _shape(sql: str, dialect: str | None) -> Shape:
    if len(sql) > MAX_SQL_CHARS:  # even its tokens would cost seconds: its words
        return _words(sql.strip().rstrip(";").strip())
    try:
        trees = [t for t in parse(sql, dialect) if t is not None]
    except Exception:  # sqlglot raises several error types, and some plain ones
        return _fallback(sql)
    if len(trees) != 1:
        return _fallback(sql)
    tree = trees[0]
    try:
        with headroom():
            return _tree_shape(tree)
    except Exception:  # a tree sqlglot cannot render back
        return _fallback(sql)


def _tree_shape(tree: Any) -> Shape:
    """The shape of one parsed statement (masked in place: the tree is the caller's own)."""
    from sqlglot import exp

    key = tree.sql(normalize=True, comments=False)
    values: list[str] = []
    # the tree is this function's own: mask its values in place
    for node in list(tree.find_all(exp.Literal, exp.Column)):
        if isinstance(node, exp.Column):
            if not _quoted_value(node):
                continue
            values.append(node.name.lower())
        elif _is_value(node):
            values.append(str(node.this).lower())
        else:
            continue
        node.replace(exp.Placeholder())
    skeleton = tree.sql(normalize=True, comments=False).lower()
    frame = _frame(skeleton)
    return Shape(key.lower(), skeleton, " ".join(frame), tuple(sorted(values)), frame, True)


def _frame(skeleton: str) -> tuple[str, ...]:
    """The tokens of a rendered skeleton with identifiers masked."""
    from sqlglot.tokens import Tokenizer, TokenType

    try:
        tokens = Tokenizer().tokenize(skeleton)
    except Exception:  # sqlglot renders what it tokenizes; this is for safety only
        return tuple(skeleton.split())
    names = (TokenType.VAR, TokenType.IDENTIFIER)
    out = []
    for n, t in enumerate(tokens):
        called = n + 1 < len(tokens) and tokens[n + 1].token_type == TokenType.L_PAREN
        out.append(NAME if t.token_type in names and not called else t.text.lower())
    return tuple(out)


def similarity(a: Shape, b: Shape) -> float:
    """How alike two queries' forms are, in [0, 1]: 1 for the same skeleton, else the
    Dice overlap of their frames' token bigrams (identifiers and values masked)."""
    if a.skeleton == b.skeleton:
        return 1.0
    x, y = _bigrams(a.tokens), _bigrams(b.tokens)
    if not x or not y:
        return 0.0
    common = sum(min(x[g], y[g]) for g in x.keys() & y.keys())
    return 0.9 * 2 * common / (sum(x.values()) + sum(y.values()))


def _bigrams(tokens: tuple[str, ...]) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for g in zip(tokens, tokens[1:], strict=False):
        out[g] = out.get(g, 0) + 1
    return out


class ShapeCache:
    """The shapes recall has computed for one project, saved in ``path`` (a checksummed
    marshal file, like every cache under ``.wrenmem/``; a damaged one is ignored and
    rebuilt). :meth:`load` makes them known to :func:`shape`; :meth:`save` writes them
    when this process computed any since the last load or save."""

    def __init__(self, path: object):
        from pathlib import Path

        self.path = Path(str(path))
        self._computed = _COMPUTED[0]
        self._written: float | None = None

    def load(self) -> None:
        data = read_marshal(self.path)
        if not isinstance(data, dict) or data.get("version") != VERSION:
            return
        try:
            for sql, dialect, key, skeleton, values, tokens, parsed in data["shapes"]:
                _KNOWN.setdefault((sql, dialect), Shape(
                    key, skeleton, " ".join(tokens), tuple(values), tuple(tokens),
                    bool(parsed)))
        except (KeyError, TypeError, ValueError):  # another layout: ignored, rebuilt
            return
        self._computed = _COMPUTED[0]

    def save(self, *, every: float = 0.0) -> None:
        """Write the shapes if any were computed since; ``every``: not again within that
        many seconds of the last write (a long-lived process saves now and then)."""
        import time

        if _COMPUTED[0] == self._computed:
            return
        now = time.monotonic()
        if self._written is not None and now - self._written < every:
            return
        self._written = now
        items = list(_KNOWN.items())
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_marshal(self.path, {"version": VERSION, "shapes": [
            (sql, dialect, s.key, s.skeleton, s.values, s.tokens, s.parsed)
            for (sql, dialect), s in items]})
        self._computed = _COMPUTED[0]
