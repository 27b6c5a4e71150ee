"""Recall fitted to the team's own pairs: a tilt of the learned ranking, chosen at sync.

A project's pairs are labelled data: phrasings of one SQL (*answered before*) and SQLs of
one skeleton (*new question*), the two leave-one-out protocols of ``wrenmem eval``
(:mod:`wrenmem.recall.evaluate`). At a sync that changed the pairs (never a no-op one, never
at recall), when the set of those questions differs from the one last fitted on, the hybrid
backend's candidates and evidence are gathered once for up to :data:`PROBES` of each task
(a sample by hash, stable as pairs come and go), and four rankings are compared on them:

- ``prior``: the shipped model alone;
- ``grep-heavy`` and ``vector-heavy``: the shipped model plus a large weight on the
  keyword (BM25 relative to the best) or the dense (cosine gap to the best) evidence, which
  rank about as the grep and vector backends do;
- ``adapted``: the weights of the two, from a small grid, that put most right answers first
  (chosen inside each fold of a five-fold cross-validation, so its figure is out of fold).

Every weight is shrunk toward the prior by ``n / (n + SHRINK)`` (``n``: the questions
asked), and a ranking other than the prior is chosen only when it puts at least
:data:`MIN_GAIN` more of them right first (mean R@1 of the two tasks, each weighing its
probes up to :data:`TASK_WEIGHT`) and loses at most :data:`TASK_LOSS` on either task (of
:data:`TASK_FLOOR` probes or more). Below :data:`MIN_PROBES`
questions the prior stays. The result is written to ``.wrenmem/recall-fit.json`` (derived,
safe to delete), keyed by a fingerprint of the questions, the shipped weights and the
embedder; the learned scorer reads it (again only when the file changed) and adds the tilt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wrenmem import statedir
from wrenmem.fsutil import atomic_write_text
from wrenmem.recall import evaluate, model, sqlshape
from wrenmem.recall.hits import Filters

if TYPE_CHECKING:
    from wrenmem.embedders import Embedder
    from wrenmem.pairs.pairfile import Pair
    from wrenmem.settings import Settings

log = logging.getLogger(__name__)
VERSION = 1  # of the fit file and of how it is made
PROBES = 150  # questions asked of each task, at most (sampled by hash)
MIN_PROBES = 30  # fewer questions in all: the prior alone
SHRINK = 50.0  # a weight is multiplied by n / (n + SHRINK)
MIN_GAIN = 0.01  # mean R@1 a ranking must gain over the prior to be chosen
TASK_LOSS = 0.05  # ... and R@1 it may lose on either task, at most
TASK_WEIGHT = 50  # a task weighs as many probes as it has, up to this many
TASK_FLOOR = 20  # a task of fewer probes is not held to TASK_LOSS (too few to tell)
FOLDS = 5
KEYWORD_GRID = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)
DENSE_GRID = (0.0, 5.0, 10.0, 20.0, 40.0)
HEAVY_KEYWORD = 40.0  # grep-heavy: the keyword evidence outweighs the rest
HEAVY_DENSE = 200.0  # vector-heavy: the cosine's gap outweighs the rest
CANDIDATES = ("prior", "grep-heavy", "vector-heavy", "adapted")


@dataclass(frozen=True)
class Gathered:
    """One question's candidates: their ranking score under the prior, their BM25 relative
    to the best and cosine gap to the best (twins sharing their best), and which are
    right."""

    task: str
    base: tuple[float, ...]
    keyword: tuple[float, ...]
    dense: tuple[float, ...]
    right: tuple[bool, ...]
    fold: int


def fit_path(settings: Settings) -> Any:
    return settings.state_dir / statedir.RECALL_FIT


def fingerprint(probes: Sequence[evaluate.Probe], model_id: str) -> str:
    """What a fit depends on: the questions and their right answers, the shipped weights,
    the embedder and this module's version."""
    digest = hashlib.sha256()
    weights = model.load()
    digest.update(f"{VERSION}\0{weights.version}\0{weights.fingerprint}\0{model_id}\0"
                  f"{PROBES}\0".encode())
    for p in probes:
        digest.update(json.dumps([p.task, p.question, p.datasource, sorted(p.exclude),
                                  sorted(map(str, p.right))], ensure_ascii=False).encode())
    return digest.hexdigest()[:32]


def _probe_hash(p: evaluate.Probe) -> str:
    return hashlib.sha256(json.dumps([p.task, p.question, sorted(p.exclude)],
                                     ensure_ascii=False).encode()).hexdigest()


def sample(probes: Sequence[evaluate.Probe], limit: int) -> list[evaluate.Probe]:
    """At most ``limit`` probes of each task: those of the smallest hashes, so one pair
    added or removed changes the sample by a probe or two, not all of it."""
    out: list[evaluate.Probe] = []
    for task in evaluate.TASKS:
        mine = [p for p in probes if p.task == task]
        out += sorted(mine, key=_probe_hash)[:limit] if len(mine) > limit else mine
    return out


def read(settings: Settings) -> dict[str, Any] | None:
    """The project's fit file, or None (absent, unreadable, another version)."""
    try:
        data = json.loads(fit_path(settings).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("version") == VERSION else None


class TiltFile:
    """The tilt of ``.wrenmem/recall-fit.json`` for the scorer: read again only when the
    file's stat changed, and used only when it was fitted for the shipped weights and this
    embedder (else the prior)."""

    def __init__(self, settings: Settings, model_id: str | None):
        self.settings = settings
        self.model_id = model_id
        self._stat: tuple[int, int] | None = None
        self._tilt: model.Tilt | None = None

    def __call__(self) -> model.Tilt | None:
        try:
            st = os.stat(fit_path(self.settings))
        except OSError:
            self._stat, self._tilt = None, None
            return None
        key = (st.st_mtime_ns, st.st_size)
        if key != self._stat:
            self._stat, self._tilt = key, _tilt(read(self.settings), self.model_id)
        return self._tilt


def _tilt(data: dict[str, Any] | None, model_id: str | None) -> model.Tilt | None:
    if not data:
        return None
    weights = model.load()
    if (data.get("weights") != [weights.version, weights.fingerprint]
            or (model_id is not None and data.get("embedder") != model_id)):
        return None
    try:
        keyword, dense = (float(v) for v in data["tilt"])
    except (KeyError, TypeError, ValueError):
        return None
    tilt = model.Tilt(keyword, dense)
    return tilt or None


# -- gathering ---------------------------------------------------------------------------

class _Recorder:
    """A scorer that keeps each question's candidates (the ranking is made afterwards)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, list[Any], float]] = []

    def __call__(self, question: str, signals: Sequence[Any], *, draft_sql: str | None = None,
                 draft_dialect: str | None = None, unknown: float = 0.0) -> list[float]:
        self.seen.append((question, list(signals), unknown))
        return [0.5] * len(signals)


class _Batched:
    """An embedder whose answers for the probe questions were computed in one batch."""

    def __init__(self, embedder: Embedder, texts: Sequence[str]):
        self._embedder = embedder
        self.model_id = embedder.model_id
        self.dim = embedder.dim
        unique = list(dict.fromkeys(texts))
        vectors: Any = embedder.embed(unique) if unique else []
        self._known = {t: v for t, v in zip(unique, vectors, strict=True)}
        self.unknown_share = getattr(embedder, "unknown_share", None)

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        if all(t in self._known for t in texts):
            return np.stack([self._known[t] for t in texts]) if texts else np.zeros(
                (0, self.dim), dtype=np.float32)
        return self._embedder.embed(list(texts))


def _answer_key(c: Any, by_skeleton: bool) -> tuple[str | None, str]:
    shape = sqlshape.shape(c.sql, c.dialect or None)
    return (c.datasource or None, shape.skeleton if by_skeleton else shape.key)


def gather(settings: Settings, embedder: Embedder, probes: Sequence[evaluate.Probe],
           glossary: Any = None) -> list[Gathered]:
    """Each probe's candidates and evidence, through the hybrid backend itself (its
    left-out phrasings filtered before ranking, as ``eval`` does)."""
    from wrenmem.recall.vector import HybridBackend

    recorder = _Recorder()
    cap = settings.max_embed_chars
    batched: Any = _Batched(embedder, [p.question[:cap] for p in probes])
    backend = HybridBackend(settings, batched, glossary or (lambda: None), recorder)
    weights = model.load()
    out = []
    for p in probes:
        recorder.seen.clear()
        backend.search([p.question], 1, Filters(exclude=p.exclude))
        if not recorder.seen:
            continue
        question, signals, unknown = recorder.seen[0]
        if not signals:
            continue
        rows, keyword, dense = model.evidence(question, signals, min(
            unknown, float(weights.meta.get("unknown_max", 0.0))))
        learned = weights.models["learned"]
        right = {(ds or None, key) for ds, key in p.right}
        out.append(Gathered(
            p.task, tuple(learned.logit(r) for r in rows), tuple(keyword), tuple(dense),
            tuple(_answer_key(c, p.by_skeleton) in right for c in signals),
            int(hashlib.sha256(str(sorted(map(str, p.right))).encode()).hexdigest(), 16)
            % FOLDS))
    return out


# -- choosing ------------------------------------------------------------------------------

def _first_right(g: Gathered, keyword: float, dense: float) -> bool:
    best, at = -math.inf, -1
    for n, (b, k, d) in enumerate(zip(g.base, g.keyword, g.dense, strict=True)):
        s = b + keyword * k + dense * d
        if s > best:
            best, at = s, n
    return at >= 0 and g.right[at]


def _r1(found: Sequence[Gathered], hits: Sequence[bool]) -> dict[str, float]:
    """R@1 per task, and their mean (``"mean"``), each task weighing as many probes as it
    has up to :data:`TASK_WEIGHT` (so two tasks of many probes weigh the same, and a task
    of two probes does not outweigh one of 150)."""
    out: dict[str, float] = {}
    weight: dict[str, int] = {}
    for task in evaluate.TASKS:
        mine = [h for g, h in zip(found, hits, strict=True) if g.task == task]
        if mine:
            out[task] = sum(mine) / len(mine)
            weight[task] = min(len(mine), TASK_WEIGHT)
    total = sum(weight.values())
    out["mean"] = sum(out[t] * w for t, w in weight.items()) / total if total else 0.0
    return out


def _eligible(r1: dict[str, float], prior: dict[str, float],
              counts: dict[str, int]) -> bool:
    """No task of :data:`TASK_FLOOR` probes or more loses more than :data:`TASK_LOSS` of
    R@1 against the prior."""
    return all(r1.get(task, 0.0) >= prior[task] - TASK_LOSS
               for task in evaluate.TASKS if task in prior and counts.get(task, 0) >= TASK_FLOOR)


def _counts(found: Sequence[Gathered]) -> dict[str, int]:
    return {task: sum(1 for g in found if g.task == task) for task in evaluate.TASKS}


def _best(found: Sequence[Gathered], grid: Sequence[tuple[float, float]]
          ) -> tuple[float, float]:
    """The grid's tilt of the highest mean R@1 on ``found`` among those that lose at most
    :data:`TASK_LOSS` on either task (the smaller weights first among equals)."""
    prior = _r1(found, [_first_right(g, 0.0, 0.0) for g in found])
    scored = []
    for t in grid:
        r1 = _r1(found, [_first_right(g, *t) for g in found])
        if _eligible(r1, prior, _counts(found)):
            scored.append(((r1["mean"], -abs(t[0]) - abs(t[1]) / 5), t))
    return max(scored)[1] if scored else (0.0, 0.0)


def choose(found: Sequence[Gathered]) -> dict[str, Any]:
    """The ranking for this project, with each candidate's R@1 (the adapted one's out of
    fold)."""
    n = len(found)
    shrink = n / (n + SHRINK)
    grid = [(k * shrink, d * shrink) for k in KEYWORD_GRID for d in DENSE_GRID]
    fixed = {"prior": (0.0, 0.0), "grep-heavy": (HEAVY_KEYWORD * shrink, 0.0),
             "vector-heavy": (0.0, HEAVY_DENSE * shrink)}
    hits = {name: [_first_right(g, *t) for g in found] for name, t in fixed.items()}
    # adapted: the grid's best on the other folds, for each fold's questions
    adapted = [False] * n
    for fold in range(FOLDS):
        train = [g for g in found if g.fold != fold]
        if not train:
            train = list(found)
        best = _best(train, grid)
        for i, g in enumerate(found):
            if g.fold == fold:
                adapted[i] = _first_right(g, *best)
    hits["adapted"] = adapted
    tilts = dict(fixed)
    tilts["adapted"] = _best(found, grid)
    scores = {name: _r1(found, h) for name, h in hits.items()}
    prior = scores["prior"]["mean"]
    counts = _counts(found)
    chosen = max((c for c in CANDIDATES if _eligible(scores[c], scores["prior"], counts)),
                 key=lambda c: (scores[c]["mean"], c == "prior"))
    if scores[chosen]["mean"] < prior + MIN_GAIN:
        chosen = "prior"
    return {"chosen": chosen, "tilt": list(tilts[chosen]) if chosen != "prior" else [0.0, 0.0],
            "shrink": round(shrink, 4),
            "candidates": {c: {k: round(v, 4) for k, v in scores[c].items()}
                           for c in CANDIDATES},
            "gain": round(scores[chosen]["mean"] - prior, 4)}


# -- the fit of a project --------------------------------------------------------------

def refresh(settings: Settings, embedder: Embedder, pairs: Sequence[Pair], *,
            glossary: Any = None, force: bool = False) -> dict[str, Any]:
    """Fit the project's ranking when its questions changed since the last fit (``force``:
    fit again anyway), write it, and return the fit file's contents."""
    from wrenmem.recall.vector import SHAPES_FILE

    shapes = sqlshape.ShapeCache(settings.state_dir / SHAPES_FILE)
    shapes.load()  # the pairs' SQL parsed by an earlier search or fit (10,000 pairs: 2 s)
    probes = sample(evaluate.probes(pairs), PROBES)
    if settings.state_dir.is_dir():
        shapes.save()
    key = fingerprint(probes, embedder.model_id)
    old = read(settings)
    if old is not None and old.get("fingerprint") == key and not force:
        return old
    started = time.process_time()
    counts = {task: sum(1 for p in probes if p.task == task) for task in evaluate.TASKS}
    weights = model.load()
    data: dict[str, Any] = {"version": VERSION, "fingerprint": key,
                            "weights": [weights.version, weights.fingerprint],
                            "embedder": embedder.model_id, "probes": counts}
    if len(probes) < MIN_PROBES:
        data.update(chosen="prior", tilt=[0.0, 0.0], shrink=0.0, candidates={}, gain=0.0,
                    reason=f"{len(probes)} question(s) to measure, fewer than {MIN_PROBES}: "
                           "the shipped model alone")
    else:
        found = gather(settings, embedder, probes, glossary)
        data.update(choose(found))
        data["reason"] = ""
    data["cpu_seconds"] = round(time.process_time() - started, 3)
    if settings.state_dir.is_dir():
        atomic_write_text(fit_path(settings), json.dumps(data, indent=1) + "\n")
    return data


def summary(data: dict[str, Any] | None) -> str:
    """One line of what was fitted (``status``, ``eval``)."""
    if not data:
        return "none yet (made by `wrenmem sync` or `wrenmem eval`)"
    probes = data.get("probes", {})
    asked = (f"{probes.get('answered', 0)} answered-before and {probes.get('new', 0)} "
             "new-question probes")
    if data.get("reason"):
        return f"prior ({asked}; {data['reason']})"
    cands = data.get("candidates", {})
    prior = cands.get("prior", {}).get("mean", 0.0)
    chosen = data.get("chosen", "prior")
    got = cands.get(chosen, {}).get("mean", prior)
    keyword, dense = data.get("tilt", [0.0, 0.0])
    return (f"{chosen} on {asked} (mean R@1 {got:.3f} against the prior's "
            f"{prior:.3f}, gain {data.get('gain', 0.0):+.3f}; keyword weight {keyword:.2f}, "
            f"dense weight {dense:.2f})")


def render_fit(data: dict[str, Any]) -> list[str]:
    """``eval``'s lines on the fit: the summary, then each ranking compared."""
    lines = [f"recall fit: {summary(data)}"]
    cands = data.get("candidates") or {}
    if cands:
        lines.append("  fitted on these pairs' own probes (R@1; adapted: out of fold): "
                     + ", ".join(f"{name} {m.get('answered', 0.0):.3f}/{m.get('new', 0.0):.3f}"
                                 for name, m in cands.items())
                     + " (answered/new); hybrid:learned above uses the chosen one")
    return lines
