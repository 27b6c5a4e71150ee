"""The shown score: the chance the hit answers the question, "nothing stored" included.

``wrenmem.recall.answerable`` maps the ranking's score, after ranking, with evidence the
ranking weights do not set (the question's words the best hit and the project lack). The
example ships questions nothing in it answers (``knowledge/eval.json``, ``"expected": null``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import short_racy_window
from wrenmem import Memory
from wrenmem.recall import answerable
from wrenmem.recall.hits import Hit

EMPLOYEES = "How many employees do we have?"


def _hit(question: str, sql: str, score: float, also: tuple[str, ...] = ()) -> Hit:
    return Hit(question, sql, f"knowledge/sql/{abs(hash(question))}.md", score, "user",
               also=also)


def _no_answer_questions(root: Path) -> list[str]:
    items = json.loads((root / "knowledge" / "eval.json").read_text(encoding="utf-8"))
    return [i["question"] for i in items if i["expected"] is None]


# -- the map itself ------------------------------------------------------------------------

def test_the_map_keeps_the_rankings_order_and_lowers_a_question_the_project_lacks() -> None:
    shop = frozenset(answerable.pair_terms(
        "How many repeat customers do we have?", (),
        "SELECT COUNT(*) FROM customers WHERE orders > 1"))
    hits = [_hit("How many repeat customers do we have?",
                 "SELECT COUNT(*) FROM customers WHERE orders > 1", 0.89),
            _hit("Which orders are pending?", "SELECT id FROM orders", 0.2),
            _hit("Revenue by month", "SELECT month, SUM(amount) FROM orders", 0.05)]
    vocabulary = shop | answerable.pair_terms("Which orders are pending?", (),
                                              "SELECT id FROM orders")
    known = answerable.calibrate("How many repeat customers do we have?", hits, vocabulary)
    unknown = answerable.calibrate(EMPLOYEES, hits, vocabulary)
    for shown in (known, unknown):
        assert [h.path for h in shown] == [h.path for h in hits]  # the ranking's order
        assert [h.score for h in shown] == sorted((h.score for h in shown), reverse=True)
    # the same ranking score: a question whose noun no stored pair has scores far lower
    assert unknown[0].score < 0.5 < known[0].score
    assert answerable.calibrate(EMPLOYEES, [], vocabulary) == ()


def test_a_chinese_question_is_covered_by_its_english_senses() -> None:
    from wrenmem.recall.glossary import Glossary

    glossary = Glossary({"客户": "customer client", "数量": "number amount quantity"})
    hit = _hit("How many customers are there?", "SELECT COUNT(*) FROM customers", 0.8)
    vocabulary = answerable.hit_terms(hit)
    asked = "客户数量"
    without = answerable.question_features(asked, [hit], vocabulary)
    with_senses = answerable.question_features(asked, [hit], vocabulary, lambda: glossary)
    assert without[0] == 1.0  # no Chinese term is in an English pair
    assert with_senses[0] < without[0] and with_senses[1] < without[1]


def test_a_word_unlike_every_project_word_counts_an_inflection_or_a_typo_does_not() -> None:
    hit = _hit("How many repeat customers do we have?",
               "SELECT COUNT(*) FROM customers WHERE orders > 1", 0.9)
    vocabulary = answerable.hit_terms(hit)
    unlike = answerable.FEATURES.index("unknown to the project, unlike its words")
    unknown = answerable.FEATURES.index("unknown to the project") - 1  # (after the rank)
    employees = answerable.question_features(EMPLOYEES, [hit], vocabulary)
    typo = answerable.question_features("How many repeat custmers do we have?", [hit],
                                        vocabulary)
    assert employees[unlike - 1] == 0.5  # "employee" of {employee, have}: nothing like it
    assert typo[unknown] > 0 and typo[unlike - 1] == 0.0  # "custmer" begins like "customer"


def test_a_question_naming_nothing_the_hits_sql_uses_is_marked() -> None:
    from wrenmem.recall.glossary import Glossary

    hits = [_hit("How many repeat customers do we have?",
                 "SELECT COUNT(*) FROM customers WHERE orders > 1", 0.9),
            _hit("Which orders are pending?", "SELECT id FROM orders WHERE status = 'p'", 0.1)]
    vocabulary = frozenset().union(*(answerable.hit_terms(h) for h in hits))
    nothing = answerable.FEATURES.index("names nothing the hits' SQL uses") - 1
    assert answerable.question_features(EMPLOYEES, hits, vocabulary)[nothing] == 1.0
    # a name of any hit's SQL counts, not only the best one's
    assert answerable.question_features("How many orders do we have?", hits,
                                        vocabulary)[nothing] == 0.0
    # a Chinese question names a table through its words' English senses
    glossary = Glossary({"订单": "order purchase"})
    assert answerable.question_features("订单有多少", hits, vocabulary,
                                        lambda: glossary)[nothing] == 0.0
    assert answerable.question_features("订单有多少", hits, vocabulary)[nothing] == 1.0


def test_the_constants_are_checked_against_the_features_this_code_computes() -> None:
    shipped = json.loads((Path(answerable.__file__).parent / answerable.CONSTANTS_FILE)
                         .read_text(encoding="utf-8"))
    calibration = answerable.parse(shipped)
    assert len(calibration.weights) == len(answerable.FEATURES)
    assert shipped["meta"]["check"]["no_answer_under_min_score"] >= 0.95
    assert shipped["meta"]["check"]["answered_kept"] >= 0.9
    with pytest.raises(ValueError, match="features"):
        answerable.parse({**shipped, "features": shipped["features"][:-1]})
    with pytest.raises(ValueError, match="version"):
        answerable.parse({**shipped, "version": 0})
    backwards = answerable.Calibration((-1.0, *calibration.weights[1:]), 0.0, {})
    with pytest.raises(ValueError, match="order"):
        answerable.calibrate(EMPLOYEES, [_hit("q", "SELECT 1", 0.5)], frozenset(), None,
                             backwards)


def test_the_project_vocabulary_follows_the_pair_files(
        example_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wrenmem.fs import statedir
    from wrenmem.settings import load_settings

    time.sleep(short_racy_window(monkeypatch))  # the copied files old enough to vouch for
    settings = load_settings(example_project)
    saved = settings.state_dir / statedir.VOCABULARY
    before = answerable.project_vocabulary(settings)
    assert "employee" not in before and "customer" in before
    assert saved.is_file()
    assert answerable.project_vocabulary(settings) == before  # read back, the same
    pair = example_project / "knowledge" / "sql" / "staff.md"
    pair.write_text("---\nnl: How many employees do we have?\n---\n\n```sql\n"
                    "SELECT COUNT(*) FROM staff\n```\n", encoding="utf-8")
    after = answerable.project_vocabulary(settings)  # (just saved: read from the files)
    assert {"employee", "staff"} <= after and before < after
    time.sleep(short_racy_window(monkeypatch))
    assert answerable.project_vocabulary(settings) == after
    pair.unlink()
    assert answerable.project_vocabulary(settings) == before


# -- the product, with the real model ------------------------------------------------------

@pytest.mark.slow
def test_questions_nothing_stored_answers_score_below_half(indexed_example: Path) -> None:
    memory = Memory(indexed_example)
    questions = _no_answer_questions(indexed_example)
    assert EMPLOYEES in questions and len(questions) == 16
    results = memory.recall_many(questions, k=3)
    tops = {r.query: r.hits[0].score for r in results}
    assert all(score < 0.5 for score in tops.values()), tops
    # before the calibration it scored 0.886 (issue 40); the aim is 0.3: 0.433 with round
    # 16's map, 0.302 with the evidence of round 17 (a word unlike the project's, no name)
    assert tops[EMPLOYEES] < 0.35
    # --min-score 0.5 now says "nothing stored answers this"
    assert all(not r.hits for r in memory.recall_many(questions, k=3, min_score=0.5))


@pytest.mark.slow
def test_the_employees_question_is_lowered_by_the_words_and_names_the_project_lacks(
        indexed_example: Path) -> None:
    """The real index and model: the evidence of round 17 (an asked word unlike any word of
    the project; no name any hit's SQL uses) is what brings the employees question down;
    without it (the same map, both set to what a known question has) it scores higher."""
    memory = Memory(indexed_example)
    [result] = memory.recall_many([EMPLOYEES], k=5)
    [raw] = memory.recaller.backend("hybrid").search([EMPLOYEES], 5, _filters())
    vocabulary = memory.recaller.vocabulary()
    evidence = answerable.question_features(EMPLOYEES, raw, vocabulary)
    unlike = answerable.FEATURES.index("unknown to the project, unlike its words") - 1
    nothing = answerable.FEATURES.index("names nothing the hits' SQL uses") - 1
    assert evidence[unlike] > 0 and evidence[nothing] == 1.0
    calibration = answerable.load()
    shown = answerable.shown(calibration, raw[0].score, evidence)
    assert result.hits[0].score == pytest.approx(shown, abs=1e-6)
    without = list(evidence)
    without[unlike] = without[nothing] = 0.0
    assert answerable.shown(calibration, raw[0].score, without) > shown + 0.1
    # a stored question's own words and names: neither is set
    known = answerable.question_features("How many repeat customers do we have?", raw,
                                         vocabulary)
    assert known[unlike] == 0.0 and known[nothing] == 0.0


@pytest.mark.slow
def test_a_stored_twin_still_scores_high(indexed_example: Path) -> None:
    memory = Memory(indexed_example)
    [twin, english_of_chinese, reworded] = memory.recall_many(
        ["How many repeat customers do we have?", "每个门店的退款金额",
         "monthly rate of cancelled orders"], k=3)
    assert twin.hits[0].question == "How many repeat customers do we have?"
    assert twin.hits[0].score > 0.9
    assert english_of_chinese.hits[0].score > 0.9
    assert reworded.hits[0].score > 0.8
    # the order is the ranking's: the hybrid backend's own hits, rescored
    raw = memory.recaller.backend("hybrid").search(["How many repeat customers do we have?"],
                                                   3, _filters())[0]
    assert [h.path for h in twin.hits] == [h.path for h in raw]


def _filters():  # noqa: ANN202
    from wrenmem.recall.hits import Filters

    return Filters()


@pytest.mark.slow
def test_eval_reports_the_no_answer_share_and_the_answered_share_kept(
        indexed_example: Path, cli) -> None:
    report = Memory(indexed_example).evaluate(backends=("hybrid",), fusions=("learned",))
    none = report["runs"]["hybrid:learned"]["none"]
    assert none["n"] == 16 and none["under_min_score"] == 1.0
    low, high = none["under_min_score_interval"]
    assert 0.8 < low < 1.0 == high
    # the right first answers (answered before and gold) that score 0.5 or more: 18 of 23
    # since the SQL-evidence terms of round 16 (19 before: one at 0.522 went to 0.397)
    assert none["answered_right"] >= 20 and none["answered_kept"] >= 0.78
    result = cli("eval", "--backends", "hybrid", "--fusions", "learned", root=indexed_example)
    assert result.exit_code == 0, result.output
    [line] = [ln for ln in result.output.splitlines() if " none " in ln]
    assert "1.000 (" in line and "score below 0.5" in line
    assert "right first (answered before, gold):" in line


def test_grep_scores_are_left_as_they_were(example_project: Path) -> None:
    """The map was fitted on the hybrid backend's scores: grep's own calibration stands."""
    memory = Memory(example_project, backend="grep")
    [result] = memory.recall_many([EMPLOYEES], k=2)
    backend = memory.recaller.backend("grep")
    [raw] = backend.search([EMPLOYEES], 2, _filters())
    assert result.hits and [h.score for h in result.hits] == [h.score for h in raw]


@pytest.mark.slow
def test_without_pair_files_here_the_scores_are_the_rankings(indexed_example: Path) -> None:
    """A recall that cannot read the pair files (their folder gone, the index kept) still
    answers: the ranking's scores are shown, not scores against an empty vocabulary."""
    import shutil

    shutil.rmtree(indexed_example / "knowledge")
    memory = Memory(indexed_example)
    [result] = memory.recall_many(["How many repeat customers do we have?"], k=2, sync=False)
    [raw] = memory.recaller.backend("hybrid").search(
        ["How many repeat customers do we have?"], 2, _filters())
    assert result.hits and [h.score for h in result.hits] == [h.score for h in raw]
