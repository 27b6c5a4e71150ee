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

Median (and p90) of ``--runs`` calls with different questions, after one warm-up call each,
and the mean CPU time (user + sys) per call of the process that did the work: the server's or the
daemon's for ``mcp`` and ``daemon`` (read from /proc around the calls), the CLI process's
for the others. Wall times depend on the machine's load; CPU times much less.

``--baseline DIR`` measures the same paths, on the same project and questions, with the
wrenmem code of another checkout (e.g. ``/work/main``), and prints the ratios. ``--keep``
keeps the project; ``--project DIR`` measures one kept before (no build, no first sync).
Target: ≤ 50 ms per MCP or daemon call.

Usage: python bench/mcp_latency.py [--pairs 10000] [--runs 30] [--backends hybrid,grep]
                                   [--baseline DIR] [--project DIR] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
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
from wrenmem.fs import statedir  # noqa: E402
from wrenmem.recall.daemon_client import ping, remote_recall  # noqa: E402
from wrenmem.recall.hits import Filters  # noqa: E402
from wrenmem.settings import load_settings  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def ask(n: int) -> list[str]:
    """Questions to recall: paraphrases of stored ones (the second half of Spider-Syn)."""
    pool = [q for q, _ in questions(2000)][1000:]
    return [pool[i * 7 % len(pool)] for i in range(n)]


def summary(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]


def cpu_of(pid: int) -> float:
    """user + sys seconds a process has used so far (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def server_pid(marker: str) -> int:
    """The pid of our child process whose command line holds ``marker``."""
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if stat[1] == me and marker in cmd:
            return int(entry)
    raise SystemExit(f"no child process running {marker!r}")


class Measure:
    """Wall times of the calls, and the CPU seconds of the working process per call."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.cpu: list[float] = []


async def mcp_times(root: Path, env: dict[str, str], backend: str, qs: list[str]) -> Measure:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "wrenmem", "mcp", "--backend", backend],
        env=env, cwd=str(root))
    out = Measure()
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("recall_queries", {"question": "warm up", "k": 3})
            pid = server_pid("wrenmem mcp")
            for q in qs:
                cpu = cpu_of(pid)
                start = time.perf_counter()
                result = await session.call_tool("recall_queries", {"question": q, "k": 3})
                out.times.append(time.perf_counter() - start)
                out.cpu.append(cpu_of(pid) - cpu)
                if result.is_error or not result.structured_content["pairs"]:
                    raise SystemExit(f"MCP recall failed: {result.content}")
    return out


def process_times(root: Path, env: dict[str, str], backend: str, qs: list[str],
                  extra: tuple[str, ...] = ()) -> Measure:
    out = Measure()
    for i, q in enumerate([qs[0], *qs]):  # the first is a warm-up (byte-code, page cache)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "wrenmem", "recall", "-q", q, "-b",
                               backend, *extra], cwd=root, env=env, capture_output=True,
                              text=True)
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if i:
            out.times.append(elapsed)
            out.cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if proc.returncode != 0:
            raise SystemExit(f"recall failed:\n{proc.stderr}")
    return out


def daemon_times(root: Path, backend: str, qs: list[str]) -> Measure:
    settings = load_settings(root, {"backend": backend})
    pid = int((root / statedir.STATE_DIR / statedir.WATCH_PID).read_text().strip())
    out = Measure()
    for i, q in enumerate([qs[0], *qs]):
        cpu = cpu_of(pid)
        start = time.perf_counter()
        results = remote_recall(settings, [q], 3, Filters())
        elapsed = time.perf_counter() - start
        if results is None:
            raise SystemExit("the daemon did not answer")
        if i:  # the first is a warm-up
            out.times.append(elapsed)
            out.cpu.append(cpu_of(pid) - cpu)
    return out


def measure(code: Path, root: Path, backend: str, qs: list[str], cli_runs: int
            ) -> dict[str, Measure]:
    """Every path, with the wrenmem code at ``code``."""
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "LANCEDB_LOG": "error",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1", "WRENMEM_PROJECT": str(root)}
    found = {"mcp": asyncio.run(mcp_times(root, env, backend, qs))}
    found["cli"] = process_times(root, {**env, "WRENMEM_NO_DAEMON": "1"}, backend,
                                 qs[:cli_runs])
    subprocess.run([sys.executable, "-m", "wrenmem", "watch", "--detach"], cwd=root,
                   env={**env, "WRENMEM_BACKEND": backend}, check=True, capture_output=True)
    try:
        deadline = time.monotonic() + 300
        while ping(root) is None:
            if time.monotonic() > deadline:
                raise SystemExit("the watcher's daemon did not come up")
            time.sleep(0.2)
        found["daemon"] = daemon_times(root, backend, qs)
        found["cli+daemon"] = process_times(root, env, backend, qs[:max(cli_runs, 10)])
        # --format is not for the fast path: the same answer through click.
        found["click+daemon"] = process_times(root, env, backend, qs[:max(cli_runs, 10)],
                                              ("--format", "wrenmem"))
    finally:
        subprocess.run([sys.executable, "-m", "wrenmem", "watch", "--stop"], cwd=root,
                       env=env, capture_output=True)
    return found


PATHS = ("mcp", "daemon", "cli+daemon", "click+daemon", "cli")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--cli-runs", type=int, default=5)
    parser.add_argument("--backends", default="hybrid,grep")
    parser.add_argument("--baseline", type=Path,
                        help="Also measure the wrenmem code of this checkout (e.g. main).")
    parser.add_argument("--project", type=Path, help="A project kept by an earlier --keep.")
    parser.add_argument("--keep", action="store_true", help="Keep the temporary project.")
    args = parser.parse_args(argv)
    root = (args.project.resolve() if args.project
            else Path(tempfile.mkdtemp(prefix=f"wm-mcp-{args.pairs}-")))
    os.environ["WRENMEM_PROJECT"] = str(root)
    codes = [("this", REPO)] + ([("baseline", args.baseline.resolve())]
                                if args.baseline else [])
    rows = []
    try:
        if args.project is None:
            make_project(root, args.pairs)
            (root / "target").mkdir()
            shutil.copy(REPO / "target" / "mdl.json", root / "target" / "mdl.json")
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "wrenmem", "sync"], cwd=root, check=True,
                           capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)})
            print(f"{args.pairs} pairs, first sync {time.perf_counter() - start:.1f} s",
                  file=sys.stderr, flush=True)
        pairs = sum(1 for _ in (root / "knowledge").rglob("*.md"))
        qs = ask(args.runs)
        for backend in args.backends.split(","):
            for label, code in codes:
                found = measure(code, root, backend, qs, args.cli_runs)
                base = statistics.median(found["mcp"].times)
                for name in PATHS:
                    median, p90 = summary(found[name].times)
                    cpu = statistics.fmean(found[name].cpu)  # /proc counts in 10 ms ticks
                    rows.append((backend, name, label, median, p90, cpu, median / base))
                    print(f"{backend:7} {name:12} {label:8} median {median * 1000:8.1f} ms  "
                          f"p90 {p90 * 1000:8.1f} ms  cpu {cpu * 1000:7.1f} ms  "
                          f"{median / base:6.1f}x mcp  (n={len(found[name].times)}; "
                          f"load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
    finally:
        if args.keep or args.project:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(f"| backend | path ({pairs:,} pair files) | code | median | p90 | CPU/call | × MCP |")
    print("|---|---|---|---|---|---|---|")
    for backend, name, label, median, p90, cpu, ratio in rows:
        print(f"| {backend} | {name} | {label} | {median * 1000:,.1f} ms | {p90 * 1000:,.1f} ms "
              f"| {cpu * 1000:,.1f} ms | {ratio:.1f}× |")
    if args.baseline:
        print("\n| backend | path | median this / baseline | CPU this / baseline |")
        print("|---|---|---|---|")
        got = {(b, n, lab): (m, c) for b, n, lab, m, _p, c, _r in rows}
        for backend in args.backends.split(","):
            for name in PATHS:
                (m1, c1), (m0, c0) = got[backend, name, "this"], got[backend, name, "baseline"]
                print(f"| {backend} | {name} | {m1 / m0:.2f} | "
                      f"{c1 / c0 if c0 else float('nan'):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
