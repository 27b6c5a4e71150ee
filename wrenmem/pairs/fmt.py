"""Rewrite pair files in the canonical format (``wrenmem fmt`` and the pre-commit hook)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wrenmem.errors import PairError, WrenmemError
from wrenmem.pairs.catalog import iter_pair_files, require_knowledge_dir
from wrenmem.pairs.pairfile import (
    checked_file_bytes,
    decode_file,
    parse_pair,
    read_pair_bytes,
    render_pair,
)
from wrenmem.pairs.store import write_pair_bytes
from wrenmem.settings import Settings


@dataclass(frozen=True)
class FmtReport:
    """Which files were (or, with ``check``, would be) rewritten, and which could not be read."""

    changed: tuple[str, ...] = ()
    unchanged: int = 0
    errors: tuple[PairError, ...] = field(default_factory=tuple)
    check: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"changed": list(self.changed), "check": self.check,
                "errors": [{"path": e.path, "line": e.line, "reason": e.reason}
                           for e in self.errors]}


def format_files(settings: Settings, paths: Iterable[Path] | None = None, *,
                 check: bool = False) -> FmtReport:
    """Render every pair file (default: all of the project) canonically, in the ``format``
    setting's layout (fenced SQL block, or Wren's ``sql:`` key); ``check`` writes
    nothing. A file that cannot be read as a pair is reported and left as it is."""
    if paths is None:
        require_knowledge_dir(settings)
    targets = list(paths) if paths is not None else list(iter_pair_files(settings.knowledge_path))
    changed: list[str] = []
    broken: list[PairError] = []
    for path in sorted(targets):
        rel = settings.relpath(path)
        if paths is not None and not _inside(settings, path):
            broken.append(PairError(rel, f"not a pair file inside {settings.knowledge_dir} "
                                         "(wrenmem formats only its own pair files)"))
            continue
        try:
            raw = read_pair_bytes(path, rel, settings.max_pair_bytes, inside=settings.root)
            pair = parse_pair(decode_file(raw, rel), rel)
        except PairError as e:
            broken.append(e)
            continue
        text = render_pair(pair, settings.format)
        if raw != text.encode("utf-8"):
            try:  # a rendering that would not read back is reported, never written
                data = checked_file_bytes(text, rel, pair, settings.max_pair_bytes)
            except WrenmemError as e:
                broken.append(PairError(rel, str(e).removeprefix(f"{rel}: ")))
                continue
            if not check:
                try:
                    write_pair_bytes(settings, path, data)
                except WrenmemError as e:  # a link leading out of the project: not written
                    broken.append(PairError(rel, str(e).removeprefix(f"{rel} ")))
                    continue
            changed.append(rel)
    return FmtReport(tuple(changed), len(targets) - len(changed) - len(broken), tuple(broken),
                     check)


def _inside(settings: Settings, path: Path) -> bool:
    """Whether ``path`` names a file in the knowledge folder (its folders resolved, the
    file itself not: a link there is a pair file, wherever it leads)."""
    absolute = Path(os.path.abspath(path))
    return (absolute.parent.resolve() / absolute.name).is_relative_to(settings.knowledge_path)
