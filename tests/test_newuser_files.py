"""What a new user met with hand-made pair files: messages, and writes outside the project."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import write_pair
from wrenmem import Memory
from wrenmem.errors import PairError


def validate_findings(cli, expected: list[str]) -> str:
    """``validate --no-schema``'s output, which fails (exit 1) with each expected finding."""
    result = cli("validate", "--no-schema")
    assert result.exit_code == 1
    for finding in expected:
        assert finding in result.output, result.output
    return result.output


NOT_CANONICAL = "---\nnl: Outside pair\n---\n\n```sql\nSELECT   1\n```\n"


def test_front_matter_that_is_not_a_mapping_is_named_in_plain_words(project: Path,
                                                                     cli) -> None:
    sql = "\n```sql\nSELECT 1\n```\n"
    (project / "knowledge" / "sql" / "list.md").write_text("---\n- a\n- b\n---\n" + sql)
    (project / "knowledge" / "sql" / "text.md").write_text("---\njust words\n---\n" + sql)
    output = validate_findings(cli, [
        "knowledge/sql/list.md:2:1: WM001 front matter must be a mapping of keys, not a list",
        "knowledge/sql/text.md:2:1: WM001 front matter must be a mapping of keys, not text"])
    assert "a a list" not in output and "not a str" not in output


def test_fmt_writes_no_file_outside_the_knowledge_folder(project: Path, tmp_path: Path,
                                                         cli) -> None:
    outside = tmp_path / "elsewhere" / "o.md"
    outside.parent.mkdir()
    outside.write_text(NOT_CANONICAL)
    at_root = project / "root-pair.md"
    at_root.write_text(NOT_CANONICAL)
    inside = project / "knowledge" / "sql" / "inside.md"
    inside.write_text(NOT_CANONICAL.replace("Outside", "Inside"))
    result = cli("fmt", str(outside), str(at_root), str(inside))
    assert result.exit_code == 1
    assert outside.read_text() == NOT_CANONICAL      # untouched: not a pair of this project
    assert at_root.read_text() == NOT_CANONICAL      # in the project, not in knowledge/sql
    assert "root-pair.md:1: not a pair file inside knowledge/sql" in result.output
    assert "reformatted knowledge/sql/inside.md" in result.output  # the rest still done
    assert inside.read_text() != NOT_CANONICAL.replace("Outside", "Inside")


def test_no_rewrite_goes_through_a_link_leading_out_of_the_project(project: Path,
                                                                  tmp_path: Path,
                                                                  cli) -> None:
    victim = tmp_path / "victim" / "o.md"
    victim.parent.mkdir()
    victim.write_text(NOT_CANONICAL)
    knowledge = project / "knowledge" / "sql"
    (knowledge / "link.md").symlink_to(victim)
    kept = project / "knowledge" / "kept.md"     # a link to a file inside the project
    kept.write_text(NOT_CANONICAL.replace("Outside", "Kept"))
    (knowledge / "kept.md").symlink_to(kept)

    result = cli("fmt")
    assert result.exit_code == 1
    assert victim.read_text() == NOT_CANONICAL
    assert (knowledge / "link.md").is_symlink()
    assert "knowledge/sql/link.md:1: a symbolic link to" in result.output, result.output
    assert "outside the project: not read" in result.output  # not even read (issue 39)
    assert "reformatted knowledge/sql/kept.md" in result.output
    assert (knowledge / "kept.md").is_symlink() and "source: user" in kept.read_text()

    # store over the linked pair's question, and the API's fmt: refused the same way
    # (the link is not even read, so its question is not this project's: a new file)
    memory = Memory(project, backend="grep")
    stored = memory.store("Outside pair", "SELECT 2")
    assert stored.path != "knowledge/sql/link.md" and not (project / stored.path).is_symlink()
    assert victim.read_text() == NOT_CANONICAL
    (knowledge / "outside-pair.md").unlink()
    (knowledge / "outside-pair.md").symlink_to(victim)  # the very name store would take
    again = memory.store("Outside pair", "SELECT 3")
    assert again.path != "knowledge/sql/outside-pair.md"
    assert victim.read_text() == NOT_CANONICAL
    report = memory.fmt([knowledge / "link.md"])
    assert not report.changed and isinstance(report.errors[0], PairError)
    assert victim.read_text() == NOT_CANONICAL


def test_store_folder_with_dot_dot_says_it_leads_out(project: Path, tmp_path: Path,
                                                      cli) -> None:
    result = cli("store", "--nl", "Escape", "--sql", "SELECT 1", "--folder", "sub/../../..")
    assert result.exit_code == 1
    assert "leads out of the knowledge folder" in result.output, result.output
    assert "hidden or backup" not in result.output   # '..' is not a hidden folder
    assert not list(tmp_path.rglob("escape*.md"))
    result = cli("store", "--nl", "Nested", "--sql", "SELECT 1", "--folder", "team/sales")
    assert result.exit_code == 0, result.output
    assert (project / "knowledge" / "sql" / "team" / "sales" / "nested.md").is_file()


def test_a_key_given_twice_is_an_error_naming_both_lines(project: Path, cli) -> None:
    """A merge resolved by hand can leave two `nl:` lines: YAML keeps the last without a
    word, so the file would answer another question than the one its first line shows."""
    sql = project / "knowledge" / "sql"
    (sql / "twice.md").write_text("---\nnl: Revenue by month\ntags: [a]\nnl: Revenue by week\n"
                                  "---\n\n```sql\nSELECT 1\n```\n")
    (sql / "quoted.md").write_text("---\n'nl': \"Orders #1\"\ndatasource: x\n"
                                   "datasource: y\n---\n\n```sql\nSELECT 2\n```\n")
    (sql / "fine.md").write_text("---\nnl: \"Fine: a colon # and a hash\"\nreview:\n"
                                 "  nl: nested keys are not top-level\n  owner: Ann\n"
                                 "---\n\n```sql\nSELECT 3\n```\n")
    output = validate_findings(cli, [
        "knowledge/sql/twice.md:4:1: WM001 'nl' is given twice in the front matter "
        "(lines 2 and 4; YAML would keep the last): keep one",
        "knowledge/sql/quoted.md:4:1: WM001 'datasource' is given twice in the front "
        "matter (lines 3 and 4;"])
    assert "fine.md" not in output
    listed = cli("list")
    assert "Revenue by" not in listed.output and "Fine: a colon" in listed.output
    assert "knowledge/sql/twice.md:4: 'nl' is given twice" in listed.output


def test_a_misspelt_dialect_gets_a_did_you_mean(project: Path, cli) -> None:
    (project / "knowledge" / "sql" / "d.md").write_text(
        "---\nnl: Dialect typo\ndialect: postgress\n---\n\n```sql\nSELECT 1\n```\n")
    validate_findings(cli, ["knowledge/sql/d.md:3:1: WM005 unknown SQL dialect 'postgress' (a "
                            "sqlglot dialect name is needed); did you mean 'postgres'?"])
    stored = cli("store", "--nl", "Other", "--sql", "SELECT 1", "--dialect", "mysq")
    assert stored.exit_code == 1 and "did you mean 'mysql'?" in stored.output, stored.output


def test_an_unclosed_sql_block_is_an_error_and_fmt_leaves_it(project: Path, cli) -> None:
    """The closing fence forgotten: the notes after the SQL would become SQL (and `fmt`
    would close the block after them for good)."""
    text = "---\nnl: Unclosed\n---\n\n```sql\nSELECT 1\nFROM t\n\nA note for reviewers.\n"
    (project / "knowledge" / "sql" / "open.md").write_text(text)
    (project / "knowledge" / "sql" / "tilde.md").write_text(
        "---\nnl: Tilde\n---\n\n~~~~sql\nSELECT 2\n```\n")       # a ``` does not close ~~~~
    write_pair(project, "fine.md", "Closed", "SELECT 3")
    validate_findings(cli, [
        "knowledge/sql/open.md:5:1: WM001 the ```sql block opened here is not closed: add a "
        "``` line after the SQL",
        "knowledge/sql/tilde.md:5:1: WM001 the ~~~~sql block opened here is not closed"])
    result = cli("fmt")
    assert result.exit_code == 1
    assert (project / "knowledge" / "sql" / "open.md").read_text() == text
    assert "Closed" in cli("list").output


def test_validate_names_a_link_loop_given_as_a_file(project: Path, cli) -> None:
    """pre-commit hands `validate` every staged path, a committed link loop too: it was a
    RuntimeError traceback (Python 3.11's resolve), not a finding."""
    sql = project / "knowledge" / "sql"
    (sql / "loop.md").symlink_to("loop.md")
    write_pair(project, "fine.md", "Fine", "SELECT 1")
    result = cli("validate", "--no-schema", str(sql / "loop.md"), str(sql / "fine.md"))
    assert result.exit_code == 1
    assert "knowledge/sql/loop.md:1:1: WM001 cannot read: a symbolic link loop" in result.output


def test_a_link_loop_has_one_code_given_as_a_file_or_found_in_the_project(project: Path,
                                                                        cli) -> None:
    """A link loop in knowledge/rules/ was WM001 (a pair file) given as a file and WM012 (a
    knowledge file) found by the whole project's validate; a loop in knowledge/sql/ is a pair
    file either way. A file is placed by where it is, not where it leads: so is a link in
    knowledge/rules/ to a file outside the knowledge folder."""
    rules = project / "knowledge" / "rules"
    rules.mkdir()
    (rules / "loop.md").symlink_to("loop.md")
    (project / "knowledge" / "sql" / "loop.md").symlink_to("loop.md")
    (project / "outside.md").write_text("## Fiscal year\n\n")
    (rules / "link.md").symlink_to(project / "outside.md")
    write_pair(project, "fine.md", "Fine", "SELECT 1")
    expected = ["knowledge/rules/loop.md:1:1: WM012 cannot read: a symbolic link loop",
                "knowledge/sql/loop.md:1:1: WM001 cannot read: a symbolic link loop",
                "knowledge/rules/link.md:1:1: WM013 empty entry 'Fiscal year'"]
    whole = validate_findings(cli, expected)
    for finding in expected:
        given = finding.split(":", 1)[0]
        result = cli("validate", "--no-schema", str(project / given))
        assert result.exit_code == 1
        assert finding in result.output, (finding, result.output, whole)
