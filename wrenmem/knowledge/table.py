"""The knowledge index: entries of the knowledge files, embedded, in the table ``knowledge``,
synced like the schema index (:func:`wrenmem.storage.embedsync.apply`). A state file
(``.wrenmem/knowledge_index.json``) records the entries' fingerprint and the embedder: when
they match, a sync opens nothing and loads no model."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from wrenmem.embed.embedders import Embedder, get_embedder
from wrenmem.errors import WrenmemError
from wrenmem.fs import statedir
from wrenmem.knowledge.entries import Entry
from wrenmem.knowledge.files import Knowledge, load_knowledge
from wrenmem.settings import Settings
from wrenmem.storage import embedsync, lance
from wrenmem.storage.lock import index_lock
from wrenmem.textsearch import tokenize

log = logging.getLogger(__name__)
TABLE = "knowledge"
STATE_FILE = statedir.KNOWLEDGE_STATE
STATE_VERSION = 1


@dataclass(frozen=True)
class KnowledgeSyncReport:
    """What a knowledge sync did; ``noop``: nothing was opened or loaded."""

    entries: int
    embedded: int = 0
    deleted: int = 0
    unchanged: int = 0
    noop: bool = False
    embedder: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        if self.noop:
            return f"knowledge index up to date: {self.entries} entries"
        return (f"knowledge synced: {self.entries} entries, {self.embedded} embedded, "
                f"{self.deleted} removed")


def indexed_entries(knowledge: Knowledge) -> list[Entry]:
    """The entries the index holds: every entry with something to say."""
    return [e for e in knowledge.entries if not e.empty or e.synonyms or e.columns]


def fingerprint(entries: list[Entry]) -> str:
    digest = hashlib.sha256()
    for e in entries:
        digest.update(f"{e.id}\0{e.entry_hash}\0".encode())
    return digest.hexdigest()


def state_path(settings: Settings) -> Path:
    return settings.state_dir / STATE_FILE


def read_state(settings: Settings) -> dict[str, Any]:
    return embedsync.read_state(state_path(settings), STATE_VERSION)


def _table_present(settings: Settings) -> bool:
    return embedsync.table_present(settings.index_uri, TABLE)


def _fresh(settings: Settings, state: dict[str, Any], fp: str, embedder_id: str,
           count: int) -> bool:
    if state.get("fingerprint") != fp or state.get("index") != settings.index_uri:
        return False
    if count == 0:
        return True  # nothing to hold: no table needed
    return state.get("embedder") == embedder_id and _table_present(settings)


def noop_report(settings: Settings, embedder_id: str) -> KnowledgeSyncReport | None:
    """What :func:`sync_knowledge` returns when the index holds the knowledge files'
    entries already (read-only, no model, no LanceDB); None when it would write."""
    entries = indexed_entries(load_knowledge(settings))
    return _noop(settings, entries, fingerprint(entries), embedder_id)


def _noop(settings: Settings, entries: list[Entry], fp: str, embedder_id: str
          ) -> KnowledgeSyncReport | None:
    if settings.is_reader or _fresh(settings, read_state(settings), fp, embedder_id,
                                    len(entries)):
        return KnowledgeSyncReport(len(entries), unchanged=len(entries), noop=True,
                                   embedder=embedder_id)
    return None


def sync_knowledge(settings: Settings, *, knowledge: Knowledge | None = None,
                   embedder: Embedder | None = None) -> KnowledgeSyncReport:
    """Bring the ``knowledge`` table to the knowledge files, embedding only what changed."""
    embedder = embedder or get_embedder(settings.embedder, root=settings.root)
    entries = indexed_entries(knowledge or load_knowledge(settings))
    fp = fingerprint(entries)
    noop = _noop(settings, entries, fp, embedder.model_id)
    if noop is not None:
        return noop
    with lance.disk_full_errors(settings.index_uri, "syncing the knowledge index"), \
            index_lock(settings):
        embedded, deleted = _apply(settings, entries, embedder)
        _write_state(settings, fp, embedder.model_id, len(entries))
    return KnowledgeSyncReport(len(entries), embedded, deleted, len(entries) - embedded,
                               False, embedder.model_id)


def _write_state(settings: Settings, fp: str, embedder_id: str, entries: int) -> None:
    embedsync.write_state(state_path(settings), {
        "version": STATE_VERSION, "fingerprint": fp, "embedder": embedder_id,
        "index": settings.index_uri, "entries": entries})


def _apply(settings: Settings, entries: list[Entry], embedder: Embedder) -> tuple[int, int]:
    """Write what changed (:func:`wrenmem.storage.embedsync.apply`): returns (texts embedded,
    rows deleted)."""
    by_id = {e.id: e for e in entries}
    done = embedsync.apply(
        lance.connect(settings.index_uri), TABLE, "entry_hash",
        {e.id: (e.entry_hash, e.search_text()) for e in entries}, embedder,
        lambda ids: _columns([by_id[i] for i in ids], embedder.model_id),
        uri=settings.index_uri, what="knowledge index")
    return done.embedded, done.deleted


def _columns(entries: list[Entry], embedder_id: str) -> dict[str, list[str]]:
    return {"id": [e.id for e in entries], "entry_hash": [e.entry_hash for e in entries],
            "embedder": [embedder_id] * len(entries), "kind": [e.kind for e in entries],
            "path": [e.path for e in entries], "title": [e.title for e in entries],
            "terms": [" ".join(dict.fromkeys(tokenize(e.search_text()))) for e in entries],
            "text": [e.search_text() for e in entries]}  # what was embedded


def vector_search(settings: Settings, question: str, embedder: Embedder, limit: int
                  ) -> list[tuple[str, str, float]]:
    """(entry id, entry hash, cosine) of the nearest entries, best first; [] without a table."""
    table = lance.open_table(lance.connect(settings.index_uri), TABLE)
    if table is None:
        return []
    vector = embedder.embed([question[:settings.max_embed_chars]])[0]
    try:
        rows = (table.search(vector.tolist()).distance_type("cosine")
                .select(["id", "entry_hash", "_distance"]).limit(limit).to_list())
    except Exception as e:
        raise WrenmemError(f"the knowledge index cannot be read: {lance.short_error(e)}"
                           ) from e
    return [(r["id"], r["entry_hash"], 1.0 - float(r["_distance"])) for r in rows]


@dataclass(frozen=True)
class KnowledgeDrift:
    """Whether the ``knowledge`` table holds the current entries (for check/status)."""

    files: int
    entries: int
    fresh: bool
    missing: bool
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def knowledge_drift(settings: Settings, embedder_id: str) -> KnowledgeDrift:
    """Compare the index with the files without opening LanceDB or loading a model."""
    knowledge = load_knowledge(settings)
    entries = indexed_entries(knowledge)
    state = read_state(settings)
    files = len(knowledge.files)
    if not entries:
        fresh = not state or state.get("entries", 0) == 0 or not _table_present(settings)
        return KnowledgeDrift(files, 0, fresh, False,
                              "" if fresh else "the index holds entries that are gone")
    if not state or not _table_present(settings):
        return KnowledgeDrift(files, len(entries), False, True, "no knowledge index yet")
    if state.get("embedder") != embedder_id:
        return KnowledgeDrift(files, len(entries), False, False,
                              f"built by {state.get('embedder')}, the setting is {embedder_id}")
    if _fresh(settings, state, fingerprint(entries), embedder_id, len(entries)):
        return KnowledgeDrift(files, len(entries), True, False)
    return KnowledgeDrift(files, len(entries), False, False, "the knowledge files changed")


def reset_knowledge(settings: Settings) -> bool:
    """Drop the ``knowledge`` table and its state; True when there was a table."""
    with index_lock(settings):
        state_path(settings).unlink(missing_ok=True)
        if not _table_present(settings):
            return False
        return bool(lance.drop_table(lance.connect(settings.index_uri), TABLE))
