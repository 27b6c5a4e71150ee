"""The rules every backend shares (wrenmem.recall.fusion): identical questions, scripts."""

from __future__ import annotations

from wrenmem.recall.fusion import IDENTICAL, at_least_identical, is_cjk, same_question


def test_same_question_up_to_case_width_spaces_and_punctuation():
    assert same_question("What is the total revenue?", "what is the  total revenue")
    assert same_question("ｒｅｖｅｎｕｅ", "revenue")
    assert not same_question("", "")
    assert not same_question("total revenue", "total revenues")


def test_an_identical_stored_question_scores_at_least_identical():
    assert at_least_identical(0.1, "Total revenue?", "total revenue") == IDENTICAL
    assert at_least_identical(0.99, "Total revenue?", "total revenue") == 0.99
    assert at_least_identical(0.1, "Total revenue?", "monthly revenue") == 0.1


def test_scripts():
    assert is_cjk("歌手的平均年龄是多少？")
    assert is_cjk("売上の合計は？")
    assert is_cjk("매출 합계는?")
    assert not is_cjk("What is the average age of singers?")
    assert not is_cjk("Doanh thu tháng này là bao nhiêu?")
