"""store's lookup of the pairs that ask a question (wrenmem.pairs.questions) against the scan
of every file it replaces: the same pairs after every kind of change, and fewer files read."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.conftest import SHORT_RACY_SECONDS as RACY
from tests.conftest import short_racy_window, write_pair
from wrenmem import Memory
from wrenmem.pairs import catalog, questions
from wrenmem.pairs.catalog import scan
from wrenmem.pairs.pairfile import Pair
from wrenmem.settings import Settings, load_settings

ASKED = ["How many orders are there?", "how many   orders are there",
         "HOW MANY ORDERS ARE THERE？", "Ｈow many orders are there?", "Cafe\u0301 sales by day?", "Café sales by day",
         "Which region sold most?", "每个国家有多少歌手？", "每个国家有多少歌手", "Unasked question?"]


@pytest.fixture(autouse=True)
def _short_racy_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests wait out the racy window (RACY + 0.1 s): half a second, not two."""
    short_racy_window(monkeypatch)


def _by_scan(settings: Settings, question: str) -> list[Pair]:
    return [p for p in scan(settings, use_cache=False).pairs if questions.asks(p, question)]


def _check(settings: Settings, what: str) -> None:
    for question in ASKED:
        got = questions.asking(settings, question)
        want = _by_scan(settings, question)
        assert [(p.path, p.nl, p.sql) for p in got] == [(p.path, p.nl, p.sql) for p in want], (
            what, question)


class _Reads:
    """The files ``asking`` reads (``catalog.read_paths``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.paths: list[str] = []
        real = catalog.read_paths

        def read_paths(settings: Settings, rels: list[str]) -> object:
            self.paths += list(rels)
            return real(settings, rels)

        monkeypatch.setattr(questions, "read_paths", read_paths)


def test_asking_finds_what_a_scan_of_every_file_finds(project: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for i, q in enumerate(ASKED[:-1]):
        write_pair(project, f"g{i % 3}/q{i}.md", q, f"SELECT {i}")
    for i in range(30):
        write_pair(project, f"g{i % 4}/other{i}.md", f"How many customers in region {i}?",
                   f"SELECT {i}")
    (project / "knowledge" / "sql" / "g1" / "broken.md").write_text("no front matter",
                                                                    encoding="utf-8")
    settings = load_settings(project)
    _check(settings, "first call (the record is built from a scan)")
    time.sleep(RACY + 0.1)
    # The files were too recent for the first record's stats: read once more, recorded.
    _check(settings, "the files now older than the clock's granularity")
    reads = _Reads(monkeypatch)
    _check(settings, "nothing changed")
    assert reads.paths and not any("other" in p for p in reads.paths)  # only the askers

    sql = project / "knowledge" / "sql"
    edited = sql / "g2" / "other2.md"
    edited.write_text(edited.read_text(encoding="utf-8").replace(
        "How many customers in region 2?", "How many orders are there?   "), encoding="utf-8")
    _check(settings, "a file now asks the question (the same second)")
    write_pair(project, "g0/new.md", "how many orders are there!", "SELECT 99")
    _check(settings, "a new file asks it")
    (sql / "g0" / "q0.md").unlink()
    _check(settings, "a file that asked it is gone")
    (sql / "g1" / "q1.md").rename(sql / "g3" / "moved.md")
    _check(settings, "renamed into another folder")
    (sql / "g1" / "broken.md").write_text("---\nnl: Which region sold most?\nsql: SELECT 7\n"
                                          "---\n", encoding="utf-8")
    _check(settings, "a broken file repaired")
    time.sleep(RACY + 0.1)
    _check(settings, "settled")
    racy = sql / "g2" / "other6.md"
    racy.write_text(racy.read_text(encoding="utf-8").replace("region 6?", "region X?"),
                    encoding="utf-8")
    _check(settings, "recorded just after an edit")
    before = racy.stat()
    racy.write_text(racy.read_text(encoding="utf-8").replace(
        "How many customers in region X?", "Which region sold most?!!!!!!!!"), encoding="utf-8")
    os.utime(racy, ns=(before.st_atime_ns, before.st_mtime_ns))  # one clock tick: same key
    assert racy.stat().st_size == before.st_size
    _check(settings, "a same-size edit within the tick of the recorded stat")
    (settings.state_dir / questions.FILE_NAME).write_bytes(b"damaged")
    _check(settings, "a damaged record")


def test_store_updates_the_file_of_its_question_among_100_files(project: Path) -> None:
    for i in range(100):
        write_pair(project, f"g{i % 5}/q{i}.md", f"How many orders in region {i}?",
                   f"SELECT {i}")
    memory = Memory(project)
    first = memory.store("How many orders in region 42?", "SELECT 42 AS again", force=True)
    assert not first.created and first.path == "knowledge/sql/g2/q42.md"
    time.sleep(0.01)
    again = memory.store("How many orders in region 42?", "SELECT 'third'", force=True)
    assert again.path == first.path and not again.created
    made = memory.store("A brand new question?", "SELECT 1", force=True)
    assert made.created
    assert memory.store("A brand   new question?", "SELECT 2", force=True).path == made.path
    assert sum(1 for p in scan(memory.settings).pairs if "region 42" in p.nl) == 1


def test_a_sync_records_the_questions_so_the_first_store_scans_nothing(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sync reads every file of a first index anyway: it leaves ``questions.bin``,
    and the first ``store`` after it finds its question's files without a catalog scan,
    with the answers of a scan of every file (also for a file edited after the sync)."""
    from tests.index_helpers import install_fake, settings_for
    from wrenmem.index.sync import sync_pairs

    install_fake(monkeypatch)
    for i, q in enumerate(ASKED[:-1]):
        write_pair(project, f"g{i % 3}/q{i}.md", q, f"SELECT {i}")
    for i in range(30):
        write_pair(project, f"g{i % 4}/other{i}.md", f"How many customers in region {i}?",
                   f"SELECT {i}")
    time.sleep(RACY + 0.1)
    settings = settings_for(project)
    record = settings.state_dir / questions.FILE_NAME
    assert not record.exists()
    sync_pairs(settings)
    assert record.exists()
    edited = project / "knowledge" / "sql" / "g2" / "other2.md"
    edited.write_text(edited.read_text(encoding="utf-8").replace(
        "How many customers in region 2?", "How many orders are there?"), encoding="utf-8")

    def no_scan(*args: object, **kw: object) -> None:
        raise AssertionError("the catalog was scanned")

    expected = {q: _by_scan(settings, q) for q in ASKED}
    monkeypatch.setattr(questions, "scan", no_scan)
    reads = _Reads(monkeypatch)
    for question in ASKED:
        got = questions.asking(settings, question)
        assert [(p.path, p.nl) for p in got] == [(p.path, p.nl) for p in expected[question]]
    assert "knowledge/sql/g2/other2.md" in reads.paths  # edited after the sync: read
    assert not any("other1" in p for p in reads.paths)


def test_forget_and_show_by_question_read_only_the_files_asking_it(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Memory.get`` (``forget <question>``, ``show``) finds a question, exactly or but for
    case, among the files :func:`questions.asking` reads, with no scan of every file; two
    files asking it are refused either way."""
    for i in range(40):
        write_pair(project, f"g{i % 4}/q{i}.md", f"How many orders in region {i}?",
                   f"SELECT {i}")
    write_pair(project, "g0/twin-a.md", "Which store sold most?", "SELECT 1")
    write_pair(project, "g1/twin-b.md", "Which store sold most?", "SELECT 2")
    memory = Memory(project)
    memory.get("How many orders in region 3?")  # builds the record
    time.sleep(RACY + 0.1)
    memory.get("How many orders in region 3?")
    scans: list[int] = []
    real = catalog.scan

    def counted(*args: object, **kw: object) -> object:
        scans.append(1)
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(catalog, "scan", counted)
    assert memory.get("How many orders in region 17?").path == "knowledge/sql/g1/q17.md"
    assert memory.get("How many  orders in region 17?").path == "knowledge/sql/g1/q17.md"
    with pytest.raises(Exception, match="matches 2 stored questions") as refused:
        memory.get("Which store sold most?")
    assert "twin-a.md" in str(refused.value) and "twin-b.md" in str(refused.value)
    assert scans == []
    assert memory.get("how many orders in region 17?").path == "knowledge/sql/g1/q17.md"
    with pytest.raises(Exception, match="differ only in case"):
        memory.get("WHICH STORE SOLD MOST?")
    with pytest.raises(Exception, match="no pair file or stored question matches"):
        memory.get("How many orders in region 99?")
    assert scans == []  # equal but for case, or asked nowhere: still no scan
    assert memory.forget(["How many orders in region 5?"]) == ["knowledge/sql/g1/q5.md"]
    assert not (project / "knowledge" / "sql" / "g1" / "q5.md").exists()
