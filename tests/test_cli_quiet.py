"""Long work as a user runs it (real processes): a progress line on stderr, counts instead of a
line per file, and a missing project refused before any of the work (issue 41 item 5)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import run_wrenmem, write_pair

MANY = 120  # past LIST_AT_MOST (20) files
ASKED = {"WRENMEM_PROGRESS": "1", "WRENMEM_PROGRESS_AFTER": "0"}  # as a CI log shows it


def queries_yml(path: Path, count: int, sql: str = "SELECT {n} AS n") -> Path:
    lines = ["version: 1", "pairs:"]
    for n in range(count):
        lines += [f"  - nl: Question number {n}", f"    sql: {sql.format(n=n)}"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_big_import_prints_counts_and_its_progress(project: Path, tmp_path: Path) -> None:
    queries = queries_yml(tmp_path / "queries.yml", MANY)
    quiet = run_wrenmem(["import", str(queries)], project, env=ASKED)
    assert quiet.returncode == 0, quiet.stderr
    assert "create:" not in quiet.stdout
    assert quiet.stdout.splitlines() == [
        f"{MANY} pair(s) read [skip]: {MANY} new, 0 updated, 0 unchanged, 0 deleted, "
        "0 skipped"]
    assert f"{MANY} file(s) written or deleted, not named one by one (-v names them)" \
        in quiet.stderr
    assert f"import: {MANY}/{MANY} pairs checked (100%)" in quiet.stderr, quiet.stderr
    assert f"import: {MANY}/{MANY} files written (100%)" in quiet.stderr, quiet.stderr
    assert len(list((project / "knowledge" / "sql").glob("*.md"))) == MANY


def test_verbose_names_each_file_and_json_is_unchanged(project: Path, tmp_path: Path) -> None:
    queries = queries_yml(tmp_path / "queries.yml", MANY)
    listed = run_wrenmem(["import", str(queries), "--dry-run", "-v"], project)
    assert listed.returncode == 0, listed.stderr
    assert sum(line.startswith("would create: ") for line in listed.stdout.splitlines()) == MANY
    again = run_wrenmem(["-v", "import", str(queries), "--dry-run"], project)  # the global -v
    assert again.stdout == listed.stdout
    as_json = run_wrenmem(["import", str(queries), "--json"], project, env=ASKED)
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)  # progress never reaches stdout
    assert len(report["created"]) == MANY and report["dry_run"] is False
    assert "pairs checked" in as_json.stderr


def test_a_few_files_are_still_named(project: Path, tmp_path: Path) -> None:
    queries = queries_yml(tmp_path / "queries.yml", 3)
    result = run_wrenmem(["import", str(queries)], project)
    assert result.returncode == 0, result.stderr
    assert "create: knowledge/sql/question-number-0.md" in result.stdout
    assert "not named one by one" not in result.stderr


def test_import_without_init_fails_before_reading_or_checking(tmp_path: Path) -> None:
    """Before, the file was read and every SQL checked (18 s for 5,000 pairs) before the
    missing knowledge folder was found: here, a file whose SQL writes would have been
    refused for that, and one that is not YAML for that."""
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / ".git").mkdir()  # a project root, without `wrenmem init`
    writes = queries_yml(tmp_path / "writes.yml", 400, "DELETE FROM t WHERE id = {n}")
    broken = tmp_path / "broken.yml"
    broken.write_text("version: 1\npairs: [\n")
    for queries in (writes, broken):
        result = run_wrenmem(["import", str(queries)], empty, env=ASKED)
        assert result.returncode == 1
        assert result.stderr.splitlines()[-1] == (
            f"error: the knowledge folder knowledge/sql does not exist in {empty}: "
            "run `wrenmem init`, or fix the setting"), result.stderr
        assert "pairs checked" not in result.stderr
    assert not (empty / "knowledge").exists()


def test_validate_verify_and_eval_show_their_count(project: Path) -> None:
    for n in range(MANY):
        write_pair(project, f"q{n}.md", f"How many orders of customer {n}?",
                   f"SELECT COUNT(*) FROM orders WHERE customer_id = {n}")
    checked = run_wrenmem(["validate", "--json"], project, env=ASKED)
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["files"] >= MANY
    assert f"validate: {MANY}/{MANY} files checked (100%)" in checked.stderr, checked.stderr

    files = sorted(str(p) for p in (project / "knowledge" / "sql").glob("*.md"))
    verified = run_wrenmem(["verify", "--by", "Ann", *files], project, env=ASKED)
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.splitlines() == [
        f"verified: {MANY} pair(s), 0 already verified, 0 not verified (-v names each)"]
    assert f"verify: {MANY}/{MANY} files verified (100%)" in verified.stderr
    again = run_wrenmem(["verify", "--by", "Ann", "-v", *files[:30]], project)
    assert sum(line.startswith("already verified: ") for line in again.stdout.splitlines()) \
        == 30

    measured = run_wrenmem(["eval", "--backends", "grep", "--json"], project,
                           env={**ASKED, "WRENMEM_BACKEND": "grep"})
    assert measured.returncode == 0, measured.stderr
    report = json.loads(measured.stdout)
    asked = sum(report["probes"].values())
    assert asked > 0
    assert f"eval: {asked}/{asked} questions asked (100%)" in measured.stderr, measured.stderr


def test_a_refused_verification_is_named_among_many(project: Path) -> None:
    for n in range(MANY):
        write_pair(project, f"q{n}.md", f"Question {n}", f"SELECT {n}")
    bad = write_pair(project, "bad.md", "Broken one", "SELECT FROM WHERE")
    files = sorted(str(p) for p in (project / "knowledge" / "sql").glob("*.md"))
    result = run_wrenmem(["verify", "--by", "Ann", *files], project)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "not verified: knowledge/sql/bad.md",
        f"verified: {MANY} pair(s), 0 already verified, 1 not verified (-v names each)"]
    assert "verified_by" not in bad.read_text()


def test_a_wren_store_import_without_init_fails_before_reading_it(tmp_path: Path) -> None:
    """Before, the store was opened first: a folder that is no Wren store said that, and
    the missing project came only after."""
    empty = tmp_path / "empty"
    (empty / ".git").mkdir(parents=True)
    not_a_store = tmp_path / "memory"
    not_a_store.mkdir()
    result = run_wrenmem(["import", "--from-wren", str(not_a_store)], empty)
    assert result.returncode == 1
    assert "run `wrenmem init`" in result.stderr.splitlines()[-1], result.stderr


def test_eval_shows_the_texts_its_sync_embeds_then_the_questions(project: Path) -> None:
    for n in range(30):
        write_pair(project, f"q{n}.md", f"How many orders of customer {n}?",
                   f"SELECT COUNT(*) FROM orders WHERE customer_id = {n}")
    measured = run_wrenmem(["eval", "--backends", "vector", "--json"], project,
                           env={**ASKED, "WRENMEM_BACKEND": "vector"})
    assert measured.returncode == 0, measured.stderr
    lines = measured.stderr.splitlines()
    embedded = [n for n, line in enumerate(lines) if "30/30 texts embedded (100%)" in line]
    asked = sum(json.loads(measured.stdout)["probes"].values())
    questions = [n for n, line in enumerate(lines)
                 if f"{asked}/{asked} questions asked (100%)" in line]
    assert embedded and questions and embedded[0] < questions[0], measured.stderr


def test_a_first_fetch_search_shows_the_schema_items_it_embeds(example_project: Path) -> None:
    first = run_wrenmem(["fetch", "-q", "revenue per store", "--threshold", "0", "--json"],
                        example_project, env=ASKED)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["strategy"] == "search"
    assert re.search(r"^fetch: (\d+)/\1 schema items embedded \(100%\)", first.stderr, re.M), \
        first.stderr
    again = run_wrenmem(["fetch", "-q", "revenue per store", "--threshold", "0"],
                        example_project, env=ASKED)
    assert again.returncode == 0 and "schema items embedded" not in again.stderr  # nothing new
