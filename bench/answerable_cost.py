"""CPU cost of the shown score's map (``wrenmem/recall/answerable.py``) against a baseline.

Usage: python bench/answerable_cost.py --suite DIR [--pairs 10000] [--questions 300]
       [--baseline main] [--repeat 5]

A vocabulary of ``--pairs`` stored pairs of the suite (``bench/suite/build.py``: every
set's items in order, as :func:`wrenmem.recall.answerable.project_vocabulary` makes it) and
``--questions`` asked questions, each with five hits drawn from the stored pairs (a fixed
seed: the map reads the hits' words and SQL, not whether they are right). Each question's
map (:func:`~wrenmem.recall.answerable.calibrate`) is timed in CPU seconds (user + sys of
this process) under this tree's module and under the module of git revision ``--baseline``
(with its constants), interleaved, best of ``--repeat``; the ratio is printed with the
load. The first call on a new vocabulary (its letters and prefixes, made once per
vocabulary) is timed apart. Timings are never asserted: the machine is shared.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from wrenmem.recall import answerable  # noqa: E402
from wrenmem.recall.hits import Hit  # noqa: E402

SEED = 20261207


def baseline_module(rev: str) -> Any:
    """``wrenmem/recall/answerable.py`` of ``rev``, with its constants, as a module."""
    folder = Path(tempfile.mkdtemp(prefix="answerable-"))
    for name in ("answerable.py", answerable.CONSTANTS_FILE):
        text = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:wrenmem/recall/{name}"],
                              check=True, capture_output=True, text=True).stdout
        (folder / name).write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("answerable_baseline",
                                                  folder / "answerable.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclass looks itself up there)
    spec.loader.exec_module(module)
    constants = json.loads((folder / answerable.CONSTANTS_FILE).read_text(encoding="utf-8"))
    module.load = lambda: module.parse(constants)  # its own constants, not this tree's
    return module


def data(suite: Path, pairs: int, questions: int) -> tuple[list[dict], list[str]]:
    manifest = json.loads((suite / "manifest.json").read_text(encoding="utf-8"))
    stored: list[dict] = []
    asked: list[str] = []
    for name in manifest["sets"]:
        path = suite / name / "items.jsonl"
        if not path.exists():
            continue
        with path.open(encoding="utf-8") as f:
            for line in f:
                item = json.loads(line)
                (stored if len(stored) < pairs else asked).append(item)
        if len(stored) >= pairs and len(asked) >= questions:
            break
    rng = random.Random(SEED)
    return stored, [i["question"] for i in rng.sample(asked, min(questions, len(asked)))]


def cpu() -> float:
    return time.process_time()  # user + sys of this process (os.times ticks in 10 ms)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--baseline", default="main")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    stored, questions = data(args.suite, args.pairs, args.questions)
    vocabulary = frozenset().union(*(answerable.pair_terms(i["question"], (), i["sql"])
                                     for i in stored))
    rng = random.Random(SEED)
    hits = [[Hit(i["question"], i["sql"], f"knowledge/sql/{i['id']}.md", s, "user")
             for i, s in zip(rng.sample(stored, 5), (0.9, 0.5, 0.2, 0.1, 0.05), strict=True)]
            for _ in questions]
    modules = {"this tree": answerable, args.baseline: baseline_module(args.baseline)}
    first: dict[str, float] = {}
    for name, module in modules.items():
        copy = frozenset(vocabulary)  # a new object: nothing cached for it yet
        start = cpu()
        module.calibrate(questions[0], hits[0], copy)
        first[name] = cpu() - start
    best: dict[str, float] = dict.fromkeys(modules, float("inf"))
    for _ in range(args.repeat):
        for name, module in modules.items():
            for q, h in zip(questions, hits, strict=True):  # warm the term caches
                module.calibrate(q, h, vocabulary)
            start = cpu()
            for q, h in zip(questions, hits, strict=True):
                module.calibrate(q, h, vocabulary)
            best[name] = min(best[name], (cpu() - start) / len(questions))
    with open("/proc/loadavg", encoding="utf-8") as f:
        load = f.read().split()[:3]
    print(f"{len(stored)} pairs, vocabulary {len(vocabulary)} terms, {len(questions)} "
          f"questions, load {' '.join(load)}, {time.strftime('%Y-%m-%d %H:%M')}")
    for name in modules:
        print(f"  {name:12} {best[name] * 1e3:.4f} ms CPU a question (best of "
              f"{args.repeat}); first call on a new vocabulary {first[name] * 1e3:.1f} ms")
    base = best[args.baseline]
    print(f"  ratio this tree / {args.baseline}: {best['this tree'] / base:.2f} "
          f"(+{(best['this tree'] - base) * 1e3:.4f} ms a question)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
