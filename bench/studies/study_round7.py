# ruff: noqa: E402, E501, E741  (a study script, kept as it was run)
"""Round 7 of the ranking model (issue 19): the form reader, studied on the suite's TUNING
part, out of fold over five folds by database, over the evidence ``bench/fit_model.py``
gathered (run it first with the same workdir). Nothing here looks at HELD-OUT.

Usage: python bench/suite/study_round7.py SUITE_DIR WORKDIR

A structure reader learned from the store itself.

For each case, the stored pairs' questions (tokens, stopwords kept) and their SQL's
structure labels (frame tokens: keywords, aggregates, operators; counts of SELECT/JOIN).
P(label | question) by a token vote (idf-weighted counts, smoothed by the prior) or naive
Bayes; a candidate's score = sum over labels of log P(its value of the label | asked).
The asked question's excluded items (itself, its versions) are taken out of the counts.
Feature: score - best among candidates. Out of fold over five folds by database.
"""

import hashlib
import math
import sys
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))
import fit_model as fm  # noqa: E402

import __main__  # noqa: E402
from wrenmem import textsearch as ts  # noqa: E402
from wrenmem.recall import model as rm  # noqa: E402
from wrenmem.recall import sqlshape  # noqa: E402

__main__.Asked = fm.Asked
__main__.Cand = fm.Cand

SUITE = Path(sys.argv[1])
WORK = Path(sys.argv[2])
items, cases = fm.read_suite(SUITE)
tuning = fm.gather(items, cases, WORK, "tuning", False)
print("asked", len(tuning), file=sys.stderr)
F = len(rm.FEATURES)

DROP = {"_", "?", "(", ")", ".", "from", "on", "as"}


def labels_of(sql, dialect):
    toks = sqlshape.shape(sql, dialect).tokens
    c = Counter(toks)
    out = {t for t in c if t not in DROP}
    out.add(f"select#{min(c['select'], 3)}")
    out.add(f"join#{min(c['join'], 3)}")
    out.add(f"and#{min(c['and'], 2)}")
    out.add(f",#{min(c[','], 3)}")
    return frozenset(out)


def qtokens(text, bigrams):
    if bigrams == "prod":
        return frozenset(ts.tokenize(text))
    if bigrams == "prod+sql":
        q, _, sql = text.partition("\0")
        return frozenset(ts.tokenize(q)) | frozenset(ts.tokenize(sql, sql=True))
    text = unicodedata.normalize("NFKC", text or "").casefold()
    out = []
    for run in ts._TOKEN.findall(text):
        if ts.CJK_CHAR.match(run):
            chars = list(run)
            out.extend(chars)
            out.extend(a + b for a, b in zip(chars, chars[1:], strict=False))
            continue
        if run.isdigit():
            continue
        out.append(ts.stem(run) if run.isascii() and run.isalpha() else run)
    if bigrams:
        words = [w for w in out]
        out = out + [a + " " + b for a, b in zip(words, words[1:], strict=False)]
    return frozenset(out)


import re as _re

_LEX = _re.compile(r"'(?:[^']|'')*'|\"[^\"]*\"|`[^`]*`|\[[^\]]*\]|[a-z_][a-z_0-9]*|<>|[<>!=]=?|[*]", _re.I)
WORDS = set("""select join where and or not in like between exists is null group having order
asc desc limit distinct union intersect except case count sum avg min max""".split())
OPS = {"=", "<", ">", "<=", ">=", "!=", "<>", "*"}


def rx_labels(sql):
    c = Counter()
    for t in _LEX.findall(sql.lower()):
        if t[0] in "'\"`[":
            continue
        if t in WORDS or t in OPS:
            c["!=" if t == "<>" else t] += 1
    out = {t for t in c if t not in ("select", "join", "and")}
    out.add(f"select#{min(c['select'], 3)}")
    out.add(f"join#{min(c['join'], 3)}")
    out.add(f"and#{min(c['and'], 2)}")
    return frozenset(out)


LABELS = "frame"
LAB = {}


def lab(sql, dialect):
    k = (sql, dialect)
    if k not in LAB:
        LAB[k] = labels_of(sql, dialect) if LABELS == "frame" else rx_labels(sql)
    return LAB[k]


class Store:
    def __init__(self, stored, bigrams):
        self.n = 0
        self.df = Counter()  # token -> stored questions holding it
        self.tl = defaultdict(Counter)  # token -> label -> count
        self.lc = Counter()  # label -> stored questions with it
        self.bigrams = bigrams
        self.rows = {}
        for it in stored:
            t = qtokens(it["question"] + ("\0" + it["sql"] if bigrams == "prod+sql" else ""), bigrams)
            ls = lab(it["sql"], it.get("dialect"))
            self.rows[it["id"]] = (t, ls)
            self.add(t, ls, 1)

    def add(self, t, ls, s):
        self.n += s
        for l in ls:
            self.lc[l] += s
        for w in t:
            self.df[w] += s
            c = self.tl[w]
            for l in ls:
                c[l] += s

    def posterior(self, question, labels, mode, alpha=2.0):
        """P(label present | question) per label."""
        t = [w for w in qtokens(question, "prod" if self.bigrams == "prod+sql" else self.bigrams) if self.df.get(w, 0) > 0]
        n = max(self.n, 1)
        out = {}
        for l in labels:
            prior = (self.lc.get(l, 0) + 0.5) / (n + 1)
            if mode == "vote":
                num = alpha * prior
                den = alpha
                for w in t:
                    df = self.df[w]
                    idf = math.log(1 + n / df)
                    num += idf * self.tl[w].get(l, 0)
                    den += idf * df
                out[l] = num / den
            else:  # naive Bayes, present tokens only, averaged log-likelihood ratio
                nk = self.lc.get(l, 0)
                nn = n - nk
                z = math.log(prior / (1 - prior))
                acc = 0.0
                for w in t:
                    a = self.tl[w].get(l, 0)
                    b = self.df[w] - a
                    acc += math.log((a + 0.5) / (nk + 1)) - math.log((b + 0.5) / (nn + 1))
                if t:
                    acc /= math.sqrt(len(t))
                out[l] = 1 / (1 + math.exp(-max(min(z + acc, 30), -30)))
        return out


by_case = defaultdict(list)
for a in tuning:
    by_case[a.case].append(a)
case_of = {c["name"]: c for c in cases if c["split"] == "tuning"}


def reader_scores(mode, bigrams):
    out = {}
    for name, asked in by_case.items():
        case = case_of[name]
        store = Store([items[i] for i in case["stored"]], bigrams)
        assert len(asked) == len(case["asked"]), name
        for a, entry in zip(asked, case["asked"], strict=True):
            assert a.question == entry["question"]
            ex = [store.rows[i] for i in entry.get("exclude", ()) if i in store.rows]
            for t, ls in ex:
                store.add(t, ls, -1)
            labsets = [lab(c.sql, c.dialect) for c in a.cands]
            union = set().union(*labsets) if labsets else set()
            # labels where the candidates differ
            varying = [l for l in union if not all(l in s for s in labsets)]
            post = store.posterior(a.question, varying, mode)
            sc = []
            for s in labsets:
                v = 0.0
                for l in varying:
                    p = min(max(post[l], 1e-4), 1 - 1e-4)
                    v += math.log(p) if l in s else math.log(1 - p)
                sc.append(v)
            out[id(a)] = sc
            for t, ls in ex:
                store.add(t, ls, 1)
    return out


def per_case(scored):
    return {case: fm.metrics(sub, lambda a: scored[id(a)]) for case, sub in sorted(by_case.items())}


def summary(name, res):
    big = {c: m for c, m in res.items() if m["n"] >= 20}
    mean = np.mean([m["R@1"] for m in big.values()])
    new = [m["R@1"] for c, m in big.items() if c.split("/")[1].startswith("new")]
    ans = [m["R@1"] for c, m in big.items() if not c.split("/")[1].startswith("new")]
    print(
        f"{name:16s} mean {mean:.4f}  new {np.mean(new):.4f} ({len(new)}) other {np.mean(ans):.4f} "
        f"syn/nt {res['spider-syn/new-tables/tuning']['R@1']:.3f}  "
        f"ko/new {res['ko-wikisql/new/tuning']['R@1']:.3f}  "
        f"en/nt {res['spider-en/new-tables/tuning']['R@1']:.3f}",
        flush=True,
    )
    return res


fold_of = {db: int(hashlib.sha256(db.encode()).hexdigest(), 16) % 5 for db in {a.db for a in tuning}}

EXT = {}


def build_ext(variants):
    for a in tuning:
        rows = fm.feats(a)
        extra = []
        for sc in variants:
            s = sc[id(a)]
            if not s:
                extra.append([])
                continue
            g = rm.twins(a.cands)
            s = rm._group_max(s, g)
            best = max(s)
            bc = max(c.coverage for c in a.cands)
            extra.append([(v - best, (v - best) * (1 - bc)) for v in s])
        EXT[id(a)] = [tuple(r) + tuple(x for e in extra for x in e[n]) for n, r in enumerate(rows)]
    for a in tuning:
        fm._FEATURES[id(a)] = EXT[id(a)]


def oof(keep):
    scored = {}
    for f in range(5):
        train = [a for a in tuning if fold_of[a.db] != f]
        b = fm.fit_ranking(train, keep)
        for a in tuning:
            if fold_of[a.db] == f:
                scored[id(a)] = [float(np.dot(b, [r[i] for i in keep])) for r in EXT[id(a)]]
    return per_case(scored)


variants = {}
import time

for mode, bg, lb in [("nb", False, "frame"), ("nb", False, "rx"), ("nb", "prod", "rx"), ("nb", "prod+sql", "rx")]:
        LABELS = lb
        LAB.clear()
        t0 = time.time()
        variants[(mode, bg, lb)] = reader_scores(mode, bg)
        print("scored", mode, bg, round(time.time() - t0, 1), "s", file=sys.stderr, flush=True)
names = list(variants)
build_ext([variants[k] for k in names])
vec = per_case({id(a): [c.dense if c.dense is not None else -1.0 for c in a.cands] for a in tuning})
results = {"vector": summary("vector", vec)}
base = list(range(F))
results["base"] = summary("base", oof(base))
for j, k in enumerate(names):
    alone = {id(a): variants[k][id(a)] for a in tuning}
    results[f"+{k}"] = summary(f"+{k}", oof(base + [F + 2 * j]))
    results[f"+{k}+u"] = summary(f"+{k}+u", oof(base + [F + 2 * j, F + 2 * j + 1]))
first = results["base"]
for case in sorted(first):
    if first[case]["n"] >= 20:
        print(f"  {case:40s} " + " ".join(f"{results[n][case]['R@1']:.3f}" for n in results) + f" n={first[case]['n']}")
print("columns:", list(results))
