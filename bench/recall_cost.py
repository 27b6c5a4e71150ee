"""Issue 40's cost figures on one project of N pairs, with the load of each run.

On a project of ``bench/scale.py``'s public pairs (built in ``--keep DIR`` or reused), with
the recall fit made and the no-answer map on (both defaults), prints medians of ``--runs``:

- warm hybrid recall in this process (a held Memory, as the daemon holds it), ms a question;
- one-shot ``wrenmem recall`` as a fresh process: in-process (``WRENMEM_NO_DAEMON=1``) and
  answered by the watcher a recall starts on demand;
- a no-op ``wrenmem sync`` process with this tree's code and with ``--baseline DIR``'s;
- what a writing sync pays for the fit when no question changed (a tag added): the cheap
  key (:class:`wrenmem.recall.adapt.PairsKey`) against the probes and fingerprint of every
  pair that it replaces.

    python bench/recall_cost.py --pairs 10000 --keep /tmp/fit10k --baseline /work/main
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import make_project  # noqa: E402

from wrenmem import Memory  # noqa: E402
from wrenmem.pairs.catalog import scan  # noqa: E402
from wrenmem.recall import adapt, evaluate  # noqa: E402
from wrenmem.recall.recaller import Recaller  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
QUESTIONS = ["How many singers do we have?", "What are the names of all stadiums?",
             "每个部门有多少员工？", "List the flights from Denver to Boston on Sunday."]


class Quiet:
    """A freshness that says no file changed (the daemon's, between edits)."""

    def needs_sync(self, key: str = "") -> bool:
        return False

    def synced(self, started_at: float, key: str = "") -> None:
        pass


def load() -> str:
    return os.getloadavg().__repr__()


def cli(root: Path, args: list[str], code: Path, *, daemon: bool = False) -> float:
    env = {**os.environ, "PYTHONPATH": str(code)}
    if not daemon:
        env["WRENMEM_NO_DAEMON"] = "1"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "wrenmem", *args], cwd=root, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def median_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--keep", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="another checkout, for the no-op sync")
    args = parser.parse_args(argv)
    root = args.keep
    if not (root / "knowledge" / "sql").is_dir():
        make_project(root, args.pairs)
    memory = Memory(root, backend="hybrid")
    memory.sync()
    memory.fit_recall()
    print(f"{args.pairs} pairs; load {load()}")

    recaller = Recaller(memory.settings, freshness=Quiet())  # warm, as the daemon's
    for q in QUESTIONS * 3:  # a long-lived process: the candidates' shapes parsed once
        recaller.recall([q], 5)
    warm = []
    for _ in range(args.runs):
        for q in QUESTIONS:
            t = time.perf_counter()
            recaller.recall([q], 5)
            warm.append(time.perf_counter() - t)
    print(f"warm hybrid (fit {memory.status()['recall_fit']['chosen']}, no-answer map on): "
          f"median {median_ms(warm)}, max {max(warm) * 1000:.0f} ms; load {load()}")

    recall = ["recall", "-q", QUESTIONS[0], "--backend", "hybrid"]
    alone = [cli(root, recall, REPO) for _ in range(args.runs)]
    print(f"one-shot CLI recall in-process: median {median_ms(alone)}; load {load()}")
    cli(root, recall, REPO, daemon=True)  # starts the watcher on demand
    time.sleep(5)  # its model loaded
    served = [cli(root, recall, REPO, daemon=True) for _ in range(args.runs)]
    print(f"one-shot CLI recall answered by the daemon: median {median_ms(served)}; "
          f"load {load()}")
    cli(root, ["watch", "--stop"], REPO, daemon=True)

    codes = [REPO, *([args.baseline] if args.baseline else [])]
    noop: dict[Path, list[float]] = {code: [] for code in codes}
    for _ in range(2 * args.runs):  # interleaved: the load changes under both alike
        for code in codes:
            noop[code].append(cli(root, ["sync"], code))
    for code in codes:
        print(f"no-op sync process ({code}): median {median_ms(noop[code])}; load {load()}")
    if args.baseline:
        print(f"no-op sync, this tree / baseline: "
              f"{statistics.median(noop[REPO]) / statistics.median(noop[args.baseline]):.2f}")

    pair = next((root / "knowledge" / "sql").rglob("*.md"))
    embedder = memory.recaller.embedder
    keyed, probed = [], []
    for n in range(args.runs):
        text = pair.read_text("utf-8")
        pair.write_text(text.replace("---\n", f"---\ntags: [bench{n}]\n", 1), "utf-8")
        Memory(root, backend="hybrid", recall_fit=False).sync()  # the write, no fit
        c = time.process_time()
        adapt.refresh(memory.settings, embedder)
        keyed.append(time.process_time() - c)
        c = time.process_time()  # what the fit paid before: every pair probed
        adapt.fingerprint(adapt.sample(evaluate.probes(scan(memory.settings).pairs),
                                       adapt.PROBES), embedder.model_id)
        probed.append(time.process_time() - c)
        pair.write_text(text, "utf-8")
    k, p = statistics.median(keyed), statistics.median(probed)
    print(f"a writing sync's fit check, no question changed: {k * 1000:.0f} ms CPU (key) "
          f"against {p * 1000:.0f} ms CPU (probes + fingerprint): {p / max(k, 1e-6):.0f}x; "
          f"load {load()}")
    Memory(root, backend="hybrid").sync()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
