"""Per case of saved suite runs: grep, vector, the prior hybrid and the fitted hybrid.

    python bench/studies/compare_fit.py PRIOR.json FITTED.json

PRIOR.json: ``run.py --runs grep,vector,hybrid`` with ``WRENMEM_RECALL_FIT=false``;
FITTED.json: ``run.py --runs hybrid`` after ``fit_workdir.py`` (bench/studies/recall-fit.md).
Prints R@1 per case, the fitted run's paired won/lost against the prior (exact McNemar p),
whether it is below its best single part beyond that part's 95 % interval, and the mean
R@1 of each task over the cases.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "suite"))

from run import paired, wilson  # noqa: E402


def main(argv: list[str]) -> int:
    prior = {c["name"]: c for c in json.loads(Path(argv[0]).read_text())["cases"]}
    fitted = {c["name"]: c for c in json.loads(Path(argv[1]).read_text())["cases"]}
    means: dict[str, list[tuple[float, float, float]]] = {}
    print(f"{'case':38s} {'n':>4s} {'grep':>6s} {'vector':>6s} {'prior':>6s} {'fitted':>6s} "
          f"won/lost p      below best single?")
    for name, case in prior.items():
        if name not in fitted:
            continue
        runs = case["runs"]
        ranks = {r: runs[r]["ranks"] for r in ("grep", "vector", "hybrid")}
        ranks["fitted"] = fitted[name]["runs"]["hybrid"]["ranks"]
        n = len(ranks["hybrid"])
        r1 = {r: sum(1 for x in v if x == 1) / max(n, 1) for r, v in ranks.items()}
        won, lost, p = paired(ranks["fitted"], ranks["hybrid"])
        best = max(("grep", "vector"), key=lambda r: r1[r])
        low, _high = wilson(sum(1 for x in ranks[best] if x == 1), n)
        flag = f"yes ({best} {r1[best]:.3f}, low {low:.3f})" if r1["fitted"] < low else ""
        print(f"{name:38s} {n:4d} {r1['grep']:6.3f} {r1['vector']:6.3f} {r1['hybrid']:6.3f} "
              f"{r1['fitted']:6.3f} {won:3d}/{lost:<3d} {p if p is not None else 1:.3f}  {flag}")
        means.setdefault(case["task"], []).append((r1["grep"], r1["hybrid"], r1["fitted"]))
    for task, rows in means.items():
        k = len(rows)
        print(f"mean over {k} {task} cases: grep {sum(r[0] for r in rows) / k:.3f}, prior "
              f"{sum(r[1] for r in rows) / k:.3f}, fitted {sum(r[2] for r in rows) / k:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
