"""Tokenizer and BM25F scoring for keyword recall, in any script.

Latin, Cyrillic, Greek… words are split on non-letters, case-folded and lightly stemmed.
Chinese, Japanese and Korean text has no spaces, so it becomes character unigrams and
bigrams. SQL keywords never count as matches; identifiers are split on ``_`` too.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

TOKENIZER_VERSION = 2
_CJK = (
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs
    "\uac00-\ud7af"  # Hangul syllables
)
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W{_CJK}]+", re.UNICODE)
CJK_CHAR = re.compile(rf"[{_CJK}]")  # one Chinese, Japanese or Korean character

STOPWORDS = frozenset(
    """a an the of for in on at by to from with and or is are was were be been being do does
    did what which who whom whose how many much show list give me tell find get return all
    each every that this these those there their its it our we us you your please i can could
    would should will any some as than then per""".split()
)
CJK_STOPWORDS = frozenset(
    "的 了 是 吗 呢 吧 啊 在 和 与 及 或 都 也 就 把 被 给 请 我 们 你 有 个 哪 些 么 什 怎 多 少".split()  # noqa: E501
)
SQL_KEYWORDS = frozenset(
    """select from where group by order having limit offset as on join left right inner outer
    full cross natural using and or not null is in between like ilike exists case when then
    else end asc desc distinct union all intersect except with recursive over partition rows
    range window filter within insert into values update set delete create table view drop
    alter true false interval cast lateral top fetch first next only nulls last""".split()
)
FIELD_WEIGHTS = {"nl": 3.0, "tags": 2.0, "sql": 1.0}
RRF_K = 60
K1 = 1.2
B = 0.75


@lru_cache(maxsize=1 << 16)  # a first index stems each of 100,000 questions' words
def stem(word: str) -> str:
    """A deliberately tiny English stemmer: plural and common verb endings only."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("sses", "xes", "ches", "shes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    if len(word) > 5 and word.endswith("ing"):
        return word[:-3]
    if len(word) > 4 and word.endswith("ed") and not word.endswith("eed"):
        return word[:-2]
    if len(word) > 5 and word.endswith("ly"):
        return word[:-2]
    return word


def is_cjk_term(term: str) -> bool:
    """Whether a term of :func:`tokenize` comes from a Chinese, Japanese or Korean run (one
    of its characters or character pairs): a token never mixes such a run with others."""
    return bool(CJK_CHAR.match(term))


def tokenize(text: str, *, sql: bool = False) -> list[str]:
    """Search terms of ``text``; with ``sql`` keywords are dropped and identifiers split."""
    text = unicodedata.normalize("NFKC", text or "").casefold()
    out: list[str] = []
    for run in _TOKEN.findall(text):
        if CJK_CHAR.match(run):
            chars = [c for c in run]
            out.extend(c for c in chars if c not in CJK_STOPWORDS)
            out.extend(a + b for a, b in zip(chars, chars[1:], strict=False))
            continue
        parts = [run]
        if "_" in run:
            parts += [p for p in run.split("_") if p]
        for part in parts:
            if sql and part in SQL_KEYWORDS:
                continue
            if not sql and part in STOPWORDS:
                continue
            if part.isdigit() and len(part) == 1:
                continue
            out.append(stem(part) if part.isascii() and part.isalpha() else part)
    return out


def document_terms(fields: Mapping[str, str]) -> dict[str, float]:
    """Weighted term frequencies of one document (BM25F's combined pseudo-field)."""
    weighted: dict[str, float] = {}
    for name, text in fields.items():
        weight = FIELD_WEIGHTS.get(name, 1.0)
        for term, count in Counter(tokenize(text, sql=name == "sql")).items():
            weighted[term] = weighted.get(term, 0.0) + weight * count
    return weighted


class Bm25Index:
    """An in-memory inverted index over weighted documents.

    ``lazy``: a term's postings are gathered the first time a query asks for it, then kept.
    Right for a process that asks a few questions (a CLI call looks at its few terms only;
    building every posting list of 10,000 documents costs about half a second); a
    long-lived index that answers many builds them all up front. The postings, in document
    order, are the same either way, and so are the scores."""

    def __init__(self, docs: Sequence[Mapping[str, float]], *, lazy: bool = False):
        self.docs = docs
        self.lengths = [sum(d.values()) for d in docs]
        self.avg_length = (sum(self.lengths) / len(docs)) if docs else 1.0
        self.lazy = lazy
        self._postings: dict[str, list[tuple[int, float]]] = {}
        if not lazy:
            for i, doc in enumerate(docs):
                for term, tf in doc.items():
                    self._postings.setdefault(term, []).append((i, tf))

    def postings(self, term: str) -> list[tuple[int, float]]:
        """(document number, weighted term frequency) of the documents holding ``term``."""
        found = self._postings.get(term)
        if found is None:
            if not self.lazy:
                return []
            found = self._postings[term] = [(i, doc[term]) for i, doc in enumerate(self.docs)
                                            if term in doc]
        return found

    def scores(self, query: str) -> dict[int, float]:
        """Document number → BM25F score, for documents sharing at least one term."""
        return self.term_scores(tokenize(query))

    def term_scores(self, terms: Iterable[str]) -> dict[int, float]:
        """:meth:`scores` for search terms already made by :func:`tokenize`."""
        out: dict[int, float] = {}
        for term in dict.fromkeys(terms):
            postings = self.postings(term)
            add_term_scores(out, postings, len(postings), len(self.docs), self.lengths,
                            self.avg_length)
        return out

    def best_possible(self, query: str) -> float:
        """The score a document holding every term of ``query`` very often would reach:
        a score divided by it is in [0, 1) and comparable across questions."""
        n = len(self.docs)
        total = 0.0
        for term in dict.fromkeys(tokenize(query)):
            df = len(self.postings(term))
            total += math.log(1 + (n - df + 0.5) / (df + 0.5)) * (K1 + 1)
        return total


def add_term_scores(out: dict[int, float], postings: Iterable[tuple[int, float]], df: int,
                    n: int, lengths: Sequence[float], average: float) -> None:
    """Add one query term's BM25 contribution to ``out`` (document number → score).

    ``postings`` are (document number, weighted term frequency) for the ``df`` documents
    holding the term, out of ``n`` documents whose weighted lengths are ``lengths``.
    """
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    for doc, tf in postings:
        norm = K1 * (1 - B + B * lengths[doc] / average)
        out[doc] = out.get(doc, 0.0) + idf * tf * (K1 + 1) / (tf + norm)


def rrf(*rankings: Sequence[str]) -> list[tuple[str, float]]:
    """Reciprocal rank fusion of rankings of ids: (id, score), best first, equal scores by
    id so the order is deterministic (the schema and knowledge searches of ``fetch``)."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking):
            scores[key] = scores.get(key, 0.0) + 1.0 / (RRF_K + rank + 1)
    return sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))
