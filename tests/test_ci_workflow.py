"""The example GitHub Actions workflow, run step by step on a real repository with a base
branch: annotations land on the right file and line; the comment carries its marker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import PROCESS_TIMEOUT

from tests.conftest import REPO, write_pair

WORKFLOW = REPO / "examples" / "github" / "wrenmem.yml"
ANNOTATION = re.compile(r"^::error file=(?P<file>[^,]+),line=(?P<line>\d+),col=(?P<col>\d+),"
                        r"title=(?P<title>[^:]+)::(?P<message>.*)$")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True, timeout=PROCESS_TIMEOUT).stdout


def line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


@pytest.fixture
def pull_request(example_project: Path, tmp_path: Path) -> Path:
    """A clone of a repository whose `main` holds the example; the checkout is a branch that
    adds a pair with an unknown column, one that does not parse, one that accepts its finding,
    and edits an existing pair."""
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    root = example_project
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "example")
    git(root, "remote", "add", "origin", str(origin))
    git(root, "push", "-q", "origin", "main")
    clone = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    git(clone, "checkout", "-q", "-b", "feature")
    write_pair(clone, "typo.md", "Customers per country",
               "SELECT country, COUNT(*)\nFROM customers\nGROUP BY countree")
    write_pair(clone, "broken.md", "Stores opened", "SELECT name,\nFROM stores WHERE")
    write_pair(clone, "accepted.md", "Legacy city column", "SELECT town FROM stores",
               **{"wrenmem-ignore": "[WM004]"})
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "pairs")
    return clone


def workflow_steps() -> list[dict]:
    data = yaml.safe_load(WORKFLOW.read_text())
    return data["jobs"]["pairs"]["steps"]


def run_step(step: dict, cwd: Path, base_ref: str) -> subprocess.CompletedProcess:
    """A `run:` step as the runner runs it (bash -eo pipefail), `wrenmem` on PATH."""
    shim = cwd.parent / "bin"
    shim.mkdir(exist_ok=True)
    (shim / "wrenmem").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m wrenmem "$@"\n')
    (shim / "wrenmem").chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(REPO),
           "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
    for name, value in (step.get("env") or {}).items():
        env[name] = str(value).replace("${{ github.base_ref }}", base_ref)
    assert "${{" not in step["run"], "a run: line must read contexts through env:"
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                           step["run"]], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_example_workflow_annotates_the_pull_request(pull_request: Path) -> None:
    steps = {s.get("id"): s for s in workflow_steps()}
    checkout = next(s for s in workflow_steps() if s.get("uses", "").startswith(
        "actions/checkout"))
    assert checkout["with"]["fetch-depth"] == 0

    validate = run_step(steps["validate"], pull_request, "main")
    assert validate.returncode == 1, validate.stderr  # findings fail the check
    found = [ANNOTATION.match(line) for line in validate.stdout.splitlines()]
    assert all(found), validate.stdout
    got = {(m["file"], int(m["line"]), m["title"]) for m in found if m}
    sql = pull_request / "knowledge" / "sql"
    assert got == {
        ("knowledge/sql/typo.md", line_of(sql / "typo.md", "GROUP BY countree"),
         "wrenmem WM004"),
        ("knowledge/sql/broken.md", line_of(sql / "broken.md", "FROM stores WHERE"),
         "wrenmem WM002"),
    }
    typo = next(m for m in found if m and m["file"].endswith("typo.md"))
    assert typo["col"] == "10" and "countree" in typo["message"]

    # The diff step runs although validate failed (`if: !cancelled()`) and succeeds.
    assert "!cancelled()" in steps["diff"]["if"]
    diff = run_step(steps["diff"], pull_request, "main")
    assert diff.returncode == 0, diff.stderr
    comment = (pull_request / "wrenmem-diff.md").read_text()
    assert comment.startswith("<!-- wrenmem-diff -->\n")
    assert "3 added" in comment and "`knowledge/sql/typo.md:" in comment
    script = next(s for s in workflow_steps() if s.get("uses", "").startswith(
        "actions/github-script"))["with"]["script"]
    assert "<!-- wrenmem-diff -->" in script and "updateComment" in script


def test_diff_annotations_point_into_the_branch(pull_request: Path) -> None:
    from tests.conftest import run_wrenmem

    done = run_wrenmem(["diff", "origin/main", "--format", "github"], pull_request)
    assert done.returncode == 0
    files = sorted(m["file"] for m in map(ANNOTATION.match, done.stdout.splitlines()) if m)
    assert files == ["knowledge/sql/broken.md", "knowledge/sql/typo.md"]
