"""Crash safety: kill -9 syncs at random moments, then check that one sync makes it exact.

Each round changes 30 random pair files (edit, delete, rename, copy to a new file), starts
1-3 `wrenmem sync` processes (one in five with `--full`) and kills each with SIGKILL after
0.3-4 s, then runs `wrenmem sync`, deletes the state mirror (so that `check` must compare
with the table itself) and runs `wrenmem check`. A round passes when both exit 0 and the
table's ids are exactly the files: no lost pair, no stale row, no duplicate.

Usage: python bench/kill_stress.py [--pairs 1500] [--rounds 12] [--seed 11]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sync_bench import REPO, make_project  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="wm-kill-"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1",
           "LANCEDB_LOG": "error", "WRENMEM_PROJECT": str(root)}
    rng = random.Random(args.seed)
    failures = 0

    def wrenmem(*a: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "wrenmem", *a], cwd=root, env=env,
                              capture_output=True, text=True)

    try:
        make_project(root, args.pairs)
        for n in range(args.rounds):
            files = sorted((root / "knowledge" / "sql").rglob("*.md"))
            for path in rng.sample(files, 30):
                action = rng.choice(["edit", "delete", "rename", "new"])
                if action == "edit":
                    path.write_text(path.read_text().replace('nl: "', f'nl: "r{n} ', 1))
                elif action == "delete":
                    path.unlink()
                elif action == "rename":
                    path.rename(path.with_name(f"mv{n}-{path.name}"))
                else:
                    (path.parent / f"new{n}-{path.name}").write_text(
                        path.read_text().replace('nl: "', f'nl: "new {n} ', 1))
            kills = rng.randint(1, 3)
            for _ in range(kills):
                cmd = ["sync", "--full"] if rng.random() < 0.2 else ["sync"]
                proc = subprocess.Popen([sys.executable, "-m", "wrenmem", *cmd], cwd=root,
                                        env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
                time.sleep(rng.uniform(0.3, 4.0))
                proc.send_signal(signal.SIGKILL)
                proc.wait()
            synced = wrenmem("sync")
            (root / ".wrenmem" / "index-state.bin").unlink(missing_ok=True)
            checked = wrenmem("check")
            import lancedb

            table = lancedb.connect(str(root / ".wrenmem" / "index")).open_table("pairs")
            ids = table.search().select(["id"]).limit(None).to_arrow().column("id").to_pylist()
            files = sorted(p.relative_to(root).as_posix()
                           for p in (root / "knowledge" / "sql").rglob("*.md"))
            ok = synced.returncode == 0 and checked.returncode == 0 and sorted(ids) == files
            failures += not ok
            print(f"round {n}: {kills} kill(s); sync {synced.returncode}, check "
                  f"{checked.returncode}; {len(ids)} rows, {len(files)} files, "
                  f"{len(ids) - len(set(ids))} duplicates: {'ok' if ok else 'FAILED'}",
                  flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{failures} failed round(s) of {args.rounds}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
