"""Each candidate's SQL read against the asked question.

The ranking's other evidence says how close a stored *question* is to the asked one; this
says whether the candidate's *SQL* has the form asked for: the names the question says
(:func:`name_agreement`: a column, table or condition missing or one more), and three forms
a question names with a closed class of words: a count against a list, the direction of a
superlative (most, highest against least, lowest), ``or`` against ``and``
(:func:`tree_terms`).

The SQL side is read from the query's skeleton, sqlglot's normalized rendering of its tree
(:mod:`wrenmem.recall.sqlshape`: one space between tokens, values masked): whether the top
query's select list counts (parentheses blanked, so a subquery's or a ``HAVING``'s count is
not the answer's), the direction of the first ``ORDER BY`` key or else of a ``MAX``/``MIN``
anywhere (a superlative often asks for a subquery's: "the students not in the largest
major"), whether the top query joins conditions with ``OR`` or is a ``UNION``. Reading that
text costs microseconds and is memoized per skeleton; the tree is not parsed again (a parse
costs about a millisecond a candidate).

The question side needs words: :data:`CUES` holds, per language this module reads
(English, Chinese, Vietnamese, Korean), the words that ask for a count, for the largest or
the smallest, and for either of two conditions. A question in none of them (no marker of
:func:`language`) gets 0 for every term, as does SQL sqlglot could not parse: the evidence
stays neutral where it does not understand the question. (Round 19 also read the values a
question states against each candidate's conditions and the names it says against the top
select list; fitted beside the others they took unstable or negative weights and were
left out: ``bench/studies/round-19.md``.)
"""

from __future__ import annotations

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
        # "many", "number" alone too: a question put as keywords drops "how" and "of"
        _COUNT: re.compile(r"\bmany\b|(?<!phone )(?<!average )\bnumber\b(?! (?:is|was)\b)"
                           r"|\bcount\b"),
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
    """A query's forms, from its skeleton: whether its top select list counts, and whether
    a count is all it selects; the
    direction of its first ORDER BY key (a subquery's too) or else of a MAX/MIN anywhere
    ('' for none); whether its top conditions join with OR (or it is a UNION)."""

    count: bool
    count_only: bool
    direction: str
    either: bool


_CLAUSE = re.compile(r"\b(SELECT|FROM|WHERE|GROUP BY|HAVING|ORDER BY|LIMIT|UNION|INTERSECT|"
                     r"EXCEPT|OR|DESC|ASC)\b", re.IGNORECASE)
_CALL = re.compile(r"\b\w+\s*\(")
# the first ORDER BY key: up to a comma, a parenthesis closing, LIMIT or a set operation
_ORDER = re.compile(r"\border by ((?:[^(),]|\([^()]*\))*?)(?=,|\)| limit\b| union\b|"
                    r" intersect\b| except\b|$)", re.IGNORECASE)
_DESC_KEY = re.compile(r"\bdesc\b", re.IGNORECASE)


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
        direction = "desc" if _DESC_KEY.search(order.group(1)) else "asc"
    else:
        text = skeleton.lower()
        direction = "desc" if "max(" in text else "asc" if "min(" in text else ""
    # a count alone is the answer (no column beside it: "SELECT count(*) FROM ...")
    alone = "count(" in head and "," not in _top_level(head)
    return Reading("count(" in head, alone, direction,
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


def tree_terms(question: str, shapes: Sequence[sqlshape.Shape]) -> list[tuple[float, ...]]:
    """Per candidate, before twins share and gaps are taken: -1 when the question asks for
    a count and its select list has none (else 0); -1 when a count is all it selects and
    the question asks for none (else 0: a count beside other columns is often asked in
    other words, "orders and revenue per store"); its order direction against a
    superlative asked (1 the same, -1 the other or none; 0 when none is asked); its OR
    against an ``or`` asked (1 both or neither, -1 one of the two). All 0 for a question
    in a language :data:`CUES` does not hold, and for SQL sqlglot could not parse."""
    want = asks(question)
    rows: list[tuple[float, ...]] = []
    for s in shapes:
        if not want.read or not s.parsed:
            rows.append((0.0, 0.0, 0.0, 0.0))
            continue
        read = reading(s.skeleton)
        wanted = "desc" if want.desc else "asc" if want.asc else ""
        rows.append((-1.0 if want.count and not read.count else 0.0,
                     -1.0 if read.count_only and not want.count else 0.0,
                     0.0 if not wanted else 1.0 if read.direction == wanted else -1.0,
                     1.0 if read.either == want.either else -1.0))
    return rows
