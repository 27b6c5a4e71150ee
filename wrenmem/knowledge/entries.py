"""Knowledge files (rules, glossary, caveats, metrics, ``instructions.md``) split into entries:
the sections at the file's splitting level, as docs/file-format.md describes."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import PurePosixPath
from typing import Any

from wrenmem.errors import PairError

KINDS = ("rule", "glossary", "caveat", "metric", "instruction")
# knowledge/<folder>/ -> kind; instructions.md (Wren's legacy file) is kind "instruction".
FOLDERS = {"rules": "rule", "glossary": "glossary", "caveats": "caveat", "metrics": "metric"}
INSTRUCTIONS_FILE = "instructions.md"
_DELIM = re.compile(r"^---[ \t]*$")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_FIELD = re.compile(
    r"^\s*(?:[-*+]\s+)?(?:\*\*|__)?(?P<key>synonyms?|aliases|also known as|aka|columns?|"
    r"tables?|refers to|means)(?:\*\*|__)?\s*:\s*(?:\*\*|__)?\s*(?P<value>.*)$", re.IGNORECASE)
_SYNONYM_KEYS = {"synonym", "synonyms", "aliases", "also known as", "aka"}
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_ALIAS = re.compile(r"(^|[\s\[{,:-])[*&][A-Za-z0-9_-]")


@dataclass(frozen=True)
class Entry:
    """One section of a knowledge file. ``line`` is the 1-based line of its heading (or of
    its first text line when it has none)."""

    path: str
    kind: str
    title: str
    body: str
    line: int = 1
    tags: tuple[str, ...] = ()
    synonyms: tuple[str, ...] = ()  # glossary only
    columns: tuple[str, ...] = ()  # glossary only: ``table`` or ``table.column``
    ordinal: int = 0  # n-th entry of this title in its file (0: the first)
    columns_line: int = 0  # glossary: the line of its first `Columns:` (0: none)

    @property
    def id(self) -> str:
        suffix = f"~{self.ordinal + 1}" if self.ordinal else ""
        return f"{self.path}#{self.title}{suffix}"

    @cached_property
    def entry_hash(self) -> str:
        payload = json.dumps([self.kind, self.title, self.body, list(self.tags),
                              list(self.synonyms), list(self.columns)], ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    @property
    def empty(self) -> bool:
        return not self.body.strip()

    @property
    def names(self) -> tuple[str, ...]:
        """The term and its synonyms (glossary), or the title."""
        return (self.title, *self.synonyms)

    def text(self) -> str:
        """What the entry says, for a prompt: its title as a heading, then its body."""
        lines = [f"### {self.title}"]
        if self.synonyms:
            lines.append("Synonyms: " + ", ".join(self.synonyms))
        if self.columns:
            lines.append("Columns: " + ", ".join(self.columns))
        if self.body.strip():
            lines.append(self.body.strip())
        return "\n".join(lines)

    def search_text(self) -> str:
        """What the entry is found by (embedded and keyword-indexed)."""
        return "\n".join(filter(None, [self.title, ", ".join(self.synonyms),
                                       " ".join(self.columns), self.body.strip()]))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "path": self.path, "kind": self.kind,
                               "title": self.title, "text": self.body, "line": self.line,
                               "tags": list(self.tags)}
        if self.kind == "glossary":
            out.update(term=self.title, synonyms=list(self.synonyms),
                       columns=list(self.columns), definition=self.body)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Entry:
        """The entry :meth:`to_dict` gave (the daemon's fetch reply); KeyError/TypeError/
        ValueError when it is not one."""
        _id, tilde, n = str(data["id"]).rpartition("~")
        ordinal = int(n) - 1 if tilde and n.isdigit() else 0
        return cls(str(data["path"]), str(data["kind"]), str(data["title"]), str(data["text"]),
                   int(data["line"]), tuple(str(t) for t in data["tags"]),
                   tuple(str(s) for s in data.get("synonyms") or ()),
                   tuple(str(c) for c in data.get("columns") or ()), ordinal)


@dataclass(frozen=True)
class ParsedFile:
    """A knowledge file's entries, and what was wrong with it (problems never stop a read)."""

    path: str
    kind: str
    title: str
    entries: tuple[Entry, ...] = ()
    problems: tuple[PairError, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict, compare=False)
    # Why the file is not served at all (front matter that does not read, a NUL byte): the
    # rest of the project's knowledge is; None for a file that is.
    refused: PairError | None = None


def parse_knowledge(text: str, path: str, kind: str) -> ParsedFile:
    """Split ``text`` (the file at ``path``, of ``kind``) into entries."""
    text = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    # HTML comments are notes to the file's editors (`init`'s examples are one): not
    # entries; their lines stay, blank, so line numbers stay true.
    text = _COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    lines = text.split("\n")
    problems: list[PairError] = []
    nul = next((n for n, line in enumerate(lines) if "\x00" in line), None)
    if nul is not None:  # binary, or text made to hide what follows from a reviewer
        return ParsedFile(path, kind, PurePosixPath(path).stem, refused=PairError(
            path, "contains a NUL byte (a binary file?): not served; save it as plain text",
            nul + 1))
    meta, start = _front_matter(lines, path, problems)
    if problems:  # front matter that does not read: what it meant to say is unknown
        first = problems[0]
        return ParsedFile(path, kind, PurePosixPath(path).stem, problems=tuple(problems),
                          refused=PairError(path, f"{first.reason}: not served until fixed",
                                            first.line))
    tags = _tags(meta.get("tags"), path, problems, lines)
    given_title = meta.get("title")
    if given_title is not None and not isinstance(given_title, str):
        problems.append(PairError(path, f"front matter `title` must be a string, got "
                                        f"{type(given_title).__name__}", _key_line(lines, "title")))
        given_title = None
    headings = _headings(lines, start)
    file_title = (given_title or "").strip()
    split_level = min((h[1] for h in headings), default=0)
    top = [h for h in headings if h[1] == split_level]
    if split_level == 1 and len(top) == 1 and len(headings) > 1 and _first_text(
            lines, start) == top[0][0]:
        file_title = file_title or top[0][2]
        rest = [h for h in headings if h[1] > 1]
        split_level = min(h[1] for h in rest)
        start = top[0][0] + 1
    cuts = [h for h in headings if h[1] == split_level and h[0] >= start]
    stem = PurePosixPath(path).stem
    file_title = file_title or (top[0][2] if len(top) == 1 and not cuts[1:] else "") or stem
    # (line of the heading or first text, title, body lines, line of the first body line)
    sections: list[tuple[int, str, list[str], int]] = []
    first_cut = cuts[0][0] if cuts else len(lines)
    preamble = lines[start:first_cut]
    if "\n".join(preamble).strip():
        sections.append((_first_text(lines, start) + 1, file_title, preamble, start + 1))
    for n, (at, _level, title) in enumerate(cuts):
        end = cuts[n + 1][0] if n + 1 < len(cuts) else len(lines)
        sections.append((at + 1, title or stem, lines[at + 1:end], at + 2))
    entries: list[Entry] = []
    seen: dict[str, int] = {}
    for line_no, title, body_lines, body_at in sections:
        synonyms: tuple[str, ...] = ()
        columns: tuple[str, ...] = ()
        columns_at = 0
        if kind == "glossary":
            body_lines, synonyms, columns, found_at = _glossary_fields(body_lines)
            columns_at = body_at + found_at if found_at >= 0 else 0
        body = "\n".join(body_lines).strip("\n")
        body = "\n".join(line.rstrip() for line in body.split("\n")).strip()
        key = title.casefold()
        ordinal = seen.get(key, 0)
        seen[key] = ordinal + 1
        entries.append(Entry(path, kind, title, body, line_no, tags, synonyms, columns,
                             ordinal, columns_at))
    return ParsedFile(path, kind, file_title, tuple(entries), tuple(problems), meta)


def _front_matter(lines: list[str], path: str, problems: list[PairError]
                  ) -> tuple[dict[str, Any], int]:
    """(front matter mapping, index of the first body line)."""
    if not lines or not _DELIM.match(lines[0]):
        return {}, 0
    end = next((i for i in range(1, len(lines)) if _DELIM.match(lines[i])), None)
    if end is None:
        problems.append(PairError(path, "front matter is not closed by a `---` line", 1))
        return {}, 0
    raw = "\n".join(lines[1:end])
    if _ALIAS.search(raw) and re.search(r"(^|\s)&[A-Za-z0-9_-]", raw):
        problems.append(PairError(path, "front matter uses YAML anchors and aliases, which "
                                        "knowledge files do not accept", 1))
        return {}, end + 1
    import yaml

    try:
        meta = yaml.safe_load(raw) if raw.strip() else {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = (mark.line + 2) if mark is not None else 1
        reason = getattr(e, "problem", None) or str(e).splitlines()[0]
        problems.append(PairError(path, f"front matter is not valid YAML: {reason}", line))
        return {}, end + 1
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        problems.append(PairError(path, "front matter must be a mapping of keys to values", 2))
        return {}, end + 1
    return {str(k): v for k, v in meta.items()}, end + 1


def _tags(value: Any, path: str, problems: list[PairError], lines: list[str]
          ) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list) or not all(isinstance(t, str | int | float) for t in value):
        problems.append(PairError(path, "front matter `tags` must be a list of strings",
                                  _key_line(lines, "tags")))
        return ()
    return tuple(dict.fromkeys(str(t).strip() for t in value if str(t).strip()))


def _key_line(lines: list[str], key: str) -> int:
    for i, line in enumerate(lines[1:], start=2):
        if _DELIM.match(line):
            break
        if re.match(rf"^\s*{re.escape(key)}\s*:", line):
            return i
    return 1


def _headings(lines: list[str], start: int) -> list[tuple[int, int, str]]:
    """(0-based line, level, text) of every ATX heading outside fenced code."""
    out: list[tuple[int, int, str]] = []
    fence: str | None = None
    for i in range(start, len(lines)):
        line = lines[i]
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        m = _HEADING.match(line)
        if m:
            out.append((i, len(m.group(1)), _plain(m.group(2))))
    return out


def _plain(title: str) -> str:
    """A heading's text without inline emphasis or code marks."""
    title = re.sub(r"(\*\*|__|`)", "", title).strip()
    return unicodedata.normalize("NFC", title)


def _first_text(lines: list[str], start: int) -> int:
    """0-based index of the first non-blank line at or after ``start``."""
    return next((i for i in range(start, len(lines)) if lines[i].strip()), len(lines))


def _glossary_fields(lines: list[str]
                     ) -> tuple[list[str], tuple[str, ...], tuple[str, ...], int]:
    """(definition lines, synonyms, columns, index of the first columns line or -1) of a
    glossary entry's body."""
    synonyms: list[str] = []
    columns: list[str] = []
    rest: list[str] = []
    first_columns = -1
    for n, line in enumerate(lines):
        m = _FIELD.match(line)
        if m is None:
            rest.append(line)
            continue
        items = [_item(v) for v in re.split(r"[,;]", m.group("value"))]
        items = [v for v in items if v]
        if m.group("key").lower() in _SYNONYM_KEYS:
            synonyms += items
        else:
            columns += items
            first_columns = n if first_columns < 0 else first_columns
    return rest, tuple(dict.fromkeys(synonyms)), tuple(dict.fromkeys(columns)), first_columns


def _item(value: str) -> str:
    return re.sub(r"(\*\*|__|`)", "", value).strip().strip("\"'").strip()


def split_reference(ref: str) -> tuple[str, str | None]:
    """``orders.amount`` -> (``orders``, ``amount``); ``orders`` -> (``orders``, None)."""
    table, _, column = ref.partition(".")
    return table.strip(), (column.strip() or None) if column else None
