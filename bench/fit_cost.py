"""Cost of fitting recall to a project's own pairs (wrenmem.recall.adapt) at N pairs.

Builds (or, with ``--keep DIR`` a second time, reuses) a project of N public pair files
(``bench/scale.py``'s, from $WRENMEM_BENCH_DATA), syncs it once with ``recall_fit`` off, then
times in this process: the probes and their fingerprint (what a sync that writes pays when
the questions did not change), and the fit itself (``refresh(force=True)``), CPU and wall,
with what it chose. The budget (issue 40): at most 10 s of CPU at 10,000 pairs.

    python bench/fit_cost.py --pairs 10000 --keep /tmp/fit10k
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import make_project  # noqa: E402

from wrenmem import Memory  # noqa: E402
from wrenmem.pairs.catalog import scan  # noqa: E402
from wrenmem.recall import adapt, evaluate, fitreport  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--keep", type=Path, help="build the project here (reused if there)")
    args = parser.parse_args(argv)
    root = args.keep or Path(tempfile.mkdtemp(prefix="fitcost-"))
    if not (root / "knowledge" / "sql").is_dir():
        make_project(root, args.pairs)
    Memory(root, backend="hybrid", recall_fit=False).sync()
    memory = Memory(root, backend="hybrid")
    memory.recall("warm up", 1)  # the model loaded, the recall copy read: as after a sync
    t0, c0 = time.perf_counter(), time.process_time()
    pairs = scan(memory.settings).pairs
    probes = evaluate.probes(pairs, limit=adapt.PROBES)
    adapt.fingerprint(probes, memory.recaller.embedder.model_id)
    t1, c1 = time.perf_counter(), time.process_time()
    fit = memory.fit_recall(force=True, pairs=pairs, measure=True)
    t2, c2 = time.perf_counter(), time.process_time()
    assert fit is not None
    print(f"{len(pairs)} pairs, {len(probes)} probes ({fit['probes']})")
    print(f"probes + fingerprint: {c1 - c0:.2f} s CPU, {t1 - t0:.2f} s wall")
    print(f"fit (probes included): {c2 - c1:.2f} s CPU, {t2 - t1:.2f} s wall "
          f"(budget 10 s CPU)")
    print(f"chose {fit['chosen']}: {fitreport.summary(fit)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
