"""Rule codes on every finding, and the two ways of accepting one."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.conftest import REPO, write_pair
from wrenmem.checks.rules import RULES, github_annotation


def schema_project(project: Path) -> None:
    (project / "target").mkdir()
    (project / "target" / "mdl.json").write_text(json.dumps({
        "catalog": "c", "schema": "s", "dataSource": "postgres",
        "models": [{"name": "orders", "columns": [{"name": "id", "type": "INT"},
                                                  {"name": "amount", "type": "INT"}]}]}))


def codes(cli, project: Path, *args: str) -> list[tuple[str, str]]:
    result = cli("validate", "--json", *args, root=project)
    return [(Path(p["path"]).name, p["code"]) for p in json.loads(result.output)["problems"]]


def test_each_kind_of_finding_has_its_code(project: Path, cli) -> None:
    schema_project(project)
    write_pair(project, "column.md", "Q1", "SELECT amount2 FROM orders")
    write_pair(project, "table.md", "Q2", "SELECT id FROM orderz")
    write_pair(project, "sql.md", "Q3", "SELECT id FROM")
    write_pair(project, "dialect.md", "Q4", "SELECT id FROM orders", dialect="klingon")
    (project / "knowledge" / "sql" / "pair.md").write_text("---\nnl: [\n---\n")
    assert sorted(codes(cli, project)) == [
        ("column.md", "WM004"), ("dialect.md", "WM005"), ("pair.md", "WM001"),
        ("sql.md", "WM002"), ("table.md", "WM003")]
    text = cli("validate", root=project).output
    assert "column.md:6:8: WM004 unknown column 'amount2'" in text


def test_a_pair_accepts_a_finding_in_its_front_matter(project: Path, cli) -> None:
    schema_project(project)
    write_pair(project, "a.md", "Q1", "SELECT amount2 FROM orderz",
               **{"wrenmem-ignore": "[WM004]"})
    assert codes(cli, project) == [("a.md", "WM003")]
    write_pair(project, "a.md", "Q1", "SELECT amount2 FROM orders",
               **{"wrenmem-ignore": "[WM004]"})
    result = cli("validate", root=project)
    assert result.exit_code == 0, result.output
    # A typo in the key is itself a finding, at the key's line, never a silent accept-nothing.
    write_pair(project, "a.md", "Q1", "SELECT id FROM orders", **{"wrenmem-ignore": "WM04"})
    result = cli("validate", root=project)
    assert result.exit_code == 1
    assert "a.md:3:1: WM001 wrenmem-ignore: unknown rule code 'WM04'" in result.output


def test_the_ignore_setting_accepts_codes_project_wide(project: Path, cli, monkeypatch) -> None:
    schema_project(project)
    write_pair(project, "a.md", "Q1", "SELECT amount2 FROM orders")
    write_pair(project, "b.md", "Q1", "SELECT id FROM orders")
    assert cli("duplicates", root=project).exit_code == 1
    (project / "wrenmem.toml").write_text('ignore = ["WM004", "wm007"]\n')
    assert cli("validate", root=project).exit_code == 0
    assert cli("duplicates", root=project).exit_code == 0
    monkeypatch.setenv("WRENMEM_IGNORE", "WM999")
    result = cli("validate", root=project)
    assert result.exit_code == 1 and "unknown rule code 'WM999'" in result.output


def test_github_annotations_escape_what_would_break_them() -> None:
    line = github_annotation("a,b:c.md", 3, 4, "WM002", "bad: 100%\nnext")
    assert line == ("::error file=a%2Cb%3Ac.md,line=3,col=4,title=wrenmem WM002::"
                    "WM002 bad: 100%25%0Anext")


def test_the_docs_document_every_code() -> None:
    readme = (REPO / "docs" / "git.md").read_text()
    documented = set(re.findall(r"^\| `(WM\d{3})` \|", readme, re.M))
    assert documented == set(RULES)
