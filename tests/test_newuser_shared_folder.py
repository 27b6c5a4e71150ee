"""An `index_uri` folder other checkouts read (a shared mount, not object storage): a
writer's small sync goes to its own `.wrenmem/pairs-journal.bin`, which the folder's
readers never see; with `WRENMEM_JOURNAL=never` every sync writes the folder's table, as
docs/index-and-sync.md says."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_wrenmem, write_pair

pytest.importorskip("lancedb")


def questions_in(folder: Path) -> set[str]:
    import lancedb

    table = lancedb.connect(str(folder)).open_table("pairs")
    return set(table.to_arrow().column("question").to_pylist())


@pytest.mark.parametrize("journal, reaches_the_folder", [("auto", False), ("never", True)])
def test_a_small_sync_reaches_a_shared_folder_only_without_the_journal(
        project: Path, tmp_path: Path, journal: str, reaches_the_folder: bool) -> None:
    shared = tmp_path / "shared-index"
    env = {"WRENMEM_INDEX_URI": str(shared), "WRENMEM_JOURNAL": journal}
    write_pair(project, "first.md", "First question", "SELECT 1")
    assert run_wrenmem(["sync"], project, env=env).returncode == 0
    write_pair(project, "second.md", "Second question", "SELECT 2")
    done = run_wrenmem(["sync"], project, env=env)
    assert done.returncode == 0, done.stderr
    assert ("in the journal" in done.stdout) is not reaches_the_folder, done.stdout
    assert ("Second question" in questions_in(shared)) is reaches_the_folder
    assert "in sync" in run_wrenmem(["check"], project, env=env).stdout   # the writer's view
