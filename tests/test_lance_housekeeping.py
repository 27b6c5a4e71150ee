"""The LanceDB adapter's housekeeping: ``import lancedb`` without the REST client, a first
build that leaves one copy of each index, and the prune of what a compaction superseded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pytest
from conftest import REPO, write_pair

from tests.fakes import RecordingEmbedder
from tests.index_helpers import install_fake, settings_for
from wrenmem import lance
from wrenmem.index import state
from wrenmem.index import table as index
from wrenmem.index.sync import MAINT_NAME, sync_pairs

LAZY = textwrap.dedent("""
    import json, sys
    from wrenmem import lance
    lancedb = lance.import_lancedb()
    api = sorted(m for m in sys.modules if m.startswith("lance_namespace_urllib3_client.api"))
    import pyarrow as pa
    db = lance.connect(sys.argv[1])
    table = db.create_table("t", pa.table({"id": ["a", "b"], "terms": ["red fox", "blue"],
                                           "vector": [[1.0, 0.0], [0.0, 1.0]]}))
    lance.ensure_fts(table, "terms")
    fts = [r["id"] for r in table.search("fox", query_type="fts").limit(5).to_list()]
    near = [r["id"] for r in table.search([0.1, 0.9]).limit(1).to_list()]
    import lance_namespace_urllib3_client as client
    late = client.TableApi.__name__, client.ApiClient.__name__
    print(json.dumps({"api_at_import": api, "fts": fts, "near": near, "late": late,
                      "api_after": any(m.startswith("lance_namespace_urllib3_client.api.")
                                       for m in sys.modules)}))
""")


def test_lancedb_imports_without_its_rest_client_and_works(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", LAZY, str(tmp_path / "db")],
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["api_at_import"] == []  # the generated API modules were not imported
    assert out["fts"] == ["a"] and out["near"] == ["b"]
    # Anything else of the package still works: its real __init__ runs on first use.
    assert out["late"] == ["TableApi", "ApiClient"] and out["api_after"]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> RecordingEmbedder:
    return install_fake(monkeypatch)


def _index_folders(settings) -> list[str]:
    folder = Path(settings.index_uri) / "pairs.lance" / "_indices"
    return sorted(os.listdir(folder))


def _bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def test_a_first_build_leaves_one_copy_of_each_index(project: Path,
                                                     fake: RecordingEmbedder) -> None:
    """A build of COMPACT_AFTER_ROWS rows or more was compacted after its indexes were
    built, which rewrote them and left the first copies on disk (about 400 MB at 100,000
    pairs); a new table's indexes are built once over its rows and kept."""
    settings = settings_for(project)
    for i in range(lance.COMPACT_AFTER_ROWS + 10):
        write_pair(project, f"g{i % 7}/q{i}.md", f"How many orders in region {i}?",
                   f"SELECT {i}")
    report = sync_pairs(settings)
    assert report.rows == lance.COMPACT_AFTER_ROWS + 10 and not report.optimized
    table = index.open_table(index.connect(settings))
    assert len(_index_folders(settings)) == len(table.list_indices()) == 1
    counter = settings.state_dir / MAINT_NAME
    assert lance._maint_record(counter) == (0, None)  # nothing superseded: no prune later
    assert sync_pairs(settings).noop
    rebuilt = sync_pairs(settings, full=True)  # replaces the table: its old files go later
    assert rebuilt.rebuilt and not rebuilt.optimized
    assert lance._maint_record(counter)[1] is not None


def test_what_a_compaction_superseded_is_pruned_after_the_grace(
        project: Path, fake: RecordingEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_for(project)
    monkeypatch.setattr(lance, "CLEANUP_AFTER", timedelta(seconds=1))
    for i in range(40):
        write_pair(project, f"q{i}.md", f"How many orders in region {i}?", f"SELECT {i}")
    sync_pairs(settings)
    for n in range(lance.COMPACT_EVERY):  # small syncs until one compacts
        write_pair(project, f"q{n}.md", f"Edited question number {n}?", f"SELECT {n}")
        report = sync_pairs(settings)
    assert report.optimized
    folder = Path(settings.index_uri) / "pairs.lance"
    table = index.open_table(index.connect(settings))
    versions_before, size_before = len(table.list_versions()), _bytes(folder)
    counter = settings.state_dir / MAINT_NAME
    assert not lance.prune_due(counter)  # within the grace: a reader may read them
    time.sleep(1.2)
    assert lance.prune_due(counter)
    write_pair(project, "late.md", "How many returns last week?", "SELECT 1")
    report = sync_pairs(settings)  # the next write prunes, before it records the files
    assert report.optimized and not lance.prune_due(counter)
    table = index.open_table(index.connect(settings))
    assert len(table.list_versions()) < versions_before
    assert _bytes(folder) < size_before
    assert table.count_rows() == 41

    assert state.same_target(settings, state.load_state(settings), fake.model_id)
    assert sync_pairs(settings).noop


def test_the_maintenance_record_of_an_older_wrenmem_is_read(tmp_path: Path) -> None:
    from wrenmem.fsutil import write_marshal

    counter = tmp_path / "maint.bin"
    write_marshal(counter, 7)  # a bare count of commits
    assert lance._maint_record(counter) == (7, None)
    assert not lance.prune_due(counter)
