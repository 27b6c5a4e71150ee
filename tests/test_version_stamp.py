"""A warm backend asks LanceDB for the table's latest version only when the table's
versions folder changed (or changed too recently to tell): a write by another process is
seen at the next search all the same."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import run_wrenmem, write_pair
from test_read_copy import QUESTIONS, _fill

from wrenmem.index import table as index
from wrenmem.index.sync import sync_pairs
from wrenmem.recall.hits import Filters
from wrenmem.recall.vector import HybridBackend
from wrenmem.settings import load_settings
from wrenmem.storage import lance


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("stamp") / "proj"
    (root / "knowledge" / "sql").mkdir(parents=True)
    _fill(root)
    sync_pairs(load_settings(root))
    return root


def versions_folder(root: Path) -> Path:
    return root / ".wrenmem" / "index" / f"{index.TABLE}.lance" / "_versions"


def age(folder: Path, seconds: float = 60.0) -> None:
    """Set the folder's times back, as a folder last changed a minute ago."""
    then = time.time_ns() - int(seconds * 1e9)
    os.utime(folder, ns=(then, then))


def counting_versions(monkeypatch: pytest.MonkeyPatch, table: Any) -> list[int]:
    """Every read of LanceDB's ``version`` of tables of ``table``'s class, counted."""
    asked: list[int] = []
    real = type(table).version

    def version(self: Any) -> int:
        asked.append(1)
        return real.fget(self)

    monkeypatch.setattr(type(table), "version", property(version))
    return asked


def test_a_settled_unchanged_folder_answers_and_a_write_is_seen(
        built: Path, copy_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = copy_project(built)
    settings = load_settings(root)
    backend = HybridBackend(settings)
    table = backend.table()
    asked = counting_versions(monkeypatch, table)
    folder = versions_folder(root)
    age(folder)
    assert lance.versions_stamp(settings.index_uri, index.TABLE) is not None
    first = backend.latest_version()
    assert asked == [1]
    for _ in range(3):
        assert backend.latest_version() == first
        backend.search(QUESTIONS[:1], 3, Filters())  # (the first holds the copy)
    assert asked == [1]  # the folder said nothing was committed
    assert backend._memory is not None and backend._memory[1] == first
    write_pair(root, "new/okapi.md", "How many okapis were adopted?", "SELECT 2")
    assert run_wrenmem(["sync"], root).returncode == 0  # another process commits
    assert lance.versions_stamp(settings.index_uri, index.TABLE) is None  # just changed
    assert backend.latest_version() > first and len(asked) == 2
    got = backend.search(["okapis adopted"], 3, Filters())
    assert got[0][0].path == "knowledge/sql/new/okapi.md"
    age(folder)
    newer = backend.latest_version()  # asked again: the stamp is not the one it knew
    assert newer > first and len(asked) >= 3
    count = len(asked)
    assert backend.latest_version() == newer and len(asked) == count


def test_a_recently_changed_folder_is_always_asked(
        built: Path, copy_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within the settle time a commit could leave the folder's time as it was: ask."""
    root = copy_project(built)
    settings = load_settings(root)
    backend = HybridBackend(settings)
    asked = counting_versions(monkeypatch, backend.table())
    folder = versions_folder(root)
    now = time.time_ns()
    os.utime(folder, ns=(now, now))
    for n in range(1, 4):
        backend.latest_version()
        assert len(asked) == n
    assert lance.versions_stamp(settings.index_uri, index.TABLE) is None
