"""A recording fake embedder for unit tests of the schema index sync logic."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from wrenmem.textsearch import tokenize


class RecordingEmbedder:
    """Bag-of-words vectors (hashed tokens), so similar texts are near; records every call."""

    def __init__(self, model_id: str = "fake@1", dim: int = 64, fail_after: int | None = None):
        self.model_id = model_id
        self.dim = dim
        self.calls: list[list[str]] = []
        self.fail_after = fail_after

    @property
    def embedded(self) -> list[str]:
        return [t for call in self.calls for t in call]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.fail_after is not None and len(self.embedded) + len(texts) > self.fail_after:
            raise RuntimeError("embedder died")
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in tokenize(text) or ["empty"]:
                h = int(hashlib.md5(token.encode()).hexdigest(), 16)
                out[row, h % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1
        return out / norms


def edit_manifest(path: Path, change: Any) -> None:
    """Apply ``change(doc)`` to the manifest JSON and make the file look settled (not racy)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    change(doc)
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    settle(path)


def settle(path: Path, seconds: float = 10) -> None:
    past = time.time() - seconds
    os.utime(path, (past, past))
