"""Latency of one recall through MCP, against the daemon and the CLI, at 10,000 pairs.

Builds a temporary project of N generated pairs (as bench/sync_bench.py does; default 10,000)
plus the example manifest, syncs it, then times, per backend:

- ``mcp``: one ``recall_queries`` call of the SDK's ``ClientSession`` to ``wrenmem mcp``
  over stdio (a long-lived server, as an agent keeps it), round trip seen by the client;
- ``daemon``: one request to ``wrenmem watch --detach``'s socket from a Python process
  (``remote_recall``, what the CLI's fast path sends);
- ``cli+daemon``: a whole ``python -m wrenmem recall`` process answered by the daemon
  through the fast path (no click); ``click+daemon``: the same through the click CLI;
- ``cli``: a whole process without the daemon (``WRENMEM_NO_DAEMON=1``): import, model, search.

Median (and p90) of ``--runs`` calls with different questions, after one warm-up call each;
the ratios are against the MCP call. Target: ≤ 50 ms per MCP or daemon call.

Usage: python bench/mcp_latency.py [--pairs 10000] [--runs 30] [--backends hybrid,grep]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sync_bench import REPO, make_project, questions  # noqa: E402

sys.path.insert(0, str(REPO))
from wrenmem.recall.hits import Filters  # noqa: E402
from wrenmem.settings import load_settings  # noqa: E402
from wrenmem.watch.client import ping, remote_recall  # noqa: E402


def ask(n: int) -> list[str]:
    """Questions to recall: paraphrases of stored ones (the second half of Spider-Syn)."""
    pool = [q for q, _ in questions(2000)][1000:]
    return [pool[i * 7 % len(pool)] for i in range(n)]


def summary(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]


async def mcp_times(root: Path, env: dict[str, str], backend: str, qs: list[str]) -> list[float]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "wrenmem", "mcp", "--backend", backend],
        env=env, cwd=str(root))
    times = []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("recall_queries", {"question": "warm up", "k": 3})
            for q in qs:
                start = time.perf_counter()
                result = await session.call_tool("recall_queries", {"question": q, "k": 3})
                times.append(time.perf_counter() - start)
                if result.is_error or not result.structured_content["pairs"]:
                    raise SystemExit(f"MCP recall failed: {result.content}")
    return times


def process_times(root: Path, env: dict[str, str], backend: str, qs: list[str],
                  extra: tuple[str, ...] = ()) -> list[float]:
    times = []
    for q in qs:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "wrenmem", "recall", "-q", q, "-b",
                               backend, *extra], cwd=root, env=env, capture_output=True,
                              text=True)
        times.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise SystemExit(f"recall failed:\n{proc.stderr}")
    return times


def daemon_times(root: Path, backend: str, qs: list[str]) -> list[float]:
    settings = load_settings(root, {"backend": backend})
    times = []
    for q in [qs[0], *qs]:
        start = time.perf_counter()
        results = remote_recall(settings, [q], 3, Filters())
        times.append(time.perf_counter() - start)
        if results is None:
            raise SystemExit("the daemon did not answer")
    return times[1:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--cli-runs", type=int, default=5)
    parser.add_argument("--backends", default="hybrid,grep")
    parser.add_argument("--keep", action="store_true", help="Keep the temporary project.")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix=f"wm-mcp-{args.pairs}-"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "LANCEDB_LOG": "error",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1", "WRENMEM_PROJECT": str(root)}
    os.environ["WRENMEM_PROJECT"] = str(root)
    rows = []
    try:
        make_project(root, args.pairs)
        (root / "target").mkdir()
        shutil.copy(REPO / "target" / "mdl.json", root / "target" / "mdl.json")
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "wrenmem", "sync"], cwd=root, env=env,
                       check=True, capture_output=True)
        print(f"{args.pairs} pairs, first sync {time.perf_counter() - start:.1f} s",
              file=sys.stderr, flush=True)
        qs = ask(args.runs)
        for backend in args.backends.split(","):
            mcp = asyncio.run(mcp_times(root, env, backend, qs))
            cold = process_times(root, {**env, "WRENMEM_NO_DAEMON": "1"}, backend,
                                 qs[:args.cli_runs])
            subprocess.run([sys.executable, "-m", "wrenmem", "watch", "--detach"], cwd=root,
                           env={**env, "WRENMEM_BACKEND": backend}, check=True,
                           capture_output=True)
            try:
                deadline = time.monotonic() + 300
                while ping(root) is None:
                    if time.monotonic() > deadline:
                        raise SystemExit("the watcher's daemon did not come up")
                    time.sleep(0.2)
                daemon = daemon_times(root, backend, qs)
                warm_cli = process_times(root, env, backend, qs[:max(args.cli_runs, 10)])
                # --format is not for the fast path: the same answer through click.
                click_cli = process_times(root, env, backend, qs[:max(args.cli_runs, 10)],
                                          ("--format", "wrenmem"))
            finally:
                subprocess.run([sys.executable, "-m", "wrenmem", "watch", "--stop"], cwd=root,
                               env=env, capture_output=True)
            base = summary(mcp)[0]
            for name, times in (("mcp", mcp), ("daemon", daemon), ("cli+daemon", warm_cli),
                                ("click+daemon", click_cli), ("cli", cold)):
                median, p90 = summary(times)
                rows.append((backend, name, median, p90, median / base, len(times)))
                print(f"{backend:7} {name:11} median {median * 1000:8.1f} ms  p90 "
                      f"{p90 * 1000:8.1f} ms  {median / base:6.1f}x mcp  (n={len(times)})",
                      file=sys.stderr, flush=True)
    finally:
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(f"| backend | path ({args.pairs:,} pairs) | median | p90 | × MCP |")
    print("|---|---|---|---|---|")
    for backend, name, median, p90, ratio, _n in rows:
        print(f"| {backend} | {name} | {median * 1000:.1f} ms | {p90 * 1000:.1f} ms | "
              f"{ratio:.1f}× |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
