"""The LanceDB adapter's housekeeping: ``import lancedb`` without the REST client, and a first
build that leaves one copy of each index."""

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
from wrenmem.index import table as index
from wrenmem.index.sync import sync_pairs
from wrenmem.storage import compaction

LAZY = textwrap.dedent("""
    import json, sys
    from wrenmem.storage import lance
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
    for i in range(compaction.COMPACT_AFTER_ROWS + 10):
        write_pair(project, f"g{i % 7}/q{i}.md", f"How many orders in region {i}?",
                   f"SELECT {i}")
    report = sync_pairs(settings)
    assert report.rows == compaction.COMPACT_AFTER_ROWS + 10 and not report.optimized
    table = index.open_table(index.connect(settings))
    assert len(_index_folders(settings)) == len(table.list_indices()) == 1
    assert sync_pairs(settings).noop
    rebuilt = sync_pairs(settings, full=True)  # a rebuild is a new table too
    assert rebuilt.rebuilt and not rebuilt.optimized
    # ... and small syncs after it are counted from zero towards the next compaction.
    for n in range(compaction.COMPACT_EVERY - 1):
        write_pair(project, f"g0/q{n}.md", f"Edited question {n}?", f"SELECT {n}")
        assert not sync_pairs(settings).optimized
    write_pair(project, "g0/last.md", "The tenth small sync compacts", "SELECT 0")
    assert sync_pairs(settings).optimized


def _data_bytes(settings) -> int:
    return _bytes(Path(settings.index_uri) / "pairs.lance")


def test_a_compaction_keeps_what_it_superseded_for_the_grace_period_then_prunes_it(
        project: Path, fake: RecordingEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compaction rewrites the table: the copy it superseded stays while a reader may
    still be reading it (CLEANUP_AFTER after it stopped being the latest, not after it was
    made), and the first write after that prunes it, so `.wrenmem/` holds one copy again."""
    grace = 2.0
    monkeypatch.setattr(compaction, "CLEANUP_AFTER", timedelta(seconds=grace))
    settings = settings_for(project)
    n = compaction.COMPACT_AFTER_ROWS + 10
    for i in range(n):
        write_pair(project, f"g{i % 7}/q{i}.md", f"How many orders in region {i}?",
                   f"SELECT {i}")
    assert sync_pairs(settings).rows == n
    one_copy = _data_bytes(settings)
    live = index.open_table(index.connect(settings))  # follows the latest version
    time.sleep(grace + 0.5)  # the first index's versions were made longer ago than that
    # A reader that opened the latest version just now and is still reading it:
    pinned = index.open_table(index.connect(settings))
    before = pinned.version
    pinned.checkout(before)
    for i in range(compaction.COMPACT_AFTER_ROWS):
        write_pair(project, f"g{i % 7}/q{i}.md", f"How many returns in region {i}?",
                   f"SELECT {i}")
    assert sync_pairs(settings).optimized  # a write this big compacts
    old = pinned.search().select(["id", "question"]).limit(None).to_arrow().to_pylist()
    assert len(old) == n and sum("orders" in r["question"] for r in old) == n
    assert before in {v["version"] for v in live.list_versions()}
    assert _data_bytes(settings) > 1.8 * one_copy  # the superseded copy is still there

    time.sleep(grace + 0.5)
    write_pair(project, "g0/q0.md", "How many refunds in region 0?", "SELECT 0")
    assert sync_pairs(settings).changed == ("knowledge/sql/g0/q0.md",)
    assert before not in {v["version"] for v in live.list_versions()}
    assert _data_bytes(settings) < 1.3 * one_copy  # one copy (and one small write) left
    rows = live.search().select(["id", "question"]).limit(None).to_arrow().to_pylist()
    questions = sorted(r["question"] for r in rows)
    assert len(rows) == n and questions.count("How many refunds in region 0?") == 1
    assert sum("returns" in q for q in questions) == compaction.COMPACT_AFTER_ROWS - 1
    assert not [v for v in live.list_versions() if v["version"] < live.version - 3]


def test_the_grace_period_counts_from_when_a_version_was_superseded() -> None:
    """LanceDB prunes versions *made* before now - older_than; wrenmem's age keeps every
    version that was the latest within the grace period, however old it is."""
    from datetime import datetime

    now = datetime(2026, 12, 1, 12, 0, 0)

    class Versions:
        def __init__(self, *made: float) -> None:
            self.made = made

        def list_versions(self) -> list[dict]:
            return [{"version": n + 1, "timestamp": now - timedelta(seconds=s)}
                    for n, s in enumerate(self.made)]

    grace = compaction.CLEANUP_AFTER.total_seconds()
    margin = timedelta(seconds=1)
    # v1 made an hour ago, superseded by v2 ten seconds ago: v1 stays (a compaction now).
    assert compaction.cleanup_age(Versions(3600, 10), superseding=True, margin=margin,
                             now=now) > timedelta(days=3000)
    # v2 made longer ago than the grace: v1 may go, v2 stays (cut at v2's time).
    age = compaction.cleanup_age(Versions(3600, grace + 30, 5), superseding=True, margin=margin,
                            now=now)
    assert age == timedelta(seconds=grace + 30) + margin
    # Nothing writes now and the latest is older than the grace: all but the latest go.
    assert compaction.cleanup_age(Versions(3600, grace + 30), superseding=False,
                             now=now) == timedelta(seconds=1)
    # ... but not while the latest is younger than it (then only what it allows).
    assert compaction.cleanup_age(Versions(3600, 10), superseding=False,
                             now=now) > timedelta(days=3000)
