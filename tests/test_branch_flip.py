"""Switching back to a branch embeds nothing again (issue 39, item 14).

On ``other`` 15 pairs are synced (a small sync: their rows and vectors go to the pairs
journal), switching to ``main`` removes them, switching back must find their vectors in the
embedding cache: ``"embedded": 0``. Real git, real ``sync --json`` processes, the real
default embedder and LanceDB; then the same through the installed git hooks.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from conftest import PROCESS_TIMEOUT

from tests.conftest import run_wrenmem, write_pair


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=Ann", "-c", "user.email=ann@example.com",
                    "-c", "commit.gpgsign=false", *args], cwd=cwd, capture_output=True,
                   text=True, check=True, timeout=PROCESS_TIMEOUT)


def _branches(project: Path) -> Path:
    """``main`` with one pair, ``other`` with 15 more; ``main`` checked out."""
    git(project, "init", "-q", "-b", "main")
    (project / ".gitignore").write_text(".wrenmem/\n")
    write_pair(project, "customers.md", "How many customers are there?",
               "SELECT COUNT(*) FROM customers")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "main")
    git(project, "checkout", "-q", "-b", "other")
    for i in range(15):
        write_pair(project, f"month-{i}.md", f"How many orders were placed in month {i + 1}?",
                   f"SELECT COUNT(*) FROM orders WHERE month = {i + 1}")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "other")
    git(project, "checkout", "-q", "main")
    return project


def _sync(root: Path) -> dict:
    done = run_wrenmem(["--project", str(root), "sync", "--json"], root,
                       env={"WRENMEM_NO_DAEMON": "1"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_switching_back_to_a_branch_embeds_nothing(project: Path) -> None:
    root = _branches(project)
    assert _sync(root)["embedded"] == 1
    git(root, "checkout", "-q", "other")
    assert _sync(root)["embedded"] == 15
    git(root, "checkout", "-q", "main")
    left = _sync(root)
    assert left["embedded"] == 0 and len(left["removed"]) == 15
    git(root, "checkout", "-q", "other")
    back = _sync(root)
    assert len(back["added"]) == 15 and back["embedded"] == 0, back
    found = run_wrenmem(["--project", str(root), "recall", "--json", "-q",
                         "How many orders were placed in month 7?"], root)
    assert json.loads(found.stdout)[0]["hits"][0]["path"] == "knowledge/sql/month-6.md"


def test_through_the_git_hooks_too(project: Path) -> None:
    root = _branches(project)
    assert _sync(root)["embedded"] == 1  # main indexed: the 15 come as a small sync
    assert run_wrenmem(["--project", str(root), "hooks", "install"], root).returncode == 0
    log = root / ".wrenmem" / "hooks.log"

    def embedded_by_last_checkout() -> int:
        lines = [x for x in log.read_text().splitlines() if " post-checkout " in x]
        got = re.search(r"(\d+) texts embedded", lines[-1])
        assert got is not None, lines[-1]
        return int(got.group(1))

    git(root, "checkout", "-q", "other")
    assert embedded_by_last_checkout() == 15
    git(root, "checkout", "-q", "main")
    assert embedded_by_last_checkout() == 0
    git(root, "checkout", "-q", "other")
    assert embedded_by_last_checkout() == 0
    git(root, "checkout", "-q", "main")
    git(root, "checkout", "-q", "other")
    assert embedded_by_last_checkout() == 0
    assert _sync(root)["noop"] is True
