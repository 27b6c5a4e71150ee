"""What the studies of the ranking model share (``study_round8.py`` on): the TUNING evidence
``bench/fit_model.py`` gathered, the form reader's tally of each case's stored items, and an
out-of-fold fit over five folds by database. Nothing here looks at HELD-OUT.

A study adds or changes columns of the model's features, then calls :func:`oof` with each
variant's rows and :func:`summary` to print the figures bench/studies/round-*.md report.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import unicodedata
from collections import defaultdict
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))
import fit_model as fm  # noqa: E402

import __main__  # noqa: E402
from wrenmem.recall import forms  # noqa: E402
from wrenmem.recall import model as rm  # noqa: E402
from wrenmem.textsearch import tokenize  # noqa: E402

__main__.Asked = fm.Asked  # type: ignore[attr-defined]
__main__.Cand = fm.Cand  # type: ignore[attr-defined]  # the pickles name fit_model's __main__

FOLDS = 5
ENGLISH = ("spider-en", "spider-syn", "spider-keyword", "bird", "mspider-en",
           "spider-followup", "kaggledbqa")


class Study:
    """The TUNING evidence of a suite, grouped by case."""

    def __init__(self, suite: Path, workdir: Path):
        self.items, self.cases = fm.read_suite(suite)
        self.tuning: list[Any] = fm.gather(self.items, self.cases, workdir, "tuning", False)
        print("asked", len(self.tuning), file=sys.stderr)
        self.by_case: dict[str, list[Any]] = defaultdict(list)
        for a in self.tuning:
            self.by_case[a.case].append(a)
        self.case_of = {c["name"]: c for c in self.cases if c["split"] == "tuning"}
        self.fold_of = {db: int(hashlib.sha256(db.encode()).hexdigest(), 16) % FOLDS
                        for db in {a.db for a in self.tuning}}
        # the shipped features, kept: oof() puts each variant's rows in fit_model's cache
        self._shipped = {id(a): [tuple(r) for r in fm.feats(a)] for a in self.tuning}

    @classmethod
    def from_command_line(cls, doc: str) -> Study:
        """The study of ``--suite DIR --workdir W`` (a study script's arguments; ``doc``:
        its docstring, whose first line describes it)."""
        parser = argparse.ArgumentParser(description=doc.splitlines()[0])
        parser.add_argument("--suite", type=Path, required=True)
        parser.add_argument("--workdir", type=Path, required=True)
        args = parser.parse_args()
        return cls(args.suite, args.workdir)

    def tallies(self) -> Iterator[tuple[Any, forms.Tally]]:
        """Each asked question with the form reader's tally of the pairs its search sees:
        its case's stored items (their question's and SQL's search terms, as the index
        holds them), its ``exclude`` items left out."""
        for name, asked in self.by_case.items():
            case = self.case_of[name]
            stored = [self.items[i] for i in case["stored"]]
            at = {it["id"]: n for n, it in enumerate(stored)}
            rows = [(" ".join(set(tokenize(it["question"]))
                              | set(tokenize(it["sql"], sql=True))), it["sql"])
                    for it in stored]
            whole = forms.tally_of(rows)
            for a, entry in zip(asked, case["asked"], strict=True):
                gone = [at[i] for i in entry.get("exclude", ()) if i in at]
                if gone:
                    allowed = np.ones(len(rows), dtype=bool)
                    allowed[gone] = False
                    yield a, forms.Tally(whole.matrix, allowed, whole._rows_with)
                else:
                    yield a, whole

    def shipped(self, first: int | None = None) -> dict[int, list[tuple[float, ...]]]:
        """The shipped model's feature rows per asked question (its first ``first``)."""
        return {n: [r[:first] for r in rows] for n, rows in self._shipped.items()}

    def with_form(self, base: dict[int, list[tuple[float, ...]]], scores: dict[int, list[float]],
                  transform: Callable[[float], float] = float,
                  times: Callable[[Any, list[int]], list[float]] | None = None
                  ) -> dict[int, list[tuple[float, ...]]]:
        """``base`` rows with the two form features of a variant's form fits: the gap to
        the best answer's (twins share their best), ``transform``-ed, and that times one
        minus the best coverage (or ``times(asked, twin groups)``, one factor a candidate)."""
        out = {}
        for a in self.tuning:
            s = scores[id(a)]
            if not s:
                out[id(a)] = []
                continue
            groups = rm.twins(a.cands)
            s = rm._group_max(s, groups)
            best = max(s)
            if times is None:
                bc = max(c.coverage for c in a.cands)
                factors = [1 - bc] * len(s)
            else:
                factors = times(a, groups)
            out[id(a)] = [r + (transform(v - best), transform(v - best) * f)
                          for r, v, f in zip(base[id(a)], s, factors, strict=True)]
        return out

    def oof(self, rows_of: dict[int, list[tuple[float, ...]]],
            fitted_on: Callable[[Any], bool] | None = None) -> dict[str, dict[str, float]]:
        """Out-of-fold metrics per case of a variant's feature rows (each fold's model fitted
        on the other folds' questions, or on those of them ``fitted_on`` accepts)."""
        for a in self.tuning:
            fm._FEATURES[id(a)] = rows_of[id(a)]
        keep = list(range(len(next(r for r in rows_of.values() if r)[0])))
        scored = {}
        for f in range(FOLDS):
            train = [a for a in self.tuning if self.fold_of[a.db] != f
                     and (fitted_on is None or fitted_on(a))]
            b = fm.fit_ranking(train, keep)
            for a in self.tuning:
                if self.fold_of[a.db] == f:
                    scored[id(a)] = [float(np.dot(b, r)) for r in rows_of[id(a)]]
        return {case: fm.metrics(sub, lambda a: scored[id(a)])
                for case, sub in self.by_case.items()}


def form_gaps(study: Study, exponents: tuple[float, ...]
              ) -> dict[float, dict[int, list[float]]]:
    """Per exponent, each asked question's candidates' form fit less the best's (twins
    sharing their best), the form reader's term weights scaled by that exponent."""
    gaps: dict[float, dict[int, list[float]]] = {e: {} for e in exponents}
    for a, tally in study.tallies():
        terms = tokenize(a.question)
        groups = rm.twins(a.cands) if a.cands else []
        for e in exponents:
            w = forms.label_weights(tally, terms, exponent=e)
            fits = rm._group_max([forms.fit(w, c.sql) for c in a.cands], groups) if a.cands else []
            best = max(fits, default=0.0)
            gaps[e][id(a)] = [v - best for v in fits]
    return gaps


def agreement(a: Any) -> tuple[list[float], list[float], list[float]]:
    """Per candidate (twins sharing their best): first on both backends (1 or 0), the worse
    of its two gaps to the best, and whether one answer is first on both (the question's)."""
    if not a.cands:
        return [], [], []
    groups = rm.twins(a.cands)
    dense = rm._group_max([c.dense if c.dense is not None else -1.0 for c in a.cands], groups)
    lexical = rm._group_max([c.lexical or 0.0 for c in a.cands], groups)
    top_d, top_l = max(dense), max(lexical) or 1.0
    pairs = list(zip(dense, lexical, strict=True))
    both = [1.0 if d == top_d and v == max(lexical) else 0.0 for d, v in pairs]
    worse = [min(d - top_d, v / top_l - 1.0) for d, v in pairs]
    agreed = 1.0 if any(both) else 0.0
    return both, worse, [agreed] * len(both)


def plus(rows: dict[int, list[tuple[float, ...]]], *columns: dict[int, list[float]]
         ) -> dict[int, list[tuple[float, ...]]]:
    """``rows`` with one more feature per column (a value per candidate)."""
    return {n: [r + tuple(col[n][i] for col in columns) for i, r in enumerate(rs)]
            for n, rs in rows.items()}


def summary(name: str, res: dict[str, dict[str, float]], watch: str = "bird/answered/tuning"
            ) -> dict[str, dict[str, float]]:
    """Print a variant's line: the mean R@1 over the cases of 20 questions or more, the
    new-question cases', the English, Chinese (``mspider-zh``) and Korean ones', and one
    case's (``watch``)."""
    big = {c: m for c, m in res.items() if m["n"] >= 20}
    mean = np.mean([m["R@1"] for m in big.values()])
    new = [m["R@1"] for c, m in big.items() if c.split("/")[1].startswith("new")]
    zh = [m["R@1"] for c, m in big.items() if c.startswith("mspider-zh/")]
    ko = [m["R@1"] for c, m in big.items() if c.startswith("ko-wikisql/")]
    en = [m["R@1"] for c, m in big.items() if c.split("/")[0] in ENGLISH]
    print(f"{name:14s} mean {mean:.4f}  new {np.mean(new):.4f}  en {np.mean(en):.4f}  "
          f"zh {np.mean(zh):.4f}  ko {np.mean(ko):.4f}  "
          f"{watch.rsplit('/', 1)[0]} {res[watch]['R@1']:.3f}", flush=True)
    return res


def table(results: dict[str, dict[str, dict[str, float]]]) -> None:
    """Every variant's R@1 per case of 20 questions or more, a column per variant."""
    names = list(results)
    first = results[names[0]]
    print("columns:", names)
    for case in sorted(first):
        if first[case]["n"] >= 20:
            print(f"  {case:40s} " + " ".join(f"{results[n][case]['R@1']:.3f}"
                                              for n in names) + f" n={first[case]['n']}")


# -- columns the studies of rounds 13 on read -------------------------------------

_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]|\w+")  # Korean has spaces


def runs(text: str, n: int) -> set[tuple[str, ...]]:
    """The word runs of ``n`` words of a text (case folded; a CJK character is a word)."""
    words = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
    if len(words) < n:
        return {tuple(words)} if words else set()
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def run_containment(a: Any, n: int) -> list[float]:
    """Per candidate (twins sharing their best): the share of its question's word runs of
    ``n`` words that the asked question holds."""
    if not a.cands:
        return []
    asked = runs(a.question, n)
    out = []
    for c in a.cands:
        own = runs(c.question, n)
        out.append(len(asked & own) / len(own) if own else 0.0)
    return rm._group_max(out, rm.twins(a.cands))


@cache
def names(sql: str, dialect: str | None) -> frozenset[str]:
    """The search terms of the column and table names of a SQL text (empty when sqlglot
    cannot read it)."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read=dialect or None)
    except Exception:  # noqa: BLE001 - any parse failure: no names
        return frozenset()
    found = {c.name for c in tree.find_all(exp.Column)} | {t.name for t in tree.find_all(exp.Table)}
    return frozenset(tokenize(" ".join(found).replace("_", " ")))


def names_stated(a: Any) -> list[float]:
    """Per candidate (twins sharing their best): the share of its SQL's name terms the
    asked question holds."""
    if not a.cands:
        return []
    asked = set(tokenize(a.question))
    out = []
    for c in a.cands:
        own = names(c.sql, c.dialect)
        out.append(len(asked & own) / len(own) if own else 0.0)
    return rm._group_max(out, rm.twins(a.cands))


def gap(col: dict[int, list[float]]) -> dict[int, list[float]]:
    """Each candidate's value less its question's best."""
    return {n: [v - max(vs) for v in vs] for n, vs in col.items()}


def line(name: str, res: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Print a variant's line as rounds 13 on report it: the mean R@1 over the cases of 20
    questions or more, the new-question and answered-before means, and three cases."""
    big = {c: m["R@1"] for c, m in res.items() if m["n"] >= 20}
    new = [r for c, r in big.items() if c.split("/")[1].startswith("new")]
    answered = [r for c, r in big.items() if c.split("/")[1].startswith("answered")]
    print(f"{name:34s} all {np.mean(list(big.values())):.4f}  new {np.mean(new):.4f}"
          f"  answered {np.mean(answered):.4f}"
          f"  bird/answered {res['bird/answered/tuning']['R@1']:.3f}"
          f"  bird-dev/answered {res['bird-dev/answered/tuning']['R@1']:.3f}"
          f"  spider-followup {res['spider-followup/answered-all/tuning']['R@1']:.3f}",
          flush=True)
    return res

