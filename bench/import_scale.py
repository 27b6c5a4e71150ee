"""Import scale: CPU seconds of ``wrenmem import`` for N and 4N pairs, and their ratio.

Builds a ``queries.yml`` of N distinct generated pairs (a question with a number, a small
SELECT), imports it into a fresh project (no index: the grep path, so only the import itself
is measured), then imports it again with ``--overwrite`` (every file replaced), each as a
new ``wrenmem`` process. Prints CPU seconds (user + system of the child) per run and the
ratio of the large run to the small one: a linear import gives about 4 for 4x the pairs, a
quadratic one about 16.

    python bench/import_scale.py [--small 500] [--large 2000] [--code CHECKOUT]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def queries_yml(n: int) -> str:
    """A queries.yml of ``n`` distinct pairs."""
    pairs = [{"nl": f"How many orders did store {i} take in week {i % 52}?",
              "sql": f"SELECT COUNT(*) FROM orders WHERE store_id = {i} AND week = {i % 52}",
              "source": "wren"} for i in range(n)]
    return yaml.safe_dump({"version": 1, "pairs": pairs}, sort_keys=False)


def child_cpu(args: list[str], cwd: Path, code: Path) -> tuple[float, float]:
    """(CPU seconds (user + system), wall seconds) of one wrenmem process run to its end."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run([sys.executable, "-m", "wrenmem", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"wrenmem {' '.join(args)} failed:\n{done.stderr}")
    after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter() - start
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def measure(n: int, code: Path) -> tuple[tuple[float, float], tuple[float, float]]:
    """((CPU, wall) seconds of a first import, of an --overwrite import) of ``n`` pairs."""
    with tempfile.TemporaryDirectory(prefix="wrenmem-import-") as tmp:
        root = Path(tmp)
        (root / "knowledge" / "sql").mkdir(parents=True)
        source = root / "queries.yml"
        source.write_text(queries_yml(n), encoding="utf-8")
        first = child_cpu(["import", str(source)], root, code)
        files = len(list((root / "knowledge" / "sql").glob("*.md")))
        if files != n:
            raise SystemExit(f"{n} pairs imported but {files} files written")
        again = child_cpu(["import", "--overwrite", "--yes", str(source)], root, code)
        return first, again


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", type=int, default=500)
    parser.add_argument("--large", type=int, default=2000)
    parser.add_argument("--code", type=Path, default=REPO,
                        help="the checkout whose wrenmem is measured (default: this one)")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    results = {n: measure(n, args.code.resolve()) for n in (args.small, args.large)}
    for n, (first, again) in results.items():
        print(f"{n:>6} pairs: import {first[0]:7.2f} s CPU ({first[1]:.2f} s wall), "
              f"import --overwrite {again[0]:7.2f} s CPU ({again[1]:.2f} s wall)")
    small, large = results[args.small], results[args.large]
    print(f"ratio {args.large}/{args.small} pairs: import {large[0][0] / small[0][0]:.1f}x, "
          f"--overwrite {large[1][0] / small[1][0]:.1f}x (linear: {args.large / args.small:.1f}x); "
          f"load average {load:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
