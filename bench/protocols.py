"""Recall benchmark protocols over the public sets: what is stored, what is asked, what hits.

Every protocol yields a :class:`Case`: the pairs to store (each with a file name) and the
questions to ask (each with the file to drop from its hits, if the question itself is stored,
and the SQL that counts as a hit). A hit is a recalled pair whose normalised SQL (case,
whitespace, trailing ``;``) and ``db_id`` equal the wanted ones.

Protocols (``data/README.md`` describes the sets):

- ``paraphrase`` (spider-syn-train): one stored question per (db, SQL); ask with another
  question that has the same SQL;
- ``synonyms`` (spider-syn-train): store every ``SpiderQuestion``, ask ``SpiderSynQuestion``;
- ``chinese`` (mspider-dev): one stored Chinese question per (db, SQL); ask another;
- ``crosslingual`` (mspider-dev): one stored English question per (db, SQL); ask in Chinese;
- ``paraphrase-all`` / ``chinese-all``: *all stored*: every question of the set is stored;
  each question that shares its SQL with another is asked, its own file dropped from the
  hits, and the other pair with that SQL is the hit;
- ``traps-en`` / ``traps-zh``: *near-duplicate traps*: the all-stored set plus, for each
  asked question, a generated pair that differs from it by one value, aggregate or condition
  (in the SQL and, the matching words, in the question). The asked question's own file is
  dropped; the pair whose SQL matches must come first (precision at 1), not the trap.

Databases are split once, by a hash of ``db_id``, into a TUNING sample and a HELD-OUT
sample; each case holds the databases of one sample only (stored and asked).
"""

from __future__ import annotations

import collections
import hashlib
import json
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from _data import data_dir

DATA = data_dir()
SEED = 20261129
SAMPLES = ("tuning", "held-out")
PROTOCOLS = ("paraphrase", "synonyms", "chinese", "crosslingual", "paraphrase-all",
             "chinese-all", "traps-en", "traps-zh")


def norm_sql(sql: str) -> str:
    return " ".join(sql.lower().strip().rstrip(";").split())


def sample_of(db_id: str) -> str:
    """TUNING or HELD-OUT, fixed by the database's name (never by the questions)."""
    return SAMPLES[int(hashlib.sha256(db_id.encode()).hexdigest(), 16) % 2]


@dataclass(frozen=True)
class Stored:
    question: str
    sql: str
    db: str
    name: str  # file name: knowledge/sql/<db>/<name>.md


@dataclass(frozen=True)
class Asked:
    question: str
    sql: str  # the SQL a hit must have
    db: str
    drop: str | None = None  # file name of the question itself, dropped from its hits
    trap_sql: str | None = None  # for trap protocols: the near-duplicate's SQL


@dataclass
class Case:
    protocol: str
    sample: str
    stored: list[Stored] = field(default_factory=list)
    asked: list[Asked] = field(default_factory=list)


def _spider_syn() -> list[dict]:
    return json.loads((DATA / "spider-syn-train" / "questions.json").read_text())


def _mspider() -> list[dict]:
    return json.loads((DATA / "mspider-dev" / "questions.json").read_text())


def _groups(rows: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(db, normalised SQL) -> distinct (question, sql) in data order."""
    groups: dict[tuple[str, str], list[tuple[str, str]]] = collections.defaultdict(list)
    for question, sql, db in rows:
        items = groups[(db, norm_sql(sql))]
        if all(q != question for q, _s in items):
            items.append((question, sql))
    return groups


def _one_per_sql(rows: list[tuple[str, str, str]], case: Case,
                 asked_of: dict | None = None) -> None:
    for n, ((db, _n), items) in enumerate(sorted(_groups(rows).items())):
        case.stored.append(Stored(items[0][0], items[0][1], db, f"s{n:05d}"))
        if asked_of is None:
            case.asked += [Asked(q, items[0][1], db) for q, _s in items[1:]]
        else:
            case.asked += [Asked(z, items[0][1], db) for z in asked_of[(db, _n)]]


def _all_stored(rows: list[tuple[str, str, str]], case: Case) -> None:
    n = 0
    for (db, _n), items in sorted(_groups(rows).items()):
        names = []
        for question, sql in items:
            names.append(f"a{n:05d}")
            case.stored.append(Stored(question, sql, db, names[-1]))
            n += 1
        if len(items) > 1:
            case.asked += [Asked(q, s, db, drop=name)
                           for (q, s), name in zip(items, names, strict=True)]


def build_case(protocol: str, sample: str) -> Case:
    """The stored pairs and asked questions of ``protocol`` on one sample's databases."""
    case = Case(protocol, sample)
    if protocol in ("paraphrase", "synonyms", "paraphrase-all", "traps-en"):
        data = [r for r in _spider_syn() if sample_of(r["db_id"]) == sample]
        rows = [(r["SpiderQuestion"], r["query"], r["db_id"]) for r in data]
        if protocol == "synonyms":
            seen: dict[tuple[str, str, str], str] = {}
            for q, s, db in rows:
                seen.setdefault((q, s, db), f"s{len(seen):05d}")
            case.stored = [Stored(q, s, db, name) for (q, s, db), name in sorted(seen.items())]
            case.asked = [Asked(r["SpiderSynQuestion"], r["query"], r["db_id"]) for r in data
                          if r["SpiderSynQuestion"].strip() != r["SpiderQuestion"].strip()]
        elif protocol == "paraphrase":
            _one_per_sql(rows, case)
        else:
            _all_stored(rows, case)
    else:
        data = [r for r in _mspider() if sample_of(r["db_id"]) == sample]
        if protocol == "crosslingual":
            zh: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
            for r in data:
                zh[(r["db_id"], norm_sql(r["sql"]))].append(r["question"]["zh"])
            _one_per_sql([(r["question"]["en"], r["sql"], r["db_id"]) for r in data], case, zh)
        else:
            rows = [(r["question"]["zh"], r["sql"], r["db_id"]) for r in data]
            if protocol == "chinese":
                _one_per_sql(rows, case)
            else:
                _all_stored(rows, case)
    if protocol.startswith("traps-"):
        add_traps(case, chinese=protocol == "traps-zh")
    return case


def subsample(asked: list[Asked], max_queries: int, seed: int = SEED) -> list[Asked]:
    if len(asked) <= max_queries:
        return asked
    return random.Random(seed).sample(asked, max_queries)


# ------------------------------------------------------------ near-duplicate traps ----

_NUMBER = re.compile(r"(?<![\w.'\"])(\d+(?:\.\d+)?)(?![\w.'\"])")
_STRING = re.compile(r"'([^']+)'|\"([^\"]+)\"")
# (SQL edit, question words) pairs; both directions are tried.
_EN_SWAPS = [
    (("max(", "min("), [("maximum", "minimum"), ("highest", "lowest"), ("largest", "smallest"),
                        ("most", "least"), ("oldest", "youngest"), ("biggest", "smallest"),
                        ("latest", "earliest"), ("longest", "shortest")]),
    ((" desc", " asc"), [("descending", "ascending"), ("highest", "lowest"),
                         ("most", "fewest"), ("largest", "smallest"), ("oldest", "youngest"),
                         ("decreasing", "increasing")]),
    ((">", "<"), [("more than", "less than"), ("greater than", "less than"),
                  ("older than", "younger than"), ("larger than", "smaller than"),
                  ("higher than", "lower than"), ("above", "below"), ("over", "under"),
                  ("after", "before"), ("at least", "at most")]),
]
_ZH_SWAPS = [
    (("max(", "min("), [("最大", "最小"), ("最高", "最低"), ("最多", "最少"), ("最长", "最短"),
                        ("最老", "最年轻")]),
    ((" desc", " asc"), [("降序", "升序"), ("最高", "最低"), ("最多", "最少"), ("最大", "最小")]),
    ((">", "<"), [("大于", "小于"), ("多于", "少于"), ("超过", "低于"), ("高于", "低于"),
                  ("以上", "以下"), ("之后", "之前")]),
]


def _number_trap(question: str, sql: str) -> tuple[str, str] | None:
    for match in _NUMBER.finditer(sql):
        value = match.group(1)
        if not re.search(rf"(?<![\d.]){re.escape(value)}(?![\d.])", question):
            continue
        new = str(int(value) * 2 + 1) if value.isdigit() else f"{float(value) * 2 + 1:g}"
        q = re.sub(rf"(?<![\d.]){re.escape(value)}(?![\d.])", new, question, count=1)
        s = sql[:match.start(1)] + new + sql[match.end(1):]
        return q, s
    return None


def _string_trap(question: str, sql: str, others: list[str]) -> tuple[str, str] | None:
    for match in _STRING.finditer(sql):
        value = match.group(1) or match.group(2)
        if value.lower() not in question.lower() or "%" in value:
            continue
        choices = [o for o in others if o.lower() != value.lower()
                   and o.lower() not in question.lower()]
        if not choices:
            continue
        new = choices[int(hashlib.sha256(value.encode()).hexdigest(), 16) % len(choices)]
        start = question.lower().index(value.lower())
        q = question[:start] + new + question[start + len(value):]
        s = sql[:match.start()] + sql[match.start()][0] + new + sql[match.end() - 1] + \
            sql[match.end():]
        return q, s
    return None


def _swap_trap(question: str, sql: str, chinese: bool) -> tuple[str, str] | None:
    lowered = sql.lower()
    for (a, b), words in (_ZH_SWAPS if chinese else _EN_SWAPS):
        for src, dst, forward in ((a, b, True), (b, a, False)):
            at = lowered.find(src)
            if at < 0:
                continue
            for w_a, w_b in words:
                old, new = (w_a, w_b) if forward else (w_b, w_a)
                pattern = re.escape(old) if chinese else rf"\b{re.escape(old)}\b"
                if re.search(pattern, question, flags=re.IGNORECASE):
                    q = re.sub(pattern, new, question, count=1, flags=re.IGNORECASE)
                    return q, sql[:at] + dst + sql[at + len(src):]
    return None


def make_trap(question: str, sql: str, others: list[str], chinese: bool
              ) -> tuple[str, str] | None:
    """A near-duplicate of (question, sql) with one value, aggregate or condition changed."""
    for attempt in (lambda: _number_trap(question, sql),
                    lambda: _string_trap(question, sql, others),
                    lambda: _swap_trap(question, sql, chinese)):
        made = attempt()
        if made is not None and norm_sql(made[1]) != norm_sql(sql) and made[0] != question:
            return made
    return None


def add_traps(case: Case, *, chinese: bool) -> None:
    """Store one trap per asked question that allows one; ask only those questions."""
    strings: dict[str, list[str]] = collections.defaultdict(list)
    for pair in case.stored:
        for m in _STRING.finditer(pair.sql):
            value = m.group(1) or m.group(2)
            if "%" not in value and value not in strings[pair.db]:
                strings[pair.db].append(value)
    existing = {(p.db, norm_sql(p.sql)) for p in case.stored}
    asked = []
    for n, item in enumerate(case.asked):
        made = make_trap(item.question, item.sql, strings[item.db], chinese)
        if made is None or (item.db, norm_sql(made[1])) in existing:
            continue  # a "trap" whose SQL is a real pair of the set would be a right answer
        case.stored.append(Stored(made[0], made[1], item.db, f"t{n:05d}"))
        asked.append(Asked(item.question, item.sql, item.db, item.drop, made[1]))
    case.asked = asked
