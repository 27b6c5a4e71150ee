from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from wrenmem.knowledge.slug import MAX_SLUG_BYTES, slugify


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


@given(st.text(min_size=1, max_size=40))
@example("\u2260")  # "≠": NFD splits it in two, and no letter is left to name the file
def test_nfc_and_nfd_spellings_get_one_name(question: str) -> None:
    import unicodedata

    from wrenmem.pairs.text import question_key

    nfc, nfd = (unicodedata.normalize(form, question) for form in ("NFC", "NFD"))
    assert slugify(nfd) == slugify(nfc)
    assert question_key(nfd) == question_key(nfc)
