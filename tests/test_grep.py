from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import settle, write_pair
from wrenmem.pairs import catalog
from wrenmem.recall.bm25f import GrepBackend
from wrenmem.recall.hits import Filters
from wrenmem.settings import load_settings
from wrenmem.textsearch import tokenize


def top(project: Path, query: str, k: int = 3, **filters: object) -> list[str]:
    backend = GrepBackend(load_settings(project))
    return [h.path.rsplit("/", 1)[1] for h in backend.search([query], k, Filters(**filters))[0]]


@pytest.fixture
def shop(project: Path) -> Path:
    write_pair(project, "rev.md", "Total revenue by month", "SELECT month, SUM(amount) FROM orders GROUP BY month", datasource="pg", tags="[revenue]")
    write_pair(project, "cust.md", "Number of customers", "SELECT COUNT(*) FROM customers", datasource="pg")
    write_pair(project, "zh-orders.md", "每个客户的订单数量是多少？", "SELECT customer_id, COUNT(*) FROM orders GROUP BY customer_id", datasource="mysql")
    write_pair(project, "zh-stores.md", "各门店的销售额", "SELECT store_id, SUM(amount) FROM orders GROUP BY store_id")
    write_pair(project, "ja.md", "月ごとの売上はいくらですか", "SELECT month, SUM(amount) FROM sales GROUP BY month")
    return project


def test_english_paraphrase(shop: Path) -> None:
    assert top(shop, "monthly revenue")[0] == "rev.md"
    assert top(shop, "how many customers are there")[0] == "cust.md"


def test_chinese_and_japanese_without_spaces(shop: Path) -> None:
    assert top(shop, "客户订单数")[0] == "zh-orders.md"
    assert top(shop, "门店销售额是多少")[0] == "zh-stores.md"
    assert top(shop, "月ごとの売上")[0] == "ja.md"


def test_sql_keywords_do_not_match(shop: Path) -> None:
    assert top(shop, "select from group by") == []


def test_question_weighs_more_than_sql(project: Path) -> None:
    write_pair(project, "a.md", "List every customer", "SELECT * FROM orders")
    write_pair(project, "b.md", "List every order", "SELECT * FROM customers")
    assert top(project, "customer")[0] == "a.md"


def test_filters(shop: Path) -> None:
    assert top(shop, "orders customers revenue", k=10, datasource="mysql") == ["zh-orders.md"]
    assert top(shop, "revenue", tags=("revenue",)) == ["rev.md"]
    assert top(shop, "revenue", tags=("nope",)) == []


def test_ties_are_broken_by_path(project: Path) -> None:
    for n, name in enumerate(["c.md", "a.md", "b.md"]):
        write_pair(project, name, "Same question", f"SELECT {n}")
    assert top(project, "same question") == ["a.md", "b.md", "c.md"]


def test_several_questions_in_one_call(shop: Path) -> None:
    backend = GrepBackend(load_settings(shop))
    results = backend.search(["monthly revenue", "客户订单数"], 1, Filters())
    assert [r[0].path.rsplit("/", 1)[1] for r in results] == ["rev.md", "zh-orders.md"]


def test_repeat_queries_read_no_files(shop: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    past = os.path.getmtime(shop / "knowledge/sql/rev.md") - 60
    for p in (shop / "knowledge/sql").iterdir():
        os.utime(p, (past, past))
    settle(monkeypatch)  # the change times too
    top(shop, "revenue")
    monkeypatch.setattr(catalog, "_read_entry", lambda *a: pytest.fail("re-read a file"))
    assert top(shop, "revenue")[0] == "rev.md"


def test_tokenizer() -> None:
    assert tokenize("What is the Total Revenue?") == ["total", "revenue"]
    assert "客户" in tokenize("每个客户的订单") and "订单" in tokenize("每个客户的订单")
    assert tokenize("SELECT customer_id FROM orders", sql=True) == ["customer_id", "customer", "id", "order"]
    assert tokenize("ＡＢＣ") == ["abc"]  # NFKC folds full-width letters
