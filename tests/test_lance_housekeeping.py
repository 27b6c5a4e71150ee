"""The LanceDB adapter's housekeeping: ``import lancedb`` without the REST client, and a first
build that leaves one copy of each index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO, write_pair

from tests.fakes import RecordingEmbedder
from tests.index_helpers import install_fake, settings_for
from wrenmem import lance
from wrenmem.index import table as index
from wrenmem.index.sync import sync_pairs

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
    assert sync_pairs(settings).noop
    rebuilt = sync_pairs(settings, full=True)  # a rebuild is a new table too
    assert rebuilt.rebuilt and not rebuilt.optimized
    # ... and small syncs after it are counted from zero towards the next compaction.
    for n in range(lance.COMPACT_EVERY - 1):
        write_pair(project, f"g0/q{n}.md", f"Edited question {n}?", f"SELECT {n}")
        assert not sync_pairs(settings).optimized
    write_pair(project, "g0/last.md", "The tenth small sync compacts", "SELECT 0")
    assert sync_pairs(settings).optimized
