"""Adding a rule, caveat, metric or glossary term: a ``##`` entry appended to a knowledge
file in the format people write by hand (:mod:`wrenmem.knowledge.entries` reads it back).
The file is the truth: one file per entry by default, written whole under a temporary
name and moved into place; an entry of the same title in that file is refused."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from wrenmem.errors import WrenmemError
from wrenmem.fs.fsutil import atomic_write_text, read_text_file
from wrenmem.fs.inside import outside_reason
from wrenmem.knowledge.entries import FOLDERS, Entry, parse_knowledge
from wrenmem.knowledge.files import knowledge_root
from wrenmem.knowledge.slug import slugify
from wrenmem.settings import Settings

KIND_FOLDERS = {kind: folder for folder, kind in FOLDERS.items()}  # rule -> rules …
MAX_KNOWLEDGE_FILE = 4 * 1024 * 1024


def add_entry(settings: Settings, kind: str, title: str, text: str, *,
              synonyms: Sequence[str] = (), columns: Sequence[str] = (),
              file: str | None = None) -> Entry:
    """Append the entry ``title`` (``text`` its body) of ``kind`` (rule, caveat, metric,
    glossary) and return it as read back from the file."""
    if kind not in KIND_FOLDERS:
        raise WrenmemError(f"unknown kind {kind!r} (one of {', '.join(KIND_FOLDERS)})")
    title = " ".join(title.split())
    if not title or title.startswith("#"):
        raise WrenmemError("the title must be a non-empty line of text (no leading #)")
    body = "\n".join(line.rstrip() for line in text.strip().splitlines())
    if not body:
        raise WrenmemError(f"the {kind} {title!r} has no text")
    for label, values in (("synonym", synonyms), ("column", columns)):
        for value in values:
            if not value.strip() or any(c in value for c in ",;\n"):
                raise WrenmemError(f"{label} {value!r}: one name, without , ; or a newline")
    folder = knowledge_root(settings) / KIND_FOLDERS[kind]
    name = file or slugify(title)
    if "/" in name or "\\" in name or name.startswith("."):
        raise WrenmemError(f"--file {name!r}: a file name in {settings.relpath(folder)}/, "
                           "without folders")
    path = folder / (name if name.endswith(".md") else f"{name}.md")
    rel = settings.relpath(path)
    old = (read_text_file(path, MAX_KNOWLEDGE_FILE, inside=settings.root)  # never a link out
           if path.exists() else "")
    before = parse_knowledge(old, rel, kind) if old else None
    if before is not None:
        same = [e for e in before.entries if e.title.casefold() == title.casefold()]
        if same:
            raise WrenmemError(f"{rel}:{same[0].line}: there is already a {kind} "
                               f"{same[0].title!r}; edit the file to change it")
    lines = [f"## {title}"]
    if synonyms:
        lines.append(f"Synonyms: {', '.join(s.strip() for s in synonyms)}")
    if columns:
        lines.append(f"Columns: {', '.join(c.strip() for c in columns)}")
    if synonyms or columns:
        lines.append("")
    lines.append(body)
    entry_text = "\n".join(lines) + "\n"
    new = (old.rstrip("\n") + "\n\n" + entry_text) if old.strip() else entry_text
    after = parse_knowledge(new, rel, kind)
    added = [e for e in after.entries if e.title == title]
    count = len(before.entries) if before is not None else 0
    if (len(added) != 1 or len(after.entries) != count + 1 or after.problems
            or after.refused is not None):
        raise WrenmemError(f"{rel}: the entry would not read back as one {kind} (the file's "
                           "headings are nested otherwise): add it by hand")
    outside = outside_reason(path, settings.root)  # a dangling link out: never written
    if outside is not None:
        raise WrenmemError(f"{rel}: {outside}")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(path), new)
    return added[0]
