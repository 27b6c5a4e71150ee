"""Duplicate questions among pair files: the same question twice, or with two different SQLs.

Questions compare after Unicode NFKC, case folding, collapsing spaces and dropping trailing
punctuation (``?``, ``？``, ``.``, ``。``, ``!``), within one datasource. SQL texts compare after
sqlglot re-renders them, so layout and keyword case do not make two SQLs "different".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from wrenmem.checks.validate import Problem, Validator, shown_path
from wrenmem.pairs.catalog import scan
from wrenmem.pairs.pairfile import Pair, key_line
from wrenmem.pairs.text import loose_question
from wrenmem.settings import Settings
from wrenmem.sql.bounds import headroom, parse_one


@dataclass(frozen=True)
class Duplicate:
    """``pair`` asks the same question as ``other``."""

    pair: Pair
    other: Pair
    same_sql: bool

    @property
    def message(self) -> str:
        if self.same_sql:
            return f"duplicate pair: same question and SQL as {self.other.path}"
        return (f"the same question as {self.other.path} with a different SQL: "
                "keep one, or make the questions say how they differ")


def question_key(pair: Pair) -> tuple[str, str]:
    """What makes two pairs "the same question": datasource and the normalised question."""
    return (pair.datasource or "").casefold(), loose_question(pair.nl)


def sql_key(pair: Pair, dialect: str | None) -> str:
    """The SQL as sqlglot renders it (layout-free); the trimmed text if it does not parse."""
    text = " ".join(pair.sql.split()).rstrip(";").strip()
    try:
        from sqlglot.errors import SqlglotError

        tree = parse_one(pair.sql, pair.dialect or dialect or None)
        with headroom():
            return str(tree.sql(dialect=pair.dialect or dialect or None, normalize=True))
    except (SqlglotError, ValueError, ImportError):  # out of bounds: a ValueError
        return text


def find_duplicates(pairs: Iterable[Pair], dialect: str | None = None) -> list[Duplicate]:
    """One entry per pair whose question another pair asks too: the first file of a
    group points at the second, every other at the first, so each file involved gets a line."""
    groups: dict[tuple[str, str], list[Pair]] = defaultdict(list)
    for pair in sorted(pairs, key=lambda p: p.path):
        groups[question_key(pair)].append(pair)
    found: list[Duplicate] = []
    for members in groups.values():
        if len(members) < 2:
            continue
        keys = [sql_key(p, dialect) for p in members]
        for i, pair in enumerate(members):
            j = 1 if i == 0 else 0
            found.append(Duplicate(pair, members[j], keys[i] == keys[j]))
    return found


def duplicate_problems(settings: Settings, files: Iterable[Path] | None = None
                       ) -> tuple[int, list[Problem]]:
    """(pairs compared, one Problem per duplicate) over every pair file of the project;
    with ``files``, only the problems in those files are reported (what pre-commit needs)."""
    found = scan(settings, use_cache=settings.state_dir.is_dir())
    wanted = {settings.relpath(f) for f in files} if files is not None else None
    validator = Validator(settings, check_schema=False)  # for the accepted codes
    problems: list[Problem] = []
    for dup in find_duplicates(found.pairs, settings.dialect):
        if wanted is not None and dup.pair.path not in wanted:
            continue
        lines = (settings.root / dup.pair.path).read_text(encoding="utf-8-sig").split("\n")
        problems += validator.accepted(
            [Problem(shown_path(settings.root, dup.pair.path), key_line(lines, "nl"), 1,
                     dup.message, "duplicate")], dup.pair, lines)
    return len(found.pairs), problems
