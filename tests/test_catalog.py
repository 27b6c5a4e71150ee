from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import settle, write_pair
from wrenmem.pairs import catalog
from wrenmem.pairs.catalog import scan
from wrenmem.settings import load_settings


def test_recurses_skips_hidden_and_readme(project: Path) -> None:
    write_pair(project, "a.md", "Alpha?", "SELECT 1")
    write_pair(project, "sub/deeper/b.md", "Beta?", "SELECT 2")
    write_pair(project, ".hidden/c.md", "Gamma?", "SELECT 3")
    write_pair(project, ".d.md", "Delta?", "SELECT 4")
    (project / "knowledge/sql/README.md").write_text("# about these pairs\n")
    (project / "knowledge/sql/notes.txt").write_text("not a pair")
    found = scan(load_settings(project))
    assert [p.path for p in found.pairs] == ["knowledge/sql/a.md", "knowledge/sql/sub/deeper/b.md"]
    assert found.errors == ()


def test_broken_files_one_error_each_and_the_rest_load(project: Path) -> None:
    sql = project / "knowledge/sql"
    write_pair(project, "good.md", "Good?", "SELECT 1")
    (sql / "bad-yaml.md").write_text("---\nnl: [unclosed\n---\n```sql\nSELECT 1\n```\n")
    (sql / "bom.md").write_bytes("\ufeff---\nnl: with bom\n---\n```sql\nSELECT 1\n```\n".encode())
    (sql / "no-sql.md").write_text("---\nnl: no sql\n---\n\njust words\n")
    (sql / "binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (sql / "yes.md").write_text("---\nnl: yes\n---\n```sql\nSELECT 1\n```\n")
    (sql / "empty.md").write_text("")
    found = scan(load_settings(project))
    assert sorted(p.path.rsplit("/", 1)[1] for p in found.pairs) == ["bom.md", "good.md"]
    by_file = {e.path.rsplit("/", 1)[1]: e for e in found.errors}
    assert sorted(by_file) == ["bad-yaml.md", "binary.md", "empty.md", "no-sql.md", "yes.md"]
    assert by_file["bad-yaml.md"].line == 2
    assert "boolean" in by_file["yes.md"].reason


def test_unchanged_files_are_not_reread(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(5):
        write_pair(project, f"p{i}.md", f"Question {i}?", f"SELECT {i}")
    settings = load_settings(project)
    old = os.path.getmtime(project / "knowledge/sql/p0.md") - 10
    for p in (project / "knowledge/sql").iterdir():
        os.utime(p, (old, old))
    settle(monkeypatch)  # the change times too, out of the racy window
    first = scan(settings)
    reads: list[str] = []
    real = catalog._read_entry

    def counting(path: Path, *args: object) -> object:
        reads.append(path.name)
        return real(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(catalog, "_read_entry", counting)
    assert scan(settings) == first
    assert reads == []
    write_pair(project, "p3.md", "Question three changed?", "SELECT 33")
    again = scan(settings)
    assert reads == ["p3.md"]
    assert "Question three changed?" in [p.nl for p in again.pairs]


def test_same_size_edit_in_the_same_second_is_seen(project: Path) -> None:
    path = write_pair(project, "p.md", "Question A?", "SELECT 1")
    settings = load_settings(project)
    stat = path.stat()
    assert scan(settings).pairs[0].nl == "Question A?"
    write_pair(project, "p.md", "Question B?", "SELECT 1")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same mtime
    assert scan(settings).pairs[0].nl == "Question B?"


def test_a_corrupt_cache_is_ignored(project: Path) -> None:
    write_pair(project, "p.md", "Q?", "SELECT 1")
    settings = load_settings(project)
    scan(settings)
    (settings.state_dir / "catalog.bin").write_bytes(b"garbage")
    assert [p.nl for p in scan(settings).pairs] == ["Q?"]


def _errors(found: catalog.Scan) -> list[tuple[str, str, int]]:
    return [(e.path, e.reason, e.line) for e in found.errors]


def _mixed_project(project: Path) -> None:
    sql = project / "knowledge/sql"
    for i in range(40):
        write_pair(project, f"g{i % 3}/p{i:02d}.md", f"Question {i} 问题?", f"SELECT {i}",
                   tags=f"[t, n{i}]")
    (sql / "g1/bad-yaml.md").write_text("---\nnl: [unclosed\n---\n```sql\nSELECT 1\n```\n")
    (sql / "g2/no-sql.md").write_text("---\nnl: no sql\n---\n\njust words\n")
    (sql / "g2/stamped.md").write_text("---\nnl: 'When?'\ncreated_at: 2026-10-20T17:02:00Z\n"
                                      "reviewed: true # kept\n---\n```sql\nSELECT 2\n```\n")
    (sql / "g2/zz-link.md").symlink_to(sql / "nowhere.md")  # dangling: an error
    os.mkfifo(sql / "g2/zz-fifo.md")  # not a regular file: an error, never opened


def test_a_scan_from_the_catalog_equals_a_fresh_read(project: Path) -> None:
    """Pairs, errors (a bad file, a dangling link, a FIFO) and hashes read through the
    catalog are those of reading every file again."""
    _mixed_project(project)
    settings = load_settings(project)
    fresh = scan(settings, refresh=True)
    cached = scan(settings)
    assert cached.pairs == fresh.pairs and cached.file_hashes == fresh.file_hashes
    assert [p.extra for p in cached.pairs] == [p.extra for p in fresh.pairs]
    assert _errors(cached) == _errors(fresh) and len(fresh.errors) == 4
