"""The candidates' SQL read against the question (wrenmem.recall.sqltree), on real sqlglot
shapes: each form term says which of two siblings answers what is asked, and says nothing
for a question in a language it does not read."""

from __future__ import annotations

from wrenmem.recall import model, sqlshape, sqltree


def _terms(question: str, *sqls: str) -> list[dict[str, float]]:
    shapes = [sqlshape.shape(s) for s in sqls]
    hits = [[model._states(question.lower(), v) for v in s.values] for s in shapes]
    names = ("values", "unstated", "selected", "count", "order", "or")
    return [dict(zip(names, row, strict=True))
            for row in sqltree.tree_terms(question, shapes, hits)]


def test_the_top_query_is_read_not_its_subqueries() -> None:
    r = sqltree.reading(sqlshape.shape(
        "SELECT name FROM singer WHERE id IN (SELECT singer_id FROM concert "
        "WHERE year = 2014 OR year = 2015) ORDER BY age DESC LIMIT 1").skeleton)
    assert r.selected == frozenset({"name"})
    assert not r.count and not r.either  # the OR and the count are the subquery's
    assert r.direction == "desc"
    having = sqltree.reading(sqlshape.shape(
        "SELECT name FROM t GROUP BY name HAVING count(*) > 2 ORDER BY count(*)").skeleton)
    assert not having.count and having.direction == "asc"
    assert sqltree.reading(sqlshape.shape("SELECT max(age) FROM t").skeleton).direction \
        == "desc"
    assert sqltree.reading(sqlshape.shape(
        "SELECT a FROM t UNION SELECT a FROM u").skeleton).either


def test_a_count_question_prefers_the_count_and_a_list_question_the_list() -> None:
    count, listing = "SELECT count(*) FROM paper WHERE author = 'Smith'", \
        "SELECT title FROM paper WHERE author = 'Smith'"
    asked = _terms("How many papers has Smith written?", count, listing)
    assert asked[0]["count"] == 1.0 and asked[1]["count"] == -1.0
    which = _terms("Which papers has Smith written?", count, listing)
    assert which[0]["count"] == -1.0 and which[1]["count"] == 1.0
    zh = _terms("Smith写了多少篇论文？", count, listing)
    assert zh[0]["count"] == 1.0 and zh[1]["count"] == -1.0
    vi = _terms("Smith đã viết bao nhiêu bài báo?", count, listing)
    assert vi[0]["count"] == 1.0 and vi[1]["count"] == -1.0


def test_direction_or_and_values_read_against_the_question() -> None:
    desc, asc = ("SELECT name FROM pet ORDER BY weight DESC LIMIT 1",
                 "SELECT name FROM pet ORDER BY weight LIMIT 1")
    heaviest = _terms("Which pet has the highest weight?", desc, asc)
    assert heaviest[0]["order"] == 1.0 and heaviest[1]["order"] == -1.0
    lightest = _terms("Which pet has the lowest weight?", desc, asc)
    assert lightest[0]["order"] == -1.0 and lightest[1]["order"] == 1.0
    either, both = ("SELECT name FROM t WHERE city = 'Oslo' OR city = 'Bergen'",
                    "SELECT name FROM t WHERE city = 'Oslo' AND kind = 'Bergen'")
    said = _terms("Names in Oslo or Bergen", either, both)
    assert said[0]["or"] == 1.0 and said[1]["or"] == -1.0
    one_less = _terms("Flights from Boston to Denver on Sunday",
                      "SELECT id FROM flight WHERE src = 'Boston' AND dst = 'Denver'",
                      "SELECT id FROM flight WHERE src = 'Boston' AND dst = 'Denver' "
                      "AND day = 'Sunday'")
    assert one_less[0]["values"] < one_less[1]["values"] == 1.0
    one_more = _terms("Flights from Boston to Denver",
                      "SELECT id FROM flight WHERE src = 'Boston' AND dst = 'Denver'",
                      "SELECT id FROM flight WHERE src = 'Boston' AND dst = 'Denver' "
                      "AND day = 'Sunday'")
    assert one_more[0]["unstated"] == 0.0 and one_more[1]["unstated"] == 1.0


def test_the_selected_entity_is_read_against_the_names_said() -> None:
    rows = _terms("Which airlines fly into Denver?",
                  "SELECT flight_no FROM flight WHERE dst = 'Denver'",
                  "SELECT airline FROM flight WHERE dst = 'Denver'")
    assert rows[1]["selected"] > rows[0]["selected"]


def test_a_language_not_read_gives_no_form_evidence() -> None:
    # German: none of the cue languages' markers; the form terms are 0 for every candidate
    rows = _terms("Wie viele Sänger gibt es?", "SELECT count(*) FROM singer",
                  "SELECT name FROM singer")
    assert sqltree.language("Wie viele Sänger gibt es?") == ""
    assert all(r["count"] == r["order"] == r["or"] == 0.0 for r in rows)


def test_the_features_carry_the_tree_terms_as_gaps() -> None:
    class C:
        def __init__(self, sql: str):
            self.sql, self.question, self.datasource = sql, "papers by Smith", "db"
            self.dense, self.lexical, self.coverage = 0.8, 1.0, 1.0
            self.translated = self.structure = self.form = self.aggregate = None

    rows = model.features("How many papers has Smith written?",
                          [C("SELECT count(*) FROM paper WHERE author = 'Smith'"),
                           C("SELECT title FROM paper WHERE author = 'Smith'")])
    at = model.FEATURES.index("count asked - best")
    assert rows[0][at] == 0.0 and rows[1][at] == -2.0
    assert len(rows[0]) == len(model.FEATURES)
