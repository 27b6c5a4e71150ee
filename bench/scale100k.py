"""Issue 42's 100,000-pair targets in one command: the first index, warm recall through the
daemon and through ``wrenmem mcp``.

Builds (once, then reuses) a project of N generated pair files outside the repo
(``bench/scale.py``'s generator: every public question of WRENMEM_BENCH_DATA, then variants
with a qualifier), default ``$TMPDIR/wrenmem-scale/pairs-N``, and measures:

- the first index: ``wrenmem sync --json`` on the project with ``.wrenmem/`` removed, as a
  whole process: wall, CPU (user + sys of the process and the children it waited for), and
  the peak RSS and PSS of the process tree (sampled every 0.1 s; RSS counts a page shared by a
  forked child twice, PSS once); ``--index-runs`` times (target: <= 60 s, <= 1 GB); then the
  recall fit the sync left to a detached fitter (from 5,000 rows), awaited before the next
  run: its wall after the sync returned, CPU and peak RSS;
- warm recall through the daemon: ``wrenmem watch --detach``, its warm-up awaited (``ping``
  says ``warm``), then ``remote_recall`` requests (what the CLI's fast path and the MCP server
  send), half stored questions, half new ones (a qualifier no pair has); the daemon's CPU per
  request read from /proc/PID/stat (10 ms ticks, every thread's, ended ones included: the
  mean over the requests is the figure) (target: <= 15 ms);
- warm recall through MCP: the SDK's ``ClientSession`` over stdio to a long-lived
  ``wrenmem mcp`` (``recall_queries``), once answering in its own process
  (``WRENMEM_NO_DAEMON=1``) and once with the watcher running (the server asks it); the
  server's CPU per call (target: <= 15 ms).

Each serving process is first left to finish what its first searches start in the background
(reading the table whole, building its scan: until it uses under 20 ms of CPU in half a
second), so the requests measured are warm ones.

Median and p90 of every figure, ``os.getloadavg()`` before and after each phase. With
``--baseline CHECKOUT`` the same with that checkout's wrenmem code (``PYTHONPATH``), the
first-index runs interleaved (baseline, this, ...) and the ratio this / baseline of each
median. A first index of 100,000 pairs costs about 110 s of CPU (main e6135ab: 146 s), so on
a quiet 2-core machine the default run (3 first indexes, then the warm paths) should take
7-9 minutes (not timed here: the machine was shared); with ``--baseline`` use
``--index-runs 2`` to stay near 10. ``--pairs 10000`` for a quick check (about a minute).

    python bench/scale100k.py [--pairs 100000] [--index-runs 3] [--runs 30]
                              [--workdir DIR] [--baseline CHECKOUT] [--skip-index]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mcp_latency import cpu_of, daemon_times, server_pid  # noqa: E402
from scale import PYCACHE, REPO, make_project, public_pairs  # noqa: E402

sys.path.insert(0, str(REPO))
from wrenmem.recall.daemon_client import ping  # noqa: E402
from wrenmem.settings import load_settings  # noqa: E402


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def env_for(code: Path, root: Path, daemon: bool) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(code), "HF_HUB_OFFLINE": "1",
           "LANCEDB_LOG": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
           "WRENMEM_PROJECT": str(root), "PYTHONPYCACHEPREFIX": str(PYCACHE),
           "WRENMEM_NO_DAEMON": "" if daemon else "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def tree_memory(pid: int) -> tuple[float, float]:
    """(RSS, PSS) in MB of ``pid`` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    rss = pss = 0
    todo = [pid]
    while todo:
        now = todo.pop()
        todo += children.get(now, [])
        try:
            with open(f"/proc/{now}/smaps_rollup", encoding="ascii") as fh:
                for line in fh:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
        except OSError:
            pass
    return rss / 1024, pss / 1024


def first_index(root: Path, code: Path) -> dict[str, float]:
    """One first index of ``root`` by ``code``: wall, cpu (s), peak tree RSS and PSS (MB)."""
    shutil.rmtree(root / ".wrenmem", ignore_errors=True)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "wrenmem", "sync", "--json"], cwd=root,
                                env=env_for(code, root, daemon=False), stdout=out, stderr=err)
        done = threading.Event()
        peak = [0.0, 0.0]

        def sample() -> None:
            while not done.wait(0.1):
                rss, pss = tree_memory(proc.pid)
                peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        done.set()
        sampler.join()
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"first index failed:\n{err.read().decode()}")
        out.seek(0)
        report = json.loads(out.read())
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss": peak[0],
            "pss": peak[1], "maxrss": usage.ru_maxrss / 1024, "rows": report["rows"],
            **detached_fit(root)}


def detached_fit(root: Path, timeout: float = 1800.0) -> dict[str, float]:
    """The recall fit a first index left to a detached fitter (``wrenmem.index.fitjob``, from
    5,000 rows), awaited so that the next run starts without it: its wall after the sync
    returned, its CPU and its peak RSS (VmHWM), read from /proc every 0.1 s (zeros: no fit
    was left, as before the fitter)."""
    owed = root / ".wrenmem" / "recall-fit-owed.json"
    start = time.perf_counter()
    cpu = hwm = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    while owed.exists():
        try:
            mark = json.loads(owed.read_text("utf-8"))
        except (OSError, ValueError):
            mark = {}
        if mark.get("failed"):
            raise SystemExit(f"the detached fit failed: {mark['failed']}")
        if time.perf_counter() - start > timeout:
            raise SystemExit(f"the detached fit took over {timeout:.0f} s")
        try:
            with open(f"/proc/{mark.get('pid')}/stat", encoding="ascii") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            cpu = max(cpu, (int(fields[11]) + int(fields[12])) / tick)
            with open(f"/proc/{mark.get('pid')}/status", encoding="ascii") as fh:
                hwm = max(hwm, next((int(line.split()[1]) / 1024 for line in fh
                                     if line.startswith("VmHWM:")), 0.0))
        except (OSError, ValueError, IndexError):
            pass
        time.sleep(0.1)
    return {"fit_wall": time.perf_counter() - start if cpu else 0.0, "fit_cpu": cpu,
            "fit_rss": hwm}


def questions(n: int) -> list[str]:
    """``n`` questions, alternately stored as asked and new (a qualifier no pair has)."""
    pool = [p["nl"] for p in public_pairs()[:20000:97]]
    stored = pool[: (n + 1) // 2]
    new = [q.rstrip("?？. ") + " for the year 2031?" for q in pool[: n // 2]]
    return [q for pair in zip(stored, new, strict=False) for q in pair] + stored[len(new):]


def start_watcher(root: Path, code: Path) -> int:
    """Start the watcher, wait for its warm-up; its pid."""
    subprocess.run([sys.executable, "-m", "wrenmem", "watch", "--detach"], cwd=root,
                   env=env_for(code, root, daemon=True), check=True, capture_output=True)
    deadline = time.monotonic() + 600
    while not (ping(root) or {}).get("warm", False):
        if time.monotonic() > deadline:
            raise SystemExit("the watcher's daemon did not warm up")
        time.sleep(0.2)
    return int((root / ".wrenmem" / "watch.pid").read_text().strip())


async def quiet(pid: int, *, idle: float = 0.02, timeout: float = 300.0) -> float:
    """Wait until ``pid`` uses less than ``idle`` s of CPU in half a second (a server past
    the first searches still reads the table whole, builds its scan in the background);
    the seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        cpu = cpu_of(pid)
        await asyncio.sleep(0.5)
        if cpu_of(pid) - cpu < idle:
            break
    return time.monotonic() - start


async def mcp_times(root: Path, env: dict[str, str], qs: list[str]
                    ) -> tuple[list[float], list[float]]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "wrenmem", "mcp"],
                                   env=env, cwd=str(root))
    times, cpus = [], []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for _ in range(2):  # the server's own warm-up, then the first question's
                await session.call_tool("recall_queries", {"question": qs[0], "k": 3})
            pid = server_pid("wrenmem mcp")
            await quiet(pid)  # what its first searches start in the background, done
            for q in qs:
                cpu = cpu_of(pid)
                start = time.perf_counter()
                result = await session.call_tool("recall_queries", {"question": q, "k": 3})
                times.append(time.perf_counter() - start)
                cpus.append(cpu_of(pid) - cpu)
                if result.is_error or not result.structured_content["pairs"]:
                    raise SystemExit(f"MCP recall failed: {result.content}")
    return times, cpus


def stats(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]


def warm(root: Path, code: Path, qs: list[str], rows: dict[tuple[str, str], dict]) -> None:
    """Warm recall through MCP alone, the daemon, and MCP with the daemon, by ``code``."""
    label = "this" if code == REPO else "baseline"
    subprocess.run([sys.executable, "-m", "wrenmem", "sync", "--json"], cwd=root,
                   env=env_for(code, root, daemon=False), check=True, capture_output=True)
    before = load()
    times, cpus = asyncio.run(mcp_times(root, env_for(code, root, daemon=False), qs))
    rows[label, "mcp, own process"] = {"times": times, "cpus": cpus, "load": (before, load())}
    pid = start_watcher(root, code)
    try:
        asyncio.run(quiet(pid))  # the daemon's background work after its warm-up, done
        before = load()
        asked = daemon_times(root, load_settings(root).backend, qs)  # the pid in watch.pid
        times, cpus = asked.times, asked.cpu
        rows[label, "daemon"] = {"times": times, "cpus": cpus, "load": (before, load())}
        rows[label, "daemon"]["rss"] = tree_memory(pid)[0]
        before = load()
        times, cpus = asyncio.run(mcp_times(root, env_for(code, root, daemon=True), qs))
        rows[label, "mcp, via the daemon"] = {"times": times, "cpus": cpus,
                                              "load": (before, load())}
    finally:
        subprocess.run([sys.executable, "-m", "wrenmem", "watch", "--stop"], cwd=root,
                       env=env_for(code, root, daemon=True), capture_output=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--index-runs", type=int, default=3)
    parser.add_argument("--runs", type=int, default=30, help="warm requests per path")
    parser.add_argument("--workdir", type=Path,
                        default=Path(tempfile.gettempdir()) / "wrenmem-scale")
    parser.add_argument("--baseline", type=Path, help="another checkout's code, e.g. main")
    parser.add_argument("--skip-index", action="store_true",
                        help="no first-index runs (the project indexed before)")
    parser.add_argument("--skip-warm", action="store_true",
                        help="no warm-recall runs (the first index alone)")
    args = parser.parse_args(argv)
    root = (args.workdir / f"pairs-{args.pairs}").resolve()
    if not (root / "generated").exists():
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        start = time.perf_counter()
        make_project(root, args.pairs)
        (root / "target").mkdir()
        shutil.copy(REPO / "target" / "mdl.json", root / "target" / "mdl.json")
        (root / "generated").write_text(f"{args.pairs}\n")
        print(f"generated {args.pairs:,} pairs in {root} ({time.perf_counter() - start:.0f} s)",
              file=sys.stderr)
    codes = [REPO] + ([args.baseline.resolve()] if args.baseline else [])
    print(f"{args.pairs:,} pairs in {root}; load {load()} at the start", file=sys.stderr)
    index: dict[Path, list[dict[str, float]]] = {code: [] for code in codes}
    for i in range(0 if args.skip_index else args.index_runs):
        for code in reversed(codes):  # this code's last, so its index is the one left
            got = first_index(root, code)
            index[code].append(got)
            print(f"first index {'this' if code == REPO else 'baseline'} #{i + 1}: "
                  f"{got['wall']:.1f} s wall, {got['cpu']:.1f} s CPU, tree RSS "
                  f"{got['rss']:.0f} MB (PSS {got['pss']:.0f}, largest process "
                  f"{got['maxrss']:.0f}), {got['rows']} rows; then the detached fit "
                  f"{got['fit_wall']:.1f} s wall, {got['fit_cpu']:.1f} s CPU, peak RSS "
                  f"{got['fit_rss']:.0f} MB; load {load()}", file=sys.stderr, flush=True)
    qs = questions(args.runs)
    rows: dict[tuple[str, str], dict] = {}
    for code in reversed(codes) if not args.skip_warm else ():
        warm(root, code, qs, rows)
    print(f"\n{args.pairs:,} pairs; load at the end {load()}")
    if not args.skip_index:
        print("\n| first index | wall | CPU | peak tree RSS | peak tree PSS | largest process "
              "| detached fit after it: wall, CPU, peak RSS |")
        print("|---|---|---|---|---|---|---|")
        for code in codes:
            runs = index[code]
            med = {k: statistics.median(r[k] for r in runs)
                   for k in ("wall", "cpu", "rss", "pss", "maxrss", "fit_wall", "fit_cpu",
                             "fit_rss")}
            fit = (f"{med['fit_wall']:.1f} s, {med['fit_cpu']:.1f} s, {med['fit_rss']:.0f} MB"
                   if med["fit_cpu"] else "none (fitted inside the sync)")
            print(f"| {'this' if code == REPO else 'baseline'} (median of {len(runs)}) | "
                  f"{med['wall']:.1f} s | {med['cpu']:.1f} s | {med['rss']:.0f} MB | "
                  f"{med['pss']:.0f} MB | {med['maxrss']:.0f} MB | {fit} |")
    print("\n| warm recall | code | median | p90 | CPU a request (mean) | load |")
    print("|---|---|---|---|---|---|")
    for (label, path), row in rows.items():
        median, p90 = stats(row["times"])
        print(f"| {path} | {label} | {median * 1000:.1f} ms | {p90 * 1000:.1f} ms | "
              f"{statistics.fmean(row['cpus']) * 1000:.1f} ms | {' -> '.join(row['load'])} |")
    for (label, _path), row in rows.items():
        if "rss" in row:  # the watcher's process tree after its requests
            print(f"\nthe daemon's tree RSS after its requests ({label}): {row['rss']:.0f} MB")
    if args.baseline:
        print("\n| ratio this / baseline | wall (median) | CPU (mean) |")
        print("|---|---|---|")
        if not args.skip_index:
            ratio = {k: statistics.median(x[k] for x in index[REPO])
                     / statistics.median(x[k] for x in index[codes[1]]) for k in ("wall", "cpu")}
            print(f"| first index | {ratio['wall']:.2f} | {ratio['cpu']:.2f} |")
        for path in () if args.skip_warm else ("mcp, own process", "daemon",
                                                "mcp, via the daemon"):
            a, b = rows["this", path], rows["baseline", path]
            print(f"| {path} | {stats(a['times'])[0] / stats(b['times'])[0]:.2f} | "
                  f"{statistics.fmean(a['cpus']) / statistics.fmean(b['cpus']):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
