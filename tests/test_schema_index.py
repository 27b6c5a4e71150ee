"""The incremental schema index: real LanceDB, a recording fake embedder."""

from __future__ import annotations

from pathlib import Path

import pytest

import wrenmem.schema.table as schema_index
from tests.fakes import RecordingEmbedder
from tests.schema_helpers import edit_manifest, settle
from wrenmem.schema.items import schema_items
from wrenmem.schema.manifest import load_manifest
from wrenmem.schema.table import sync_schema, vector_search
from wrenmem.settings import Settings, load_settings


@pytest.fixture
def settings(example_project: Path) -> Settings:
    s = load_settings(example_project)
    settle(s.manifest_path)
    return s


def rows(settings: Settings) -> dict[str, tuple[str, str, str]]:
    table = schema_index.open_table(schema_index.connect(settings))
    data = table.search().select(["id", "item_hash", "embedder", "text"]).limit(None).to_arrow()
    return {i: (h, e, t) for i, h, e, t in zip(*(data[c].to_pylist() for c in (
        "id", "item_hash", "embedder", "text")), strict=True)}


def current_items(settings: Settings) -> dict[str, str]:
    return {i.id: i.item_hash for i in schema_items(load_manifest(settings.manifest_path))}


def test_first_sync_embeds_everything_once(settings: Settings) -> None:
    fake = RecordingEmbedder()
    report = sync_schema(settings, embedder=fake)
    items = current_items(settings)
    assert report.embedded == report.items == len(items) and not report.noop
    assert len(fake.texts) == len(items)
    stored = rows(settings)
    assert {k: v[0] for k, v in stored.items()} == items
    assert {v[1] for v in stored.values()} == {"fake@1"}


def test_noop_sync_opens_nothing_and_embeds_nothing(settings: Settings,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    sync_schema(settings, embedder=RecordingEmbedder())
    fake = RecordingEmbedder()

    def no_lancedb(_settings: Settings) -> None:
        raise AssertionError("a no-op sync must not open the index")

    monkeypatch.setattr(schema_index, "connect", no_lancedb)
    report = sync_schema(settings, embedder=fake)
    assert report.noop and fake.calls == []
    # Same content, new mtime: parsed once, fingerprint equal, still nothing opened.
    settings.manifest_path.write_bytes(settings.manifest_path.read_bytes())
    settle(settings.manifest_path, 5)
    assert sync_schema(settings, embedder=fake).noop and fake.calls == []
    # Only a key starting with "_" added: fingerprint unchanged.
    edit_manifest(settings.manifest_path, lambda d: d.update(_instructions="be brief"))
    assert sync_schema(settings, embedder=fake).noop and fake.calls == []


def test_one_changed_column_re_embeds_only_that_item(settings: Settings) -> None:
    sync_schema(settings, embedder=RecordingEmbedder())
    edit_manifest(settings.manifest_path, lambda d: d["models"][4]["columns"][6].update(
        type="NUMERIC(12,2)"))
    fake = RecordingEmbedder()
    report = sync_schema(settings, embedder=fake)
    assert (report.embedded, report.deleted) == (1, 0)
    assert len(fake.texts) == 1 and fake.texts[0].startswith("Column amount (NUMERIC")
    stored = rows(settings)
    assert "NUMERIC(12,2)" in stored["column:orders.amount"][2]
    assert {k: v[0] for k, v in stored.items()} == current_items(settings)


def test_removed_and_renamed_items_are_deleted(settings: Settings) -> None:
    sync_schema(settings, embedder=RecordingEmbedder())

    def drop_payments(doc: dict) -> None:
        doc["models"] = [m for m in doc["models"] if m["name"] != "payments"]
        doc["relationships"] = [r for r in doc["relationships"] if "payments" not in r["models"]]
        doc["models"][0]["columns"][1]["name"] = "given_name"

    edit_manifest(settings.manifest_path, drop_payments)
    fake = RecordingEmbedder()
    report = sync_schema(settings, embedder=fake)
    stored = rows(settings)
    assert {k: v[0] for k, v in stored.items()} == current_items(settings)
    assert not any("payments" in k for k in stored)
    # The renamed column and its model's column list changed; nothing else was embedded.
    assert sorted(t.split(" ")[1] for t in fake.texts) == ["customers:", "given_name"]
    assert report.deleted == 1 + 6 + 1 + 1  # model, its visible columns, relationship, old name


def test_another_embedder_rebuilds(settings: Settings) -> None:
    sync_schema(settings, embedder=RecordingEmbedder())
    other = RecordingEmbedder("fake@2", dim=32)
    report = sync_schema(settings, embedder=other)
    assert report.rebuilt and report.embedded == report.items
    assert {v[1] for v in rows(settings).values()} == {"fake@2"}


def test_a_failed_sync_is_completed_by_the_next(settings: Settings) -> None:
    sync_schema(settings, embedder=RecordingEmbedder())
    def change(doc: dict) -> None:
        doc["models"].pop(1)
        doc["models"][0]["properties"]["description"] = "People who buy things."

    edit_manifest(settings.manifest_path, change)
    with pytest.raises(RuntimeError):
        sync_schema(settings, embedder=RecordingEmbedder(fail_after=0))
    edit_manifest(settings.manifest_path, lambda d: d["models"][0]["columns"].pop())
    sync_schema(settings, embedder=RecordingEmbedder())
    assert {k: v[0] for k, v in rows(settings).items()} == current_items(settings)


def test_deleted_index_folder_is_rebuilt(settings: Settings) -> None:
    import shutil

    sync_schema(settings, embedder=RecordingEmbedder())
    shutil.rmtree(settings.index_uri)
    fake = RecordingEmbedder()
    assert sync_schema(settings, embedder=fake).embedded == len(current_items(settings))


def test_vector_search_filters(settings: Settings) -> None:
    fake = RecordingEmbedder()
    sync_schema(settings, embedder=fake)
    hits = vector_search(settings, "payment method chosen at checkout", embedder=fake, limit=3)
    assert hits[0][0] == "column:payments.method"
    only_models = vector_search(settings, "payment", embedder=fake, limit=50, types=["model"])
    assert only_models and all(h[0].startswith("model:") for h in only_models)
    customers = vector_search(settings, "customer", embedder=fake, limit=100,
                              model="customers")
    ids = {h[0] for h in customers}
    assert "relationship:orders_customer" in ids and "column:customers.email" in ids
    assert all("customers" in i or i == "relationship:orders_customer" for i in ids)


def test_killed_first_index_keeps_finished_chunks(settings: Settings,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema_index.embedsync, "WRITE_CHUNK", 10)
    monkeypatch.setattr(schema_index.embedsync, "EMBED_BATCH", 5)
    with pytest.raises(RuntimeError):
        sync_schema(settings, embedder=RecordingEmbedder(fail_after=25))
    assert len(rows(settings)) == 20
    resumed = RecordingEmbedder()
    report = sync_schema(settings, embedder=resumed)
    total = len(current_items(settings))
    assert report.embedded == len(resumed.texts) == total - 20
    assert {k: v[0] for k, v in rows(settings).items()} == current_items(settings)


def test_a_warm_process_keeps_its_table_open(settings: Settings,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    fake = RecordingEmbedder()
    sync_schema(settings, embedder=fake)
    schema_index.forget_handles()
    opened: list[str] = []
    real_open = schema_index.open_table

    def counting(db: object) -> object:
        opened.append("open")
        return real_open(db)

    monkeypatch.setattr(schema_index, "open_table", counting)
    for _ in range(3):  # the vectors stay loaded between questions
        hits = vector_search(settings, "payment method chosen at checkout", embedder=fake,
                             limit=1)
        assert hits[0][0] == "column:payments.method"
    assert opened == ["open"]
    # A sync that re-creates the table (another embedder) drops the handle; the search sees
    # the new table.
    sync_schema(settings, embedder=RecordingEmbedder(model_id="fake@2"))
    hits = vector_search(settings, "payment method chosen at checkout", embedder=fake, limit=1)
    assert hits[0][0] == "column:payments.method" and opened == ["open", "open"]
    assert {v[1] for v in rows(settings).values()} == {"fake@2"}


@pytest.mark.parametrize("queued", [False, True])
def test_a_compaction_after_a_sync_keeps_the_state_current(
        settings: Settings, queued: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tenth commit compacts the table (rewrites its files): in the watcher after the
    index is up to date (queued with the file writes, wrenmem/schema/later.py), in any
    other process inside the sync; either way the state names the new files."""
    from tests.conftest import settle as settle_ctime
    from wrenmem.fs import statedir
    from wrenmem.fs.fsutil import write_marshal
    from wrenmem.schema import later
    from wrenmem.storage import compaction

    fake = RecordingEmbedder()
    path = settings.manifest_path.resolve()
    sync_schema(settings, embedder=fake)
    counter = settings.state_dir / statedir.SCHEMA_MAINT
    write_marshal(counter, compaction.COMPACT_EVERY - 1)
    edit_manifest(path, lambda d: d["models"][0].update(properties={"description": "B."}))
    settle_ctime(monkeypatch)  # its change time too: the state records its stat
    if queued:
        with later.collect() as files:
            sync_schema(settings, embedder=fake)
        written = schema_index._disk(settings)
        assert files and compaction.maintenance_record(counter)["commits"] == (
            compaction.COMPACT_EVERY - 1)  # not yet
        later._run(files)
        assert schema_index._disk(settings) != written  # the compaction rewrote its files
    else:
        sync_schema(settings, embedder=fake)
    assert compaction.maintenance_record(counter)["commits"] == 0  # compacted
    assert schema_index.is_fresh(settings, path, fake.model_id)  # its state: these files


def test_first_index_appends_its_later_chunks(settings: Settings,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from wrenmem.storage import lance

    def no_merge(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a table this sync created has no rows to merge with")

    monkeypatch.setattr(schema_index.embedsync, "WRITE_CHUNK", 10)
    monkeypatch.setattr(lance, "upsert", no_merge)
    fake = RecordingEmbedder()
    report = sync_schema(settings, embedder=fake)
    items = current_items(settings)
    assert report.embedded == len(items) > 20 and len(fake.texts) == len(set(fake.texts))
    assert {k: v[0] for k, v in rows(settings).items()} == items


def test_changed_hash_with_same_text_reuses_the_stored_vector(settings: Settings,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    from functools import cached_property

    from wrenmem.schema.items import SchemaItem

    sync_schema(settings, embedder=RecordingEmbedder())
    before = rows(settings)
    # Another hash scheme (or a field that is not in the text): every item looks changed.
    # A release that changes it bumps the item format, so no cached hash is trusted.
    patched = cached_property(lambda self: "v2-" + self.id)
    patched.__set_name__(SchemaItem, "item_hash")
    monkeypatch.setattr(SchemaItem, "item_hash", patched)
    monkeypatch.setattr("wrenmem.schema.items.ITEMS_VERSION", 99)
    edit_manifest(settings.manifest_path, lambda d: d.update(layoutVersion=4))
    fake = RecordingEmbedder()
    report = sync_schema(settings, embedder=fake)
    assert fake.calls == [] and report.embedded == 0
    after = rows(settings)
    assert set(after) == set(before) and all(v[0].startswith("v2-") for v in after.values())
    hits = vector_search(settings, "payment method chosen at checkout", embedder=fake, limit=1)
    assert hits[0][0] == "column:payments.method"


def test_one_column_change_in_a_2000_model_manifest(project: Path) -> None:
    import json

    doc = {"dataSource": "postgres", "models": [
        {"name": f"table_{n:04d}", "primaryKey": "id", "columns": [
            {"name": "id", "type": "INTEGER"},
            {"name": f"metric_{n}", "type": "DECIMAL",
             "properties": {"description": f"Metric number {n}."}}]}
        for n in range(2000)]}
    path = project / "target" / "mdl.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc))
    settle(path)
    settings = load_settings(project)
    first = RecordingEmbedder()
    built = sync_schema(settings, embedder=first)
    # 2,000 "id" columns share one sentence (the model's name is not embedded): 4,001 texts
    assert (built.written, built.embedded) == (6000, 4001)
    assert len(first.texts) == 4001 and "Column id (INTEGER, primary key)." in first.texts
    edit_manifest(path, lambda d: d["models"][1234]["columns"][1]["properties"].update(
        description="Metric 1234, now in euros."))
    fake = RecordingEmbedder()
    report = sync_schema(settings, embedder=fake)
    assert (report.items, report.embedded, report.deleted) == (6000, 1, 0)
    assert fake.texts == ["Column metric_1234 (DECIMAL): Metric 1234, now in euros."]
    assert report.written == 1 and report.unchanged == 5999
