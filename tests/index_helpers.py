"""A recording fake embedder and small helpers for the index tests."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from wrenmem.embedders import _CACHE, EMBEDDERS
from wrenmem.settings import Settings, load_settings


class RecordingEmbedder:
    """Deterministic hash vectors; remembers every text it was asked to embed."""

    def __init__(self, model_id: str = "fake@1", dim: int = 16):
        self.model_id = model_id
        self._dim = dim
        self.calls: list[list[str]] = []

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def texts(self) -> list[str]:
        return [t for call in self.calls for t in call]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
            rows.append(np.random.default_rng(seed).standard_normal(self._dim))
        out = np.asarray(rows, dtype=np.float32).reshape(len(texts), self._dim)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


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
