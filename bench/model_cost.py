"""CPU of the ranking model per question (``wrenmem.recall.model.score``), on real candidates.

Usage: python bench/model_cost.py PROJECT [--questions N] [--rounds 3]

The project's first N stored questions are recalled once by the hybrid backend while the
candidates handed to the scorer are recorded; then ``model.score`` is timed alone over
them (process CPU, interleaved rounds, the best of each). Run it under two code trees
(``PYTHONPATH=A`` and ``PYTHONPATH=B``) on one project to get the ratio of a change; the
script uses only ``Memory`` and ``model.score``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("project", type=Path)
    parser.add_argument("--questions", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    from wrenmem import Memory
    from wrenmem.pairs.catalog import scan
    from wrenmem.recall import model

    memory = Memory(args.project, backend="hybrid", recall_fit=False)
    memory.sync()
    questions = [p.nl for p in scan(memory.settings).pairs][:args.questions]
    seen: list[tuple[str, list, float]] = []
    real = model.score

    def recording(question, signals, *a, **kw):
        seen.append((question, list(signals), float(kw.get("unknown", 0.0))))
        return real(question, signals, *a, **kw)

    model.score = recording
    try:
        memory.recall_many(questions, 5, sync=False)
    finally:
        model.score = real
    candidates = sum(len(s) for _q, s, _u in seen) / max(len(seen), 1)
    best = float("inf")
    for _ in range(args.rounds):
        start = time.process_time()
        for question, signals, unknown in seen:
            model.score(question, signals, unknown=unknown)
        best = min(best, (time.process_time() - start) / max(len(seen), 1))
    print(f"model.score: {best * 1000:.3f} ms of CPU per question "
          f"({len(seen)} questions, {candidates:.0f} candidates each, "
          f"best of {args.rounds} rounds; code {model.__file__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
