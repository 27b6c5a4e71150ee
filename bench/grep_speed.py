"""How fast is grep recall over 10,000 pair files, with and without the parse cache?

Builds a temporary project of N pair files (Spider-Syn and mSpider questions), then times
whole `wrenmem recall --backend grep` processes:

- cold: `.wrenmem/` deleted first, so every file is read, parsed and tokenized;
- warm: the cache is in place and no file changed (the normal case);
- one edited: one file changed since the last call.

Prints medians and the ratio warm/cold. Usage: python bench/grep_speed.py [--pairs 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _data import DATA, REPO


def questions(n: int) -> list[tuple[str, str]]:
    syn = json.loads((DATA / "spider-syn-train" / "questions.json").read_text())
    ms = json.loads((DATA / "mspider-dev" / "questions.json").read_text())
    base = [(q["SpiderQuestion"], q["query"]) for q in syn]
    base += [(q["question"]["zh"], q["sql"]) for q in ms]
    out = []
    for i in range(n):
        nl, sql = base[i % len(base)]
        out.append((nl if i < len(base) else f"{nl} (variant {i // len(base)})", sql))
    return out


def build(root: Path, n: int) -> None:
    folder = root / "knowledge" / "sql"
    for i, (nl, sql) in enumerate(questions(n)):
        sub = folder / f"part{i % 20:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        front = f"---\nnl: {json.dumps(nl, ensure_ascii=False)}\nsource: user\n---\n"
        (sub / f"pair-{i:05d}.md").write_text(f"{front}\n```sql\n{sql}\n```\n", encoding="utf-8")


def run(root: Path, query: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "wrenmem", "--project", str(root), "recall",
                           "-b", "grep", "-q", query, "--json"], env=env, capture_output=True,
                          text=True, check=True)
    elapsed = time.perf_counter() - start
    assert json.loads(proc.stdout)[0]["hits"], "no hits"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build(root, args.pairs)
        query = "How many singers are older than 40?"
        cold = []
        for _ in range(args.repeat):
            shutil.rmtree(root / ".wrenmem", ignore_errors=True)
            cold.append(run(root, query))
        run(root, query)
        past = time.time() - 60  # out of the two-second racy window
        for path in (root / "knowledge" / "sql").rglob("*.md"):
            os.utime(path, (past, past))
        run(root, query)
        warm = [run(root, query) for _ in range(args.repeat)]
        edited = []
        target = root / "knowledge" / "sql" / "part00" / "pair-00000.md"
        for i in range(args.repeat):
            target.write_text(target.read_text().replace("nl: ", f"nl: edit{i} ", 1))
            edited.append(run(root, query))
        c, w, e = (statistics.median(x) for x in (cold, warm, edited))
        print(f"grep recall, one CLI process, {args.pairs} pair files, median of {args.repeat}:")
        print(f"  cold (no cache)      {c:6.2f} s")
        print(f"  warm (nothing new)   {w:6.2f} s   ratio warm/cold {w / c:.2f}")
        print(f"  one file edited      {e:6.2f} s   ratio edited/cold {e / c:.2f}")


if __name__ == "__main__":
    main()
