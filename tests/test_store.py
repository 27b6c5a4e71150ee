from __future__ import annotations

import multiprocessing
from pathlib import Path

from wrenmem.pairs.catalog import scan
from wrenmem.pairs.pairfile import Pair
from wrenmem.pairs.store import store_pair
from wrenmem.settings import load_settings


def test_new_question_gets_its_own_file(project: Path) -> None:
    settings = load_settings(project)
    result = store_pair(settings, Pair(nl="Total revenue?", sql="SELECT SUM(amount) FROM orders"))
    assert result.created and result.path == "knowledge/sql/total-revenue.md"
    stored = scan(settings).pairs[0]
    assert stored.sql == "SELECT SUM(amount) FROM orders" and stored.created_at


def test_same_question_updates_and_keeps_notes_and_created_at(project: Path) -> None:
    settings = load_settings(project)
    first = store_pair(settings, Pair(nl="Total revenue?", sql="SELECT 1", notes="Keep me."))
    path = project / first.path
    path.write_text(path.read_text() + "\nMore notes by hand.\n")
    second = store_pair(settings, Pair(nl="  Total revenue?  ", sql="SELECT 2", tags=("kpi",)))
    assert not second.created and second.path == first.path
    [pair] = scan(settings).pairs
    assert pair.sql == "SELECT 2" and pair.tags == ("kpi",)
    assert "Keep me." in pair.notes and "More notes by hand." in pair.notes
    assert pair.created_at == first.pair.created_at


def test_colliding_slugs_never_overwrite(project: Path) -> None:
    settings = load_settings(project)
    a = store_pair(settings, Pair(nl="Revenue?!", sql="SELECT 1"))
    b = store_pair(settings, Pair(nl="Revenue???", sql="SELECT 2"))
    assert (a.path, b.path) == ("knowledge/sql/revenue.md", "knowledge/sql/revenue-2.md")
    assert {p.nl: p.sql for p in scan(settings).pairs} == {"Revenue?!": "SELECT 1",
                                                           "Revenue???": "SELECT 2"}


def test_a_broken_file_with_the_same_slug_is_not_clobbered(project: Path) -> None:
    settings = load_settings(project)
    broken = project / "knowledge/sql/revenue.md"
    broken.write_text("---\nnl: [oops\n---\n")
    result = store_pair(settings, Pair(nl="Revenue", sql="SELECT 1"))
    assert result.path == "knowledge/sql/revenue-2.md"
    assert broken.read_text() == "---\nnl: [oops\n---\n"


def test_chinese_question_gets_a_chinese_name(project: Path) -> None:
    settings = load_settings(project)
    result = store_pair(settings, Pair(nl="每个客户的订单数量是多少？", sql="SELECT 1"))
    assert result.path == "knowledge/sql/每个客户的订单数量是多少.md"


def _store_many(root: str, worker: int) -> None:
    settings = load_settings(Path(root))
    for i in range(12):
        # Every worker uses the same slug for i (punctuation differs), so names collide.
        nl = f"Revenue {i}" + "?" * (worker + 1)
        store_pair(settings, Pair(nl=nl, sql=f"SELECT {worker * 100 + i}"))
    store_pair(settings, Pair(nl="Shared question", sql=f"SELECT {worker}"))


def test_concurrent_writers_lose_nothing(project: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_store_many, args=(str(project), w)) for w in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    found = scan(load_settings(project))
    assert found.errors == ()
    questions = {p.nl: p.sql for p in found.pairs}
    for worker in range(6):
        for i in range(12):
            assert questions[f"Revenue {i}" + "?" * (worker + 1)] == f"SELECT {worker * 100 + i}"
    assert questions["Shared question"] in {f"SELECT {w}" for w in range(6)}
    assert len(found.pairs) == 6 * 12 + 1
    assert not list((project / "knowledge/sql").glob(".wrenmem-*"))  # no temp files left
