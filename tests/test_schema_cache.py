"""The stat-keyed schema cache that keeps fetch fast on large manifests."""

from __future__ import annotations

from pathlib import Path

import pytest

import wrenmem.schema.cache as schema_cache
import wrenmem.schema.manifest
from tests.schema_helpers import edit_manifest, settle
from wrenmem.schema.items import schema_items
from wrenmem.schema.manifest import load_manifest
from wrenmem.settings import load_settings


def test_second_process_reads_the_cache_not_the_manifest(example_project: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    settings = load_settings(example_project)
    path = settings.manifest_path
    settle(path)
    first = schema_cache.prepare(settings, path)
    assert first.items == schema_items(load_manifest(path))
    assert (settings.state_dir / schema_cache.CACHE_FILE).is_file()
    schema_cache._memory.clear()  # as in a new process

    def boom(_path: object) -> None:
        raise AssertionError("the manifest must not be parsed again")

    monkeypatch.setattr(wrenmem.schema.manifest, "load_manifest", boom)
    second = schema_cache.prepare(settings, path)
    assert second.items == first.items and second.postings == first.postings
    assert second.keyword_scores("payment method") == first.keyword_scores("payment method")
    assert second.fingerprint == first.fingerprint
    assert second.characters == first.characters


def test_changed_or_just_edited_manifest_is_read_again(example_project: Path) -> None:
    settings = load_settings(example_project)
    path = settings.manifest_path
    settle(path)
    before = schema_cache.prepare(settings, path)
    edit_manifest(path, lambda d: d["models"][0]["columns"].pop())
    after = schema_cache.prepare(settings, path)
    assert len(after.items) == len(before.items) - 1
    # Edited just now (inside the racy window): never served from a cache.
    path.write_text(path.read_text().replace('"segment"', '"tier"'))
    fresh = schema_cache.prepare(settings, path)
    assert any(i.id == "column:customers.tier" for i in fresh.items)


def test_memoised_item_terms_equal_plain_tokenizing() -> None:
    from collections import Counter

    from tests.conftest import EXAMPLE_MANIFEST
    from wrenmem.schema.manifest import parse_manifest
    from wrenmem.textsearch import tokenize

    extra = parse_manifest({"models": [{"name": "订单表", "properties": {
        "description": "每个客户的订单，金额（美元）。Ünïcode naïve café"}, "columns": [
        {"name": "金额", "type": "DECIMAL", "properties": {"description": "订单 总额"}}]}]})
    items = schema_items(load_manifest(EXAMPLE_MANIFEST)) + schema_items(extra)
    memo: dict[str, list[str]] = {}
    for item in items:
        plain: Counter[str] = Counter()
        for term in tokenize(f"{item.name} {item.model} {item.related}"):
            plain[term] += schema_cache.NAME_WEIGHT
        for term in tokenize(item.text):
            plain[term] += 1.0
        assert schema_cache.item_terms(item, memo) == dict(plain), item.id
