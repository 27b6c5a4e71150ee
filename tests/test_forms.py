"""The form reader (wrenmem.recall.forms): what a team's own pairs say about the form of SQL a
question asks for, learned from the pairs a search sees, in any language."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from wrenmem.index.table import query_terms
from wrenmem.recall import forms, model
from wrenmem.textsearch import tokenize


def _names(sql: str) -> set[str]:
    return {forms.LABELS[n] for n in forms.labels(sql)}


def test_labels_are_the_keywords_aggregates_and_operators_outside_strings():
    found = _names("SELECT count(*) FROM singer WHERE note = 'group by x' AND age >= 3")
    assert {"count", "*", "where", "=", ">=", "select#1", "join#0", "and#1"} <= found
    assert "group" not in found  # inside a string
    assert "!=" in _names('SELECT a FROM t WHERE "order" <> 2')
    assert "order" not in _names('SELECT a FROM t WHERE "order" <> 2')  # a quoted name
    nested = _names("SELECT a FROM t JOIN u ON t.id = u.id WHERE b IN (SELECT b FROM v)")
    assert {"select#2", "join#1", "in"} <= nested
    assert "select#3" in _names("SELECT a FROM (SELECT a FROM (SELECT 1 AS a) x) y UNION "
                                "SELECT a FROM z UNION SELECT 2")


def _tally(pairs: list[tuple[str, str]]) -> forms.Tally:
    return forms.tally_of([(" ".join(tokenize(q)), sql) for q, sql in pairs])


COUNTING = [("What is the number of singers?", "SELECT count(*) FROM singer"),
            ("The number of songs.", "SELECT count(*) FROM song"),
            ("Number of albums released", "SELECT count(*) FROM album"),
            ("List the names of the singers.", "SELECT name FROM singer"),
            ("List the titles of the songs.", "SELECT title FROM song"),
            ("List every album's title.", "SELECT title FROM album")]


def _fits(tally: forms.Tally, question: str, sqls: list[str]) -> list[float]:
    weights = forms.label_weights(tally, query_terms(question).split())
    return [forms.fit(weights, s) for s in sqls]


def test_the_pairs_teach_which_form_a_question_asks_for():
    # ("how many" is made of stop words of the keyword search: the form reader reads the
    # search terms, as the index holds them)
    tally = _tally(COUNTING)
    count, plain = _fits(tally, "What is the number of bands?",
                         ["SELECT count(*) FROM band", "SELECT name FROM band"])
    assert count > plain
    listed = _fits(tally, "List the names of the bands.",
                   ["SELECT count(*) FROM band", "SELECT name FROM band"])
    assert listed[1] > listed[0]


def test_no_word_list_the_same_in_another_script():
    korean = [("가수는 몇 명입니까", "SELECT count(*) FROM singer"),
              ("노래는 몇 곡입니까", "SELECT count(*) FROM song"),
              ("가수 이름 목록", "SELECT name FROM singer"),
              ("노래 제목 목록", "SELECT title FROM song")]
    count, plain = _fits(_tally(korean), "앨범은 몇 장입니까",
                         ["SELECT count(*) FROM album", "SELECT title FROM album"])
    assert count > plain


def test_rows_the_search_does_not_see_are_not_counted():
    rows = [(" ".join(tokenize(q)), sql) for q, sql in COUNTING]
    every = forms.tally_of(rows)
    allowed = np.array([True, True, False, True, True, True])
    seen = forms.Tally(every.matrix, allowed, every._rows_with)
    alone = forms.tally_of([r for r, keep in zip(rows, allowed, strict=True) if keep])
    assert seen.count == alone.count == 5
    assert (seen.totals == alone.totals).all()
    terms = query_terms("Number of albums released").split()
    assert np.allclose(forms.label_weights(seen, terms), forms.label_weights(alone, terms))
    assert not np.allclose(forms.label_weights(every, terms), forms.label_weights(seen, terms))


def test_an_empty_tally_gives_finite_even_weights():
    weights = forms.label_weights(forms.tally_of([]), ["anything"])
    assert np.isfinite(weights).all()
    assert forms.fit(weights, "SELECT 1") == pytest.approx(forms.fit(weights, "SELECT 2"))


def test_the_model_reads_the_gap_to_the_best_form_fit_shared_by_twins():
    from tests.test_model import Cand

    cands = [Cand(dense=0.8, sql="SELECT count(*) FROM t", question="a", form=-1.0),
             Cand(dense=0.7, sql="select count(*) from T", question="b", form=2.0),
             Cand(dense=0.9, sql="SELECT x FROM t", question="c", form=0.5)]
    rows = [dict(zip(model.FEATURES, r, strict=True)) for r in model.features("q", cands)]
    gaps = [r["form fit - best"] for r in rows]
    assert gaps == [0.0, 0.0, -1.5]  # the twins share the better fit


def test_the_index_and_its_copy_count_the_same_pairs(indexed_example: Path):
    """Held in memory or searched in LanceDB (a table too big to hold, a pinned version),
    the form reader sees the same pairs and gives the same weights."""
    from wrenmem.index import table as index
    from wrenmem.index.readcopy.held import RecallCopy
    from wrenmem.recall.hits import Filters
    from wrenmem.recall.vector import HybridBackend, _Derived
    from wrenmem.settings import load_settings

    settings = load_settings(indexed_example)
    backend = HybridBackend(settings)
    table = index.open_table(index.connect(settings))
    copy = RecallCopy.from_table(table)
    held = _Derived.of(copy).tally(copy.live)
    read = backend._table_tally(table, None)
    assert held.count == read.count == table.count_rows()
    assert (held.totals == read.totals).all()
    terms = query_terms("How many orders were cancelled each month?").split()
    assert np.allclose(forms.label_weights(held, terms), forms.label_weights(read, terms))
    # and a search hands every candidate's form fit to the ranking model
    seen: list = []

    def recording(question, signals, **kwargs):
        seen.extend(signals)
        return [0.5] * len(signals)

    HybridBackend(settings, scorer=recording).search(
        ["How many orders were cancelled each month?"], 3, Filters())
    assert seen and all(s.form is not None for s in seen)
    assert len({s.form for s in seen}) > 1


def test_a_cjk_run_counts_its_character_pairs_not_its_characters_again():
    chinese = [("每个部门有多少员工", "SELECT dept, count(*) FROM staff GROUP BY dept"),
               ("列出所有员工的名字", "SELECT name FROM staff"),
               ("每个城市有多少门店", "SELECT city, count(*) FROM store GROUP BY city")]
    tally = _tally(chinese)
    terms = tokenize("每个国家有多少客户")
    pairs = [t for t in terms if len(t) == 2]
    assert pairs and len(pairs) < len(terms)
    assert np.allclose(forms.label_weights(tally, terms), forms.label_weights(tally, pairs))
    group, plain = _fits(tally, "每个国家有多少客户",
                         ["SELECT country, count(*) FROM customer GROUP BY country",
                          "SELECT name FROM customer"])
    assert group > plain


# SQL texts whose labels are pinned under a fingerprint of sqllabels (the labels, the lexer,
# RULES): the recall copy saves label matrices under that fingerprint, so labels() must not
# read a text otherwise while the fingerprint stays the same.
_LABELLED = (
    "SELECT 1",
    "select count(*) from orders where city = 'Oslo'",
    "SELECT SUM(amount) FROM orders WHERE created_at >= '2024-01-01' AND created_at < "
    "'2025-01-01'",
    "SELECT c.name, COUNT(o.id) FROM customers AS c LEFT JOIN orders AS o ON o.customer_id = "
    "c.id GROUP BY c.name HAVING COUNT(o.id) > 3 ORDER BY 2 DESC LIMIT 10",
    "SELECT DISTINCT name FROM t WHERE x IN (SELECT y FROM u WHERE z <> 2) OR NOT w IS NULL",
    "SELECT a FROM t WHERE b BETWEEN 1 AND 5 AND c LIKE 'x%' AND d != 'and or select'",
    "SELECT avg(price), min(price), max(price) FROM p UNION SELECT 1, 2, 3 INTERSECT SELECT "
    "4, 5, 6 EXCEPT SELECT 7, 8, 9",
    "SELECT CASE WHEN a <= 1 THEN 'low' ELSE 'high' END FROM t WHERE EXISTS (SELECT 1 FROM u)",
    'SELECT "select", `join`, [and] FROM "group" ORDER BY "order" ASC',
    "SELECT * FROM a JOIN b ON a.i = b.i JOIN c ON c.i = b.i JOIN d ON d.i = c.i JOIN e ON "
    "e.i = d.i",
    "SELECT x FROM t WHERE a = 1 AND b = 2 AND c = 3 AND d = 4",
    "SELECT 顾客, SUM(金额) FROM 订单 WHERE 城市 = '北京' GROUP BY 顾客",
    "select x from t where note = 'it''s where and'",
)
# fingerprint -> the digest of the labels of _LABELLED; add a line when RULES is raised
_PINNED = {"708645a95ac19462": "e1b77b0ddbd9bd92"}


def test_labels_do_not_change_under_one_fingerprint():
    import hashlib
    import json

    from wrenmem.sql import labels as sqllabels

    found = [sqllabels.labels(sql) for sql in _LABELLED]
    digest = hashlib.sha256(json.dumps(found).encode()).hexdigest()[:16]
    fingerprint = sqllabels.fingerprint()
    assert fingerprint in _PINNED, (
        f"sqllabels' fingerprint is new ({fingerprint}): pin its labels, "
        f"_PINNED[{fingerprint!r}] = {digest!r}")
    assert _PINNED[fingerprint] == digest, (
        "labels() reads these SQL texts otherwise than when this fingerprint was pinned: "
        "raise sqllabels.RULES (saved label matrices would be read as this code's), then "
        "pin the new fingerprint")
    names = [{sqllabels.LABELS[n] for n in row} for row in found]
    assert {"select#1", "count", "where", "=", "join#0", "and#0"} <= names[1]
    assert "and#2" in names[5] and "like" in names[5] and "or" not in names[5]  # in a string
    assert "join#3" in names[9] and "and#2" in names[10]  # counted up to their top
    assert not {"group", "join#1", "and#1"} & names[8]  # quoted names are no labels
    assert {"order", "asc"} <= names[8]  # ORDER BY itself is


# -- count against list, on a real project -------------------------------------------------

_WRITES = ("FROM writes AS w JOIN paper AS p ON w.paper_id = p.id "
           "WHERE w.author = 'Smith' AND p.topic = 'databases'")
COUNT_PAIR = ("How many papers has Smith written about databases?",
              f"SELECT count(DISTINCT p.id) {_WRITES}")
LIST_PAIR = ("Which papers has Smith written about databases?", f"SELECT DISTINCT p.title {_WRITES}")
_TEACH = [  # what the team's other pairs say "how many", "number", "which", "list" ask for
    ("How many authors are there?", "SELECT count(*) FROM author"),
    ("How many venues are there?", "SELECT count(*) FROM venue"),
    ("How many papers were published in 2015?", "SELECT count(*) FROM paper WHERE year = 2015"),
    ("How many authors work at MIT?", "SELECT count(*) FROM author WHERE affiliation = 'MIT'"),
    ("Count the papers cited more than 100 times.",
     "SELECT count(*) FROM paper WHERE citations > 100"),
    ("What is the number of venues?", "SELECT count(*) FROM venue WHERE active = 1"),
    ("Number of authors with more than 10 papers",
     "SELECT count(*) FROM author WHERE papers > 10"),
    ("What are the names of all authors?", "SELECT name FROM author"),
    ("List the titles of papers from 2014.", "SELECT title FROM paper WHERE year = 2014"),
    ("List all venues.", "SELECT name FROM venue"),
    ("Which papers were published in 2016?", "SELECT title FROM paper WHERE year = 2016"),
    ("List the authors who work at CMU.", "SELECT name FROM author WHERE affiliation = 'CMU'"),
    ("Which papers are cited more than 50 times?", "SELECT title FROM paper WHERE citations > 50"),
]


def _margins(memory, question: str, monkeypatch, blind: bool) -> tuple[str, float]:
    """(the first hit's question, the count pair's score less the list pair's), with the
    form reader's aggregate labels read or (``blind``) set to no evidence."""
    if blind:
        real = forms.label_weights

        def without_aggregates(*args, **kwargs):
            weights = np.array(real(*args, **kwargs))
            weights[sorted(forms.AGGREGATES)] = 0.0
            return weights

        monkeypatch.setattr(forms, "label_weights", without_aggregates)
    hits = memory.recall(question, 5)
    monkeypatch.undo()
    score = {h.question: h.score for h in hits}
    return hits[0].question, score[COUNT_PAIR[0]] - score[LIST_PAIR[0]]


def test_a_count_question_reads_the_aggregate_against_the_list_pair_sharing_its_words(
        tmp_path: Path, monkeypatch):
    from wrenmem import Memory

    folder = tmp_path / "knowledge" / "sql"
    folder.mkdir(parents=True)
    for n, (question, sql) in enumerate([*_TEACH, COUNT_PAIR, LIST_PAIR]):
        (folder / f"p{n:02d}.md").write_text(
            f"---\nnl: {question}\ndatasource: papers\n---\n\n```sql\n{sql}\n```\n",
            encoding="utf-8")
    memory = Memory(tmp_path, backend="hybrid", recall_fit=False)  # the shipped model
    memory.sync()
    for question, first in (("Count of papers by Smith on databases", COUNT_PAIR[0]),
                            ("Number of papers by Smith on databases", COUNT_PAIR[0]),
                            ("List papers by Smith on databases", LIST_PAIR[0])):
        top, margin = _margins(memory, question, monkeypatch, blind=False)
        _top, blind = _margins(memory, question, monkeypatch, blind=True)
        assert top == first, question
        # the aggregate read from the team's pairs moves the count pair toward a count
        # question and away from a list question: without it the margin is not moved
        if first == COUNT_PAIR[0]:
            assert margin > blind + 0.005, (question, margin, blind)
        else:
            assert margin < blind - 0.003, (question, margin, blind)
