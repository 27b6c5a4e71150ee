"""Finding and reading the knowledge files of a project (the files are the truth).

``knowledge/rules|glossary|caveats|metrics/**/*.md`` under the ``knowledge_root`` setting
(default ``knowledge``, Wren's v5 layout) and the project's ``instructions.md`` (Wren's
legacy file). Reading is cached in the process by each file's stat, so asking again after
nothing changed reads no file; one unreadable file is reported and skipped.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from wrenmem.errors import PairError, UnreadableFileError
from wrenmem.fs.encoding import not_utf8
from wrenmem.fs.fsutil import change_ns, is_racy, os_error_reason, read_regular_file
from wrenmem.knowledge.entries import (
    FOLDERS,
    INSTRUCTIONS_FILE,
    Entry,
    ParsedFile,
    parse_knowledge,
)
from wrenmem.settings import Settings

SKIPPED = ("readme.md",)


@dataclass(frozen=True)
class Knowledge:
    """Every knowledge file of a project, parsed. ``fingerprint`` hashes their contents."""

    files: tuple[ParsedFile, ...]
    errors: tuple[PairError, ...]  # files that could not be read
    fingerprint: str

    @property
    def entries(self) -> tuple[Entry, ...]:
        return tuple(e for f in self.files for e in f.entries)

    @property
    def rules(self) -> tuple[Entry, ...]:
        """Every entry that is not a glossary term, non-empty, in file order."""
        return tuple(e for e in self.entries if e.kind != "glossary" and not e.empty)

    @property
    def terms(self) -> tuple[Entry, ...]:
        return tuple(e for e in self.entries if e.kind == "glossary")


def knowledge_root(settings: Settings) -> Path:
    return (settings.root / settings.knowledge_root).resolve()


def knowledge_paths(settings: Settings) -> list[tuple[Path, str, str]]:
    """(absolute path, project-relative path, kind) of every knowledge file, sorted."""
    out: list[tuple[Path, str, str]] = []
    base = knowledge_root(settings)
    try:  # the folder's project-relative name, once (resolving each file costs more)
        rel_base = base.relative_to(settings.root.resolve()).as_posix()
    except ValueError:
        rel_base = settings.relpath(base)
    for folder, kind in FOLDERS.items():
        top = base / folder
        if not top.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            inner = os.path.relpath(dirpath, base).replace(os.sep, "/")
            for name in sorted(filenames):
                if (not name.lower().endswith(".md") or name.startswith(".")
                        or name.lower() in SKIPPED):
                    continue
                rel = f"{rel_base}/{inner}/{name}" if rel_base != "." else f"{inner}/{name}"
                out.append((Path(dirpath) / name, rel, kind))
    legacy = settings.root / INSTRUCTIONS_FILE
    if legacy.is_file():
        out.append((legacy, INSTRUCTIONS_FILE, "instruction"))
    return sorted(out, key=lambda t: t[1])


def is_knowledge_path(settings: Settings, path: Path) -> bool:
    """Whether a change at ``path`` (a file or folder) may change the knowledge files."""
    if path == settings.root / INSTRUCTIONS_FILE:
        return True
    base = knowledge_root(settings)
    try:
        rel = path.relative_to(base)
    except ValueError:
        return False
    if not rel.parts:
        return True
    if rel.parts[0] not in FOLDERS or any(p.startswith(".") for p in rel.parts):
        return False
    return len(rel.parts) == 1 or rel.name.lower().endswith(".md") or "." not in rel.name


# path -> (stat key, parsed file, content digest); racy files are never kept. The key holds
# the mode, so a file made unreadable by chmod is read again (and said to be unreadable).
_cache: dict[str, tuple[tuple[int, int, int, int, int], ParsedFile, str]] = {}
_cache_lock = threading.Lock()


def load_knowledge(settings: Settings) -> Knowledge:
    """Every knowledge file, parsed (files not changed since the last call are not read)."""
    files: list[ParsedFile] = []
    errors: list[PairError] = []
    digest = hashlib.sha256()
    for path, rel, kind in knowledge_paths(settings):
        try:
            st = path.stat()
        except OSError as e:
            errors.append(PairError(rel, os_error_reason(path, e)))
            continue
        key = (st.st_mtime_ns, change_ns(st), st.st_size, st.st_ino, st.st_mode)
        cache_key = f"{path}\0{kind}"
        with _cache_lock:
            cached = _cache.get(cache_key)
        if cached is not None and cached[0] == key:
            parsed, content = cached[1], cached[2]
        else:
            try:
                data, text = _read(path, settings)
            except UnreadableFileError as e:
                errors.append(PairError(rel, e.reason))
                continue
            parsed = parse_knowledge(text, rel, kind)
            content = hashlib.sha256(data).hexdigest()
            if not is_racy(change_ns(st)):
                with _cache_lock:
                    _cache[cache_key] = (key, parsed, content)
        if parsed.refused is not None:  # said where and why; the other files still served
            errors.append(parsed.refused)
            continue
        digest.update(f"{rel}\0{kind}\0{content}\0".encode())
        files.append(parsed)
    return Knowledge(tuple(files), tuple(errors), digest.hexdigest())


def _read(path: Path, settings: Settings) -> tuple[bytes, str]:
    """A knowledge file's bytes and text; :class:`UnreadableFileError` says why not (not a
    regular file, too big, a link loop, no permission, not UTF-8)."""
    data = b""
    try:
        data = read_regular_file(path, settings.max_pair_bytes, inside=settings.root)
        return data, data.decode("utf-8-sig")
    except OSError as e:
        raise UnreadableFileError(os_error_reason(path, e)) from e
    except UnicodeDecodeError as e:
        raise UnreadableFileError(not_utf8(data, e)) from e


def read_knowledge_text(settings: Settings, rel: str) -> str:
    """The text of the knowledge file ``rel`` (project-relative), refusing anything that is
    not one of the project's knowledge files (FileNotFoundError) and saying why one cannot
    be read (:class:`UnreadableFileError`, as ``validate`` words it): what MCP resources
    serve. A file :func:`load_knowledge` does not serve (a link out of the project, a NUL
    byte, front matter that does not read) is refused with its reason."""
    for path, known, _kind in knowledge_paths(settings):
        if known == rel:
            refused = next((e for e in load_knowledge(settings).errors if e.path == rel), None)
            if refused is not None:
                raise UnreadableFileError(refused.reason)
            return _read(path, settings)[1]
    raise FileNotFoundError(rel)
