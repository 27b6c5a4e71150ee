"""``wrenmem eval``: the memory measured on the team's own pairs.

Leave-one-out over the pair files and their ``also:`` phrasings: *answered before* (each
phrasing of a SQL stored under two or more, asked with itself left out; right: another
phrasing of that SQL) and *new question* (one phrasing of each SQL whose skeleton another
SQL shares, asked with every pair of that SQL left out; right: the same skeleton). And a
*gold* file (``knowledge/eval.json``, :func:`gold_probes`). Per backend and fusion: R@1
with its 95 % Wilson interval, R@5, MRR and ECE. Nothing is written: left-out candidates
are filtered before scoring.
"""

from __future__ import annotations

import json
import math
import re
import sys
import unicodedata
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from wrenmem.pairs.catalog import scan
from wrenmem.pairs.pairfile import Pair
from wrenmem.recall import sqlshape
from wrenmem.recall.backends import choose_backend
from wrenmem.recall.hits import Filters, Hit
from wrenmem.settings import Settings
from wrenmem.textsearch import CJK_CHAR

TASKS = ("answered", "new", "gold")
NO_ANSWER_MIN_SCORE = 0.5  # a no-answer gold question should score below this (--min-score)
GOLD_FILE = "eval.json"  # in the knowledge folder: questions with the pair each expects
TOP = 5


@dataclass(frozen=True)
class Probe:
    """One question asked of the memory with some phrasings left out."""

    task: str
    question: str
    datasource: str | None
    exclude: frozenset[tuple[str, str]]  # (path, phrasing) left out of the candidates
    right: frozenset[tuple[str | None, str]]  # (datasource, SQL key or skeleton) that count
    by_skeleton: bool = False
    path: str = ""  # the pair file the question comes from


class Answer(Protocol):
    """A recalled pair (a :class:`~wrenmem.recall.hits.Hit`) or a stored one."""

    @property
    def sql(self) -> str: ...
    @property
    def datasource(self) -> str | None: ...
    @property
    def dialect(self) -> str | None: ...


def _key(pair: Answer) -> tuple[str | None, str]:
    return (pair.datasource, sqlshape.shape(pair.sql, pair.dialect).key)


def _skeleton(pair: Answer) -> tuple[str | None, str]:
    return (pair.datasource, sqlshape.shape(pair.sql, pair.dialect).skeleton)


def phrasings(pair: Pair) -> list[str]:
    return [pair.nl, *pair.also]


def _measured(pairs: Sequence[Pair]) -> list[Pair]:
    """The pairs eval asks about: the team's, with SQL (seed queries are not measured)."""
    return [p for p in pairs if p.source != "seed" and p.sql.strip()]


def probes(pairs: Sequence[Pair], *, limit: int = 0) -> list[Probe]:
    """The questions of both protocols (at most ``limit`` of each, spread evenly; 0: all)."""
    user = _measured(pairs)
    by_sql: dict[tuple[str | None, str], list[Pair]] = defaultdict(list)
    for p in user:
        by_sql[_key(p)].append(p)
    answered = []
    for key, group in sorted(by_sql.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        asked = [(p, q) for p in sorted(group, key=lambda p: p.path) for q in phrasings(p)]
        if len(asked) < 2:
            continue
        for p, q in asked:
            answered.append(Probe("answered", q, p.datasource, frozenset({(p.path, q)}),
                                  frozenset({key}), path=p.path))
    by_skeleton: dict[tuple[str | None, str], set[tuple[str | None, str]]] = defaultdict(set)
    for key, group in by_sql.items():
        by_skeleton[_skeleton(group[0])].add(key)
    new = []
    for _sql, group in sorted(by_sql.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        skeleton = _skeleton(group[0])
        if len(by_skeleton[skeleton]) < 2:
            continue
        first = min(group, key=lambda p: p.path)
        left_out = frozenset((p.path, q) for p in group for q in phrasings(p))
        new.append(Probe("new", first.nl, first.datasource, left_out, frozenset({skeleton}),
                         by_skeleton=True, path=first.path))
    return _spread(answered, limit) + _spread(new, limit)


SIBLING_OVERLAP = 0.6  # word Jaccard of two phrasings: "most words shared"
# a word, or one Chinese, Japanese or Korean character
_WORD = re.compile(rf"{CJK_CHAR.pattern}|(?:(?!{CJK_CHAR.pattern})\w)+", re.UNICODE)


def _words(text: str) -> frozenset[str]:
    """A phrasing's words, case-folded (NFKC, so a decomposed accent stays in its word);
    a Chinese, Japanese or Korean run, which has no spaces, as its characters (as one
    word, a whole sentence would share nothing with its siblings). Interned: the words of
    100,000 phrasings are one string each, not one per phrasing (100 MB less)."""
    return frozenset(map(sys.intern, _WORD.findall(
        unicodedata.normalize("NFKC", text).casefold())))


class Siblings:
    """Whether an answered-before probe has a decisive-word sibling: a stored phrasing of
    another SQL on its datasource that shares most of its words (word Jaccard at least
    :data:`SIBLING_OVERLAP`: a count for a list, a condition more, another column). Found
    through the rarest words of the question (one of its first ``len - ceil(0.6 len) + 1`` by
    document frequency is in any phrasing that close), so the cost grows with the rare
    words' postings, not the pairs squared; the index is made once, each probe asked
    alone (the fit asks only until it has its sample)."""

    def __init__(self, pairs: Sequence[Pair]):
        stored: dict[str | None, list[tuple[frozenset[str], tuple[str | None, str]]]] = (
            defaultdict(list))
        for p in _measured(pairs):
            key = _key(p)
            for q in phrasings(p):
                stored[p.datasource].append((_words(q), key))
        postings: dict[str | None, dict[str, list[int]]] = {}
        for ds, rows in stored.items():
            index: dict[str, list[int]] = defaultdict(list)
            for n, (words, _k) in enumerate(rows):
                for w in words:
                    index[w].append(n)
            postings[ds] = index
        self.stored, self.postings = stored, postings

    def __call__(self, probe: Probe) -> bool:
        if probe.task not in ("answered", "siblings"):
            return False
        mine = _words(probe.question)
        rows, index = self.stored.get(probe.datasource, []), self.postings.get(
            probe.datasource, {})
        if not mine:
            return False
        order = sorted(mine, key=lambda w: (len(index.get(w, ())), w))
        prefix = order[:len(mine) - math.ceil(SIBLING_OVERLAP * len(mine)) + 1]
        seen = {n for w in prefix for n in index.get(w, ())}
        return any(rows[n][1] not in probe.right
                   and len(mine & rows[n][0]) >= SIBLING_OVERLAP * len(mine | rows[n][0])
                   for n in seen)


def sibling_probes(pairs: Sequence[Pair], asked: Sequence[Probe]) -> list[Probe]:
    """The answered-before probes of ``asked`` that have a decisive-word sibling
    (:class:`Siblings`), as task ``siblings``."""
    has = Siblings(pairs)
    return [replace(p, task="siblings") for p in asked if p.task == "answered" and has(p)]


def gold_probes(path: Path, pairs: Sequence[Pair], root: Path) -> tuple[list[Probe], list[str]]:
    """The questions of a gold file (a JSON list of ``{"question", "expected"}``, the
    expected pair's path from the project root), each asked with nothing left out; a
    right answer has the expected pair's SQL. Returns the probes and one message per item
    that cannot be asked (file, item number, reason); a missing file gives neither. An
    item with ``"expected": null`` is a question nothing stored answers (task ``none``):
    its best score should stay below :data:`NO_ANSWER_MIN_SCORE`."""
    if not path.is_file():
        return [], []
    where = path.relative_to(root) if path.is_relative_to(root) else path
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return [], [f"{where}: not read as JSON ({e}); its questions are not measured"]
    if not isinstance(items, list):
        return [], [f"{where}: expected a list of {{\"question\", \"expected\"}} items"]
    by_path = {p.path: p for p in pairs}
    found, problems = [], []
    for n, item in enumerate(items, 1):
        question = item.get("question") if isinstance(item, dict) else None
        expected = item.get("expected") if isinstance(item, dict) else None
        if (isinstance(question, str) and question.strip() and isinstance(item, dict)
                and "expected" in item and expected is None):  # nothing stored answers it
            found.append(Probe("none", question, None, frozenset(), frozenset()))
        elif not isinstance(question, str) or not question.strip() or not isinstance(expected, str):
            problems.append(f"{where}: item {n}: needs a \"question\" and an \"expected\" "
                            "pair path; skipped")
        elif expected not in by_path or not by_path[expected].sql.strip():
            problems.append(f"{where}: item {n}: expected pair {expected} is not a stored "
                            "pair with SQL; skipped")
        else:
            pair = by_path[expected]
            found.append(Probe("gold", question, pair.datasource, frozenset(),
                               frozenset({_key(pair)}), path=expected))
    return found, problems


def nothing_to_measure(pairs: Sequence[Pair]) -> str:
    """Why ``pairs`` give :func:`probes` no question, in one line, with what to do."""
    user = len(_measured(pairs))
    if not user:
        return "nothing to measure: there are no pairs (seed pairs are not measured)"
    return (f"nothing to measure: of {user} pair(s), none has `also:` phrasings and no two "
            "share a SQL or a skeleton (the SQL with its values masked); add `also:` "
            "phrasings to a pair, or store the same SQL for another question")


def _spread(items: list[Probe], limit: int) -> list[Probe]:
    if limit <= 0 or len(items) <= limit:
        return items
    step = len(items) / limit
    return [items[int(i * step)] for i in range(limit)]


@dataclass
class Tally:
    """R@1, R@5, MRR and calibration of one run over one task's probes."""

    n: int = 0
    r1: int = 0
    r5: int = 0
    rr: float = 0.0
    scored: list[tuple[float, int]] = field(default_factory=list)  # top-5 (score, right)

    def add(self, ranks: Sequence[tuple[float, bool]]) -> None:
        self.n += 1
        first = next((i for i, (_s, ok) in enumerate(ranks[:TOP], 1) if ok), None)
        if first is not None:
            self.r1 += first == 1
            self.r5 += 1
            self.rr += 1 / first
        self.scored += [(s, int(ok)) for s, ok in ranks[:TOP]]

    def report(self) -> dict[str, float | int | list[float]]:
        n = max(self.n, 1)
        return {"n": self.n, "R@1": round(self.r1 / n, 4),
                "R@1_interval": [round(v, 4) for v in wilson(self.r1 / n, self.n)],
                "R@5": round(self.r5 / n, 4), "MRR": round(self.rr / n, 4),
                "ECE": round(expected_calibration_error(self.scored), 4)}


def wilson(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson score interval of a proportion ``p`` of ``n``."""
    if n == 0:
        return (0.0, 0.0)
    d = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, centre - half), min(1.0, centre + half))


def reliability(scored: Sequence[tuple[float, int]], bins: int = 10
                ) -> list[tuple[float, float, int, float, float]]:
    """The reliability curve of (score, right) pairs: per non-empty score bin of width
    1 / ``bins``, (low, high, answers, mean score, share right)."""
    curve = []
    for b in range(bins):
        inside = [(s, y) for s, y in scored
                  if b / bins <= s < (b + 1) / bins or (b == bins - 1 and s >= 1.0)]
        if inside:
            curve.append((b / bins, (b + 1) / bins, len(inside),
                          sum(s for s, _ in inside) / len(inside),
                          sum(y for _, y in inside) / len(inside)))
    return curve


def expected_calibration_error(scored: Sequence[tuple[float, int]], bins: int = 10) -> float:
    """The mean gap between score and accuracy over ten equal-width score bins, weighted
    by the bins' sizes."""
    if not scored:
        return 0.0
    return sum(n / len(scored) * abs(mean_s - mean_y)
               for _lo, _hi, n, mean_s, mean_y in reliability(scored, bins))


Search = Callable[[Probe], Sequence[tuple[float, Any]]]  # (score, an Answer)


def run(probes_: Sequence[Probe], search: Search,
        misses: list[dict[str, Any]] | None = None) -> dict[str, dict]:
    """Each task's report for one backend: ``search(probe)`` returns the (score, answer)
    pairs, best first, the probe's left-out phrasings already excluded. With ``misses``,
    each question whose first answer is not right is appended to it (:func:`miss`)."""
    tallies = {task: Tally() for task in TASKS}
    tops: list[float] = []  # the best score of each no-answer question
    right_tops: list[float] = []  # the score of each right first answer (answered, gold)
    for probe in probes_:
        ranks = []
        found = list(search(probe))
        if probe.task == "none":
            tops.append(found[0][0] if found else 0.0)
            continue
        for score, pair in found:
            got = _skeleton(pair) if probe.by_skeleton else _key(pair)
            ranks.append((score, got in probe.right))
        tallies[probe.task].add(ranks)
        if probe.task in ("answered", "gold") and ranks and ranks[0][1]:
            right_tops.append(ranks[0][0])
        if misses is not None and not (ranks and ranks[0][1]):
            misses.append(miss(probe, found, [ok for _s, ok in ranks]))
    report: dict[str, dict] = {task: t.report() for task, t in tallies.items() if t.n}
    if tops:
        report["none"] = no_answer_report(tops, right_tops)
    return report


def no_answer_report(tops: Sequence[float], right_tops: Sequence[float] = ()
                     ) -> dict[str, Any]:
    """How low the questions nothing stored answers score: their number, the share whose
    best score is below :data:`NO_ANSWER_MIN_SCORE` (with its 95 % Wilson interval), the
    mean and highest best score; and beside it what that threshold costs the questions a
    stored pair answers: of the answered-before and gold questions whose first answer is
    right (``right_tops``, their scores), the share that scores at least the threshold."""
    under = sum(t < NO_ANSWER_MIN_SCORE for t in tops) / len(tops)
    kept = (sum(t >= NO_ANSWER_MIN_SCORE for t in right_tops) / len(right_tops)
            if right_tops else None)
    return {"n": len(tops), "min_score": NO_ANSWER_MIN_SCORE,
            "under_min_score": round(under, 4),
            "under_min_score_interval": [round(v, 4) for v in wilson(under, len(tops))],
            "mean_top_score": round(sum(tops) / len(tops), 4),
            "max_top_score": round(max(tops), 4),
            "answered_right": len(right_tops),
            "answered_kept": None if kept is None else round(kept, 4)}


def miss(probe: Probe, found: Sequence[tuple[float, Any]], right: Sequence[bool]
         ) -> dict[str, Any]:
    """What a team needs to mend a missed question: the question and its file, what came
    first (file, question, score), and the rank of the first right answer (``None``: not
    among the answers; a right answer's file, where there is one)."""
    at = next((n for n, ok in enumerate(right, 1) if ok), None)
    first = found[0][1] if found else None
    return {"task": probe.task, "question": probe.question, "path": probe.path,
            "first": getattr(first, "path", None),
            "first_question": getattr(first, "question", None),
            "first_score": round(found[0][0], 4) if found else None,
            "right_rank": at,
            "right_path": getattr(found[at - 1][1], "path", None) if at else None}


def measure(settings: Settings, recall: Callable[..., Any], *, sync: Callable[[], Any],
            default_run: Callable[[], str], notify: Callable[[str], None] | None,
            backends: Sequence[str], fusions: Sequence[str], k: int, limit: int,
            misses: bool, progress: Callable[[int, int], None] | None = None,
            fit: Callable[[Sequence[Pair]], Any] | None = None) -> dict[str, Any]:
    """``Memory.evaluate``: every probe of the pairs and of the gold file, per backend and,
    for hybrid, per fusion, through ``recall``; the index brought up to date by ``sync``
    first, and ``fit(pairs)`` (``Memory.fit_recall``, which the ``hybrid:learned`` run
    uses) made. Returns ``{"probes": {task: n}, "runs": {name: {task: report}}, "default":
    default_run(), "nothing_to_measure": why or None, "fit": fit or None}``; with
    ``misses``, ``"misses"``: the questions the default run did not answer right first.
    ``limit``: at most so many probes of each task (0: all); ``progress(done, total)``."""
    found = scan(settings, use_cache=settings.state_dir.is_dir())
    if notify is not None:
        for error in found.errors:
            notify(f"{error.location()}: {error.reason} (skipped)")
    asked = probes(found.pairs, limit=limit)
    gold, problems = gold_probes(settings.root / settings.knowledge_root / GOLD_FILE,
                                 found.pairs, settings.root)
    if notify is not None:
        for problem in problems:
            notify(problem)
    asked += gold
    counts = {task: sum(1 for p in asked if p.task == task) for task in TASKS
              if task != "gold" or gold}  # "gold": only with a gold file's questions
    if any(p.task == "none" for p in gold):
        counts["none"] = sum(1 for p in gold if p.task == "none")
    runs: dict[str, Any] = {}
    missed: list[dict[str, Any]] = []
    default = default_run()
    # the index backends, when this install has them, measured over a fresh index
    indexed = choose_backend(replace(settings, backend="auto")) != "grep"
    names = [n for n in backends if n == "grep" or indexed]
    fitted = None
    if any(n != "grep" for n in names):
        sync()
        if fit is not None:  # (made by the sync already when recall_fit is on)
            fitted = fit(found.pairs)
    runs_asked = sum(len(fusions) if n == "hybrid" else 1 for n in names)
    done = [0, runs_asked * len(asked)]  # questions asked, of all runs
    for name in names:
        for fusion in (fusions if name == "hybrid" else ("",)):
            chosen = replace(settings, backend=name, fusion=fusion or settings.fusion)

            def search(probe: Any, chosen: Settings = chosen) -> list[tuple[float, Hit]]:
                [result] = recall([probe.question], k, Filters(exclude=probe.exclude),
                                  settings=chosen, sync=False)
                done[0] += 1
                if progress is not None:
                    progress(*done)
                return [(h.score, h) for h in result.hits]

            run_name = f"{name}:{fusion}" if fusion else name
            wanted = missed if misses and run_name == default else None
            runs[run_name] = run(asked, search, wanted)
    report: dict[str, Any] = {
        "probes": counts, "runs": runs, "default": default,
        "nothing_to_measure": None if asked else nothing_to_measure(found.pairs),
        "fit": fitted}
    if misses:  # None: the configured backend was not among the runs asked for
        report["misses"] = missed if default in runs else None
    return report
