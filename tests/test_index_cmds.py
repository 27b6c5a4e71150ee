"""The index commands as a user runs them: real LanceDB, the real default model; real
processes for the status, reset, kill and concurrency tests (the logic of store, recall,
edit and delete runs in this process)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from conftest import PROCESS_TIMEOUT, REPO, write_pair

from wrenmem.index.autosync import update_after_write
from wrenmem.settings import load_settings

pytestmark = pytest.mark.slow
Run = Callable[..., subprocess.CompletedProcess]


def _json(proc: subprocess.CompletedProcess) -> object:
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def test_store_recall_edit_delete_check(project: Path, cli: Callable[..., Result]) -> None:
    """The commands in this process (test_status_reset_and_full runs them as processes)."""
    def run(*args: str) -> Result:
        done = cli(*args)
        assert done.exit_code in (0, 1), done.output
        return done

    def out(*args: str) -> object:
        return json.loads(run(*args).stdout)

    done = run("store", "--nl", "How many orders were placed last month?",
               "--sql", "SELECT COUNT(*) FROM orders WHERE ordered_at >= now() - interval '1 month'")
    assert done.exit_code == 0, done.output
    run("store", "--nl", "每个门店的销售额是多少？", "--sql",
        "SELECT store_id, SUM(amount) FROM orders GROUP BY store_id")
    run("store", "--nl", "List the products that were never ordered",
        "--sql", "SELECT p.* FROM products p LEFT JOIN order_items i ON i.product_id = p.id "
        "WHERE i.id IS NULL")
    shapes = []
    for backend in ("grep", "vector", "hybrid"):
        got = out("recall", "-q", "每个门店的销售额", "-k", "2", "--json", "--backend", backend)
        assert isinstance(got, list)
        top = got[0]["hits"][0]
        assert top["question"] == "每个门店的销售额是多少？" and top["backend"] == backend
        shapes.append(sorted(top))
    assert shapes[0] == shapes[1] == shapes[2]
    # Ask in Chinese, stored in English.
    got = out("recall", "-q", "哪些商品从来没有被订购过？", "-k", "1", "--json",
              "--backend", "vector")
    assert got[0]["hits"][0]["question"] == "List the products that were never ordered"

    status = out("status", "--json")
    assert status["backend"] == "hybrid" and status["fresh"] is True and status["pairs"] == 3

    target = next((project / "knowledge/sql").glob("how-many-orders*.md"))
    target.write_text(target.read_text().replace("last month", "in the last 30 days"))
    check = run("check", "--json")
    assert check.exit_code == 1 and json.loads(check.stdout)["changed"] == [
        "knowledge/sql/" + target.name]
    report = out("sync", "--json")
    assert report["embedded"] == 1 and report["changed"] == ["knowledge/sql/" + target.name]
    assert run("check").exit_code == 0

    gone = next((project / "knowledge/sql").glob("list-the-products*.md"))
    gone.unlink()
    assert run("check").exit_code == 1
    report = out("index", "--json")  # the alias
    assert report["removed"] == ["knowledge/sql/" + gone.name] and report["embedded"] == 0
    assert run("check").exit_code == 0
    for backend in ("vector", "hybrid"):
        got = out("recall", "-q", "List the products that were never ordered", "-k", "5",
                  "--json", "--backend", backend)
        assert all(h["path"] != "knowledge/sql/" + gone.name for h in got[0]["hits"])
    assert out("sync", "--json")["noop"] is True


def test_recall_after_hand_delete_without_sync_never_returns_it(project: Path,
                                                                wrenmem_proc: Run) -> None:
    write_pair(project, "a.md", "Total revenue by region", "SELECT region, SUM(x) FROM t")
    write_pair(project, "b.md", "Number of customers", "SELECT COUNT(*) FROM customers")
    assert wrenmem_proc("sync").returncode == 0
    (project / "knowledge/sql/a.md").unlink()
    out = _json(wrenmem_proc("recall", "-q", "Total revenue by region", "--json", "-b",
                             "hybrid"))
    assert [h["path"] for h in out[0]["hits"]] == ["knowledge/sql/b.md"]


def test_status_reset_and_full(project: Path, wrenmem_proc: Run) -> None:
    write_pair(project, "a.md", "Total revenue by region", "SELECT 1")
    status = _json(wrenmem_proc("status", "--json"))
    assert status["index_missing"] is True and status["fresh"] is False
    assert wrenmem_proc("check").returncode == 1
    synced = wrenmem_proc("sync")
    assert synced.returncode == 0 and "1 added" in synced.stdout, synced.stderr
    assert synced.stderr == ""  # no model-loading or LanceDB noise
    full = _json(wrenmem_proc("sync", "--full", "--json"))
    assert full["rebuilt"] is True and full["embedded"] == 1
    reset = wrenmem_proc("reset")
    assert reset.returncode == 0 and "dropped" in reset.stdout
    assert _json(wrenmem_proc("status", "--json"))["index_missing"] is True
    for cmd in ("sync", "index", "status", "check", "reset"):
        assert wrenmem_proc(cmd, "--help").returncode == 0


def test_after_write_only_when_an_index_exists(project: Path) -> None:
    settings = load_settings(project)
    write_pair(project, "a.md", "Total revenue by region", "SELECT 1")
    assert update_after_write(settings, ["knowledge/sql/a.md"]).note() is None
    assert not (project / ".wrenmem" / "index").exists()
    from wrenmem.index.drift import check_drift
    from wrenmem.index.sync import sync_pairs

    sync_pairs(settings)
    write_pair(project, "b.md", "Number of customers", "SELECT COUNT(*) FROM customers")
    assert update_after_write(settings, ["knowledge/sql/b.md"]).note() == \
        "index: 1 pair(s) indexed (1 embedded)"
    drift = check_drift(settings)
    assert drift.fresh and drift.from_state and drift.rows == 2


KILLER_PAIRS = 400


def test_kill_9_during_syncs_then_sync_is_clean(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    for n in range(KILLER_PAIRS):
        write_pair(root, f"g{n % 7}/q{n}.md", f"Question {n}: how many units of item {n}?",
                   f"SELECT COUNT(*) FROM t WHERE item = {n}")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rng = random.Random(7)
    for attempt in range(4):
        # Change something every round: edits, deletes, renames, new files.
        for n in rng.sample(range(KILLER_PAIRS), 20):
            path = root / "knowledge/sql" / f"g{n % 7}" / f"q{n}.md"
            if not path.exists():
                continue
            action = rng.choice(["edit", "delete", "rename"])
            if action == "edit":
                path.write_text(path.read_text().replace("units", f"pieces{attempt}"))
            elif action == "delete":
                path.unlink()
            else:
                path.rename(path.with_name(f"r{attempt}-{path.name}"))
        proc = subprocess.Popen([sys.executable, "-m", "wrenmem", "sync"], cwd=root, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(1.0, 3.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    done = subprocess.run([sys.executable, "-m", "wrenmem", "sync", "--json"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=PROCESS_TIMEOUT)
    assert done.returncode == 0, done.stderr
    check = subprocess.run([sys.executable, "-m", "wrenmem", "check", "--json"], cwd=root,
                           env=env, capture_output=True, text=True, timeout=PROCESS_TIMEOUT)
    assert check.returncode == 0, check.stdout
    from wrenmem.index import table as index
    settings = load_settings(root)
    table = index.open_table(index.connect(settings))
    ids = table.search().select(["id"]).limit(None).to_arrow().column("id").to_pylist()
    files = sorted(settings.relpath(p) for p in (root / "knowledge/sql").rglob("*.md"))
    assert sorted(ids) == files  # no lost pair, no stale row, no duplicate


def test_concurrent_stores_lose_nothing(project: Path, wrenmem_proc: Run) -> None:
    write_pair(project, "seed.md", "Total revenue by region", "SELECT 1")
    assert wrenmem_proc("sync").returncode == 0
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-m", "wrenmem", "store", "--nl",
                               f"How many orders came from store number {n}?", "--sql",
                               f"SELECT COUNT(*) FROM orders WHERE store_id = {n}"],
                              cwd=project, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for n in range(4)]
    for proc in procs:
        _out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        assert "index not updated" not in err
    check = wrenmem_proc("check", "--json")
    assert check.returncode == 0, check.stdout  # every store indexed its own pair
    status = _json(wrenmem_proc("status", "--json"))
    assert status["rows"] == status["pairs"] == 5
