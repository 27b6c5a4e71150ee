"""The grep snapshot answers exactly what building the BM25F index from the files answers,
and only while no pair file (nor the manifest) changed."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from conftest import settle, write_pair

from wrenmem.recall import bm25f, grepsnap
from wrenmem.recall.bm25f import GrepBackend
from wrenmem.recall.hits import Filters
from wrenmem.settings import load_settings

THINGS = ["orders", "customers", "products", "invoices", "stores", "employees", "suppliers",
          "shipments", "refunds", "reviews", "singers", "airports", "students", "courses"]
MEASURES = ["price", "age", "amount", "rating", "weight", "count", "total", "name"]
QUESTIONS = ["How many orders are there?", "average price of products per store",
             "which supplier has the highest rating", "每个门店的订单数量是多少？",
             "list refunds with amount above 100", "top customers by total amount",
             "How many singers do we have?", "Average age of students",
             "names of airports", "rating", "orders", "the", "How many courses are there?",
             "What is the total weight of shipments in region 7?", "employees name age",
             "orders in store"]


def _fill(root: Path) -> None:
    """Pairs with twins (one SQL, several questions and files), a question stored twice,
    datasources, tags, and one file that cannot be read."""
    n = 0
    for thing in THINGS:
        table = thing.rstrip("s")
        for measure in MEASURES:
            for region in range(3):
                n += 1
                sql = f"SELECT AVG({measure}) FROM {table}"
                if region:
                    sql += f" WHERE region = {region}"
                write_pair(root, f"{thing}/{measure}-{region}.md",
                           f"What is the average {measure} of {thing} in region {region}?",
                           sql, datasource="shop" if n % 3 else "crm",
                           tags="[kpi]" if n % 4 == 0 else "[]")
                write_pair(root, f"{thing}/twin-{measure}-{region}.md",  # another wording
                           f"{measure} of the {thing}, on average, region {region}",
                           sql.lower(), datasource="shop" if n % 3 else "crm")
        write_pair(root, f"{thing}/count.md", f"How many {thing} are there?",
                   f"SELECT COUNT(*) FROM {table}")
    for store in range(150):  # one answer in 150 files, ahead of all the others: the best
        write_pair(root, f"many/store-{store}.md",  # 4k + 16 pairs are one answer
                   f"How many orders are there in store {store}?",
                   "SELECT COUNT(*) FROM orders WHERE store = :store")
    write_pair(root, "again/orders.md", "How many orders are there?",
               "SELECT COUNT(*) FROM orders WHERE NOT cancelled")
    (root / "knowledge" / "sql" / "broken.md").write_text("---\nnl: [unclosed\n---\n")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(grepsnap, "MIN_PAIRS", 100)  # 837 pairs: a snapshot is saved
    monkeypatch.setattr(grepsnap, "SAVE_EVERY_SECONDS", 0.0)  # after every build
    root = tmp_path / "proj"
    (root / "knowledge" / "sql").mkdir(parents=True)
    _fill(root)
    past = time.time() - 60  # older than a stat can be trusted for
    for path in (root / "knowledge").rglob("*.md"):
        os.utime(path, (past, past))
    settle(monkeypatch)  # the change times too
    return root


def _answers(settings, snapshots: bool, k: int) -> list:  # type: ignore[no-untyped-def]
    backend = GrepBackend(settings)
    backend.snapshots = snapshots
    found = backend.search(QUESTIONS, k, Filters())
    return [*found, [(e.path, e.reason, e.line) for e in backend.skipped]]


@pytest.mark.parametrize("k", [1, 3, 10, 40])
def test_the_snapshot_answers_what_the_files_answer(project: Path, k: int,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(project)
    path = grepsnap.snapshot_path(settings)
    want = _answers(settings, False, k)
    assert not path.exists()
    first = _answers(settings, True, k)  # builds the index and saves the snapshot
    assert path.exists() and first == want
    built: list[int] = []
    monkeypatch.setattr(bm25f.GrepBackend, "index", lambda *a: built.append(1))
    got = _answers(settings, True, k)  # from the snapshot: no file read, nothing built
    assert built == []
    assert got == want
    assert any(h.also for hits in got[:-1] for h in hits)  # twins were folded together
    assert [e[0] for e in got[-1]] == ["knowledge/sql/broken.md"]


def test_a_changed_file_or_manifest_makes_the_snapshot_stale(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(project)
    _answers(settings, True, 3)
    key = grepsnap.listing_key(settings)
    assert grepsnap.load(settings, key) is not None
    target = project / "knowledge" / "sql" / "orders" / "count.md"
    write_pair(project, "orders/count.md", "How many capybaras are there?",
               "SELECT COUNT(*) FROM capybara")
    assert grepsnap.listing_key(settings) is None  # too recent for a stat to vouch for
    past = time.time() - 30
    os.utime(target, (past, past))
    settle(monkeypatch)
    assert grepsnap.load(settings, grepsnap.listing_key(settings)) is None  # stale
    [hits, *_rest] = GrepBackend(settings).search(["How many capybaras are there?"], 1,
                                                   Filters())
    assert hits[0].path == "knowledge/sql/orders/count.md"
    fresh = grepsnap.listing_key(settings)
    assert grepsnap.load(settings, fresh) is not None  # that search saved a new one
    monkeypatch.setattr(grepsnap, "SAVE_EVERY_SECONDS", 3600.0)  # one saved moments ago
    (project / "knowledge" / "sql" / "orders" / "price-0.md").unlink()
    GrepBackend(settings).search(["orders"], 1, Filters())
    assert grepsnap.load(settings, grepsnap.listing_key(settings)) is None  # not saved again
    monkeypatch.setattr(grepsnap, "SAVE_EVERY_SECONDS", 0.0)
    GrepBackend(settings).search(["orders"], 1, Filters())
    fresh = grepsnap.listing_key(settings)
    assert grepsnap.load(settings, fresh) is not None
    (project / "target").mkdir()
    manifest = project / "target" / "mdl.json"
    manifest.write_text('{"catalog": "c", "schema": "s", "models": []}')
    os.utime(manifest, (past, past))
    assert grepsnap.listing_key(settings) != fresh  # the seeds' input
    (project / "knowledge" / "sql" / "refunds" / "count.md").unlink()
    assert grepsnap.load(settings, grepsnap.listing_key(settings)) is None


def test_a_snapshot_read_ahead_is_used_only_under_the_key_listed_with_it(
        project: Path) -> None:
    """The snapshot is read in a thread while the files are listed; what was read is used
    only if its key is that of the listing (a change in between: the files answer)."""
    settings = load_settings(project)
    _answers(settings, True, 3)
    saved = grepsnap.read_ahead(settings)
    assert grepsnap.load(settings, grepsnap.listing_key(settings), saved()) is not None
    early = grepsnap.read_ahead(settings)()  # read before the change below
    gone = project / "knowledge" / "sql" / "refunds" / "count.md"
    gone.unlink()
    assert grepsnap.load(settings, grepsnap.listing_key(settings), early) is None
    [hits] = GrepBackend(settings).search(["How many refunds are there?"], 5, Filters())
    assert hits and "knowledge/sql/refunds/count.md" not in {h.path for h in hits}
    for h in hits:
        assert "knowledge/sql/refunds/count.md" not in h.also_paths
    grepsnap.snapshot_path(settings).unlink()
    assert grepsnap.read_ahead(settings)() is None  # nothing saved: nothing read


def test_filters_and_given_pairs_never_use_the_snapshot(project: Path,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    settings = load_settings(project)
    _answers(settings, True, 3)
    monkeypatch.setattr(grepsnap, "load", lambda *a: pytest.fail("snapshot used"))
    [hits] = GrepBackend(settings).search(["orders"], 3, Filters(datasource="crm"))
    assert hits and all(h.datasource == "crm" for h in hits)


def test_a_damaged_snapshot_is_not_used(project: Path) -> None:
    settings = load_settings(project)
    want = _answers(settings, False, 5)
    _answers(settings, True, 5)
    path = grepsnap.snapshot_path(settings)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert grepsnap.load(settings, grepsnap.listing_key(settings)) is None
    assert _answers(settings, True, 5) == want


def test_seeds_rank_from_the_snapshot_as_from_the_files(example_project: Path,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    monkeypatch.setattr(grepsnap, "MIN_PAIRS", 1)
    monkeypatch.setattr(grepsnap, "SAVE_EVERY_SECONDS", 0.0)
    past = time.time() - 60
    for path in [*example_project.rglob("*.md"), *example_project.rglob("*.json")]:
        os.utime(path, (past, past))
    settle(monkeypatch)
    settings = load_settings(example_project)
    asked = ["revenue per month", "customers who never ordered", "How many orders?",
             "top products by sales", "orders per customer", "average order value"]
    backend = GrepBackend(settings)
    backend.snapshots = False
    want = backend.search(asked, 5, Filters())
    assert any(h.source == "seed" for hits in want for h in hits)
    GrepBackend(settings).search(asked, 5, Filters())  # saves the snapshot
    assert grepsnap.load(settings, grepsnap.listing_key(settings)) is not None
    assert GrepBackend(settings).search(asked, 5, Filters()) == want
