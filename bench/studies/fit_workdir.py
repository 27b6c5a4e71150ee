"""Fit every suite project under a run.py ``--workdir`` (wrenmem.recall.adapt), as a sync
that writes would: for the round-15 study (bench/studies/recall-fit.md), which runs the
suite once with ``WRENMEM_RECALL_FIT=false`` (the prior; the indexes built) and once after
this (the fitted default; only no-op syncs then).

    python bench/studies/fit_workdir.py /tmp/wrenmem-suite-work [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from wrenmem import Memory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--force", action="store_true", help="fit again where fitted")
    args = parser.parse_args(argv)
    fits = {}
    for root in sorted((args.workdir / "projects").iterdir()):
        if not (root / ".wrenmem" / "index").exists():
            continue  # a grep-only project (never synced)
        started = time.process_time()
        fit = Memory(root, backend="hybrid", recall_fit=True).fit_recall(force=args.force)
        if fit is None:
            continue
        fits[root.name] = fit
        cands = fit.get("candidates") or {}
        print(f"{root.name} {fit['probes']} {fit['chosen']:12s} gain {fit['gain']:+.3f} "
              f"tilt {fit['tilt']} " + " ".join(
                  f"{c}={m.get('mean', 0):.3f}" for c, m in cands.items())
              + f" ({time.process_time() - started:.1f} s CPU)", flush=True)
    if args.json:
        args.json.write_text(json.dumps(fits, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
