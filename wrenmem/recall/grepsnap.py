"""The grep snapshot: a one-shot grep recall over 100,000 files without parsing any.

Building grep's BM25F index from every pair costs seconds at 100,000 files, so the built
index is saved in ``.wrenmem/grep-snapshot.bin`` (postings as numpy-ready arrays, document
lengths, each pair as the catalog stores it, the twin groups, the unreadable files), keyed
by the stat of every pair file and of the manifest, and used only while a fresh listing
gives the same key with no file too recent to vouch for (:func:`wrenmem.fs.fsutil.is_racy`).
A question is scored with numpy in the same float64 order as
:class:`wrenmem.textsearch.Bm25Index` (the same scores, bit for bit), and only the best
answers are ranked the ordinary way. Only searches without filters use it (a CLI call's).
"""

from __future__ import annotations

import hashlib
import logging
import marshal
import math
import os
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from wrenmem.errors import PairError
from wrenmem.fs import statedir
from wrenmem.fs.fsutil import RACY_SECONDS, read_marshal, stat_key, write_marshal
from wrenmem.pairs import listing
from wrenmem.pairs.catalog import _pair_from_record, _pair_to_record
from wrenmem.pairs.pairfile import Pair
from wrenmem.recall.fusion import _normal, at_least_a_phrasing
from wrenmem.recall.hits import SEED_WEIGHT, Hit, rank, sql_key
from wrenmem.recall.model import lexical_score
from wrenmem.settings import Settings
from wrenmem.textsearch import K1, TOKENIZER_VERSION, B, tokenize

log = logging.getLogger(__name__)

FILE_NAME = statedir.GREP_SNAPSHOT
VERSION = 2  # 2: keyed by the shared stat walk (wrenmem.pairs.listing)
MIN_PAIRS = 2_000  # below this the ordinary build takes a few hundred milliseconds
# Saving costs about as much as the build it follows (at 100,000 pairs 4.4 s of CPU at load
# 10): after a change, a snapshot is saved again only once this long has passed since the
# last save, so a run of edits and searches pays it at most once a minute.
SAVE_EVERY_SECONDS = 60.0


def snapshot_path(settings: Settings) -> Path:
    return settings.state_dir / FILE_NAME


def listing_key(settings: Settings) -> str | None:
    """The key of the pair files and manifest as they are now; None when a file is too
    recent for its stat to vouch for its content, or the folder cannot be listed whole."""
    if (settings.state_dir / statedir.IMPORT_SWAP).exists():
        return None  # an import to finish first (the ordinary scan does it)
    walk = listing.walk(settings)  # the same walk as a no-op sync's
    if not walk.complete or walk.racy(walk.taken_at):
        return None
    now = walk.taken_at
    parts = [f"{VERSION}\0{TOKENIZER_VERSION}\0{settings.root}\0{settings.knowledge_path}\0"
             f"{settings.max_pair_bytes}\0{settings.seeds}\0{settings.manifest_path}"]
    try:
        st = os.stat(settings.manifest_path)
        changed, size, inode = stat_key(st)  # the ctime: an mtime put back is seen
        if now - changed / 1e9 < RACY_SECONDS:
            return None
        parts.append(f"manifest\0{changed}\0{size}\0{inode}")
    except OSError:
        parts.append("no manifest")
    parts.append(walk.id)
    h = hashlib.sha256("\n".join(parts).encode("utf-8", "surrogateescape"))
    h.update(walk.keys)
    return h.hexdigest()


def due(settings: Settings) -> bool:
    """Whether a search that built the index should save it (see SAVE_EVERY_SECONDS)."""
    try:
        return time.time() - snapshot_path(settings).stat().st_mtime >= SAVE_EVERY_SECONDS
    except OSError:
        return True


def save(settings: Settings, key: str, pairs: Sequence[Pair],
         docs: Sequence[Mapping[str, float]], errors: Sequence[Any]) -> bool:
    """Save the index over ``pairs`` (term vectors ``docs``, in that order) under ``key``
    (:func:`listing_key`, taken before the pairs were read)."""
    import numpy as np

    lists: dict[str, tuple[list[int], list[float]]] = {}
    for n, doc in enumerate(docs):
        for term, tf in doc.items():
            entry = lists.get(term)
            if entry is None:
                entry = lists[term] = ([], [])
            entry[0].append(n)
            entry[1].append(tf)
    postings = {t: (np.asarray(ids, dtype=np.int32).tobytes(),
                    np.asarray(tfs, dtype=np.float64).tobytes())
                for t, (ids, tfs) in lists.items()}
    groups: dict[tuple[str, str], int] = {}
    group_of = [groups.setdefault(
        (p.datasource or "", sql_key(p.sql)) if p.sql.strip() else ("", p.path), len(groups))
        for p in pairs]
    questions: dict[str, list[int]] = {}
    for n, p in enumerate(pairs):
        for phrasing in (p.nl, *p.also):
            if phrasing:
                questions.setdefault(_normal(phrasing), []).append(n)
    codes = sorted((zlib.crc32(q.encode("utf-8", "surrogateescape")), n)
                   for q, ns in questions.items() for n in ns)
    encoded = [marshal.dumps((p.path, _pair_to_record(p))) for p in pairs]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(b) for b in encoded])
    record = {
        "v": VERSION, "key": key, "count": len(pairs),
        "lengths": np.asarray([sum(d.values()) for d in docs], dtype=np.float64).tobytes(),
        "postings": postings, "groups": np.asarray(group_of, dtype=np.int32).tobytes(),
        "seed": np.asarray([p.source == "seed" for p in pairs], dtype=bool).tobytes(),
        "question_codes": np.asarray([c for c, _n in codes], dtype=np.uint32).tobytes(),
        "question_docs": np.asarray([n for _c, n in codes], dtype=np.int32).tobytes(),
        "pairs": b"".join(encoded), "offsets": offsets.tobytes(),
        "errors": [(e.path, e.reason, e.line) for e in errors],
    }
    return write_marshal(snapshot_path(settings), record)


class Snapshot:
    """A saved grep index (see the module docstring)."""

    def __init__(self, data: dict[str, Any]):
        import numpy as np

        self.count = int(data["count"])
        self.lengths = np.frombuffer(data["lengths"], dtype=np.float64)
        self.postings: dict[str, tuple[bytes, bytes]] = data["postings"]
        self.groups = np.frombuffer(data["groups"], dtype=np.int32)
        self.seed = np.frombuffer(data["seed"], dtype=bool)
        # the documents of each question (nl or also), by the CRC-32 of its normal form
        self.codes = np.frombuffer(data["question_codes"], dtype=np.uint32)
        self.code_docs = np.frombuffer(data["question_docs"], dtype=np.int32)
        self.records: bytes = data["pairs"]
        self.offsets = np.frombuffer(data["offsets"], dtype=np.int64)
        self.errors = tuple(PairError(path, reason, line)
                            for path, reason, line in data["errors"])
        if not (len(self.lengths) == len(self.groups) == len(self.seed)
                == len(self.offsets) - 1 == self.count) or len(self.codes) != len(
                self.code_docs) or int(self.offsets[-1]) != len(self.records):
            raise ValueError("the grep snapshot's parts are not of one size")
        self.average = float(sum(self.lengths.tolist())) / self.count if self.count else 1.0
        self._pairs: dict[int, Pair] = {}

    def pair(self, n: int) -> Pair:
        found = self._pairs.get(n)
        if found is None:
            a, b = int(self.offsets[n]), int(self.offsets[n + 1])
            path, rec = marshal.loads(self.records[a:b])
            found = self._pairs[n] = _pair_from_record(path, rec)
        return found

    def _postings(self, term: str) -> tuple[Any, Any] | None:
        import numpy as np

        raw = self.postings.get(term)
        if raw is None:
            return None
        return np.frombuffer(raw[0], dtype=np.int32), np.frombuffer(raw[1], dtype=np.float64)

    def scores(self, terms: Sequence[str]) -> tuple[Any, Any]:
        """(documents, BM25F scores) of the documents holding any of ``terms``, as
        :meth:`wrenmem.textsearch.Bm25Index.term_scores` computes them."""
        import numpy as np

        total = np.zeros(self.count, dtype=np.float64)
        touched = np.zeros(self.count, dtype=bool)
        for term in dict.fromkeys(terms):
            found = self._postings(term)
            if found is None:
                continue
            docs, tf = found
            idf = math.log(1 + (self.count - len(docs) + 0.5) / (len(docs) + 0.5))
            norm = K1 * (1 - B + B * self.lengths[docs] / self.average)
            total[docs] += idf * tf * (K1 + 1) / (tf + norm)
            touched[docs] = True
        hit = np.flatnonzero(touched)
        return hit, total[hit]

    def best_possible(self, terms: Sequence[str]) -> float:
        total = 0.0
        for term in dict.fromkeys(terms):
            raw = self.postings.get(term)
            df = len(raw[0]) // 4 if raw is not None else 0
            total += math.log(1 + (self.count - df + 0.5) / (df + 0.5)) * (K1 + 1)
        return total

    def rank(self, query: str, k: int, backend: str, extra: Sequence[str] = ()) -> list[Hit]:
        """:meth:`wrenmem.recall.bm25f.GrepIndex.rank` over the snapshot: the same hits."""
        import numpy as np

        text = " ".join([query, *extra])
        terms = tokenize(text)
        docs, raw = self.scores(terms)
        keep = raw > 0
        docs, raw = docs[keep], raw[keep]
        if not len(docs):
            return []
        best_possible = self.best_possible(terms)
        best = float(raw.max())
        order = np.lexsort((docs, -raw))  # by score, then document (= path) order
        docs, raw = docs[order], raw[order]
        found = set(docs.tolist())
        code = zlib.crc32(_normal(query).encode("utf-8", "surrogateescape"))
        at = int(np.searchsorted(self.codes, code))
        identical = set()  # maybe the question asked (at_least_a_phrasing decides), a superset
        while query and at < len(self.codes) and int(self.codes[at]) == code:
            if int(self.code_docs[at]) in found:
                identical.add(int(self.code_docs[at]))
            at += 1
        size = min(len(docs), 4 * k + 16)
        while True:
            # Every pair past ``size`` scores at most the calibrated score of the last one
            # in: the answers whose best pair beats that are ahead of everything left out.
            cut = float(raw[size - 1]) if size < len(docs) else -1.0
            chosen = set(docs[:size].tolist()) | identical
            if cut >= 0:  # (rounding may tie pairs just below the cut with it)
                chosen |= set(docs[size:][raw[size:] >= cut * (1 - 1e-9)].tolist())
            groups = {int(self.groups[n]) for n in chosen}
            members = np.flatnonzero(np.isin(self.groups[docs], list(groups)))
            picked = docs[members].tolist()
            scores = dict(zip(docs.tolist(), raw.tolist(), strict=True))
            calibrated = _calibrated(picked, scores, best, best_possible)
            scored = [(at_least_a_phrasing(c, query, self.pair(n)), self.pair(n), scores[n])
                      for n, c in zip(picked, calibrated, strict=True)]
            if cut < 0:
                return rank(scored, k, backend, query)
            floor = _calibrated([0], {0: cut}, best, best_possible)[0]
            ahead: dict[int, float] = {}
            for n, (s, _p, _r) in zip(picked, scored, strict=True):
                value = s * SEED_WEIGHT if self.seed[n] else s
                g = int(self.groups[n])
                ahead[g] = max(ahead.get(g, -1.0), value)
            if sum(v > floor for v in ahead.values()) >= k:
                return rank(scored, k, backend, query)
            size = min(len(docs), size * 4)


def _calibrated(picked: Sequence[int], scores: dict[int, float], best: float,
                best_possible: float) -> list[float]:
    """The calibrated scores of ``picked`` as over the whole list: with ``best``, the best
    raw score of all the pairs found, which :func:`lexical_score` divides by."""
    values = [scores[n] for n in picked]
    return lexical_score([*values, best], best_possible)[:len(values)]


def read_ahead(settings: Settings) -> Callable[[], Any]:
    """Start reading the saved snapshot (and importing numpy, which scoring it needs) in a
    thread, while the caller lists the files for its key (mostly system calls, which let
    the thread run): the call returned waits for it and gives what :func:`load` takes."""
    found: list[Any] = []

    def read() -> None:
        data = read_marshal(snapshot_path(settings))
        found.append(data)
        if data is not None:
            import numpy  # noqa: F401

    thread = threading.Thread(target=read, daemon=True, name="wrenmem-grep-snapshot")
    thread.start()

    def result() -> Any:
        thread.join()
        return found[0] if found else None

    return result


_UNREAD = object()


def load(settings: Settings, key: str | None, data: Any = _UNREAD) -> Snapshot | None:
    """The saved snapshot while ``key`` (:func:`listing_key`, now) is the one it was saved
    under; else None. ``data``: the file's content, read already (:func:`read_ahead`)."""
    if key is None:
        return None
    if data is _UNREAD:
        data = read_marshal(snapshot_path(settings))
    try:
        if not isinstance(data, dict) or data.get("v") != VERSION or data["key"] != key:
            return None
        return Snapshot(data)
    except (KeyError, TypeError, ValueError):
        return None


