"""A reader of a shared index (``role = "reader"``): how far the index is behind the files.
A reader never writes it; it compares the last committed version with its own pair files by
content hash, so an agent on another branch knows what the answers are missing."""

from __future__ import annotations

import time
from dataclasses import dataclass

from wrenmem.errors import WrenmemError
from wrenmem.index import table as index
from wrenmem.index.origin import Origin, local_origin, other_project
from wrenmem.index.snapshot import take_snapshot
from wrenmem.index.team import replica
from wrenmem.settings import Settings
from wrenmem.storage import lance
from wrenmem.storage.embedsync import SyncPlan, plan_sync


@dataclass(frozen=True)
class ReaderView:
    """The committed index as a reader sees it, against the reader's files."""

    uri: str
    version: int | None  # None: the index has no pairs table yet
    built_from: Origin | None
    here: Origin
    plan: SyncPlan
    stale_since: float | None = None  # the remote could not be reached: the local copy's age
    error: str = ""
    owner: str | None = None  # the other project that wrote it: recall refuses

    @property
    def other_branch(self) -> bool:
        return self.built_from is not None and self.built_from.branch != self.here.branch

    def counts(self) -> dict[str, int]:
        return {"added": len(self.plan.added), "changed": len(self.plan.changed),
                "removed": len(self.plan.removed), "renamed": len(self.plan.renamed)}

    def note(self) -> str | None:
        """One line for people, or None when the index holds exactly these files."""
        if self.stale_since is not None:
            return self._stale_note()
        if self.version is None:
            return (f"reader: the shared index {self.uri} has no pairs yet (its writer has "
                    "not synced): recall finds nothing")
        if self.plan.in_sync:
            return None
        counts = ", ".join(f"{n} {label}" for label, n in self.counts().items()
                           if n or label != "renamed")
        source = f" (built from {self.built_from.describe()})" if self.built_from else ""
        branch = (f"; this checkout is on {self.here.branch}" if self.other_branch else "")
        return (f"reader: answering from {self.uri} version {self.version}{source}, behind "
                f"the files here by {counts}{branch}")

    def _stale_note(self) -> str:
        assert self.stale_since is not None
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.stale_since))
        counts = ", ".join(f"{n} {label}" for label, n in self.counts().items()
                           if n or label != "renamed")
        behind = "" if self.plan.in_sync else f"; behind the files here by {counts}"
        return (f"reader: {self.error}; answering from the local copy of version "
                f"{self.version}, stale since {since}{behind}")


def reader_view(settings: Settings) -> ReaderView:
    """Compare the last committed index (its local copy when remote) with the files."""
    origin: Origin | None = None
    version: int | None = None
    stale: replica.ReplicaInfo | None = None
    if settings.remote_index:
        info = replica.refresh(settings)
        version, origin = info.version, info.built_from
        stale = info if info.stale_since is not None else None
    table = lance.open_table(lance.connect(replica.reading_uri(settings)), index.TABLE)
    indexed: dict[str, list[str]] = {}
    if table is not None:
        if not settings.remote_index:
            version, origin = int(table.version), index.table_origin(table)
        indexed = index.read_ids(table)
    elif not settings.remote_index:
        version = None
    here = local_origin(settings.root)
    plan = plan_sync(take_snapshot(settings).desired(), indexed)
    return ReaderView(settings.index_uri, version if table is not None else None, origin,
                      here, plan,
                      stale.stale_since if stale else None, stale.error if stale else "",
                      other_project(origin, here))


def behind_note(settings: Settings) -> str | None:
    """What a reader's recall prints on stderr: how far the index is behind its files.
    An index another project wrote (its recorded git remote names another repository than
    this checkout's) is refused, as a second writer is: its answers are not this project's."""
    view = reader_view(settings)
    if view.owner is not None:
        raise WrenmemError(index.foreign_refusal(settings, view.owner))
    return view.note()
