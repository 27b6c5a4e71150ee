"""Knowledge files' front matter as docs/file-format.md describes it: `tags` a list or one
comma-separated string (as in pair files); anything else a WM012 naming the line."""

from __future__ import annotations

from pathlib import Path

from wrenmem import Memory


def test_knowledge_tags_take_a_list_or_a_comma_separated_string(project: Path, cli) -> None:
    rules = project / "knowledge" / "rules"
    rules.mkdir()
    (rules / "listed.md").write_text("---\ntags: [finance, fy]\n---\n## A\nText a.\n")
    (rules / "commas.md").write_text("---\ntags: finance, fy\n---\n## B\nText b.\n")
    (rules / "mapping.md").write_text("---\ntitle: M\ntags: {a: 1}\n---\n## C\nText c.\n")
    tags = {r.title: r.tags for r in Memory(project, backend="grep").rules().rules}
    assert tags["A"] == tags["B"] == ("finance", "fy")
    result = cli("validate", "--no-schema")
    assert result.exit_code == 1
    assert "knowledge/rules/mapping.md:3:1: WM012 front matter `tags` must be a list of strings" \
        in result.output, result.output
    assert "listed.md" not in result.output and "commas.md" not in result.output
