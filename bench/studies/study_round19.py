"""Round 19: the SQL-tree features (wrenmem/recall/sqltree.py), offline on gathered candidates.

Reads the pickles ``bench/fit_model.py --stores`` gathered (``WORKDIR/gathered/*.pkl``: the
product's own candidates and evidence for each TUNING case), computes the ranking features
with this tree's code, and compares rankings (the order is the ranking's argmax, as in the
product; no project fit): the shipped weights (``--prior``, a weights file), and the new
features fitted beside the held ones, all of them or one at a time, in sample and out of
set (fitted on the other sets, scored on this one). R@1 per case with its Wilson 95 %
interval, and the questions won / lost against the prior.

Usage: python bench/studies/study_round19.py WORKDIR --gather CASES --stores RUNWORK
       python bench/studies/study_round19.py WORKDIR [--scale 0.5] [--single] [--out-of-set]
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import fit_model  # noqa: E402

from wrenmem.recall import model as rank_model  # noqa: E402

NEW = rank_model.FEATURES[22:]  # round 19's; the prior is the shipped file with them at 0
SMALL = 20  # cases of fewer questions are left out of the means


def wilson(hits: int, n: int) -> tuple[float, float]:
    if not n:
        return (0.0, 0.0)
    z, p = 1.96, hits / n
    d = 1 + z * z / n
    c = p + z * z / (2 * n)
    m = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return ((c - m) / d, (c + m) / d)


def load(workdir: Path) -> list:
    out = []
    for path in sorted((workdir / "gathered").glob("*.pkl")):
        with path.open("rb") as f:
            _digest, asked = pickle.load(f)
        out += fit_model._without_excluded(asked)
    return out


def firsts(asked: list, weights: np.ndarray) -> list[int]:
    """Per asked question, 1 when the ranking (weights: one per feature) puts a right
    answer first."""
    out = []
    for a in asked:
        if not a.cands:
            out.append(0)
            continue
        rows = fit_model.feats(a)
        scores = [float(np.dot(weights, r)) for r in rows]
        order = fit_model.ranked_groups(a, scores)
        out.append(int(bool(order) and order[0][1] == 1))
    return out


def fitted(asked: list, prior: np.ndarray, names: tuple[str, ...], scale: float
           ) -> np.ndarray:
    """The prior's weights with ``names`` fitted beside the others (held), times ``scale``."""
    held = {i: float(prior[i]) for i, f in enumerate(rank_model.FEATURES) if f not in names}
    keep = list(range(len(rank_model.FEATURES)))
    beta = fit_model.fit_ranking(asked, keep, held=held)
    out = prior.copy()
    for i, f in enumerate(rank_model.FEATURES):
        if f in names:
            out[i] = beta[i] * scale
    return out


def report(asked: list, runs: dict[str, list[int]], base: str) -> None:
    by_case: dict[str, list[int]] = defaultdict(list)
    for n, a in enumerate(asked):
        by_case[a.case].append(n)
    names = list(runs)
    print("| case | n | " + " | ".join(names) + " | won / lost (last) |")
    print("|---|---|" + "---|" * len(names) + "---|")
    means: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for case, idx in sorted(by_case.items()):
        cells = []
        for name in names:
            hits = sum(runs[name][i] for i in idx)
            lo, hi = wilson(hits, len(idx))
            cells.append(f"{hits / len(idx):.3f} ({lo:.2f}–{hi:.2f})")
            if len(idx) >= SMALL:
                task = asked[idx[0]].task
                means[task][name].append(hits / len(idx))
        last = names[-1]
        won = sum(1 for i in idx if runs[last][i] and not runs[base][i])
        lost = sum(1 for i in idx if runs[base][i] and not runs[last][i])
        print(f"| {case} | {len(idx)} | " + " | ".join(cells) + f" | {won} / {lost} |")
    for task, by_name in sorted(means.items()):
        print(f"mean {task} ({len(next(iter(by_name.values())))} cases of ≥ {SMALL}): "
              + ", ".join(f"{k} {np.mean(v):.3f}" for k, v in by_name.items()))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--single", action="store_true", help="each feature alone too")
    parser.add_argument("--out-of-set", action="store_true")
    parser.add_argument("--write-to", type=Path)
    parser.add_argument("--features", help="comma-separated indexes into the new features "
                        "to fit (the others stay at 0); default all")
    parser.add_argument("--gather", help="first gather these cases (comma-separated names "
                        "without '/tuning') through --stores")
    parser.add_argument("--suite", type=Path, default=Path("/tmp/suite"))
    parser.add_argument("--stores", type=Path)
    args = parser.parse_args()
    if args.gather:
        items, cases = fit_model.read_suite(args.suite)
        wanted = set(args.gather.split(","))
        fit_model.gather(items, [c for c in cases if c["name"].rsplit("/", 1)[0] in wanted],
                         args.workdir, "tuning", False, args.stores)
        return 0
    asked = load(args.workdir)
    global NEW
    if args.features:
        NEW = tuple(NEW[int(i)] for i in args.features.split(","))
    prior = fit_model.shipped_models()["learned"][1:].copy()
    prior[22:] = 0.0
    runs = {"prior": firsts(asked, prior)}
    if args.single:
        for f in NEW:
            w = fitted(asked, prior, (f,), args.scale)
            print(f"{f}: {w[rank_model.FEATURES.index(f)]:.3f}", file=sys.stderr)
            runs[f[:14]] = firsts(asked, w)
    every = fitted(asked, prior, NEW, args.scale)  # the round-19 features together
    print("all four:", {f: round(float(every[rank_model.FEATURES.index(f)]), 3) for f in NEW},
          file=sys.stderr)
    if args.out_of_set:
        by_set: dict[str, list[int]] = defaultdict(list)
        for n, a in enumerate(asked):
            by_set[a.set].append(n)
        out = [0] * len(asked)
        for s, idx in by_set.items():
            rest = [a for n, a in enumerate(asked) if a.set != s]
            w = fitted(rest, prior, NEW, args.scale)
            got = firsts([asked[i] for i in idx], w)
            for i, g in zip(idx, got, strict=True):
                out[i] = g
        runs["all four, out of set"] = out
    runs["all four, in sample"] = firsts(asked, every)
    report(asked, runs, "prior")
    if args.write_to:
        json.dump({f: float(every[rank_model.FEATURES.index(f)]) for f in NEW},
                  args.write_to.open("w"), indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
