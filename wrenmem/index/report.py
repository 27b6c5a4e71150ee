"""What a sync of the pairs did (:class:`SyncReport`), in a module of its own: a process
whose sync the watcher ran (``store``, ``forget``, ``sync`` through the daemon) reads the
report without importing the sync and everything it needs."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wrenmem.errors import PairError


@dataclass(frozen=True)
class SyncReport:
    """What a sync did. Paths are relative to the project; seeds appear as ``seed:...``."""

    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()
    unchanged: tuple[str, ...] = ()
    embedded: int = 0
    errors: tuple[PairError, ...] = ()
    warnings: tuple[str, ...] = ()
    rebuilt: bool = False
    rebuild_reason: str | None = None
    noop: bool = False
    model_id: str = ""
    rows: int = 0
    optimized: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "noop": self.noop, "rebuilt": self.rebuilt, "rebuild_reason": self.rebuild_reason,
            "added": list(self.added), "changed": list(self.changed),
            "removed": list(self.removed),
            "renamed": [{"from": a, "to": b} for a, b in self.renamed],
            "unchanged": len(self.unchanged),
            "embedded": self.embedded, "rows": self.rows, "embedder": self.model_id,
            "optimized": self.optimized,
            "journal": False,  # (the pairs journal went; the key stays for scripts reading it)
            "errors": [{"path": e.path, "line": e.line, "reason": e.reason}
                       for e in self.errors],
            "warnings": list(self.warnings),
        }

    def to_wire(self) -> dict[str, Any]:
        """Everything, for the watcher's daemon to send a sync it ran (:meth:`from_wire`)."""
        return {**self.to_dict(), "unchanged": list(self.unchanged),
                "renamed": [list(r) for r in self.renamed]}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> SyncReport:
        """The report :meth:`to_wire` sent (KeyError/TypeError/ValueError if malformed)."""
        def paths(key: str) -> tuple[str, ...]:
            return tuple(str(p) for p in data[key])

        return cls(paths("added"), paths("changed"), paths("removed"),
                   tuple((str(a), str(b)) for a, b in data["renamed"]), paths("unchanged"),
                   int(data["embedded"]),
                   tuple(PairError(str(e["path"]), str(e["reason"]), int(e["line"]))
                         for e in data["errors"]),
                   paths("warnings"), bool(data["rebuilt"]),
                   None if data["rebuild_reason"] is None else str(data["rebuild_reason"]),
                   bool(data["noop"]), str(data["embedder"]), int(data["rows"]),
                   bool(data["optimized"]))

    def summary(self) -> str:
        """One line for people: counts, never the lists of paths."""
        if self.noop:
            return f"index up to date: {self.rows} pairs ({self.model_id})"
        counts = [f"{len(self.added)} added", f"{len(self.changed)} changed",
                  f"{len(self.removed)} removed", f"{len(self.renamed)} renamed",
                  f"{len(self.unchanged)} unchanged"]
        texts = "text" if self.embedded == 1 else "texts"
        return (f"{'rebuilt' if self.rebuilt else 'synced'}: {', '.join(counts)}; "
                f"{self.embedded} {texts} embedded; {self.rows} rows ({self.model_id})")


def render_sync(report: SyncReport | None, schema: Any, knowledge: Any, *, as_json: bool
                ) -> tuple[str, list[str]]:
    """What ``wrenmem sync`` prints: (stdout, the stderr lines), for the click command and
    the CLI's fast path alike. ``report``, ``schema`` and ``knowledge``: their sync reports,
    or None (``report`` is None with Wren's ``index --no-queries``)."""
    err = [f"{e.location()}: {e.reason} (skipped)" for e in report.errors] if report else []
    err += [f"warning: {message}" for message in report.warnings] if report else []
    if as_json:
        data = {**(report.to_dict() if report else {"pairs": None}),
                "schema": schema.to_dict() if schema else None,
                "knowledge": knowledge.to_dict() if knowledge else None}
        return json.dumps(data, ensure_ascii=False, indent=2, sort_keys=False) + "\n", err
    if report is not None and report.rebuilt:
        err.append(f"rebuilt the index: {report.rebuild_reason}")
    lines = [report.summary()] if report else ["pairs not indexed (--no-queries)"]
    if schema is not None:
        state = "schema index up to date" if schema.noop else "schema synced"
        lines.append(f"{state}: {schema.items} items, {schema.embedded} embedded")
    if knowledge is not None and knowledge.entries:
        lines.append(knowledge.summary())
    return "".join(line + "\n" for line in lines), err
