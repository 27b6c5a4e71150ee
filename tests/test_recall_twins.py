"""One answer per SQL: twins fold into one hit, and a pair file's ``also:`` phrasings are
searched with it and shown with it (every backend, the CLI, the API)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import write_pair
from tests.fakes import RecordingEmbedder
from wrenmem import Memory
from wrenmem.errors import PairError
from wrenmem.pairs.catalog import scan
from wrenmem.pairs.pairfile import parse_pair, render_pair
from wrenmem.recall import model
from wrenmem.recall.hits import sql_key
from wrenmem.settings import load_settings

BACKENDS = ["grep", "vector", "hybrid"]


def shop(root: Path) -> Path:
    write_pair(root, "a.md", "How many orders are there?", "SELECT count(*) FROM orders",
               datasource="shop")
    write_pair(root, "b.md", "Count the orders", "select COUNT(*)\n  from orders;",
               datasource="shop")
    write_pair(root, "c.md", "Number of orders", "SELECT count(*) FROM orders",
               datasource="crm")  # another datasource: another answer
    write_pair(root, "d.md", "How many orders shipped?",
               "SELECT count(*) FROM orders WHERE status = 'Shipped'", datasource="shop")
    write_pair(root, "e.md", "How many orders are shipped?",
               "SELECT count(*) FROM orders WHERE status = 'shipped'", datasource="shop")
    return root


def test_sql_key_ignores_case_spacing_and_semicolon_but_not_quoted_text() -> None:
    assert sql_key("select COUNT(*)\n  from orders;") == sql_key("SELECT count(*) FROM orders")
    assert sql_key("SELECT 'A'  FROM t") != sql_key("SELECT 'a' FROM t")
    assert sql_key("SELECT \"Name  X\" FROM t") == sql_key("select \"Name  X\" from T")


@pytest.mark.parametrize("backend", BACKENDS)
def test_twins_are_one_hit_so_k_slots_give_k_distinct_answers(project: Path, backend: str
                                                              ) -> None:
    shop(project)
    memory = Memory(project, backend=backend, embedder=RecordingEmbedder())
    hits = memory.recall("How many orders are there?", k=4)
    keys = [(h.datasource, sql_key(h.sql)) for h in hits]
    assert len(keys) == len(set(keys)) == 4  # all five pairs, the twins as one
    [first] = [h for h in hits if h.path == "knowledge/sql/a.md"]
    assert first.also == ("Count the orders",)
    assert first.also_paths == ("knowledge/sql/b.md",)
    assert "knowledge/sql/b.md" not in [h.path for h in hits]
    assert first.to_dict()["also"] == ["Count the orders"]


PHRASED = """---
nl: Monthly revenue in 2024
also:
  - "What was our revenue per month?"
  - income by month this year
datasource: shop
---

```sql
SELECT date_trunc('month', ordered_at) AS month, sum(amount) FROM orders GROUP BY 1
```
"""


def test_also_is_parsed_written_canonically_and_hashed() -> None:
    pair = parse_pair(PHRASED, "knowledge/sql/rev.md")
    assert pair.also == ("What was our revenue per month?", "income by month this year")
    text = render_pair(pair)
    assert text.startswith("---\nnl: Monthly revenue in 2024\nalso:\n  - What was our revenue "
                           "per month?\n  - income by month this year\ndatasource: shop\n")
    again = parse_pair(text, "knowledge/sql/rev.md")
    assert again.also == pair.also and again.content_hash == pair.content_hash
    assert render_pair(again) == text  # canonical: fmt is idempotent
    plain = pair.with_changes(also=())
    assert plain.content_hash != pair.content_hash  # an edit of also: is an edit
    assert pair.with_changes(also=pair.also[:1]).content_hash != pair.content_hash
    assert "also:" not in render_pair(plain)


@pytest.mark.parametrize(("also", "reason"), [
    ('"one phrasing"', "must be a list of other phrasings"),
    ("[1, two]", "item 1 must be text, got a number 1"),
    ('["  "]', "item 1 is empty"),
    ('[income, " Income "]', "item 2 repeats an earlier one"),
    ('["monthly  revenue in 2024"]', "item 1 repeats the question 'nl'"),
])
def test_a_bad_also_names_the_file_line_and_reason(also: str, reason: str) -> None:
    text = f"---\nnl: Monthly revenue in 2024\ndatasource: shop\nalso: {also}\n---\n\n" \
           "```sql\nSELECT 1\n```\n"
    with pytest.raises(PairError) as info:
        parse_pair(text, "knowledge/sql/rev.md")
    assert info.value.path == "knowledge/sql/rev.md" and info.value.line == 4
    assert reason in info.value.reason and "'also'" in info.value.reason


def test_one_bad_also_skips_only_its_file(project: Path) -> None:
    (project / "knowledge/sql/bad.md").write_text(
        "---\nnl: Bad\nalso: [1]\n---\n\n```sql\nSELECT 1\n```\n", encoding="utf-8")
    (project / "knowledge/sql/rev.md").write_text(PHRASED, encoding="utf-8")
    found = scan(load_settings(project))
    assert [p.path for p in found.pairs] == ["knowledge/sql/rev.md"]
    assert [(e.path, e.line) for e in found.errors] == [("knowledge/sql/bad.md", 3)]


@pytest.mark.parametrize("backend", ["grep", "hybrid"])  # the vector embeds ``nl`` alone
def test_each_phrasing_is_searched_with_the_pair_and_shown_with_it(project: Path,
                                                                   backend: str) -> None:
    (project / "knowledge/sql/rev.md").write_text(PHRASED, encoding="utf-8")
    write_pair(project, "signups.md", "New customer signups per month",
               "SELECT date_trunc('month', created_at), count(*) FROM customers GROUP BY 1")
    write_pair(project, "stores.md", "Which stores sold the most?",
               "SELECT store, sum(amount) FROM orders GROUP BY store ORDER BY 2 DESC")
    memory = Memory(project, backend=backend, embedder=RecordingEmbedder())
    [hit, *_] = memory.recall("income by month this year", k=3)
    assert hit.path == "knowledge/sql/rev.md"  # found by a phrasing only its also: holds
    assert hit.also == ("What was our revenue per month?", "income by month this year")


def test_editing_also_is_followed_by_the_next_recall(project: Path) -> None:
    path = project / "knowledge/sql/rev.md"
    path.write_text(PHRASED.replace("income by month this year", "takings"), encoding="utf-8")
    write_pair(project, "stores.md", "Which stores sold the most?",
               "SELECT store, sum(amount) FROM orders GROUP BY store")
    fake = RecordingEmbedder()
    memory = Memory(project, backend="hybrid", embedder=fake)
    assert memory.recall("takings", k=1)[0].also[-1] == "takings"
    path.write_text(PHRASED.replace("income by month this year", "turnover"), encoding="utf-8")
    [hit] = memory.recall("turnover", k=1)
    assert hit.path == "knowledge/sql/rev.md" and hit.also[-1] == "turnover"
    assert memory.check().fresh


def test_the_cli_shows_also_in_text_and_json(project: Path, cli) -> None:
    shop(project)
    text = cli("recall", "--backend", "grep", "-q", "How many orders are there?", "-k", "2")
    assert text.exit_code == 0, text.output
    assert "   also: Count the orders\n" in text.output
    data = cli("recall", "--backend", "grep", "-q", "How many orders are there?", "-k", "2",
               "--json")
    [result] = json.loads(data.output)
    assert result["hits"][0]["also"] == ["Count the orders"]
    assert result["hits"][0]["also_paths"] == ["knowledge/sql/b.md"]


def test_a_draft_sql_reaches_the_scorer_at_its_one_call(project: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    shop(project)
    seen: list[str | None] = []

    def recording_score(question, signals, *args, draft_sql=None, **kwargs):
        seen.append(draft_sql)
        return real(question, signals, *args, draft_sql=draft_sql, **kwargs)

    real = model.score
    monkeypatch.setattr(model, "score", recording_score)  # what the recaller's scorer calls
    memory = Memory(project, backend="hybrid", embedder=RecordingEmbedder())
    draft = "SELECT count(*) FROM orders WHERE status = 'x'"
    memory.recall("How many orders are there?", k=3, sql=draft)
    assert seen == [draft]
    memory.recall("How many orders are there?", k=3)
    assert seen == [draft, None]
    many = memory.recall_many(["orders", "shipped orders"], 2, sql=draft)
    assert len(many) == 2 and seen[2:] == [draft, draft]


class HalfReadEmbedder(RecordingEmbedder):
    """Reads only the words it was told: the share of the others is its unknown share."""

    known = frozenset({"how", "many", "orders", "are", "there?"})

    def unknown_share(self, text: str) -> float:
        words = text.lower().split()
        return sum(w not in self.known for w in words) / len(words)


def test_the_embedders_unknown_share_reaches_the_scorer(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shop(project)
    seen: list[float] = []

    def recording_score(question, signals, *args, unknown=0.0, **kwargs):
        seen.append(unknown)
        return real(question, signals, *args, unknown=unknown, **kwargs)

    real = model.score
    monkeypatch.setattr(model, "score", recording_score)
    memory = Memory(project, backend="hybrid", embedder=HalfReadEmbedder())
    memory.recall("How many orders are there?", k=3)
    memory.recall("How many orders ya hay?", k=3)
    assert seen == [0.0, 0.4]
    # an embedder that cannot say (the plain fake) is read as reading everything
    Memory(project, backend="hybrid", embedder=RecordingEmbedder()).recall("ya hay", k=1)
    assert seen[-1] == 0.0


def test_storing_the_question_again_keeps_its_phrasings(project: Path) -> None:
    path = project / "knowledge/sql/rev.md"
    path.write_text(PHRASED, encoding="utf-8")
    memory = Memory(project, backend="grep")
    result = memory.store("Monthly revenue in 2024", "SELECT sum(amount) FROM orders",
                          force=True)
    assert result.path == "knowledge/sql/rev.md"
    again = parse_pair(path.read_text(encoding="utf-8"), result.path)
    assert again.sql == "SELECT sum(amount) FROM orders"
    assert again.also == ("What was our revenue per month?", "income by month this year")
