"""Wren round trip: the `format` setting, one timestamp style, import checks, export shape."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from conftest import PROCESS_TIMEOUT

from tests.conftest import write_pair
from wrenmem.pairs.pairfile import Pair, canonical_time, parse_pair, render_pair


def wren_loadable(doc: object) -> None:
    """The checks Wren's `load` makes (reference §8.2, `load FILE`), as assertions."""
    assert isinstance(doc, dict) and isinstance(doc.get("pairs"), list)
    assert doc.get("version", 1) == 1
    for item in doc["pairs"]:
        assert isinstance(item, dict)
        assert "nl" in item and "sql" in item
        for key in ("nl", "sql", "source", "datasource"):
            assert key not in item or isinstance(item[key], str), (key, item)


def test_a_wren_project_stays_wren(project: Path, cli) -> None:
    (project / "wrenmem.toml").write_text('format = "wren"\n')
    result = cli("store", "--nl", "Revenue by month", "--sql",
                 "SELECT month, SUM(amount)\nFROM orders\nGROUP BY month")
    assert result.exit_code == 0, result.output
    path = project / "knowledge" / "sql" / "revenue-by-month.md"
    text = path.read_text()
    assert "sql: |-\n  SELECT month, SUM(amount)\n  FROM orders\n  GROUP BY month\n" in text
    assert "```" not in text
    pair = parse_pair(text, "x.md")
    assert pair.wren_format and pair.sql == "SELECT month, SUM(amount)\nFROM orders\nGROUP BY month"
    # Updating keeps the layout; fmt --check agrees it is canonical.
    assert cli("store", "--nl", "Revenue by month", "--sql", "SELECT 1").exit_code == 0
    assert "sql: |-\n  SELECT 1\n" in path.read_text()
    assert cli("fmt", "--check").exit_code == 0
    # A fenced file in a Wren project is rewritten to Wren's layout by fmt.
    write_pair(project, "fenced.md", "Orders", "SELECT * FROM orders")
    assert cli("fmt", "--check").exit_code == 1
    assert cli("fmt").exit_code == 0
    assert "sql: |-\n  SELECT * FROM orders\n" in (project / "knowledge/sql/fenced.md").read_text()


def test_wren_layout_round_trips_awkward_sql() -> None:
    for sql in ("  SELECT 1\nFROM t", "SELECT '---'\n---\nUNION ALL SELECT 2",
                "SELECT 'a: b' -- c\n\n\nFROM t", "SELECT \"x\"\tFROM t"):
        text = render_pair(Pair(nl="q", sql=sql), "wren")
        fenced = parse_pair(render_pair(Pair(nl="q", sql=sql)), "x.md").sql
        assert parse_pair(text, "x.md").sql == fenced.strip(), text  # Wren strips its sql:


def test_timestamps_are_written_one_way() -> None:
    assert canonical_time("2026-11-29T12:00:00+00:00") == "2026-11-29T12:00:00Z"
    assert canonical_time("2026-11-29 12:00:00.5+00:00") == "2026-11-29T12:00:00.500000Z"
    assert canonical_time("2026-11-29T12:00:00+02:00") == "2026-11-29T12:00:00+02:00"
    assert canonical_time("2026-11-29") == "2026-11-29"
    assert canonical_time("last tuesday") == "last tuesday"


def test_import_then_fmt_check_agree(project: Path, cli, tmp_path: Path) -> None:
    doc = {"version": 1, "pairs": [
        {"nl": "Orders per day", "sql": "SELECT 1", "source": "user",
         "created_at": "2026-07-30T09:15:02.123456+00:00"}]}
    queries = tmp_path / "queries.yml"
    queries.write_text(yaml.safe_dump(doc))
    assert cli("import", str(queries)).exit_code == 0
    text = (project / "knowledge/sql/orders-per-day.md").read_text()
    assert "created_at: 2026-07-30T09:15:02.123456Z" in text
    assert cli("fmt", "--check").exit_code == 0


def test_import_checks_sql_like_store(project: Path, cli, tmp_path: Path) -> None:
    doc = {"version": 1, "pairs": [{"nl": "Good", "sql": "SELECT 1"},
                                   {"nl": "Bad", "sql": "SELECT FROM WHERE"}]}
    queries = tmp_path / "queries.yml"
    queries.write_text(yaml.safe_dump(doc))
    result = cli("import", str(queries))
    assert result.exit_code == 1 and "pair #2 (Bad)" in result.stderr
    assert list((project / "knowledge" / "sql").glob("*.md")) == []  # nothing written
    assert cli("import", str(queries), "--force").exit_code == 0
    assert len(list((project / "knowledge" / "sql").glob("*.md"))) == 2


def test_export_is_what_wren_loads_and_imports_back(project: Path, cli, tmp_path: Path) -> None:
    cli("store", "--nl", "Revenue by month", "--sql", "SELECT 1", "--tag", "kpi", "--tag",
        "revenue", "--datasource", "pg")
    cli("store", "--nl", "yes", "--sql", "SELECT 2")  # a question YAML would read as a bool
    text = cli("export").stdout
    doc = yaml.safe_load(text)
    wren_loadable(doc)
    first = next(p for p in doc["pairs"] if p["nl"] == "Revenue by month")
    assert first["tags"] == ["kpi", "revenue"] and first["datasource"] == "pg"
    assert isinstance(first["created_at"], str) and first["created_at"].endswith("Z")
    exported = tmp_path / "queries.yml"
    exported.write_text(text)
    other = tmp_path / "other"
    (other / "knowledge" / "sql").mkdir(parents=True)
    result = cli("import", str(exported), "--json", root=other)
    assert len(json.loads(result.stdout)["created"]) == 2
    assert cli("export", root=other).stdout.split("pairs:")[1] == text.split("pairs:")[1]


# -- issue 22: an import replaces a set of files whole, in linear time ---------------------

KILLER = r"""
import os, signal, sys
from pathlib import Path

phase, after, root = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
knowledge = str(root / "knowledge" / "sql")
calls = {"n": 0}


def count() -> None:
    calls["n"] += 1
    if calls["n"] >= after:
        os.kill(os.getpid(), signal.SIGKILL)  # kill -9: no handler, no clean-up runs


if phase == "write":  # while the new files are being written (a mode set per file)
    real_fchmod = os.fchmod

    def fchmod(fd, mode):
        real_fchmod(fd, mode)
        count()
    os.fchmod = fchmod
else:  # while they are being moved into place
    real_replace, real_link = os.replace, os.link

    def replace(src, dst, **kw):
        real_replace(src, dst, **kw)
        if str(dst).startswith(knowledge):
            count()

    def link(src, dst, **kw):
        real_link(src, dst, **kw)
        if str(dst).startswith(knowledge):
            count()
    os.replace, os.link = replace, link

from wrenmem.cli import main
main(["--project", str(root), "import", "--overwrite", "--yes", sys.argv[4]])
"""


def _queries(tmp_path: Path, name: str, n: int, version: str) -> Path:
    doc = {"version": 1, "pairs": [
        {"nl": f"Orders of store {i}", "sql": f"SELECT {version} AS v, {i} AS store",
         "source": "wren"} for i in range(n)]}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def _sql_versions(project: Path) -> dict[str, set[str]]:
    """Question -> the versions of SQL its files hold (one file per question expected)."""
    from wrenmem.pairs.catalog import scan
    from wrenmem.settings import load_settings

    found = scan(load_settings(project), use_cache=False)
    assert found.errors == ()
    out: dict[str, set[str]] = {}
    for pair in found.pairs:
        out.setdefault(pair.nl, set()).add(pair.sql.split()[1])
    return out


def _git_untracked(project: Path) -> list[str]:
    import subprocess

    subprocess.run(["git", "init", "-q"], cwd=project, check=True, timeout=PROCESS_TIMEOUT)
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"],
                         cwd=project, check=True, capture_output=True, text=True, timeout=PROCESS_TIMEOUT).stdout
    return [line[3:] for line in out.splitlines()]


@pytest.mark.parametrize("phase,after", [("write", 60), ("move", 60)])
def test_import_overwrite_killed_midway_keeps_a_whole_set(
        project: Path, cli, tmp_path: Path, phase: str, after: int) -> None:
    import subprocess
    import sys

    from tests.conftest import REPO

    n = 150
    assert cli("import", str(_queries(tmp_path, "old.yml", n, "1"))).exit_code == 0
    new = _queries(tmp_path, "new.yml", n, "2")
    proc = subprocess.run([sys.executable, "-c", KILLER, phase, str(after), str(project),
                           str(new)], env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    # Any command that reads the pairs finishes a move the kill interrupted.
    listed = cli("list")
    assert listed.exit_code == 0, listed.output
    versions = _sql_versions(project)
    assert len(versions) == n and all(len(v) == 1 for v in versions.values())
    expected = "1" if phase == "write" else "2"  # before the move: old set; during: new set
    assert {v for vs in versions.values() for v in vs} == {expected}
    assert not [p for p in _git_untracked(project) if not p.endswith(".md")]


@pytest.mark.parametrize("where", ["write", "sync"])
def test_import_on_a_full_disk_changes_nothing(project: Path, cli, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                where: str) -> None:
    """The disk fills while the new files are written, or their one syncfs reports it."""
    import errno

    from wrenmem.pairs import swap

    n = 100
    assert cli("import", str(_queries(tmp_path, "old.yml", n, "1"))).exit_code == 0
    before = {p.name: p.read_bytes() for p in (project / "knowledge/sql").iterdir()}
    real_fchmod, calls = os.fchmod, {"n": 0}

    def fchmod(fd: int, mode: int) -> None:
        calls["n"] += 1
        if calls["n"] > 25:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fchmod(fd, mode)

    def full(folders: object) -> bool:
        raise OSError(errno.ENOSPC, "No space left on device")

    if where == "write":
        monkeypatch.setattr(os, "fchmod", fchmod)
    else:
        monkeypatch.setattr(swap, "sync_file_systems", full)
    result = cli("import", "--overwrite", "--yes", str(_queries(tmp_path, "new.yml", n, "2")))
    monkeypatch.undo()
    assert result.exit_code == 1, result.output
    assert "No space left on device" in result.output and "nothing changed" in result.output
    after = {p.name: p.read_bytes() for p in (project / "knowledge/sql").iterdir()}
    assert after == before
    tmp = project / ".wrenmem" / "tmp"
    assert not tmp.exists() or not [p for p in tmp.rglob("*") if p.is_file()]


def test_control_characters_in_an_import_are_refused(project: Path, cli,
                                                      tmp_path: Path) -> None:
    doc = {"version": 1, "pairs": [{"nl": "Good", "sql": "SELECT 1"},
                                   {"nl": "Bad", "sql": "SELECT 1\x00"}]}
    queries = tmp_path / "queries.yml"
    queries.write_text(yaml.safe_dump(doc))
    result = cli("import", str(queries), "--force")
    assert result.exit_code == 1
    assert "pair #2" in result.output and "control character U+0000" in result.output
    assert list((project / "knowledge" / "sql").glob("*.md")) == []


def test_import_normalises_like_store(project: Path, cli, tmp_path: Path) -> None:
    import unicodedata

    doc = {"version": 1, "pairs": [
        {"nl": unicodedata.normalize("NFD", "Café orders"), "sql": "SELECT 1\r\nFROM t"}]}
    queries = tmp_path / "queries.yml"
    queries.write_text(yaml.safe_dump(doc))
    assert cli("store", "--nl", "Café orders", "--sql", "SELECT 1\nFROM t").exit_code == 0
    out = json.loads(cli("import", str(queries), "--upsert", "--json").stdout)
    assert out["unchanged"] == ["knowledge/sql/café-orders.md"] and out["created"] == []
    assert cli("fmt", "--check").exit_code == 0


def test_import_overwrite_killed_from_outside_keeps_a_whole_set(project: Path, cli,
                                                                 tmp_path: Path) -> None:
    """A real ``kill -9`` from another process, at the moment the import has written a
    quarter of its files (wherever it writes them): one whole set is left, never a mix."""
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import REPO

    n = 400
    assert cli("import", str(_queries(tmp_path, "old.yml", n, "1"))).exit_code == 0
    new = _queries(tmp_path, "new.yml", n, "2")
    sql = project / "knowledge" / "sql"
    proc = subprocess.Popen([sys.executable, "-m", "wrenmem", "--project", str(project),
                             "import", "--overwrite", "--yes", str(new)],
                            env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def written() -> int:
        staged = project / ".wrenmem" / "tmp"
        found = len(list(staged.glob(".wrenmem-*"))) if staged.is_dir() else 0
        return found + sum(1 for p in sql.glob("*.md") if b"SELECT 2" in p.read_bytes())

    deadline = time.monotonic() + 120
    while written() < n // 4 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert cli("list").exit_code == 0
    versions = _sql_versions(project)
    assert len(versions) == n and all(len(v) == 1 for v in versions.values())
    assert len({v for vs in versions.values() for v in vs}) == 1, "a mix of old and new"
    assert not [p for p in _git_untracked(project) if not p.endswith(".md")]


def test_import_parses_each_pairs_sql_once(project: Path, cli, monkeypatch) -> None:
    # the checks before writing parse each SQL once (they parsed it twice: 3.5 s at 5,000)
    import wrenmem.sql.check as sql_check

    parsed: list[str] = []
    real = sql_check.parse

    def counting(sql: str, dialect: str | None = None) -> list:
        parsed.append(sql)
        return real(sql, dialect)

    monkeypatch.setattr(sql_check, "parse", counting)
    sqls = [f"SELECT {n} FROM orders" for n in range(3)]
    (project / "q.yml").write_text(yaml.safe_dump(
        {"version": 1, "pairs": [{"nl": f"question {n}", "sql": s} for n, s in enumerate(sqls)]}))
    result = cli("import", str(project / "q.yml"))
    assert result.exit_code == 0, result.output
    assert sorted(parsed) == sqls
    bad = project / "bad.yml"
    bad.write_text(yaml.safe_dump({"version": 1, "pairs": [{"nl": "broken", "sql": "SELECT"}]}))
    refused = cli("import", str(bad))
    assert refused.exit_code != 0 and "pair #1 (broken)" in refused.output
    assert cli("import", "--force", str(bad)).exit_code == 0
