"""The candidates' SQL read against the question (wrenmem.recall.sqltree), on real sqlglot
shapes: each form term says which of two siblings answers what is asked, and says nothing
for a question in a language it does not read."""

from __future__ import annotations

from wrenmem.recall import model, sqlshape, sqltree


def _terms(question: str, *sqls: str) -> list[dict[str, float]]:
    shapes = [sqlshape.shape(s) for s in sqls]
    return [dict(zip(("lists", "counts", "order", "or"), row, strict=True))
            for row in sqltree.tree_terms(question, shapes)]


def test_the_top_query_is_read_for_its_count_and_or_the_whole_for_its_direction() -> None:
    r = sqltree.reading(sqlshape.shape(
        "SELECT name FROM singer WHERE id IN (SELECT singer_id FROM concert "
        "WHERE year = 2014 OR year = 2015) ORDER BY age DESC LIMIT 1").skeleton)
    assert not r.count and not r.either  # the OR is the subquery's
    assert r.direction == "desc"
    nested = sqltree.reading(sqlshape.shape(
        "SELECT fname FROM student WHERE major != (SELECT major FROM student "
        "GROUP BY major ORDER BY count(*) DESC LIMIT 1)").skeleton)
    assert nested.direction == "desc" and not nested.count  # "not in the largest major"
    assert sqltree.reading(sqlshape.shape(
        "SELECT a FROM t ORDER BY x, y DESC").skeleton).direction == "asc"
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
    assert asked[0]["lists"] == 0.0 and asked[1]["lists"] == -1.0
    assert asked[0]["counts"] == asked[1]["counts"] == 0.0
    which = _terms("Which papers has Smith written?", count, listing)
    assert which[0]["counts"] == -1.0 and which[1]["counts"] == 0.0
    assert which[0]["lists"] == which[1]["lists"] == 0.0
    zh = _terms("Smith写了多少篇论文？", count, listing)
    assert zh[0]["lists"] == 0.0 and zh[1]["lists"] == -1.0
    vi = _terms("Smith đã viết bao nhiêu bài báo?", count, listing)
    assert vi[0]["lists"] == 0.0 and vi[1]["lists"] == -1.0


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
    assert sqltree.asks("employees who serve at most 20 customers").desc is False
    assert sqltree.asks("number employees salary between 1 and 2").count  # keywords only


def test_a_language_not_read_gives_no_form_evidence() -> None:
    # German: none of the cue languages' markers; the form terms are 0 for every candidate
    rows = _terms("Wie viele Sänger gibt es?", "SELECT count(*) FROM singer",
                  "SELECT name FROM singer")
    assert sqltree.language("Wie viele Sänger gibt es?") == ""
    assert all(r["lists"] == r["counts"] == r["order"] == r["or"] == 0.0 for r in rows)


def test_the_features_carry_the_tree_terms_as_gaps() -> None:
    class C:
        def __init__(self, sql: str):
            self.sql, self.question, self.datasource = sql, "papers by Smith", "db"
            self.dense, self.lexical, self.coverage = 0.8, 1.0, 1.0
            self.translated = self.structure = self.form = self.aggregate = None

    rows = model.features("How many papers has Smith written?",
                          [C("SELECT count(*) FROM paper WHERE author = 'Smith'"),
                           C("SELECT title FROM paper WHERE author = 'Smith'")])
    at = model.FEATURES.index("count asked, sql lists - best")
    assert rows[0][at] == 0.0 and rows[1][at] == -1.0
    assert len(rows[0]) == len(model.FEATURES)
