"""What docs/commands.md says `import` does with a pair its file already holds."""

from __future__ import annotations

from pathlib import Path


def test_upsert_leaves_an_identical_pair_untouched(cli, example_project: Path) -> None:
    root = example_project
    exported = str(root / "queries.yml")  # FILE is relative to the shell's folder, not root
    assert cli("export", exported, root=root).exit_code == 0
    files = sorted((root / "knowledge" / "sql").rglob("*.md"))
    before = {f: (f.stat().st_ino, f.stat().st_mtime_ns) for f in files}
    out = cli("import", "--upsert", exported, root=root)
    assert out.exit_code == 0, out.output
    assert "0 new, 0 updated, 48 unchanged, 0 deleted, 0 skipped" in out.output
    assert {f: (f.stat().st_ino, f.stat().st_mtime_ns) for f in files} == before
    out = cli("import", exported, root=root)  # the default mode skips them
    assert "0 new, 0 updated, 0 unchanged, 0 deleted, 48 skipped" in out.output
