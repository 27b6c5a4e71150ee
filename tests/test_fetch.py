"""fetch: full text when small, search (never stale) when large, keyword-only fallback."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import wrenmem.schema.table
from tests.fakes import RecordingEmbedder
from tests.schema_helpers import edit_manifest, settle
from wrenmem.errors import ExtraMissingError, ManifestError, WrenmemError
from wrenmem.schema import fetch as schema_fetch
from wrenmem.schema.describe import describe
from wrenmem.schema.manifest import load_manifest
from wrenmem.settings import Settings, load_settings


@pytest.fixture
def fake() -> RecordingEmbedder:
    return RecordingEmbedder()


# The fake embedder of the project a test's ``settings`` fixture made (as Memory(embedder=)
# hands its embedder to fetch); other projects use their embedder setting.
FAKES: dict[Path, RecordingEmbedder] = {}


def fetch(settings: Settings, question: str, **options) -> schema_fetch.FetchResult:
    return schema_fetch.fetch(settings, question, embedder=FAKES.get(settings.root), **options)


@pytest.fixture
def settings(example_project: Path, fake: RecordingEmbedder):
    s = load_settings(example_project)
    settle(s.manifest_path)
    FAKES[s.root] = fake
    yield s
    FAKES.pop(s.root, None)


def ids(result) -> list[str]:
    return [r.item.id for r in result.results]


def test_small_schema_is_returned_whole(settings: Settings, fake: RecordingEmbedder) -> None:
    result = fetch(settings, "revenue per store")
    assert result.strategy == "full" and result.method == "full"
    assert result.schema == describe(load_manifest(settings.manifest_path))
    assert result.characters == len(result.schema) <= 30000
    # the example's rule and caveat follow the schema (all of them: their text is small)
    rendered = result.render()
    assert rendered.startswith(result.schema)
    assert rendered[len(result.schema):].lstrip().startswith("## Business rules and caveats")
    assert "Revenue excludes cancelled and returned orders" in rendered
    assert "Coupons before March 2024 are not recorded" in rendered
    assert fake.calls == []  # no model needed
    assert not (settings.state_dir / "schema_index.json").exists()
    filtered = fetch(settings, "x", model="orders")
    assert filtered.strategy == "full" and "--type and --model are not applied" in \
        filtered.notes[0]


def test_threshold_switches_to_search(settings: Settings, fake: RecordingEmbedder) -> None:
    result = fetch(settings, "payment method chosen at checkout", threshold=0, k=5)
    assert result.strategy == "search" and result.method == "hybrid"
    assert ids(result)[0] == "column:payments.method"
    assert len(result.results) == 5
    text = result.render()
    assert text.startswith("# Schema items for: payment method chosen at checkout\n")
    assert "## Model payments" in text
    assert "- Column payments.method (VARCHAR; not null): Payment method chosen" in text
    # k=5 of its 8 items: the fake embedder's bag of words dilutes the long model summary
    payments = fetch(settings, "payment transactions", threshold=0, k=5, model="payments")
    assert "model:payments" in ids(payments)
    assert {r.item.model for r in payments.results} == {"payments"}
    # The model's summary sits under its group title, without repeating its name.
    assert "## Model payments\nPayment transactions against orders." in payments.render()
    small = load_settings(settings.root, {"fetch_threshold": 100})
    assert fetch(small, "payment method").strategy == "search"


def test_search_filters(settings: Settings, fake: RecordingEmbedder) -> None:
    columns = fetch(settings, "amount", threshold=0, types=["column"], k=20)
    assert columns.results and all(r.item.type == "column" for r in columns.results)
    orders = fetch(settings, "amount", threshold=0, model="orders", k=50)
    assert orders.results and all("orders" in (r.item.model, r.item.related)
                                  for r in orders.results)
    with pytest.raises(WrenmemError, match="no model, view or cube named 'nope'"):
        fetch(settings, "amount", threshold=0, model="nope")
    with pytest.raises(WrenmemError, match="unknown item type"):
        fetch(settings, "amount", threshold=0, types=["tables2"])


def test_search_is_never_stale(settings: Settings, fake: RecordingEmbedder) -> None:
    fetch(settings, "anything", threshold=0)
    before = len(fake.texts)

    def add_column(doc: dict) -> None:
        doc["models"][0]["columns"].append({"name": "loyalty_points", "type": "INTEGER",
                                            "properties": {"description": "Bonus points."}})

    edit_manifest(settings.manifest_path, add_column)
    result = fetch(settings, "loyalty bonus points", threshold=0, k=3)
    assert ids(result)[0] == "column:customers.loyalty_points"
    # the new column and the customers model whose column list changed (embedded in the
    # write loop's sorted order), then the question
    new = [t.split(" ")[:2] for t in fake.texts[before:]]
    assert sorted(new[:2]) == [["Column", "loyalty_points"], ["Model", "customers:"]]
    assert new[2:] == [["loyalty", "bonus"]]


def test_keyword_only_without_the_index_extra(settings: Settings, fake: RecordingEmbedder,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(_settings: Settings) -> None:
        raise ExtraMissingError("the schema index needs lancedb (pip install 'wrenmem[index]')")

    monkeypatch.setattr(wrenmem.schema.table, "connect", missing)
    result = fetch(settings, "payment method", threshold=0, k=3)
    assert result.method == "keyword" and "keyword search only" in result.notes[0]
    assert ids(result)[0] == "column:payments.method"
    grep = load_settings(settings.root, {"backend": "grep"})
    assert fetch(grep, "payment method", threshold=0).method == "keyword"


def test_no_manifest_is_a_clear_error(project: Path) -> None:
    with pytest.raises(ManifestError, match="manifest not found"):
        fetch(load_settings(project), "x")


@pytest.mark.slow
def test_real_model_finds_relevant_items_in_two_languages(example_project: Path) -> None:
    settings = load_settings(example_project)
    english = fetch(settings, "which payment methods do customers use", threshold=0, k=5)
    assert "column:payments.method" in ids(english)
    chinese = fetch(settings, "每个商店的销售渠道", threshold=0, k=8,
                    types=["column"])
    assert "column:stores.channel" in ids(chinese)


def test_index_with_other_item_hashes_is_resynced_not_empty(settings: Settings,
                                                           fake: RecordingEmbedder,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    from functools import cached_property

    from wrenmem.schema.items import SchemaItem

    fetch(settings, "anything", threshold=0)
    # The state file says fresh (same manifest), but the rows hold hashes of another item
    # format, as after an upgrade: fetch must notice, re-sync and still answer.
    patched = cached_property(lambda self: "v9-" + self.id)
    patched.__set_name__(SchemaItem, "item_hash")
    monkeypatch.setattr(SchemaItem, "item_hash", patched)
    import wrenmem.schema.cache as schema_cache

    schema_cache._memory.clear()
    (settings.state_dir / schema_cache.CACHE_FILE).unlink()
    before = len(fake.texts)
    vector_only = dataclasses.replace(settings, backend="vector")
    result = fetch(vector_only, "payment method chosen at checkout", threshold=0, k=3)
    assert ids(result)[0] == "column:payments.method"
    assert result.index is not None and result.index["embedded"] == 0
    assert len(fake.texts) - before == 2  # the question, searched twice


def test_table_dropped_behind_the_state_files_back(settings: Settings,
                                                   fake: RecordingEmbedder) -> None:
    import wrenmem.schema.table as schema_index

    fetch(settings, "anything", threshold=0)
    schema_index.connect(settings).drop_table(schema_index.TABLE)
    (Path(settings.index_uri) / f"{schema_index.TABLE}.lance").mkdir(parents=True,
                                                                       exist_ok=True)
    result = fetch(settings, "payment method chosen at checkout", threshold=0, k=3)
    assert ids(result)[0] == "column:payments.method"
    assert result.index is not None and result.index["embedded"] == result.index["items"]


def test_one_match_is_singular_and_sections_are_one_blank_line_apart(
        settings: Settings, fake: RecordingEmbedder) -> None:
    """fetch said "1 best matches" and left two blank lines before "## Glossary terms"."""
    (settings.root / "knowledge" / "glossary" / "terms.md").write_text(
        "## Payment method\nSynonyms: payment type\nColumns: payments.method\n\n"
        "How the customer paid.\n", encoding="utf-8")
    text = fetch(settings, "payment method chosen at checkout", threshold=0, k=1).render()
    assert "\n1 best match (" in text
    assert "\n\n## Glossary terms in this question\n\n" in text
    assert "\n\n\n" not in text
