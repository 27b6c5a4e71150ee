"""The rules, glossary terms, caveats and metrics a change adds, edits and removes.

Entries (the sections of the knowledge files, :mod:`wrenmem.knowledge.entries`) are compared
by their identity, file and title: a reviewer sees "rule *Fiscal year* changed" with the
text's diff, not a diff of whole files. Part of ``wrenmem diff``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from wrenmem.errors import UnreadableFileError
from wrenmem.fs.fsutil import read_regular_file
from wrenmem.knowledge.entries import FOLDERS, INSTRUCTIONS_FILE, Entry, parse_knowledge
from wrenmem.knowledge.files import knowledge_paths
from wrenmem.settings import Settings


@dataclass(frozen=True)
class KnowledgeChange:
    """One entry that differs: ``entry`` is the head version (the base one when removed)."""

    status: str  # added | changed | removed
    entry: Entry
    old: Entry | None = None

    def text_diff(self) -> list[str]:
        if self.old is None:
            return []
        return list(difflib.unified_diff(self.old.text().splitlines(),
                                         self.entry.text().splitlines(), "base", "head",
                                         n=2, lineterm=""))[2:]

    def to_dict(self) -> dict[str, Any]:
        data = {"status": self.status, **self.entry.to_dict()}
        if self.old is not None:
            data["old_text"] = self.old.body
            data["diff"] = self.text_diff()
        return data


def knowledge_files_at(commit: Any, settings: Settings, project: str) -> dict[str, bytes]:
    """The knowledge files at ``commit``, keyed by project-relative path; one over
    ``max_pair_bytes`` is left out unread (its size is in the tree), as the working tree's."""
    limit = settings.max_pair_bytes
    out: dict[str, bytes] = {}
    prefix = "" if project == "." else project + "/"
    base = settings.knowledge_root.strip("/")
    for folder in FOLDERS:
        try:
            tree = commit.tree / f"{prefix}{base}/{folder}"
        except KeyError:
            continue
        for item in tree.traverse():
            name = PurePosixPath(item.path).name
            if (item.type == "blob" and name.lower().endswith(".md")
                    and not name.startswith(".") and item.size <= limit):
                out[item.path[len(prefix):]] = item.data_stream.read()
    try:
        blob = commit.tree / f"{prefix}{INSTRUCTIONS_FILE}"
    except KeyError:
        return out
    if blob.size <= limit:
        out[INSTRUCTIONS_FILE] = blob.data_stream.read()
    return out


def knowledge_files_here(settings: Settings) -> dict[str, bytes]:
    """The knowledge files of the working tree (unreadable ones, and ones over
    ``max_pair_bytes``, left out)."""
    out: dict[str, bytes] = {}
    for path, rel, _kind in knowledge_paths(settings):
        try:
            out[rel] = read_regular_file(path, settings.max_pair_bytes, inside=settings.root)
        except (OSError, UnreadableFileError):
            continue
    return out


def _entries(files: Mapping[str, bytes], settings: Settings) -> dict[str, Entry]:
    base = settings.knowledge_root.strip("/") + "/"
    out: dict[str, Entry] = {}
    for rel, data in files.items():
        if rel == INSTRUCTIONS_FILE:
            kind = "instruction"
        else:
            inner = rel[len(base):] if rel.startswith(base) else rel
            kind = FOLDERS.get(inner.split("/")[0], "rule")
        text = data.decode("utf-8-sig", errors="replace")
        for entry in parse_knowledge(text, rel, kind).entries:
            out[entry.id] = entry
    return out


def compare_knowledge(base: Mapping[str, bytes], head: Mapping[str, bytes],
                      settings: Settings) -> tuple[KnowledgeChange, ...]:
    """Entries added, changed and removed from ``base`` to ``head`` (path, title order)."""
    old = _entries({p: d for p, d in base.items() if head.get(p) != d}, settings)
    new = _entries({p: d for p, d in head.items() if base.get(p) != d}, settings)
    changes = [KnowledgeChange("added", e) for i, e in new.items() if i not in old]
    changes += [KnowledgeChange("changed", e, old[i]) for i, e in new.items()
                if i in old and old[i].entry_hash != e.entry_hash]
    changes += [KnowledgeChange("removed", e) for i, e in old.items() if i not in new]
    order = {"added": 0, "changed": 1, "removed": 2}
    return tuple(sorted(changes, key=lambda c: (order[c.status], c.entry.path, c.entry.line)))


def render_knowledge_text(changes: tuple[KnowledgeChange, ...]) -> list[str]:
    marks = {"added": "A", "changed": "M", "removed": "D"}
    out = []
    for c in changes:
        out.append(f"{marks[c.status]} {c.entry.path}:{c.entry.line}  {c.entry.kind} "
                   f"{c.entry.title!r}")
        out += [f"    {line}" for line in c.text_diff()]
    return out


def render_knowledge_markdown(changes: tuple[KnowledgeChange, ...]) -> list[str]:
    if not changes:
        return []
    counts = ", ".join(f"{sum(c.status == s for c in changes)} {s}"
                       for s in ("added", "changed", "removed"))
    out = ["", f"### Rules, glossary, caveats and metrics ({counts})", ""]
    for c in changes:
        out.append(f"- **{c.status}** {c.entry.kind} *{c.entry.title}* — "
                   f"`{c.entry.path}:{c.entry.line}`")
        if c.status == "added" and c.entry.body.strip():
            out += ["", "  " + "\n  ".join(f"> {line}" for line in
                                           c.entry.text().splitlines()), ""]
        elif c.status == "changed":
            out += ["", "  ```diff", *(f"  {line}" for line in c.text_diff()), "  ```", ""]
    return out
