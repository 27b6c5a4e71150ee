from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from wrenmem.pairs.slug import MAX_SLUG_BYTES, slugify


def test_english_and_chinese() -> None:
    assert slugify("What is the total revenue?") == "what-is-the-total-revenue"
    assert slugify("每个客户的订单数量是多少？") == "每个客户的订单数量是多少"
    assert slugify("Café crème brûlée") == "café-crème-brûlée"
    assert slugify("Сколько заказов?") == "сколько-заказов"


def test_paths_cannot_escape_or_hide() -> None:
    assert slugify("../../etc/passwd") == "etc-passwd"
    assert slugify("..") .startswith("query-")
    assert slugify(".hidden") == "hidden"
    assert slugify("a\\b/c") == "a-b-c"


def test_reserved_windows_names() -> None:
    assert slugify("CON") == "con-query"
    assert slugify("lpt1") == "lpt1-query"


def test_punctuation_only_gets_a_stable_distinct_name() -> None:
    assert slugify("!!!") == slugify("!!!")
    assert slugify("!!!") != slugify("???")


@given(st.text(min_size=1, max_size=300))
def test_always_safe(question: str) -> None:
    slug = slugify(question)
    assert slug
    assert len(slug.encode("utf-8")) <= MAX_SLUG_BYTES
    assert "/" not in slug and "\\" not in slug and "\x00" not in slug
    assert not slug.startswith((".", "-"))
    assert ".." not in slug
