"""The labels of a SQL text (:data:`LABELS`): each SQL keyword, aggregate and comparison
it uses, and how many ``SELECT``\\ s, ``JOIN``\\ s and ``AND``\\ s, for the form reader
(:mod:`wrenmem.recall.forms`). Below the index, whose read copy holds every row's labels; read
by a keyword lexer (strings and quoted names skipped), 20 times cheaper than sqlglot's."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

_FLAGS = ("where", "or", "not", "in", "like", "between", "exists", "is", "null", "group",
          "having", "order", "asc", "desc", "limit", "distinct", "union", "intersect",
          "except", "case", "count", "sum", "avg", "min", "max",
          "=", "<", ">", "<=", ">=", "!=", "*")
_COUNTED = {"select": 3, "join": 3, "and": 2}  # counted up to this many
LABELS: tuple[str, ...] = _FLAGS + tuple(
    f"{word}#{n}" for word, top in _COUNTED.items() for n in range(top + 1))
_AT = {label: n for n, label in enumerate(LABELS)}
# a string, a quoted name (four quotings), a word, an operator
_LEX = re.compile(r"'(?:[^']|'')*'|\"[^\"]*\"|`[^`]*`|\[[^\]]*\]|[a-z_][a-z_0-9]*|<>|[<>!=]=?"
                  r"|[*]", re.IGNORECASE)
RULES = 1  # raise it when labels() reads a text otherwise with the same LABELS and lexer
# (tests/test_forms.py pins the labels of some texts under each fingerprint, and fails when
# they change under one)

# what each lexed token counts as: its label, or for the counted words their own name
_TOKEN_AT: dict[str, int | str] = {**_AT, "<>": _AT["!="], **{w: w for w in _COUNTED}}


@lru_cache(maxsize=1 << 16)
def labels(sql: str) -> tuple[int, ...]:
    """The positions in :data:`LABELS` of the labels of ``sql``, in order."""
    found: set[int] = set()
    counted = dict.fromkeys(_COUNTED, 0)
    get = _TOKEN_AT.get
    for token in _LEX.findall(sql.lower()):  # a string or a quoted name is no label
        at = get(token)
        if at is None:
            continue
        if isinstance(at, str):
            counted[at] += 1
        else:
            found.add(at)
    for word, top in _COUNTED.items():
        found.add(_AT[f"{word}#{min(counted[word], top)}"])
    return tuple(sorted(found))


def label_matrix(sqls: Iterable[str]) -> Any:
    """One row of 0/1 per SQL text, a column per label (uint8); each distinct text read once."""
    import numpy as np

    codes: dict[str, int] = {}
    order = [codes.setdefault(s or "", len(codes)) for s in sqls]
    distinct = np.zeros((len(codes), len(LABELS)), dtype=np.uint8)
    for text, n in codes.items():
        distinct[n, list(labels(text))] = 1
    return distinct[np.asarray(order, dtype=np.int64)] if order else distinct[:0]


def fingerprint() -> str:
    """What made a label matrix (the labels, the lexer, :data:`RULES`): a matrix saved
    under another fingerprint is not read as this code's, but made again."""
    rules = repr((RULES, LABELS, _LEX.pattern, sorted(_COUNTED.items())))
    return hashlib.sha256(rules.encode()).hexdigest()[:16]
