"""The fusion of keyword and dense evidence, and the [0, 1] score scale (pure functions)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wrenmem.recall.fusion import (
    FEATURES,
    Signals,
    asked_operations,
    confident_dense,
    dense_score,
    features,
    fuse,
    is_cjk,
    lexical_score,
    literal_agreement,
    polarity,
    same_question,
    sql_operations,
    sql_polarity,
    sql_values,
    twins,
)


def old_fusion(candidates: list[Signals]) -> list[float]:
    """The fusion this replaced: cosine + 1.5 (1 - best cosine) sqrt(coverage) bm25/best."""
    best_cos = max(c.dense or 0.0 for c in candidates)
    best_lex = max(c.lexical or 0.0 for c in candidates)
    return [(c.dense or 0.0) + 1.5 * (1 - best_cos) * c.coverage ** 0.5
            * (c.lexical or 0.0) / best_lex for c in candidates]


def test_a_stored_near_duplicate_does_not_switch_keyword_evidence_off() -> None:
    question = "How many heads of the departments are older than 56?"
    right = Signals(0.80, 9.0, 1.0, "SELECT count(*) FROM head WHERE age > 56")
    other = Signals(0.83, None, 0.2, "SELECT name FROM department")
    near_duplicate = Signals(0.99, 8.5, 0.9, "SELECT count(*) FROM head WHERE age > 60")
    candidates = [right, other, near_duplicate]
    # The bug: the near-duplicate's cosine, near 1, zeroed the keyword weight for everyone,
    # so the pair without a shared word outranked the one that shares all of them.
    old = old_fusion(candidates)
    assert old[1] > old[0]
    scores = fuse(question, candidates)
    assert scores[0] > scores[1]  # keywords still decide between the others
    assert scores[0] > scores[2]  # and the pair whose value is asked beats the trap


def test_without_a_near_duplicate_the_confident_dense_answer_wins() -> None:
    # A question rewritten with synonyms: few shared words, yet its original is far closer
    # in meaning than anything else.
    question = "What are the describing details for the airplanes?"
    original = Signals(0.88, None, 0.1, "SELECT Description FROM aircraft")
    wordy = Signals(0.62, 7.0, 1.0, "SELECT name, distance FROM Aircraft")
    scores = fuse(question, [original, wordy])
    assert scores[0] > scores[1]


def test_a_clear_dense_lead_wins_below_a_near_duplicate_cosine() -> None:
    # Every schema word replaced by a synonym: the original shares no keyword and its
    # cosine is modest, but it leads the next question by far; the keyword-rich pair of
    # another database is another question.
    question = "Show all hypersensitivities and their categories."
    original = Signals(0.62, None, 0.0, "SELECT allergy, allergytype FROM Allergy_type",
                       "Show all allergies and their types.", "allergy_1")
    wordy = Signals(0.45, 9.0, 0.5, "SELECT T1.product_category_description FROM "
                    "ref_product_categories AS T1", "Find the category descriptions of all "
                    "the products.", "products")
    other = Signals(0.50, None, 0.0, "SELECT name FROM allergy_1_people", "Who has "
                    "allergies?", "allergy_1")
    candidates = [original, wordy, other]
    assert fuse(question, candidates, confident=False)[1] > fuse(question, candidates,
                                                                  confident=False)[0]
    assert confident_dense(question, candidates, features(question, candidates)) == 0
    scores = fuse(question, candidates)
    assert scores[0] > scores[1]


def test_an_ordering_the_stored_question_states_too_is_no_contradiction() -> None:
    # The stored pair's question says "largest" and its SQL sorts ascending (a fault of
    # the stored pair, not a sign of another question): the dense model may still be sure.
    # A stored question stating the opposite ordering is a trap, and the rule stays off.
    question = "Find the name of the goods whose total order amount is the largest."
    sql = ("SELECT t2.name FROM order_items AS t1 JOIN products AS t2 ON t1.pid = t2.pid "
           "GROUP BY t1.pid ORDER BY sum(t1.quantity) LIMIT 1")
    rival = Signals(0.69, 9.0, 0.8, "SELECT name FROM customers ORDER BY spent DESC "
                    "LIMIT 1", "Find the customer with the largest amount of goods.")
    for stored, sure in (("Find the name of the product whose total order quantity is "
                          "the largest.", True),
                         ("Find the name of the product whose total order quantity is "
                          "the smallest.", False)):
        candidates = [Signals(0.92, 2.0, 0.4, sql, stored), rival]
        rows = features(question, candidates)
        assert rows[0][FEATURES.index("ordering agrees")] == -1
        assert confident_dense(question, candidates, rows) == (0 if sure else None), stored


def test_a_contradicted_ordering_loses_to_the_agreeing_pair() -> None:
    question = "Which airport has the largest number of passengers?"
    largest = Signals(0.84, 8.0, 1.0, "SELECT name FROM airport ORDER BY passengers DESC LIMIT 1")
    smallest = Signals(0.93, 8.2, 1.0, "SELECT name FROM airport ORDER BY passengers ASC LIMIT 1")
    scores = fuse(question, [largest, smallest])
    assert scores[0] > scores[1]


def test_chinese_question_finds_the_english_pair_on_meaning() -> None:
    question = "每个部门有多少员工？"
    english = Signals(0.78, None, 0.0, "SELECT dept, count(*) FROM employees GROUP BY dept")
    number_only = Signals(0.30, 5.0, 0.1, "SELECT * FROM t WHERE x = 1")
    assert is_cjk(question)
    scores = fuse(question, [english, number_only])
    assert scores[0] > scores[1]


candidate = st.builds(
    Signals,
    dense=st.one_of(st.none(), st.floats(-1, 1)),
    lexical=st.one_of(st.none(), st.floats(0, 50)),
    coverage=st.floats(0, 1),
    sql=st.sampled_from(["SELECT 1", "SELECT a FROM t WHERE x > 3 ORDER BY a DESC",
                         "SELECT min(a) FROM t WHERE b = 'x'", ""]),
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # timing: bench/
@given(st.text(max_size=40), st.lists(candidate, max_size=8))
def test_every_fused_score_is_in_0_1(question: str, candidates: list[Signals]) -> None:
    scores = fuse(question, candidates)
    assert len(scores) == len(candidates)
    assert all(0.0 <= s <= 1.0 for s in scores)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # timing: bench/
@given(st.lists(st.floats(-1, 1), min_size=1, max_size=10))
def test_dense_calibration_keeps_the_order_and_the_scale(cosines: list[float]) -> None:
    scores = dense_score(cosines)
    assert all(0.0 <= s <= 1.0 for s in scores)
    order = sorted(range(len(cosines)), key=lambda i: -cosines[i])
    assert all(scores[a] >= scores[b] for a, b in zip(order, order[1:], strict=False))


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # timing: bench/
@given(st.lists(st.floats(0, 40), min_size=1, max_size=10), st.floats(0, 60))
def test_lexical_calibration_keeps_the_order_and_the_scale(bm25: list[float],
                                                           possible: float) -> None:
    scores = lexical_score(bm25, possible)
    assert all(0.0 <= s <= 1.0 for s in scores)
    order = sorted(range(len(bm25)), key=lambda i: -bm25[i])
    assert all(scores[a] >= scores[b] for a, b in zip(order, order[1:], strict=False))


def test_sql_values_and_their_agreement_with_the_question() -> None:
    sql = "SELECT * FROM t WHERE a = 'London Heathrow' AND b > 30 AND c LIKE '%x%' LIMIT 5"
    assert sql_values(sql) == ("london heathrow", "x", "30")
    assert literal_agreement("flights from London Heathrow over 30 x", sql) == (1.0, 0.0)
    assert literal_agreement("flights over 300", "SELECT a WHERE b > 30") == (0.0, 1.0)
    assert literal_agreement("哪些城市30岁以下的员工", "SELECT city WHERE age < 30") == (1.0, 0.0)
    assert literal_agreement("account name 900.", 'SELECT a WHERE n = "900"') == (1.0, 0.0)
    assert literal_agreement("anything", "SELECT count(*) FROM t") == (0.0, 0.0)
    # a string value is a whole word of the question (a Chinese character may touch it)
    letter = "SELECT name FROM t WHERE name LIKE '%t%'"
    assert literal_agreement("names that contain the letter 't'", letter) == (1.0, 0.0)
    assert literal_agreement("Show all allergies and their types.", letter) == (0.0, 1.0)
    assert literal_agreement("名字是john的歌手", "SELECT a FROM t WHERE n = 'John'") == (1.0, 0.0)


def test_a_functions_literal_arguments_are_no_values() -> None:
    # How to compute ('month', 2 decimals, a default), not what to compare with: "revenue per
    # month" must not count as asking for the value 'month' (nor a question without "2" as
    # contradicting ROUND(…, 2)); lists and comparisons keep theirs, inside a call too.
    sql = ("SELECT DATE_TRUNC('month', o.ordered_at) AS m, ROUND(SUM(o.amount), 2), "
           "COALESCE(MAX(c.name), 'none') FROM o JOIN c ON o.c = c.id "
           "WHERE o.status NOT IN ('cancelled', 'refunded') AND o.ordered_at >= '2024-01-01' "
           "AND STRFTIME('%Y', o.day) = '2024' GROUP BY 1")
    assert sql_values(sql) == ("cancelled", "refunded", "2024-01-01", "2024", "1")
    assert sql_values("SELECT count(CASE WHEN s = 'x' THEN 1 END), SUBSTR(n, 1, 1) FROM t "
                      "WHERE (a = 'y' OR b > 3)") == ("x", "y", "1", "3")
    assert literal_agreement("revenue per month", "SELECT DATE_TRUNC('month', d) FROM o") == (
        0.0, 0.0)


def test_orderings() -> None:
    assert polarity("the oldest singer") == 1 and polarity("the youngest singer") == -1
    assert polarity("年龄最大的歌手") == 1 and polarity("almost nothing") == 0
    assert sql_polarity("SELECT max(a) FROM t") == 1
    assert sql_polarity("SELECT a FROM t ORDER BY a") == -1
    assert sql_polarity("SELECT a FROM t WHERE a = '>'") == 0


def test_the_question_itself_stored_scores_high_whatever_the_backend_evidence() -> None:
    question = "2024年每个月的收入是多少？"
    stored = Signals(1.0, 9.0, 1.0, "SELECT 1 WHERE d >= DATE '2024-01-01'", "2024年每个月的收入是多少?")
    other = Signals(0.5, 2.0, 0.3, "SELECT 2", "别的问题")
    scores = fuse(question, [stored, other])
    assert scores[0] >= 0.95 > scores[1]
    assert same_question("How many  orders?", "how many orders") and not same_question("", "")
    assert not same_question("older than 56", "older than 113")


def test_twins_share_a_rank_and_neither_takes_the_others_lead() -> None:
    # Two stored questions with the same SQL on the same datasource are one answer: the
    # second is not "rank 2, no lead" behind its own twin.
    question = "How many singers do we have?"
    first = Signals(0.90, 9.0, 1.0, "SELECT count(*) FROM singer", "", "concerts")
    twin = Signals(0.86, 8.0, 1.0, "select  COUNT(*) from singer;", "", "concerts")
    other_db = Signals(0.85, 8.0, 1.0, "SELECT count(*) FROM singer", "", "music")
    other = Signals(0.70, 4.0, 0.5, "SELECT name FROM singer", "", "concerts")
    assert twins([first, twin, other_db, other]) == [0, 0, 1, 2]
    rows = features(question, [first, twin, other_db, other])
    rank, lead = FEATURES.index("1 / dense rank"), FEATURES.index("dense lead")
    assert [r[rank] for r in rows] == [1.0, 1.0, 0.5, 1 / 3]
    assert rows[0][lead] == pytest.approx(0.05) and rows[1][lead] == pytest.approx(0.01)
    assert rows[2][lead] == rows[3][lead] == 0.0
    # the same evidence with another SQL is a rival of the first pair, and scores lower
    rival = Signals(0.86, 8.0, 1.0, "SELECT count(*) FROM singer WHERE age > 30", "",
                    "concerts")
    assert fuse(question, [first, twin, other])[1] > fuse(question, [first, rival, other])[1]


@pytest.mark.parametrize(("question", "right", "wrong"), [
    ("歌手的平均年龄是多少？", "SELECT avg(age) FROM singer", "SELECT max(age) FROM singer"),
    ("What is the average age of the singers?", "SELECT avg(age) FROM singer",
     "SELECT max(age) FROM singer"),
    ("每个国家有多少歌手？", "SELECT country, count(*) FROM singer GROUP BY country",
     "SELECT count(*) FROM singer"),
    ("How many different countries do the singers come from?",
     "SELECT count(DISTINCT country) FROM singer", "SELECT count(*) FROM singer"),
    ("没有举办音乐会的体育场叫什么名字？",
     "SELECT name FROM stadium WHERE id NOT IN (SELECT stadium_id FROM concert)",
     "SELECT T2.name FROM concert AS T1 JOIN stadium AS T2 ON T1.stadium_id = T2.id"),
])
def test_the_pair_performing_the_operation_the_question_states_wins_a_tie(
        question: str, right: str, wrong: str) -> None:
    # Same database, same cosine, same keyword evidence: only the SQL's operation tells
    # them apart (cross-lingual questions share no keyword with the English pair).
    for lexical in (None, 4.0):
        candidates = [Signals(0.7, lexical, 0.2, wrong), Signals(0.7, lexical, 0.2, right)]
        scores = fuse(question, candidates)
        assert scores[1] > scores[0], (question, lexical)


def test_operations_asked_and_performed() -> None:
    assert asked_operations("歌手的平均年龄是多少？") == {"average"}  # 是多少: "what is"
    assert asked_operations("每个国家有多少个歌手？") == {"group", "count"}
    assert asked_operations("不同国家的数量") == {"distinct", "count"}  # 不同 is no "not"
    assert asked_operations("Which stadiums had no concert?") == {"negation"}
    assert asked_operations("the names and ages") == frozenset()  # "and" is no intersect
    assert asked_operations("notable singers in Norway") == frozenset()  # whole words
    assert asked_operations("the total amount of the orders") == {"sum"}  # no count
    assert sql_operations("SELECT a FROM t WHERE b = 'not avg(x) group by'") == frozenset()
    assert sql_operations("SELECT a, count(DISTINCT b) FROM t GROUP BY a ORDER BY 2 DESC "
                          "LIMIT 1") == {"count", "distinct", "group", "extreme"}
    assert sql_operations("SELECT a FROM t EXCEPT SELECT a FROM u") == {"negation"}
