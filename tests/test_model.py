"""The ranking model (wrenmem.recall.model) and the SQL shapes it reads (sqlshape)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from importlib import resources

import pytest

from wrenmem.recall import model, sqlshape


@dataclass(frozen=True)
class Cand:
    dense: float | None = None
    lexical: float | None = None
    coverage: float = 0.0
    sql: str = ""
    question: str = ""
    datasource: str = "shop"
    translated: float | None = None
    structure: float | None = None
    dialect: str | None = None
    form: float | None = None
    aggregate: float | None = None


# -- shapes ---------------------------------------------------------------------------

def test_values_are_masked_and_structure_kept():
    a = sqlshape.shape("SELECT name FROM singer WHERE age > 20 LIMIT 3")
    b = sqlshape.shape("select Name  from SINGER where age>30 limit 5;")
    assert a.skeleton == b.skeleton
    assert a.key != b.key
    assert a.values == ("20", "3") and b.values == ("30", "5")


def test_function_arguments_and_positions_are_structure_not_values():
    s = sqlshape.shape("SELECT DATE_TRUNC('month', t) AS m, ROUND(SUM(x), 2) FROM o "
                       "WHERE status <> 'cancelled' GROUP BY 1 ORDER BY 2 DESC")
    assert s.values == ("cancelled",)
    assert "'month'" in s.skeleton and "group by 1" in s.skeleton


def test_double_quoted_values_of_sqlite_style_sql():
    s = sqlshape.shape('SELECT "name" FROM t WHERE city = "Boston" AND x IN ("a", "b")',
                       "sqlite")
    assert set(s.values) == {"boston", "a", "b"}
    assert '"name"' in s.skeleton  # a quoted column in the select list stays a column


def test_same_sql_up_to_formatting_has_one_key():
    a = sqlshape.shape("SELECT a FROM t WHERE b = 'X'")
    b = sqlshape.shape("select   A\nfrom T where B='X';")
    assert a.key == b.key


def test_unparsable_sql_still_has_a_shape():
    s = sqlshape.shape("this is ((( not sql at all")
    assert not s.parsed and s.key


def test_similarity_orders_structures():
    a = sqlshape.shape("SELECT name FROM singer WHERE age > 20")
    same_form = sqlshape.shape("SELECT title FROM song WHERE length > 2")
    other = sqlshape.shape("SELECT count(*) FROM song GROUP BY genre")
    assert sqlshape.similarity(a, a) == 1.0
    assert sqlshape.similarity(a, same_form) > sqlshape.similarity(a, other)


# -- features -------------------------------------------------------------------------

def _row(question, cands, name):
    return [dict(zip(model.FEATURES, r, strict=True))[name]
            for r in model.features(question, cands)]


def test_twins_share_their_best_evidence():
    a = Cand(dense=0.9, lexical=5.0, sql="SELECT 1 FROM t", question="one")
    b = Cand(dense=0.5, lexical=9.0, sql="select 1 from T;", question="uno")
    c = Cand(dense=0.7, lexical=1.0, sql="SELECT 2 FROM t", question="two")
    assert model.twins([a, b, c]) == [0, 0, 1]
    rows = model.features("q", [a, b, c])
    assert rows[0] == rows[1]
    assert _row("q", [a, b, c], "(cosine - best) x uncovered")[1] == 0.0  # b has a's 0.9


def test_values_cost_nothing_when_no_pair_states_them():
    """A new question: no stored pair has the asked values, so differing values are no
    evidence against any pair."""
    q = "Which singers are older than 41?"
    cands = [Cand(dense=0.8, sql="SELECT name FROM singer WHERE age > 30"),
             Cand(dense=0.7, sql="SELECT name FROM song WHERE year = 1999")]
    assert _row(q, cands, "values stated - best of its skeleton") == [0.0, 0.0]


def test_values_decide_within_one_structure_only():
    q = "Which singers are older than 30?"
    right = Cand(dense=0.8, sql="SELECT name FROM singer WHERE age > 30")
    trap = Cand(dense=0.8, sql="SELECT name FROM singer WHERE age > 40")
    other = Cand(dense=0.8, sql="SELECT count(*) FROM concert WHERE year = 30")
    gaps = _row(q, [right, trap, other], "values stated - best of its skeleton")
    assert gaps[0] == 0.0 and gaps[1] < 0.0
    assert gaps[2] == 0.0  # another structure stating the value does not demote the first two


def test_skeleton_support_counts_other_answers_of_the_same_structure():
    cands = [Cand(dense=0.80, sql="SELECT a FROM t WHERE b = 1"),
             Cand(dense=0.79, sql="SELECT a FROM t WHERE b = 2"),
             Cand(dense=0.78, sql="SELECT count(*) FROM u")]
    support = _row("q", cands, "skeleton support")
    assert support[0] > 0 and support[1] > 0 and support[2] == 0


LAST = "last full sentence overlap - overlap"


def test_a_quoted_earlier_question_weighs_less_than_the_asked_one():
    """An agent passing a conversation on quotes the earlier question first: the overlap
    with the last full sentence is evidence of its own (zero for a one-sentence question)."""
    earlier = Cand(dense=0.8, sql="SELECT count(*) FROM singer", question="How many singers?")
    asked = Cand(dense=0.8, sql="SELECT avg(age) FROM singer",
                 question="What is the average age of the singers?")
    for q in ("Earlier I asked: How many singers? Now: what is the average age of the singers?",
              "Earlier I asked: How many singers? Now: the average age of the singers."):
        gain = _row(q, [earlier, asked], LAST)
        assert gain[1] > gain[0], q
    assert _row("What is the average age of the singers?", [earlier, asked], LAST) == [0.0, 0.0]
    assert model.last_full_sentence("Prices above 3.5?") == "Prices above 3.5?"
    assert model.last_full_sentence("先问了：有多少歌手？现在：平均年龄是多少？") == "现在：平均年龄是多少"


def test_notes_after_a_question_are_not_the_question():
    """A question followed by notes that end with `;` or with nothing (BIRD's "X refers to
    Y"): the question is the last full sentence, in any script; without one, the last."""
    asked = Cand(dense=0.8, sql="SELECT avg(attribute_value) FROM hero_attribute",
                 question="Calculate the average attribute value of all superheroes.")
    other = Cand(dense=0.8, sql="SELECT max(attribute_value) FROM hero_attribute",
                 question="What does attribute value refer to?")
    q = ("Calculate the average attribute value of all superheroes. average attribute "
         "value refers to AVG(attribute_value); superheroes refers to hero_attribute")
    assert model.last_full_sentence(q) == "Calculate the average attribute value of all superheroes"
    gain = _row(q, [asked, other], LAST)
    assert gain[0] > gain[1]
    assert model.last_full_sentence("有多少歌手？歌手指 singer 表；") == "有多少歌手"
    assert model.last_full_sentence("first part; second part") == " second part"
    assert model.last_full_sentence("How many? Show them.\nnotes here") == " Show them"


def test_twins_share_their_best_last_sentence_gain():
    """Two phrasings of one SQL: the pair's gain is the best of its phrasings' own gains."""
    sql = "SELECT avg(age) FROM singer"
    near = Cand(dense=0.8, sql=sql, question="the average age of the singers")
    far = Cand(dense=0.8, sql=sql, question="How many singers? the average age")
    q = "Earlier I asked: How many singers? Now: the average age of the singers."
    gains = _row(q, [near, far], LAST)
    assert gains[0] == gains[1] > 0


# -- weights ----------------------------------------------------------------------------

def test_shipped_weights_match_the_code():
    weights = model.load()
    assert weights.models["learned"].features == model.FEATURES
    assert weights.models["draft"].features == model.DRAFT_FEATURES
    assert len(weights.fingerprint) == 64
    assert weights.meta.get("split") == "tuning"


def test_weights_naming_other_features_are_refused():
    data = json.loads(resources.files("wrenmem.recall").joinpath("weights.json")
                      .read_text("utf-8"))
    data["models"]["learned"]["features"] = [*data["models"]["learned"]["features"][:-1],
                                             "something else"]
    with pytest.raises(ValueError, match="features"):
        model.parse_weights(data)
    data["version"] = 99
    with pytest.raises(ValueError, match="version"):
        model.parse_weights(data)


@pytest.mark.parametrize("fusion", model.FUSIONS)
def test_every_fusion_scores_in_unit_interval_and_prefers_strong_evidence(fusion):
    strong = Cand(dense=0.95, lexical=20.0, coverage=1.0, structure=20.0,
                  sql="SELECT avg(age) FROM singer", question="average singer age")
    weak = Cand(dense=0.20, lexical=1.0, coverage=0.1, structure=1.0,
                sql="SELECT name FROM stadium", question="stadium names")
    scores = model.score("What is the average age of singers?", [strong, weak], fusion=fusion)
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores[0] > scores[1]


def test_unknown_fusion_is_refused():
    with pytest.raises(ValueError, match="fusion"):
        model.score("q", [Cand(dense=0.5, sql="SELECT 1")], fusion="magic")


def test_a_draft_brings_the_pair_of_its_structure_forward():
    near = Cand(dense=0.70, lexical=5.0, coverage=0.5, structure=5.0,
                sql="SELECT name FROM singer WHERE age > 30")
    far = replace(near, dense=0.72, sql="SELECT count(*) FROM singer GROUP BY country")
    q = "singers older than 50"
    draft = "SELECT name FROM singer WHERE age > 50"
    without = model.score(q, [near, far])
    with_draft = model.score(q, [near, far], draft_sql=draft)
    assert with_draft[0] - with_draft[1] > without[0] - without[1]
    assert with_draft[0] > with_draft[1]


def test_when_the_embedder_cannot_read_the_question_keywords_count_more():
    by_cosine = Cand(dense=0.80, lexical=4.0, coverage=0.4, structure=4.0,
                     sql="SELECT name FROM singer WHERE age > 30", question="ca sĩ tuổi")
    by_words = replace(by_cosine, dense=0.70, lexical=12.0,
                       sql="SELECT count(*) FROM singer GROUP BY country")
    q = "Có bao nhiêu ca sĩ ở mỗi quốc gia?"
    read = model.score(q, [by_cosine, by_words])
    unread = model.score(q, [by_cosine, by_words], unknown=0.2)
    assert unread[1] - unread[0] > read[1] - read[0]
    assert model.features(q, [by_cosine, by_words], 0.2) != model.features(q, [by_cosine,
                                                                               by_words])
    # past the largest share it was fitted on, the model is not extrapolated
    top = model.load().meta["unknown_max"]
    assert 0.1 < top < 1.0
    assert model.score(q, [by_cosine, by_words], unknown=1.0) == model.score(
        q, [by_cosine, by_words], unknown=top)
    assert model.score(q, [by_cosine, by_words], unknown=top / 2) != model.score(
        q, [by_cosine, by_words], unknown=top)


def test_no_candidates_no_scores():
    assert model.score("q", []) == []
    assert model.features("q", []) == []


def test_shape_cache_round_trip_and_damage(tmp_path):
    path = tmp_path / ".wrenmem" / "recall-shapes.bin"
    sql = "SELECT name FROM t WHERE id = 7 -- shape cache test"
    cache = sqlshape.ShapeCache(path)
    cache.save()
    assert not path.exists()  # nothing computed since: nothing written
    first = sqlshape.shape(sql)
    cache.save()
    assert path.exists()
    sqlshape._KNOWN.clear()
    sqlshape.ShapeCache(path).load()
    assert sqlshape._KNOWN[(sql, "")] == first
    assert sqlshape.shape(sql) == first
    # a damaged file is ignored: the shapes are computed again, the same
    path.write_bytes(b"not a cache")
    sqlshape._KNOWN.clear()
    sqlshape.ShapeCache(path).load()
    assert (sql, "") not in sqlshape._KNOWN
    assert sqlshape.shape(sql) == first
