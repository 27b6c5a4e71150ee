"""`wrenmem diff` in a repository that has no commit yet says so."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import PROCESS_TIMEOUT


def test_diff_before_the_first_commit_says_there_is_none(project: Path, cli) -> None:
    subprocess.run(["git", "init", "-q", str(project)], check=True, timeout=PROCESS_TIMEOUT)
    result = cli("diff")
    assert result.exit_code == 1
    assert "unknown revision 'HEAD': the repository has no commit yet" in result.output, \
        result.output
    subprocess.run(["git", "-C", str(project), "commit", "-q", "--allow-empty", "-m", "one"],
                   check=True, timeout=PROCESS_TIMEOUT)
    result = cli("diff", "nosuch")
    assert result.exit_code == 1 and "no commit yet" not in result.output
    assert "unknown revision 'nosuch'" in result.output
