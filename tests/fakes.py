"""The one fake embedder of the unit tests: it records every text it is asked to embed.

For the sync logic (what is embedded, when, how often), not a stand-in for the integration
tests, which load a real model.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"\w+")


class RecordingEmbedder:
    """Bag-of-words vectors (each word hashed to a dimension), so texts that share words are
    near and equal texts are equal; ``calls`` holds every batch, ``texts`` every text.

    With ``fail_after`` it raises, as a model dying mid-sync would, instead of embedding a
    batch that would take it past that many texts.
    """

    def __init__(self, model_id: str = "fake@1", dim: int = 64,
                 fail_after: int | None = None):
        self.model_id = model_id
        self._dim = dim
        self.fail_after = fail_after
        self.calls: list[list[str]] = []

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def texts(self) -> list[str]:
        """Every text embedded so far, in order."""
        return [text for call in self.calls for text in call]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.fail_after is not None and len(self.texts) + len(texts) > self.fail_after:
            raise RuntimeError("embedder died")
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD.findall(text.casefold()) or [""]:
                digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
                out[row, int.from_bytes(digest, "little") % self._dim] += 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)
