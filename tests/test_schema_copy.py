"""The schema search copy: the same rows, vectors and ranking as the ``schema_items`` table
(real LanceDB, the real default model), kept exact by each sync, never used stale, and a
one-shot ``fetch`` then answers without importing LanceDB."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import imported_modules, run_wrenmem

from tests.schema_helpers import edit_manifest, settle
from wrenmem.embed.embedders import get_embedder
from wrenmem.schema import searchcopy
from wrenmem.schema import table as schema_index
from wrenmem.schema.table import sync_schema, vector_search
from wrenmem.settings import Settings, load_settings

REGIONS = ["", "eu__", "apac__"]
TABLES = {"singer": ["name", "age", "country"], "concert": ["venue", "year", "capacity"],
          "orders": ["amount", "placed_at", "status"], "stores": ["city", "opened_on"],
          "employees": ["salary", "hired_on", "department"]}
AUDIT = [("created_at", "TIMESTAMP", "When the row was first loaded."),
         ("is_current", "BOOLEAN", "True for the current version of the row.")]
QUESTIONS = ["average age of singers by country", "concert venues with the biggest capacity",
             "total amount of orders placed last month", "每个城市有多少家商店？",
             "when was the row loaded", "salary of employees per department"]


def manifest() -> dict:
    models = []
    for region in REGIONS:
        for table, columns in TABLES.items():
            models.append({"name": f"{region}{table}", "primaryKey": "id", "columns": [
                {"name": "id", "type": "INTEGER"},
                *({"name": c, "type": "VARCHAR",
                   "properties": {"description": f"The {c.replace('_', ' ')} of the {table}."}}
                  for c in columns),
                *({"name": n, "type": t, "properties": {"description": d}}
                  for n, t, d in AUDIT)],
                "properties": {"description": f"{table.capitalize()} records"
                                              f"{' (' + region[:-2] + ')' if region else ''}."}})
    return {"dataSource": "postgres", "models": models, "relationships": [
        {"name": f"{r}concert_singer", "models": [f"{r}concert", f"{r}singer"],
         "joinType": "MANY_TO_ONE", "condition": f"{r}concert.id = {r}singer.id"}
        for r in REGIONS]}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 15-model manifest (three regional copies, shared audit columns), indexed with the
    real default model."""
    root = tmp_path_factory.mktemp("schemacopy") / "proj"
    (root / "knowledge" / "sql").mkdir(parents=True)
    (root / "target").mkdir()
    path = root / "target" / "mdl.json"
    path.write_text(json.dumps(manifest()), encoding="utf-8")
    settle(path)
    sync_schema(load_settings(root))
    return root


@pytest.fixture
def project_copy(built: Path, tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    shutil.copytree(built, root, symlinks=True)
    return root


def table_rows(settings: Settings) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    """id -> ((id, item_hash, type, model, related), unit vector), read from LanceDB."""
    table = schema_index.open_table(schema_index.connect(settings))
    model_id = get_embedder(settings.embedder, root=settings.root).model_id
    copy = searchcopy.SchemaCopy.from_table(table, model_id)
    return {r[0]: (r, copy.matrix[copy.which[n]]) for n, r in enumerate(copy.rows)}


def copy_rows(copy: searchcopy.SchemaCopy) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    return {r[0]: (r, copy.matrix[copy.which[n]]) for n, r in enumerate(copy.rows)}


def assert_same_rows(copy: searchcopy.SchemaCopy, settings: Settings) -> None:
    """The copy holds exactly the table's rows, each with the table's vector."""
    mine, theirs = copy_rows(copy), table_rows(settings)
    assert set(mine) == set(theirs)
    for key, (row, vector) in theirs.items():
        assert mine[key][0] == row
        np.testing.assert_allclose(mine[key][1], vector, atol=1e-6)


def lancedb_exact(settings: Settings, question: str, limit: int, types=(), model=None):
    """The table's exact (flat) cosine ranking, every row fetched, equal scores by id."""
    embedder = get_embedder(settings.embedder, root=settings.root)
    table = schema_index.open_table(schema_index.connect(settings))
    vector = embedder.embed([question])[0]
    query = table.search(vector.tolist()).distance_type("cosine").bypass_vector_index()
    where = []
    if types:
        where.append("type IN (" + ", ".join(f"'{t}'" for t in types) + ")")
    if model:
        where.append(f"(model = '{model}' OR related = '{model}')")
    if where:
        query = query.where(" AND ".join(where), prefilter=True)
    rows = query.select(["id", "item_hash", "_distance"]).limit(table.count_rows()).to_list()
    ranked = sorted(((r["id"], r["item_hash"], 1.0 - r["_distance"]) for r in rows),
                    key=lambda r: (-r[2], r[0]))
    return ranked[:limit]


def test_the_sync_saves_a_copy_of_the_table_with_each_vector_once(built: Path) -> None:
    settings = load_settings(built)
    model_id = get_embedder(settings.embedder, root=settings.root).model_id
    copy = searchcopy.load(settings, model_id, searchcopy.listing(settings))
    assert copy is not None
    assert_same_rows(copy, settings)
    # 87 columns of 15 models: the 3 regional copies share every sentence, all 15 share
    # "id" and the 2 audit columns: 17 column vectors, 15 of models, 3 of relationships
    assert sum(r[2] == "column" for r in copy.rows) == 87 and len(copy) == 105
    assert len(copy.matrix) == 17 + 15 + 3


@pytest.mark.parametrize("question", QUESTIONS)
@pytest.mark.parametrize("types,model", [((), None), (("column",), None), ((), "eu__orders"),
                                         (("model", "relationship"), None)])
def test_the_copy_ranks_exactly_as_lancedb(built: Path, question: str, types, model) -> None:
    settings = load_settings(built)
    embedder = get_embedder(settings.embedder, root=settings.root)
    copy = searchcopy.load(settings, embedder.model_id, searchcopy.listing(settings))
    assert copy is not None
    got = copy.search(embedder.embed([question])[0], 12, types, model)
    want = lancedb_exact(settings, question, 12, types, model)
    assert [r[:2] for r in got] == [r[:2] for r in want]
    np.testing.assert_allclose([r[2] for r in got], [r[2] for r in want], atol=1e-5)
    by_id = {r[0]: r for r in copy.rows}
    assert got and all((not types or by_id[i][2] in types)
                       and (model is None or model in by_id[i][3:]) for i, _h, _s in got)


def test_an_incremental_sync_updates_the_copy_to_the_table(project_copy: Path) -> None:
    settings = load_settings(project_copy)
    path = settings.manifest_path

    def change(doc: dict) -> None:
        doc["models"][3]["columns"][1]["properties"]["description"] = "Hourly wage in euros."
        doc["models"][4]["columns"][2]["type"] = "DATE"
        del doc["models"][7]  # a model removed
        doc["models"].append({"name": "refunds", "columns": [
            {"name": "created_at", "type": "TIMESTAMP",
             "properties": {"description": "When the row was first loaded."}},
            {"name": "reason", "type": "VARCHAR"}]})

    edit_manifest(path, change)
    report = sync_schema(settings)
    # 2 changed columns, the new model and its "reason"; its created_at's vector is shared
    assert (report.deleted, report.embedded, report.written) == (7, 4, 5)
    embedder = get_embedder(settings.embedder, root=settings.root)
    held = searchcopy.load(settings, embedder.model_id, searchcopy.listing(settings))
    assert held is not None
    assert_same_rows(held, settings)
    searchcopy._recent.clear()  # and the file a new process reads is that one too
    saved = searchcopy.load(settings, embedder.model_id, searchcopy.listing(settings))
    assert saved is not None and saved is not held
    assert_same_rows(saved, settings)


def test_a_stale_or_foreign_copy_is_not_used(project_copy: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(project_copy)
    embedder = get_embedder(settings.embedder, root=settings.root)
    files = searchcopy.listing(settings)
    assert files and searchcopy.copy_path(settings).is_file()
    # The saved copy is another project's (this one was copied from it): not used.
    assert searchcopy.load(settings, embedder.model_id, files) is None
    opened: list[str] = []
    real = schema_index._search_table
    monkeypatch.setattr(schema_index, "_search_table",
                        lambda s, uri: opened.append(uri) or real(s, uri))
    got = vector_search(settings, QUESTIONS[0], embedder=embedder, limit=8)
    assert opened  # the table was read, and its copy saved for this project
    assert [r[:2] for r in got] == [r[:2] for r in lancedb_exact(settings, QUESTIONS[0], 8)]
    searchcopy._recent.clear()
    assert searchcopy.load(settings, embedder.model_id, files) is not None
    assert searchcopy.load(settings, "other@1", files) is None
    searchcopy._recent.clear()
    stale = {**files, "data/extra.lance": (1, 1)}
    assert searchcopy.load(settings, embedder.model_id, stale) is None
    searchcopy.copy_path(settings).write_bytes(b"garbage")
    assert searchcopy.load(settings, embedder.model_id, files) is None
    opened.clear()
    assert vector_search(settings, QUESTIONS[0], embedder=embedder, limit=8) == got
    assert opened


def test_a_one_shot_fetch_answers_from_the_copy_without_lancedb(project_copy: Path) -> None:
    args = ["--project", str(project_copy), "fetch", "-q", QUESTIONS[0], "--threshold", "0",
            "--json"]
    env = {"WRENMEM_NO_DAEMON": "1", "PYTHONPROFILEIMPORTTIME": "1"}
    slow = run_wrenmem(args, project_copy, env=env)  # the copy is another project's
    assert slow.returncode == 0, slow.stderr
    assert "lancedb" in imported_modules(slow.stderr)  # the table was read, the copy saved
    fast = run_wrenmem(args, project_copy, env=env)
    assert fast.returncode == 0, fast.stderr
    imported = imported_modules(fast.stderr)
    assert "wrenmem.schema.searchcopy" in imported
    assert "lancedb" not in imported  # answered from the copy
    assert json.loads(fast.stdout)["results"] == json.loads(slow.stdout)["results"]
    assert json.loads(fast.stdout)["results"]


def test_a_one_shot_fetch_with_a_stale_index_goes_to_click(project_copy: Path) -> None:
    settings = load_settings(project_copy)
    edit_manifest(settings.manifest_path, lambda d: d["models"].pop())
    out = run_wrenmem(["--project", str(project_copy), "fetch", "-q", QUESTIONS[0],
                       "--threshold", "0", "--json"], project_copy,
                      env={"WRENMEM_NO_DAEMON": "1", "PYTHONPROFILEIMPORTTIME": "1"})
    assert out.returncode == 0, out.stderr
    assert "wrenmem.cli" in imported_modules(out.stderr)  # it builds: click shows progress
    assert json.loads(out.stdout)["index"]["deleted"] == 7  # the model and its 6 columns


def stored_rows(settings: Settings) -> dict[str, tuple]:
    """id -> every column of the table's row, the vector as its float32 bytes."""
    table = schema_index.open_table(schema_index.connect(settings))
    data = table.to_arrow()
    names = [n for n in data.column_names if n != "vector"]
    vectors = data["vector"].to_numpy(zero_copy_only=False)
    columns = [data[n].to_pylist() for n in names]
    return {row[0]: (*row, np.asarray(v, np.float32).tobytes())
            for *row, v in zip(*columns, vectors, strict=True)}


EDITS = [
    ("a changed description",
     lambda d: d["models"][3]["columns"][1]["properties"].update(description="Hourly wage.")),
    ("a changed type and a renamed column",
     lambda d: (d["models"][4]["columns"][2].update(type="DATE"),
                d["models"][5]["columns"][1].update(name="venue_name"))),
    ("a removed model and a new one sharing texts", lambda d: (d["models"].pop(7), d[
        "models"].append({"name": "refunds", "columns": [
            {"name": "created_at", "type": "TIMESTAMP",
             "properties": {"description": "When the row was first loaded."}},
            {"name": "reason", "type": "VARCHAR"}]}))),
    ("a column made the same as one the table holds (its vector kept, not embedded)",
     lambda d: d["models"][3]["columns"].__setitem__(1, dict(d["models"][0]["columns"][1]))),
    ("a new relationship", lambda d: d["relationships"].append(
        {"name": "refund_orders", "models": ["refunds", "orders"], "joinType": "MANY_TO_ONE",
         "condition": "refunds.id = orders.id"})),
]


def test_a_sync_reading_its_changes_from_the_copy_writes_what_comparing_the_table_does(
        project_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two copies of one project take the same edits; one sync reads what the table holds
    from the search copy, the other compares every row of the table: the same rows, texts
    and vectors (bit for bit), the same reports, and each copy is its table's."""
    fast = project_copy
    full = tmp_path / "full"
    shutil.copytree(fast, full, symlinks=True)
    compared: list[str] = []
    real_read = schema_index.embedsync.read

    def existing(*args: object) -> object:
        compared.append("table")
        return real_read(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(schema_index.embedsync, "read", existing)
    fast_settings, full_settings = load_settings(fast), load_settings(full)
    embedder = get_embedder(fast_settings.embedder, root=fast)
    for settings in (fast_settings, full_settings):  # the copies are of the other folder
        edit_manifest(settings.manifest_path, lambda d: d["models"][0].update(
            properties={"description": "Singers, one row each."}))
        assert sync_schema(settings).written == 1
    assert compared == ["table", "table"]  # a copy no sync had checked: the table compared
    for what, change in EDITS:
        compared.clear()
        edit_manifest(fast_settings.manifest_path, change)
        edit_manifest(full_settings.manifest_path, change)
        got = sync_schema(fast_settings)
        assert compared == [], what  # read from the copy
        monkeypatch.setattr(schema_index, "KNOWN_MAX", -1)  # every row compared
        want = sync_schema(full_settings)
        monkeypatch.setattr(schema_index, "KNOWN_MAX", 500)
        assert compared == ["table"], what
        assert got.written and (got.embedded, got.deleted, got.written, got.items) == (
            want.embedded, want.deleted, want.written, want.items), what
        assert stored_rows(fast_settings) == stored_rows(full_settings), what
        for settings in (fast_settings, full_settings):
            copy = searchcopy.load(settings, embedder.model_id, searchcopy.listing(settings))
            assert copy is not None and copy.texts_version is not None, what
            assert_same_rows(copy, settings)
    searchcopy._recent.clear()  # the saved file, as a new process reads it
    copy = searchcopy.load(fast_settings, embedder.model_id, searchcopy.listing(fast_settings))
    assert copy is not None and copy.texts_version is not None
    assert_same_rows(copy, fast_settings)


@pytest.mark.parametrize("queued", [False, True])
def test_a_compaction_after_a_sync_keeps_the_copy_and_the_state_current(
        project_copy: Path, queued: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tenth commit compacts the table (rewrites its files): in the watcher after the
    index is up to date (queued with the file writes, wrenmem/schema/later.py), in any
    other process inside the sync; either way the copy and the state name the new files."""
    from wrenmem.fs import statedir
    from wrenmem.fs.fsutil import write_marshal
    from wrenmem.schema import later
    from wrenmem.storage import compaction

    settings = load_settings(project_copy)
    embedder = get_embedder(settings.embedder, root=settings.root)
    path = settings.manifest_path.resolve()
    edit_manifest(path, lambda d: d["models"][0].update(properties={"description": "A."}))
    sync_schema(settings)  # a copy this project's sync checked
    counter = settings.state_dir / statedir.SCHEMA_MAINT
    write_marshal(counter, compaction.COMPACT_EVERY - 1)
    edit_manifest(path, lambda d: d["models"][1].update(properties={"description": "B."}))
    from tests.conftest import settle as settle_ctime

    settle_ctime(monkeypatch)  # its change time too: the state records its stat
    if queued:
        with later.collect() as files:
            sync_schema(settings)
        written = searchcopy.listing(settings)
        assert files and compaction.maintenance_record(counter)["commits"] == compaction.COMPACT_EVERY - 1  # not yet
        later._run(files)
        assert searchcopy.listing(settings) != written  # the compaction rewrote its files
    else:
        sync_schema(settings)
    assert compaction.maintenance_record(counter)["commits"] == 0  # compacted
    after = searchcopy.listing(settings)
    assert schema_index.is_fresh(settings, path, embedder.model_id)  # its state: these files
    searchcopy._recent.clear()  # the saved copy is of these files, checked by a sync
    copy = searchcopy.load(settings, embedder.model_id, after)
    assert copy is not None and copy.texts_version is not None
    assert_same_rows(copy, settings)


def test_a_queued_copy_write_that_a_newer_one_superseded_is_not_made(
        project_copy: Path) -> None:
    from wrenmem.fs.fsutil import read_marshal
    from wrenmem.schema import later

    settings = load_settings(project_copy)
    rows = [("model:a", "h1", "model", "a", "")]
    old = searchcopy.SchemaCopy.build("m@1", rows, [np.ones(4, np.float32)])
    new = searchcopy.SchemaCopy.build("m@1", rows, [np.arange(4, dtype=np.float32)])
    with later.collect() as files:
        assert searchcopy.save(settings, old, {"data/a.lance": (1, 2)})
    assert files  # queued: the file is not written yet
    assert searchcopy.save(settings, new, {"data/b.lance": (3, 4)})  # written at once
    later._run(files)  # the older write comes late: the newer file stays
    saved = read_marshal(searchcopy.copy_path(settings))
    assert saved["listing"] == {"data/b.lance": (3, 4)}
    assert np.array_equal(np.frombuffer(saved["matrix"], np.float32), new.matrix[0])
