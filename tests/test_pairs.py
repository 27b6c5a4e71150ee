from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wrenmem.errors import PairError
from wrenmem.pairs.pairfile import Pair, decode_file, parse_pair, render_pair

CANONICAL = """---
nl: What is the total revenue across all orders?
datasource: postgres
dialect: postgres
tags: [revenue, kpi]
source: user
created_at: 2026-11-29T12:00:00Z
owner: finance
---

```sql
SELECT SUM(amount) AS total_revenue
FROM orders
```

Free-form notes for reviewers.
"""


def test_parse_canonical() -> None:
    pair = parse_pair(CANONICAL, "knowledge/sql/a.md")
    assert pair.nl == "What is the total revenue across all orders?"
    assert pair.sql == "SELECT SUM(amount) AS total_revenue\nFROM orders"
    assert pair.tags == ("revenue", "kpi")
    assert pair.datasource == "postgres" and pair.dialect == "postgres"
    assert pair.created_at == "2026-11-29T12:00:00Z"
    assert pair.notes == "Free-form notes for reviewers."
    assert pair.extra == {"owner": "finance"}
    assert pair.sql_line == 12
    assert not pair.wren_format


def test_canonical_text_renders_to_itself() -> None:
    assert render_pair(parse_pair(CANONICAL)) == CANONICAL


def test_wren_format_is_read_and_converted() -> None:
    text = "---\nnl: Dashy query\nsql: 'SELECT 1\n\n  ---\n\n  UNION ALL\n\n  SELECT 2'\nsource: user\n---\n"
    pair = parse_pair(text)
    assert pair.wren_format
    assert pair.sql == "SELECT 1\n---\nUNION ALL\nSELECT 2"
    assert pair.sql_line == 3
    again = parse_pair(render_pair(pair))
    assert again.sql == pair.sql and not again.wren_format


def test_wren_block_scalar_and_notes() -> None:
    text = "---\nnl: Revenue\nsql: |\n  SELECT SUM(amount)\n  FROM orders\ntags:\n  - revenue\n---\n\nHuman notes.\n"
    pair = parse_pair(text)
    assert pair.sql == "SELECT SUM(amount)\nFROM orders"
    assert pair.notes == "Human notes."
    assert pair.tags == ("revenue",)


def test_both_sql_forms_is_an_error_on_the_sql_key_line() -> None:
    text = "---\nnl: q\nsql: SELECT 1\n---\n\n```sql\nSELECT 2\n```\n"
    with pytest.raises(PairError) as info:
        parse_pair(text, "x.md")
    assert info.value.line == 3
    assert "twice" in info.value.reason


def test_bom_crlf_and_trailing_spaces_on_delimiters() -> None:
    raw = "\ufeff---  \r\nnl: q\r\n--- \r\n\r\n```sql\r\nSELECT 1\r\n```\r\n".encode()
    pair = parse_pair(decode_file(raw, "x.md"), "x.md")
    assert pair.nl == "q" and pair.sql == "SELECT 1"


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("---\nnl: yes\n---\n```sql\nSELECT 1\n```\n", 2, "boolean"),
        ("---\nnl: 2024\n---\n```sql\nSELECT 1\n```\n", 2, "number"),
        ("---\ndatasource: x\nnl: ''\n---\n```sql\nSELECT 1\n```\n", 3, "empty"),
        ("---\ndatasource: pg\n---\n```sql\nSELECT 1\n```\n", 1, "missing 'nl'"),
        ("---\nnl: q\n---\n\nno sql here\n", 3, "no SQL"),
        ("---\nnl: q\n---\n\n```sql\n\n```\n", 6, "SQL is empty"),
        ("---\nnl: q\ntags: [a\n---\n```sql\nSELECT 1\n```\n", 3, "not valid YAML"),
        ("---\nnl: q\ntags: {a: 1}\n---\n```sql\nSELECT 1\n```\n", 3, "'tags'"),
        ("---\nnl: q\ntags: [true]\n---\n```sql\nSELECT 1\n```\n", 3, "'tags'"),
        ("---\n- a\n- b\n---\n```sql\nSELECT 1\n```\n", 2, "mapping"),
        ("just text\n", 1, "no front matter"),
        ("---\nnl: q\n```sql\nSELECT 1\n```\n", 1, "not closed"),
        ("---\n---\n```sql\nSELECT 1\n```\n", 1, "empty"),
    ],
)
def test_bad_files_name_line_and_reason(text: str, line: int, fragment: str) -> None:
    with pytest.raises(PairError) as info:
        parse_pair(text, "k/x.md")
    assert info.value.line == line, info.value
    assert fragment in info.value.reason
    assert str(info.value).startswith(f"k/x.md:{line}: ")


@pytest.mark.parametrize(
    ("data", "fragment"),
    [(b"", "empty"), (b"  \n\n", "empty"), (b"\x00\x01PNG", "binary"), (b"---\nnl: \xff\n", "UTF-8")],
)
def test_undecodable_files(data: bytes, fragment: str) -> None:
    with pytest.raises(PairError) as info:
        decode_file(data, "x.md")
    assert fragment in info.value.reason


def test_first_sql_block_wins_and_other_blocks_stay_in_notes() -> None:
    text = "---\nnl: q\n---\n\n```python\nprint(1)\n```\n\n```SQL\nSELECT 1\n```\n\n```sql\nSELECT 2\n```\n"
    pair = parse_pair(text)
    assert pair.sql == "SELECT 1"
    assert "print(1)" in pair.notes and "SELECT 2" in pair.notes


def test_sql_containing_a_fence_round_trips() -> None:
    pair = Pair(nl="q", sql="SELECT '```' AS fence")
    assert parse_pair(render_pair(pair)).sql == pair.sql


def test_questions_that_yaml_would_mistype_are_quoted() -> None:
    for nl in ["yes", "2024", "null", "- a", "a: b", "#hash", "'quoted'", "[x]", "2024-01-01"]:
        pair = Pair(nl=nl, sql="SELECT 1")
        assert parse_pair(render_pair(pair)).nl == nl


text_st = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\u2028\u2029\x85"),
    min_size=1, max_size=40,
).filter(lambda s: s.strip() == s and s.strip())
sql_st = st.lists(text_st, min_size=1, max_size=4).map("\n".join).filter(
    lambda s: s.strip() and "\r" not in s)
tag_st = text_st.filter(lambda s: "," not in s)


@settings(max_examples=150, deadline=None)
@given(nl=text_st, sql=sql_st, tags=st.lists(tag_st, max_size=3, unique=True),
       datasource=st.none() | text_st, notes=st.none() | text_st)
def test_render_parse_round_trip(nl: str, sql: str, tags: list[str], datasource: str | None,
                                 notes: str | None) -> None:
    pair = Pair(nl=nl, sql=sql, tags=tuple(tags), datasource=datasource, notes=notes or "")
    back = parse_pair(render_pair(pair))
    assert (back.nl, back.sql, back.tags, back.datasource, back.notes) == (
        pair.nl, pair.sql.strip("\n").rstrip(), pair.tags, pair.datasource, pair.notes.strip())
    assert render_pair(back) == render_pair(parse_pair(render_pair(back)))
