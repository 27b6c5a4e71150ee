"""The stat-keyed schema cache that keeps fetch fast on large manifests."""

from __future__ import annotations

from pathlib import Path

import pytest

import wrenmem.errors
import wrenmem.schema.cache as schema_cache
import wrenmem.schema.describe
import wrenmem.schema.manifest
from tests.schema_helpers import edit_manifest, settle
from wrenmem.schema.items import schema_items
from wrenmem.schema.manifest import load_manifest
from wrenmem.settings import Settings, load_settings


@pytest.fixture
def settings(example_project: Path) -> Settings:
    """The example project, its manifest settled (old enough for a stat-keyed cache)."""
    s = load_settings(example_project)
    settle(s.manifest_path)
    return s


def test_second_process_reads_the_cache_not_the_manifest(settings: Settings,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    path = settings.manifest_path
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


def test_changed_or_just_edited_manifest_is_read_again(settings: Settings) -> None:
    path = settings.manifest_path
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


def test_rewritten_identical_manifest_is_not_parsed_again(settings: Settings,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    from wrenmem.fs.fsutil import read_marshal

    path = settings.manifest_path
    first = schema_cache.prepare(settings, path)
    cache_file = settings.state_dir / schema_cache.CACHE_FILE
    assert read_marshal(cache_file)["digest"] == first.digest != ""

    def boom(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("an unchanged manifest must not be parsed again")

    monkeypatch.setattr(schema_cache, "load_manifest", boom)
    monkeypatch.setattr(schema_cache, "schema_items", boom)
    # The same bytes written again just now: the stat is new and too fresh to trust, so
    # the content hash decides, in this process and in a new one.
    path.write_bytes(path.read_bytes())
    assert schema_cache.prepare(settings, path) is first
    schema_cache._memory.clear()
    again = schema_cache.prepare(settings, path)
    assert again.postings == first.postings and again.records == first.records
    # Settled: the cache records the new stat, so the next process need not hash the file.
    from tests.conftest import settle as settle_ctime
    from wrenmem.fs.fsutil import stat_key

    settle_ctime(monkeypatch)  # the change time, which a utime cannot set back
    schema_cache._memory.clear()
    assert schema_cache.prepare(settings, path).fingerprint == first.fingerprint
    assert tuple(read_marshal(cache_file)["stat"]) == stat_key(path.stat())


def test_one_changed_column_patches_the_keyword_index(settings: Settings,
                                                      monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    path = settings.manifest_path
    schema_cache.prepare(settings, path)
    edit_manifest(path, lambda d: d["models"][1]["columns"][2].setdefault(
        "properties", {}).update(description="Zanzibar loyalty tier of the customer."))
    edit_manifest(path, lambda d: d["models"][0]["columns"][0].update(type="BIGINT"))
    full = schema_cache._build(load_manifest(path))

    def boom(*_args: object) -> None:
        raise AssertionError("one changed column must not rebuild the whole keyword index")

    schema_cache._memory.clear()  # as in a new process: the previous version is on disk
    monkeypatch.setattr(schema_cache, "_postings", boom)
    patched = schema_cache.prepare(settings, path)
    assert patched.postings == full.postings and patched.lengths == full.lengths
    assert patched.records == full.records
    best = max(patched.keyword_scores("zanzibar").items(), key=lambda kv: kv[1])[0]
    assert "Zanzibar" in patched.item(best).text


def test_added_column_builds_the_keyword_index_in_full(settings: Settings) -> None:
    path = settings.manifest_path
    schema_cache.prepare(settings, path)
    edit_manifest(path, lambda d: d["models"][0]["columns"].insert(0, {
        "name": "quokka_score", "type": "INTEGER"}))
    prepared = schema_cache.prepare(settings, path)
    full = schema_cache._build(load_manifest(path))
    assert prepared.postings == full.postings and prepared.lengths == full.lengths
    assert prepared.keyword_scores("quokka")


def _generated(models: int = 30) -> dict:
    return {"catalog": "wh", "dataSource": "postgres", "cubes": [{"name": "c", "models": []}],
            "_note": "private", "models": [
                {"name": f"{region}m{n}", "primaryKey": "id", "_private": {"x": 1},
                 "properties": {"description": f"Model {n} ünïcode “quoted” {region}"},
                 "columns": [{"name": "id", "type": "INTEGER"},
                             {"name": f"v{n}", "type": "DECIMAL",
                              "properties": {"description": f"Value {n}."}},
                             {"name": "created_at", "type": "TIMESTAMP"}]}
                for region in ("", "eu__") for n in range(models // 2)],
            "relationships": [{"name": "r1", "models": ["m0", "m1"], "joinType": "MANY_TO_ONE",
                               "condition": "m0.id = m1.id"}]}


@pytest.mark.parametrize("document", [
    _generated(), {}, {"models": "not a list"}, {"models": [1, {"name": " padded "}, {}]},
    {"models": [{"name": "a", "models": []}], "cubes": [{"name": "x", "models": [1]}]}])
def test_the_fingerprint_from_model_pieces_is_the_plain_one(document: dict) -> None:
    if not isinstance(document.get("models", []), list):
        with pytest.raises(wrenmem.errors.ManifestError):
            wrenmem.schema.manifest.parse_manifest(document)
        return
    parsed = wrenmem.schema.manifest.parse_manifest(document)
    assert parsed.fingerprint == wrenmem.schema.manifest.fingerprint(document)
    assert len(parsed.model_keys) == len(parsed.models)


EDITS = {
    "one column's description": lambda d: d["models"][5]["columns"][1]["properties"].update(
        description="Now in euros."),
    "a model added in the middle": lambda d: d["models"].insert(3, {
        "name": "newcomer", "columns": [{"name": "id", "type": "INTEGER"}]}),
    "a model removed": lambda d: d["models"].pop(7),
    "models reordered": lambda d: d["models"].reverse(),
    "a model renamed": lambda d: d["models"][2].update(name="renamed"),
    "a model with a warning": lambda d: d["models"][4].update(columns="not a list"),
    "a duplicate name": lambda d: d["models"].append(dict(d["models"][0])),
    "a relationship changed": lambda d: d["relationships"][0].update(joinType="ONE_TO_ONE"),
}


@pytest.mark.parametrize("edit", EDITS)
def test_a_warm_re_read_reuses_unchanged_models_and_equals_a_fresh_parse(
        settings: Settings, edit: str) -> None:
    import json

    path = settings.manifest_path
    path.write_text(json.dumps(_generated()), encoding="utf-8")
    settle(path)
    before = schema_cache.prepare(settings, path)
    old_models = before._memo.models if before._memo else {}
    edit_manifest(path, EDITS[edit])
    if edit == "a model with a warning":
        edit_manifest(path, lambda d: d["models"][5]["columns"][1]["properties"].update(
            description="Changed again, next to the model with a warning."))
    warm = schema_cache.prepare(settings, path)  # this process held the previous version
    schema_cache._memory.clear()
    (settings.state_dir / schema_cache.CACHE_FILE).unlink()
    fresh = schema_cache.prepare(settings, path)  # a new process, no cache
    assert warm is not fresh
    assert [i.to_dict() for i in warm.items] == [i.to_dict() for i in fresh.items]
    assert warm.hashes == fresh.hashes == [i.item_hash for i in fresh.items]
    assert warm.records == fresh.records
    assert (warm.fingerprint, warm.characters, warm.warnings) == (
        fresh.fingerprint, fresh.characters, fresh.warnings)
    assert warm.postings == fresh.postings and warm.lengths == fresh.lengths
    reread = load_manifest(path)
    assert fresh.characters == len(wrenmem.schema.describe.describe(reread))
    # The unchanged models were not parsed again: the warm read holds the same objects.
    assert warm._memo is not None
    kept = [k for k in warm._memo.models if k in old_models]
    assert len(kept) >= 20 and all(warm._memo.models[k] is old_models[k] for k in kept)


def test_a_warm_process_writes_the_cache_file_after_the_work_in_order(
        settings: Settings) -> None:
    from wrenmem.fs.fsutil import read_marshal
    from wrenmem.schema import later

    path, cache_file = settings.manifest_path, settings.state_dir / schema_cache.CACHE_FILE
    first = schema_cache.prepare(settings, path)
    written = read_marshal(cache_file)
    edit_manifest(path, lambda d: d["models"][0]["columns"].pop())
    with later.collect() as files:
        second = schema_cache.prepare(settings, path)
    assert second.fingerprint != first.fingerprint
    assert len(files) == 1 and read_marshal(cache_file) == written  # not written yet
    assert schema_cache.prepare(settings, path) is second  # this process holds it
    edit_manifest(path, lambda d: d["models"][0]["columns"].pop())
    with later.collect() as more:
        third = schema_cache.prepare(settings, path)
    later.write_in_background(files)
    done = later.write_in_background(more)
    assert done is not None and later.write_in_background([]) is None
    done.result(timeout=60)  # one writer thread: the older version first, then this one
    schema_cache._memory.clear()  # a new process reads the last one, not the manifest
    assert read_marshal(cache_file)["digest"] == third.digest
    assert schema_cache.prepare(settings, path).items == third.items
