"""Validate knowledge files: readable, sound front matter, no empty entry, no glossary term
defined twice, and (with a manifest) glossary ``Columns:`` that name tables and columns the
manifest has. What ``wrenmem validate`` and its pre-commit hook run besides the pair checks.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from wrenmem.checks.references import Schema, _hint
from wrenmem.knowledge.entries import split_reference
from wrenmem.knowledge.files import Knowledge, is_knowledge_path, load_knowledge
from wrenmem.settings import Settings
from wrenmem.textsearch import tokenize

# Problem is defined in wrenmem.checks.validate, which imports this module: made by a factory.
ProblemFactory = type


def knowledge_problems(settings: Settings, tables: Mapping[str, Mapping[str, str]] | None,
                       make: ProblemFactory, paths: Iterable[str] | None = None,
                       knowledge: Knowledge | None = None) -> tuple[int, list[object]]:
    """(knowledge files checked, problems), for every file or the project-relative
    ``paths``; ``tables`` None: references unchecked. A term defined twice is reported at the
    second definition."""
    knowledge = knowledge or load_knowledge(settings)
    wanted = None if paths is None else set(paths)
    problems: list[object] = []
    schema = Schema(dict(tables)) if tables else None
    checked = 0
    for error in knowledge.errors:
        if wanted is None or error.path in wanted:
            problems.append(make(error.path, error.line, 1, error.reason, "knowledge"))
            checked += 1
    seen: dict[tuple[str, ...], tuple[str, int, str]] = {}
    for parsed in knowledge.files:
        report = wanted is None or parsed.path in wanted
        checked += report
        if report:
            problems += [make(parsed.path, p.line, 1, p.reason, "knowledge")
                         for p in parsed.problems]
        for entry in parsed.entries:
            if report and entry.empty and not (entry.synonyms or entry.columns):
                what = "glossary term" if entry.kind == "glossary" else "entry"
                problems.append(make(entry.path, entry.line, 1,
                                     f"empty {what} {entry.title!r}: write its text or "
                                     "remove the heading", "knowledge-empty"))
            if entry.kind != "glossary":
                continue
            for name in entry.names:
                key = tuple(tokenize(name))
                if not key:
                    continue
                first = seen.get(key)
                if first is None:
                    seen[key] = (entry.path, entry.line, name)
                elif report and (first[0], first[1]) != (entry.path, entry.line):
                    problems.append(make(entry.path, entry.line, 1,
                                         f"glossary term {name!r} is already defined at "
                                         f"{first[0]}:{first[1]} ({first[2]!r})",
                                         "knowledge-duplicate"))
            if report and schema is not None:
                problems += _reference_problems(entry.path, entry.columns_line or entry.line,
                                                entry.columns, schema, make)
    return checked, problems


def _reference_problems(path: str, line: int, refs: Iterable[str], schema: Schema,
                        make: ProblemFactory) -> list[object]:
    out: list[object] = []
    for ref in refs:
        table, column = split_reference(ref)
        columns = schema.known.get(table.lower())
        if columns is None:
            out.append(make(path, line, 1, f"unknown table {table!r} in glossary Columns "
                                           f"({ref!r}){_hint(table, schema.known)}",
                            "knowledge-schema"))
        elif column is not None and columns and column.lower() not in columns:
            out.append(make(path, line, 1, f"unknown column {column!r} of {table} in "
                                           f"glossary Columns ({ref!r})"
                                           f"{_hint(column, dict.fromkeys(columns))}",
                            "knowledge-schema"))
    return out


def knowledge_targets(settings: Settings, paths: Iterable[Path]) -> list[str]:
    """The project-relative paths among ``paths`` that are knowledge files, placed by
    their folders (resolved) and own name, as the project walk places them: a link in
    ``knowledge/rules/`` is a knowledge file even when it leads elsewhere (WM012, not WM001)."""
    out = []
    for path in paths:
        absolute = Path(os.path.abspath(path))
        try:
            placed = absolute.parent.resolve() / absolute.name
        except (OSError, RuntimeError):  # a folder that is a link loop: not a knowledge file
            continue
        if is_knowledge_path(settings, placed) and absolute.suffix.lower() == ".md":
            out.append(settings.relpath(absolute))
    return out
