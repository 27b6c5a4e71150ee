"""Helpers for the pairs index tests: register the recording fake embedder, read the table."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.fakes import RecordingEmbedder
from wrenmem.embed.embedders import _CACHE, EMBEDDERS
from wrenmem.settings import Settings, load_settings


def install_fake(monkeypatch: Any, name: str = "fake", **kw: Any) -> RecordingEmbedder:
    """Register a fresh RecordingEmbedder under ``name`` for this test."""
    fake = RecordingEmbedder(**kw)
    monkeypatch.setitem(EMBEDDERS, name, lambda arg, root: fake)
    for key in [k for k in _CACHE if k[0].startswith(name + ":")]:
        monkeypatch.delitem(_CACHE, key)
    return fake


def settings_for(root: Path, embedder: str = "fake") -> Settings:
    return load_settings(root, {"embedder": embedder})


def table_rows(settings: Settings) -> list[dict[str, Any]]:
    """Every row of the pairs table (id, content_hash, question, path, vector)."""
    from wrenmem.index import table as index
    table = index.open_table(index.connect(settings))
    assert table is not None
    data = (table.search().select(["id", "content_hash", "question", "path", "vector"])
            .limit(None).to_arrow())
    return sorted(data.to_pylist(), key=lambda r: r["id"])


def catalog_stats(settings: Settings) -> dict[str, tuple[int, int, int]]:
    """(change time ns, size, inode) of every pair file the catalog lists (its own walk, no
    record, no shortcut): what the stat walk must find."""
    from wrenmem.fs.fsutil import stat_key
    from wrenmem.pairs.catalog import iter_pair_files

    want = {}
    for path in iter_pair_files(settings.knowledge_path):
        try:
            st = os.stat(path)
        except OSError:
            continue
        want[path.relative_to(settings.root).as_posix()] = stat_key(st)
    return want
