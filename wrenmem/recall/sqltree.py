"""Each candidate's SQL read against the asked question, clause by clause.

The ranking's other evidence says how close a stored *question* is to the asked one; this
says whether the candidate's *SQL* answers what is asked: the names the question says
(:func:`name_agreement`), the values it states (one condition more or less), what the top
query selects, and three forms a question names with a closed class of words (a count
against a list, the direction of a superlative, ``or``).

The SQL side is read from the query's skeleton, sqlglot's normalized rendering of its tree
(:mod:`wrenmem.recall.sqlshape`: keywords upper-cased, one space between tokens, strings
and numbers masked), at parenthesis depth 0: the top ``SELECT`` list, the first ``ORDER
BY`` key's direction, whether the ``WHERE`` joins conditions with ``OR`` (or the query is a
``UNION``). Reading that text costs a few microseconds and is memoized per skeleton; the
tree itself is not kept (a parse costs about a millisecond a candidate).

The question side: the names and values need no word list (the names are those the
candidates' SQL uses, the values those their SQL compares with, both in the team's own
language). The forms do: :data:`CUES` holds, per language this module reads (English,
Chinese, Vietnamese, Korean), the words that ask for a count, for the largest or the
smallest, and for ``or``. A question in none of those languages (no marker of
:func:`language`) gets 0 for every form term: the evidence stays neutral where it does not
understand the question.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from wrenmem.recall import sqlshape
from wrenmem.textsearch import tokenize

# -- the question's language and its cue words -----------------------------------------

_HAN = re.compile(r"[\u4e00-\u9fff]")
_HANGUL = re.compile(r"[\uac00-\ud7a3]")
# letters only Vietnamese writes among the Latin scripts (with đ, ơ, ư and the tone marks)
_VIET = re.compile(r"[đơưạảấầẩẫậắằẳẵặẹẻẽếềểễệỉịọỏốồổỗộớờởỡợụủứừửữựỳỵỷỹ]")
_ENGLISH = re.compile(r"\b(what|which|who|whom|whose|how|show|list|find|give|return|tell|"
                      r"the|of|are|is|there|all|each|count|number|and|or|with|from|for|by|that|"
                      r"has|have)\b")

_COUNT, _DESC, _ASC, _OR = "count", "desc", "asc", "or"
# per language: the words that ask for a count, for the largest (DESC / MAX), for the
# smallest (ASC / MIN), for either of two conditions; each a regular expression over the
# case-folded question. Closed classes (question words, superlatives, a conjunction), not
# a benchmark's vocabulary; "oldest"/"youngest" and their kin are left out (an age is
# sorted one way, a birth date the other).
CUES: dict[str, dict[str, re.Pattern[str]]] = {
    "en": {
        _COUNT: re.compile(r"\bhow many\b|\bnumber of\b|\bcount\b|\bhow much\b.*\bcount"),
        # "at most 20", "at least one" bound a count: no superlative; "max", "min" are
        # more often a column's name ("max speed") than a superlative
        _DESC: re.compile(r"(?<!\bat )\b(most|highest|largest|biggest|greatest|maximum|"
                          r"longest|heaviest|latest|newest|best)\b"),
        _ASC: re.compile(r"(?<!\bat )\b(least|lowest|smallest|fewest|minimum|shortest|"
                         r"lightest|earliest|worst)\b"),
        _OR: re.compile(r"\bor\b|\beither\b"),
    },
    "zh": {
        _COUNT: re.compile(r"多少|几|数量|数目|总数|個數|个数"),
        _DESC: re.compile(r"最(多|高|大|长|長|重|晚|新)"),
        _ASC: re.compile(r"最(少|低|小|短|轻|輕|早)"),
        _OR: re.compile(r"或"),
    },
    "vi": {
        _COUNT: re.compile(r"bao nhiêu|số lượng|\bđếm\b"),
        _DESC: re.compile(r"(nhiều|cao|lớn|dài|nặng|mới) nhất"),
        _ASC: re.compile(r"(ít|thấp|nhỏ|ngắn|nhẹ|sớm) nhất"),
        _OR: re.compile(r"\bhoặc\b"),
    },
    "ko": {
        _COUNT: re.compile(r"몇|개수|갯수"),
        _DESC: re.compile(r"가장 (많|높|큰|긴)|최대|최고"),
        _ASC: re.compile(r"가장 (적|낮|작|짧)|최소|최저"),
        _OR: re.compile(r"또는|혹은"),
    },
}


@lru_cache(maxsize=65536)
def language(question: str) -> str:
    """The language of :data:`CUES` the question is read in, '' for none (the form terms
    are then 0): Korean or Chinese by their script, Vietnamese by its letters, English by
    its function words."""
    if _HANGUL.search(question):
        return "ko"
    if _HAN.search(question):
        return "zh"
    text = question.casefold()
    if _VIET.search(text):
        return "vi"
    return "en" if _ENGLISH.search(text) else ""


@dataclass(frozen=True)
class Asks:
    """What the question asks for by its cue words (all false in a language not read)."""

    read: bool
    count: bool
    desc: bool
    asc: bool
    either: bool


@lru_cache(maxsize=65536)
def asks(question: str) -> Asks:
    lang = language(question)
    if not lang:
        return Asks(False, False, False, False, False)
    text = question.casefold()
    cue = CUES[lang]
    desc, asc = bool(cue[_DESC].search(text)), bool(cue[_ASC].search(text))
    return Asks(True, bool(cue[_COUNT].search(text)), desc and not asc, asc and not desc,
                bool(cue[_OR].search(text)))


# -- the SQL's top clauses, from its skeleton -------------------------------------------

@dataclass(frozen=True)
class Reading:
    """The top query of a skeleton: the terms of what it selects, whether its select list
    counts; the direction of the query's first ORDER BY key (a subquery's too) or else of
    a MAX/MIN anywhere ('' for none), whether its conditions join with OR (or it is a UNION)."""

    selected: frozenset[str]
    count: bool
    direction: str
    either: bool


_CLAUSE = re.compile(r"\b(SELECT|FROM|WHERE|GROUP BY|HAVING|ORDER BY|LIMIT|UNION|INTERSECT|"
                     r"EXCEPT|OR|DESC|ASC)\b", re.IGNORECASE)
_CALL = re.compile(r"\b\w+\s*\(")
# the first ORDER BY key, its DESC when it has one (up to the next clause or parenthesis)
_ORDER = re.compile(r"\border by [^()]*?(?:\([^()]*\)[^()]*?)*?( desc\b)?(?=,| limit\b|\)|$|"
                    r" union\b| intersect\b| except\b)", re.IGNORECASE)
_QUALIFIER = re.compile(r"\b\w+\.(?=\w)")  # t1.name: the alias is no name the question says


def _top_level(skeleton: str) -> str:
    """The skeleton with every parenthesized part blanked (subqueries, calls' arguments
    kept only as their parentheses), so clause words found are the top query's."""
    out, depth = [], 0
    for ch in skeleton:
        if ch == "(":
            depth += 1
            out.append(ch if depth == 1 else " ")
        elif ch == ")":
            depth = max(depth - 1, 0)
            out.append(ch if depth == 0 else " ")
        else:
            out.append(ch if depth == 0 else " ")
    return "".join(out)


@lru_cache(maxsize=65536)
def reading(skeleton: str) -> Reading:
    top = _top_level(skeleton)
    marks = [(m.start(), m.end(), m.group(1).upper()) for m in _CLAUSE.finditer(top)]
    words = {w for _s, _e, w in marks}
    select = ""
    for n, (_s, end, word) in enumerate(marks):
        if word == "SELECT":
            stop = next((s for s, _e, w in marks[n + 1:] if w != "SELECT"), len(skeleton))
            select = skeleton[end:stop]
            break
    head = select.lower()
    # the direction anywhere in the query: a superlative often asks for a subquery's
    # ("the students not in the largest major")
    order = _ORDER.search(skeleton)
    if order:
        direction = "desc" if order.group(1) else "asc"
    else:
        text = skeleton.lower()
        direction = "desc" if "max(" in text else "asc" if "min(" in text else ""
    selected = frozenset(t for t in tokenize(_QUALIFIER.sub(" ", _CALL.sub("(", select)),
                                             sql=True)
                         if not t.isdigit())
    return Reading(selected, "count(" in head, direction,
                   bool(words & {"OR", "UNION"}))


# -- the evidence ------------------------------------------------------------------------

@lru_cache(maxsize=65536)
def _question_terms(text: str) -> frozenset[str]:
    return frozenset(tokenize(text))


@lru_cache(maxsize=65536)
def sql_names(skeleton: str) -> frozenset[str]:
    """The search terms of the names a query's SQL uses (tables, columns, aliases; its
    values are masked in the skeleton, its keywords and functions dropped, identifiers
    split on ``_``), stemmed as a question's words are."""
    return frozenset(t for t in tokenize(_CALL.sub("(", skeleton), sql=True)
                     if not t.isdigit())


def name_agreement(question: str, shapes: Sequence[sqlshape.Shape]
                   ) -> tuple[list[float], list[float]]:
    """The candidates' SQL read against the question by the names it uses (the schema's
    words: the names any candidate's SQL uses): of those the question says, the share each
    SQL uses (a column, table or condition missing), and how many of each SQL's names the
    question does not say (one more than asked). No word list: the names are the team's."""
    said = _question_terms(question)
    names = [sql_names(s.skeleton) for s in shapes]
    schema = frozenset().union(*names) if names else frozenset()
    asked = said & schema
    share = [len(asked & n) / len(asked) if asked else 0.0 for n in names]
    extra = [float(len(n - said)) for n in names]
    return share, extra


def tree_terms(question: str, shapes: Sequence[sqlshape.Shape],
               stated: Sequence[Sequence[bool]]) -> list[tuple[float, ...]]:
    """Per candidate, before twins share and gaps are taken: the share of the values any
    candidate's SQL compares with and the question states that its SQL has (a condition
    missing); how many of its values the question does not state (a condition more); the
    share of what its top query selects that the question names (a select list without
    names: the best candidate's share); whether its select list
    counts as the question asks (1), against it (-1), or the question is not read (0);
    its order direction against a superlative asked (1 the same, -1 the other or none,
    0 none asked); its OR against an ``or`` asked (1 both, -1 one of the two).
    ``stated``: per candidate, per value of its shape, whether the question states it."""
    want = asks(question)
    said = _question_terms(question)
    asked_values = {v for s, st in zip(shapes, stated, strict=True)
                    for v, hit in zip(s.values, st, strict=True) if hit}
    rows: list[list[float]] = []
    for s, st in zip(shapes, stated, strict=True):
        read = reading(s.skeleton) if s.parsed else Reading(frozenset(), False, "", False)
        have = {v for v, hit in zip(s.values, st, strict=True) if hit}
        values_share = len(have) / len(asked_values) if asked_values else 0.0
        # a condition more, where the question's values are the candidates' (a new
        # question states values no stored pair has: every candidate's are unstated)
        unstated = float(sum(1 for hit in st if not hit)) if asked_values else 0.0
        selected = (len(read.selected & said) / len(read.selected)
                    if read.selected else math.nan)
        if not want.read or not s.parsed:
            count = order = either = 0.0
        else:
            count = 1.0 if read.count == want.count else -1.0
            wanted = "desc" if want.desc else "asc" if want.asc else ""
            order = (0.0 if not wanted else 1.0 if read.direction == wanted else -1.0)
            either = 1.0 if read.either == want.either else -1.0
        rows.append([values_share, unstated, selected, count, order, either])
    # a select list without names (count(*)) is neither for nor against: the best's share
    named = [r[2] for r in rows if not math.isnan(r[2])]
    for r in rows:
        if math.isnan(r[2]):
            r[2] = max(named, default=0.0)
    return [tuple(r) for r in rows]
