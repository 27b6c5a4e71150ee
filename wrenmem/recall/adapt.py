"""Recall fitted to the team's own pairs: a tilt of the learned ranking, chosen at sync.

At a sync that wrote (never at a no-op, never at recall), when the questions of ``eval``'s
two leave-one-out tasks (:mod:`wrenmem.recall.evaluate`) changed since the last fit, the
hybrid backend's candidates are gathered for up to :data:`PROBES` of each task (sampled by
hash) and four rankings compared: ``prior`` (the shipped model), ``grep-heavy`` and
``vector-heavy`` (a large weight on the keyword or dense evidence), and ``adapted``: a tilt
by the keyword, dense and structure evidence and the SQL read against the question
(:func:`wrenmem.recall.sqltree.name_agreement`), from a small grid chosen inside each fold of
a five-fold cross-validation (its figure is out of fold), one such candidate per share of the
shipped SQL-form evidence (:data:`FORM_GRID`: kept, halved, off). Weights shrink toward the
prior by ``n / (n + SHRINK)``. Another ranking than the prior needs a mean gain of
:data:`MIN_GAIN` with no task losing more than :data:`TASK_LOSS` or the prior's 95 %
half-width; a task with fewer than :data:`MIN_PROBES` probes is not fitted (it is said)
but from :data:`MIN_CHECKED` its loss is checked; with fewer than that of either task a user
has (answered-before, new-question), or too few of every task to fit, the prior stays. The
result is ``.wrenmem/recall-fit.json`` (derived), which the learned scorer reads when it
changes. From :data:`wrenmem.index.fitjob.DETACH_AT` rows a sync leaves the fit to a detached
process (:func:`after_sync`, :mod:`wrenmem.watch.fitter`); recall meanwhile uses the last fit.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from wrenmem.errors import WrenmemError
from wrenmem.fs import statedir
from wrenmem.fs.fsutil import atomic_write_text, read_marshal, write_marshal
from wrenmem.index import fitjob
from wrenmem.index import state as index_state
from wrenmem.pairs.catalog import read_paths, scan
from wrenmem.recall import evaluate, model, sqlshape
from wrenmem.recall.daemon_client import settings_payload
from wrenmem.recall.fitgather import FOLDS, Gathered, gather

if TYPE_CHECKING:
    from wrenmem.embed.embedders import Embedder
    from wrenmem.pairs.pairfile import Pair
    from wrenmem.settings import Settings

log = logging.getLogger(__name__)
VERSION = 6  # of the fit file and of how it is made
PROBES = 150  # questions asked of each task, at most (sampled by hash)
MIN_PROBES = 30  # fewer questions of a task: not fitted there; of every task: the prior
MIN_CHECKED = 10  # ... but from this many its loss is still checked; fewer answered-before
# or new-question ones: the prior (what a fit would change there could not be checked)
SHRINK = 50.0  # a weight is multiplied by n / (n + SHRINK)
MIN_GAIN = 0.01  # mean R@1 a ranking must gain over the prior to be chosen
TASK_LOSS = 0.05  # ... and R@1 it may lose on either task, at most
LOSS_WEIGHT = 3.0  # R@1 lost on a task counts this many times R@1 gained
# the adapted grid, one tuple per model.TILT_TERMS
KEYWORD_GRID = (0.0, 1.0, 2.0, 4.0)
DENSE_GRID = (0.0, 5.0, 20.0)
STRUCTURE_GRID = (0.0, 1.0, 2.0, 4.0)  # the BM25 without values: the structure asked for
NAMES_GRID = (0.0, 1.0, 2.0, 4.0)  # the question's schema names its SQL uses
EXTRA_GRID = (0.0, 0.05, 0.1, 0.2)  # per name its SQL uses that the question does not say
FORM_GRID = (0.0, -0.5, -1.0)  # the shipped SQL-form evidence kept, halved, taken out (not
# shrunk: a share of the shipped weights, not a weight fitted here); a candidate each
FORM_SHARES = ("kept", "halved", "off")
HEAVY_KEYWORD = 40.0  # grep-heavy: the keyword evidence outweighs the rest
HEAVY_DENSE = 200.0  # vector-heavy: the cosine's gap outweighs the rest
FIXED = ("prior", "grep-heavy", "vector-heavy")
CANDIDATES = (*FIXED, "adapted")
FITTED_TASKS = ("answered", "new", "siblings")
SAMPLED = (*evaluate.TASKS, "siblings")  # the probes' tasks: eval's and the siblings
TASK_NAMES = {"answered": "answered-before", "new": "new-question",
              "siblings": "decisive-word sibling"}
EVAL_WAIT = 900.0  # eval's wait for a detached fit at work (then it fits itself)


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
    for task in SAMPLED:
        mine = [p for p in probes if p.task == task]
        out += sorted(mine, key=_probe_hash)[:limit] if len(mine) > limit else mine
    return out


def sample_with_siblings(pairs: Sequence[Pair], asked: Sequence[evaluate.Probe], limit: int
                         ) -> list[evaluate.Probe]:
    """:func:`sample` of ``asked`` and their sibling probes
    (:func:`wrenmem.recall.evaluate.sibling_probes`), each answered-before probe asked for
    a sibling in the sample's order only until ``limit`` are found (at 100,000 pairs the
    test of every one cost 20 s of CPU for the 150 kept)."""
    has = evaluate.Siblings(pairs)
    answered = [replace(p, task="siblings") for p in asked if p.task == "answered"]
    found: list[int] = []
    for n in sorted(range(len(answered)), key=lambda n: _probe_hash(answered[n])):
        if has(answered[n]):
            found.append(n)
            if len(found) > limit:
                break
    if len(found) <= limit:  # every one: in their order (as sample keeps a short stratum)
        found.sort()
    return sample([*asked, *(answered[n] for n in found)], limit)


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
        self._path = fit_path(settings)  # (asked at every ranking: the path made once)
        self._stat: tuple[int, int] | None = None
        self._tilt: model.Tilt | None = None

    def __call__(self) -> model.Tilt | None:
        try:
            st = os.stat(self._path)
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
        weights_ = [float(v) for v in data["tilt"]]
        tilt = model.Tilt(*weights_)
    except (KeyError, TypeError, ValueError):
        return None
    return tilt or None


# -- choosing ------------------------------------------------------------------------------

def _grid(shrink: float) -> Any:
    """Every tilt compared (rows: :class:`wrenmem.recall.model.Tilt`'s weights): the
    prior, grep-heavy and vector-heavy first, then the adapted grid; shrunk."""
    import itertools

    import numpy as np

    rest = (0.0,) * (len(model.TILT_TERMS) - 2)
    fixed = [(0.0, 0.0, *rest), (HEAVY_KEYWORD, 0.0, *rest), (0.0, HEAVY_DENSE, *rest)]
    grid = [t for t in itertools.product(KEYWORD_GRID, DENSE_GRID, STRUCTURE_GRID, NAMES_GRID,
                                         EXTRA_GRID, FORM_GRID) if any(t)]
    scale = np.full(len(model.TILT_TERMS), shrink)
    scale[-1] = 1.0
    return np.array(fixed + grid, dtype=np.float64) * scale


def _hits(found: Sequence[Gathered], grid: Any) -> Any:
    """hits[t, q]: under tilt ``t`` the first answer to question ``q`` is right (the first
    of equal scores, as a strict ``>`` over the candidates in order would pick)."""
    import numpy as np

    out = np.zeros((len(grid), len(found)), dtype=bool)
    for q, g in enumerate(found):
        scores = np.asarray(g.base)[None, :] + grid @ np.asarray(g.terms, dtype=np.float64).T
        out[:, q] = np.asarray(g.right)[scores.argmax(axis=1)]
    return out


def _task_r1(hits: Any, tasks: Any) -> dict[str, Any]:
    """R@1 per task (rows: tilts) over the questions of ``tasks``."""
    return {t: hits[:, tasks == t].mean(axis=1) for t in FITTED_TASKS if (tasks == t).any()}


def _allowed_loss(r1: float, n: int) -> float:
    """The R@1 a task may lose against the prior's: at most :data:`TASK_LOSS`, and at most
    the half-width of the prior's 95 % interval there."""
    low, high = evaluate.wilson(r1, n)
    return min(TASK_LOSS, (high - low) / 2)


def _pick(hits: Any, tasks: Any, among: Any, sizes: dict[str, int]
          ) -> tuple[int, dict[str, Any]]:
    """The tilt (row of ``among``, a boolean mask) that gains most over the prior (row 0)
    on these questions, a task's loss counting :data:`LOSS_WEIGHT` times its gain (the
    mean over the tasks), among those that lose no task beyond :func:`_allowed_loss`; the
    prior unless one gains :data:`MIN_GAIN`; ties: the earlier row (smaller weights).

    The guard (issue 40: the default never below its best single part): the rows at or
    above each fitted task's best single part (grep-heavy, vector-heavy: rows 1 and 2) are
    chosen from when there are any, else those inside its 95 % interval, else all; a prior
    outside that pool gives way to the pool's best with no gain asked. ``sizes``: each
    task's probes in all (a task of fewer than :data:`MIN_PROBES` is not fitted: only its
    loss is checked, from :data:`MIN_CHECKED`)."""
    import numpy as np

    r1 = _task_r1(hits, tasks)
    counts = {t: int((tasks == t).sum()) for t in r1}
    ok = among.copy()
    level = np.ones(len(hits), dtype=bool)  # at or above every best single part
    inside = np.ones(len(hits), dtype=bool)  # ... or inside its 95 % interval
    for t, values in r1.items():
        if sizes[t] >= MIN_CHECKED:
            ok &= values >= values[0] - _allowed_loss(float(values[0]), counts[t]) - 1e-12
        if sizes[t] >= MIN_PROBES:
            single = float(max(values[1], values[2]))
            level &= values >= single - 1e-12
            inside &= values >= evaluate.wilson(single, counts[t])[0] - 1e-12
    gains = [values - values[0] for t, values in r1.items() if sizes[t] >= MIN_PROBES]
    if not gains:  # no task fitted (each below MIN_PROBES): the prior
        return 0, r1
    worth = np.mean([np.where(g < 0, LOSS_WEIGHT * g, g) for g in gains], axis=0)
    pool = next((ok & g for g in (level, inside) if (ok & g).any()), ok)
    best = int(np.flatnonzero(pool)[np.argmax(worth[pool])]) if pool.any() else 0
    if worth[best] < MIN_GAIN and (pool[0] or not pool.any()):
        best = 0
    return best, r1


def choose(found: Sequence[Gathered]) -> dict[str, Any]:
    """The ranking for this project, with each candidate's R@1 per task (the adapted
    one's out of fold: the tilt chosen on the other four folds, for each fold's
    questions), and its gain over the prior with a paired interval.

    The adapted tilt is one candidate per share of the SQL-form evidence kept
    (:data:`FORM_GRID`: each its own grid, chosen inside the folds), compared out of fold
    with the others by the same rule: a project whose questions the shipped form evidence
    misreads gets it halved or taken out (and the tilt found without it), not a tilt that
    keeps it and loses new questions to reach grep's level. Where the kept share would be
    chosen among the first four, another replaces it only by gaining over it as a ranking
    must over the prior. ``adapted`` in the report is the share chosen (or, the prior
    kept, the best of them); ``form``: which share."""
    import numpy as np

    n = len(found)
    shrink = n / (n + SHRINK)
    grid = _grid(shrink)
    hits = _hits(found, grid)
    tasks = np.array([g.task for g in found])
    folds = np.array([g.fold for g in found])
    sizes = {t: int((tasks == t).sum()) for t in FITTED_TASKS}
    fitted = [t for t in FITTED_TASKS if sizes[t] >= MIN_PROBES]
    rows = np.arange(len(grid))
    shares = [(rows >= len(FIXED)) & np.isclose(grid[:, -1], f) for f in FORM_GRID]
    adapted = np.zeros((len(FORM_GRID), n), dtype=bool)
    for fold in range(FOLDS):
        inside = folds == fold
        train = ~inside if (~inside).any() else np.ones(n, dtype=bool)
        for k, share in enumerate(shares):
            best, _ = _pick(hits[:, train], tasks[train], share, sizes)
            adapted[k, inside] = hits[best, inside]
    # the candidates' hits: the fixed three, and the adapted ones (a share each) out of fold
    table = np.concatenate([hits[:len(FIXED)], adapted])
    picked, r1 = _pick(table, tasks, np.ones(len(table), dtype=bool), sizes)
    kept = len(FIXED)  # the tilt with the form evidence kept
    if picked > kept and _pick(table[:kept + 1], tasks, np.ones(kept + 1, dtype=bool),
                               sizes)[0] == kept:
        # the kept tilt would be chosen: another share must gain over it by the same rule
        # (its rows in the place of the prior's), not win a near tie
        among = np.array([True, *([False] * (kept - 1)), True])
        if _pick(table[[kept, *range(1, kept), picked]], tasks, among, sizes)[0] == 0:
            picked = kept
    if picked < len(FIXED):
        chosen = CANDIDATES[picked]
        weights = grid[picked]
        # the share reported as "adapted": the best of them against the prior
        share = _pick(table, tasks, np.arange(len(table)) >= len(FIXED), sizes)[0] - len(
            FIXED)
    else:  # the tilt itself: that share's grid's best on every question
        chosen, share = "adapted", picked - len(FIXED)
        weights = grid[_pick(hits, tasks, shares[share], sizes)[0]]
    keep = [*range(len(FIXED)), len(FIXED) + share]
    gains = {c: {t: _paired_gain(table[i, tasks == t], table[0, tasks == t]) for t in r1}
             for c, i in zip(CANDIDATES, keep, strict=True)}
    gain = gains[chosen]
    return {"chosen": chosen, "tilt": [round(float(w), 4) for w in weights],
            "shrink": round(shrink, 4), "form": FORM_SHARES[share],
            "candidates": {c: {**{t: round(float(v[i]), 4) for t, v in r1.items()},
                               "mean": round(float(np.mean([r1[t][i] for t in fitted])), 4)}
                           for c, i in zip(CANDIDATES, keep, strict=True)},
            "forms": {FORM_SHARES[k]: {t: round(float(v[len(FIXED) + k]), 4)
                                       for t, v in r1.items()}
                      for k in range(len(FORM_GRID))},
            "gain": round(float(np.mean([gain[t][0] for t in fitted])), 4),
            "task_gain": gain, "candidate_gain": gains}


def _paired_gain(mine: Any, prior: Any) -> list[float]:
    """R@1 gained over the prior on one task's questions, with a 95 % interval of the
    paired difference (normal approximation on the per-question differences)."""
    d = mine.astype(float) - prior.astype(float)
    if not len(d):
        return [0.0, 0.0, 0.0]
    mean = float(d.mean())
    half = 1.96 * float(d.std(ddof=1)) / math.sqrt(len(d)) if len(d) > 1 else 0.0
    return [round(mean, 4), round(mean - half, 4), round(mean + half, 4)]


# -- the fit of a project --------------------------------------------------------------

def fit_project(settings: Settings, recaller: Callable[[], Any],
                pairs: Sequence[Pair] | None, *, force: bool = False, measure: bool = False,
                indexed: bool = True, one_shot: bool = False) -> dict[str, Any] | None:
    """``Memory.fit_recall``: fit hybrid recall to the project's own pairs (default: every
    stored one) when their questions changed since the last fit (``force``: anyway), with
    ``recaller()``'s embedder and glossary, holding the fit lock; the fit's report
    (``"applied"``: whether recall uses it, the ``recall_fit`` setting), or None where
    nothing is fitted (:func:`fits`; ``measure``: whatever the setting). Run by
    ``Memory.sync`` when it wrote (:func:`after_sync`), by the detached fitter, and by
    ``Memory.evaluate`` (``measure``: to report it, a detached fit awaited first); never
    at recall. A fit made clears the owed mark read before it. ``one_shot``: see
    :func:`gather`."""
    if not fits(settings, indexed=indexed, measure=measure):
        return None
    if measure:  # eval: the detached fitter's fit, when one is at work (else made here)
        fitjob.wait(settings, EVAL_WAIT)
    held = recaller()
    with fitjob.fit_lock(settings):
        owed = fitjob.read_owed(settings.state_dir)
        fit = refresh(settings, held.embedder, pairs, glossary=held.glossary, force=force,
                      one_shot=one_shot)
        fitjob.clear(settings, owed)
    return {**fit, "applied": settings.recall_fit}


def fits(settings: Settings, *, indexed: bool, measure: bool = False) -> bool:
    """Whether a fit is made here: the ``recall_fit`` setting on (or ``measure``), a
    writer with an index backend, and the ``learned`` fusion."""
    return ((settings.recall_fit or measure) and not settings.is_reader and indexed
            and settings.fusion == "learned")


def after_sync(settings: Settings, report: Any, recaller: Callable[[], Any],
               notify: Callable[[str], None] | None, *, indexed: Callable[[], bool],
               detach: bool = True) -> None:
    """``Memory.sync``'s fit: after a sync that wrote, from :func:`fitjob.detach_at` rows
    (and ``detach``: the configured embedder, which another process can load) the fit is
    marked owed and left to a detached fitter, below that made here
    (:func:`fit_after_sync`); after a no-op, a fit still owed whose fitter died is started
    again (``indexed()``: whether there is an index backend, asked only then)."""
    if report.noop:
        if fitjob.owed_path(settings.state_dir).exists() and fits(settings, indexed=indexed()):
            _start(settings, notify, resume=True)
        return
    if not fits(settings, indexed=indexed()):
        return
    if detach and report.rows >= fitjob.detach_at() and settings.state_dir.is_dir():
        fitjob.mark(settings, settings_payload(settings))
        if _start(settings, notify, resume=False):
            return
    fit_after_sync(settings, recaller, notify, indexed=True)


def _start(settings: Settings, notify: Callable[[str], None] | None, *, resume: bool) -> bool:
    try:
        fitjob.resume(settings) if resume else fitjob.start(settings)
    except OSError as e:
        if notify is not None:
            notify(f"recall fit: cannot start the fitter ({e}); fitted here")
        return False
    return True


def fit_after_sync(settings: Settings, recaller: Callable[[], Any],
                   notify: Callable[[str], None] | None, *, indexed: bool) -> None:
    """:func:`fit_project` after a sync that wrote: a fit that fails is said (``notify``),
    the sync being done all the same."""
    try:
        fit_project(settings, recaller, None, indexed=indexed)
    except (WrenmemError, OSError, ValueError) as e:
        if notify is not None:
            notify(f"recall fit: not made ({e}); recall uses the last fit or the shipped model")


class PairsKey:
    """A cheap key of what a fit reads of the pairs, for a sync that wrote: per pair file
    the index mirror records, a digest of its questions, SQL, datasource, dialect and
    source, found by the file's raw hash in ``.wrenmem/recall-fit-keys.bin`` (only a file
    whose hash is not there is read). A sync that changed no such field (a tag, a
    verification) then costs a marshal read, not the probes of every pair."""

    def __init__(self, settings: Settings, model_id: str):
        self.settings = settings
        self.path = settings.state_dir / statedir.RECALL_FIT_KEYS
        data = read_marshal(self.path)
        ok = (isinstance(data, dict) and data.get("version") == VERSION
              and isinstance(data.get("files"), dict)
              and all(isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str)
                      and isinstance(v[1], bytes) for v in data["files"].values()))
        self.files: dict[str, tuple[str, bytes]] = data["files"] if ok else {}
        self.key: str | None = data.get("key") if ok else None
        self.fit: str | None = data.get("fit") if ok else None
        self.read = 0  # files read by :meth:`now` (not found by their hash)
        weights = model.load()
        self.head = (f"{VERSION}\0{weights.version}\0{weights.fingerprint}\0{model_id}\0"
                     f"{PROBES}\0").encode()

    def now(self, found: Any = None) -> str | None:
        """The key of the pair files as the mirror has them (None: no mirror, or no
        digests yet and no ``found`` scan to take them from)."""
        state = index_state.load_state(self.settings)
        if state is None:
            return None
        current = state.files
        if found is not None:
            by_path = {p.path: p for p in found.pairs}
            self.files = {rel: (h, _digest(by_path.get(rel)))
                          for rel, h in found.file_hashes.items()}
        elif not self.files:
            return None
        missing = [rel for rel, h in current.items()
                   if rel not in self.files or self.files[rel][0] != h]
        self.read += len(missing) + (found is not None)
        if missing:
            read = read_paths(self.settings, missing)
            by_path = {p.path: p for p in read.pairs}
            for rel in missing:
                self.files[rel] = (current[rel], _digest(by_path.get(rel)))
        digest = hashlib.sha256(self.head)
        for rel in state.paths:
            digest.update(rel.encode() + b"\0" + self.files[rel][1])
        self.files = {rel: self.files[rel] for rel in state.paths}
        return digest.hexdigest()[:32]

    def save(self, key: str | None, fit: str) -> None:
        if key is None or not self.settings.state_dir.is_dir():
            return
        if self.read or (key, fit) != (self.key, self.fit):
            write_marshal(self.path, {"version": VERSION, "files": self.files, "key": key,
                                      "fit": fit})


def _digest(pair: Pair | None) -> bytes:
    if pair is None:
        return b""
    return hashlib.sha256(json.dumps([pair.nl, list(pair.also), pair.datasource, pair.sql,
                                      pair.dialect, pair.source], ensure_ascii=False
                                     ).encode()).digest()[:16]


def refresh(settings: Settings, embedder: Embedder, pairs: Sequence[Pair] | None = None, *,
            glossary: Any = None, force: bool = False, one_shot: bool = False
            ) -> dict[str, Any]:
    """Fit the project's ranking when its questions changed since the last fit (``force``:
    fit again anyway), write it, and return the fit file's contents. ``pairs``: the
    project's (default: scanned, and only when :class:`PairsKey` says they changed);
    ``one_shot``: see :func:`gather`."""
    from wrenmem.recall.vector import SHAPES_FILE

    old = read(settings)
    keys = PairsKey(settings, embedder.model_id)
    cheap = None if force or old is None else keys.now()
    if old is not None and cheap is not None and (cheap, old.get("fingerprint")) == (
            keys.key, keys.fit):
        keys.save(cheap, old["fingerprint"])  # the digests of the files read, for the next sync
        return old
    found = None
    if pairs is None:
        found = scan(settings, use_cache=settings.state_dir.is_dir())
        pairs = found.pairs
    shapes = sqlshape.ShapeCache(settings.state_dir / SHAPES_FILE)
    shapes.load()  # the pairs' SQL parsed by an earlier search or fit (10,000 pairs: 2 s)
    asked = evaluate.probes(pairs)
    probes = sample_with_siblings(pairs, asked, PROBES)
    if settings.state_dir.is_dir():
        shapes.save()
    key = fingerprint(probes, embedder.model_id)
    if old is not None and old.get("fingerprint") == key and not force:
        keys.save(keys.now(found) if found is not None or cheap is None else cheap, key)
        return old
    # what the next sync compares with, taken now: the pairs are let go before the probes
    # read the table (at 100,000 pairs 200 MB held through the fit otherwise)
    pairs_key = ((keys.now(found) if found is not None or cheap is None else cheap)
                 if settings.state_dir.is_dir() else None)
    del found, pairs, asked, shapes
    started = time.process_time()
    counts = {task: sum(1 for p in probes if p.task == task)
              for task in SAMPLED}
    weights = model.load()
    data: dict[str, Any] = {"version": VERSION, "fingerprint": key,
                            "weights": [weights.version, weights.fingerprint],
                            "embedder": embedder.model_id, "probes": counts}
    few = [t for t in FITTED_TASKS if counts.get(t, 0) < MIN_PROBES]
    # both tasks a user has must be checked: a ranking that gains answering before while
    # nothing checks new questions lost them on the suite (spider-en/new 0.794 -> 0.556)
    blind = [t for t in ("answered", "new") if counts.get(t, 0) < MIN_CHECKED]
    said = " and ".join(f"{counts.get(t, 0)} {TASK_NAMES[t]} probes" for t in blind or few)
    if blind or len(few) == len(FITTED_TASKS):
        least = MIN_CHECKED if blind else MIN_PROBES
        data.update(chosen="prior", tilt=[0.0] * len(model.TILT_TERMS), shrink=0.0,
                    candidates={}, gain=0.0, task_gain={}, unchecked=few,
                    reason=f"{said}, fewer than {least}: a fit could not be checked, so "
                           "the shipped model alone")
    else:  # fitted on the tasks with enough probes (the others said, their loss checked)
        checked = [p for p in probes if p.task in FITTED_TASKS]
        data.update(choose(gather(settings, embedder, checked, glossary, one_shot=one_shot)))
        data.update(reason="", unchecked=few)
    data["cpu_seconds"] = round(time.process_time() - started, 3)
    if settings.state_dir.is_dir():
        atomic_write_text(fit_path(settings), json.dumps(data, indent=1) + "\n")
        keys.save(pairs_key, key)
    return data
