"""An `index_uri` folder other checkouts read (a shared mount, not object storage): every
sync, a small one too, writes the folder's table, so its readers see it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_wrenmem, write_pair

pytest.importorskip("lancedb")


def questions_in(folder: Path) -> set[str]:
    import lancedb

    table = lancedb.connect(str(folder)).open_table("pairs")
    return set(table.to_arrow().column("question").to_pylist())


def test_a_small_sync_reaches_a_shared_folder(project: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared-index"
    env = {"WRENMEM_INDEX_URI": str(shared)}
    write_pair(project, "first.md", "First question", "SELECT 1")
    assert run_wrenmem(["sync"], project, env=env).returncode == 0
    write_pair(project, "second.md", "Second question", "SELECT 2")
    done = run_wrenmem(["sync"], project, env=env)
    assert done.returncode == 0, done.stderr
    assert "Second question" in questions_in(shared)
    assert "in sync" in run_wrenmem(["check"], project, env=env).stdout   # the writer's view
