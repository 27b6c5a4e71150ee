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


def test_the_index_and_its_copy_count_the_same_pairs(example_project: Path):
    """Held in memory or searched in LanceDB (a table too big to hold, a pinned version),
    the form reader sees the same pairs and gives the same weights."""
    from wrenmem import Memory
    from wrenmem.index import recallcopy
    from wrenmem.index import table as index
    from wrenmem.recall.hits import Filters
    from wrenmem.recall.vector import HybridBackend, _Derived
    from wrenmem.settings import load_settings

    Memory(example_project, backend="hybrid").sync()
    settings = load_settings(example_project)
    backend = HybridBackend(settings)
    table = index.open_table(index.connect(settings))
    copy = recallcopy.RecallCopy.from_table(table)
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
