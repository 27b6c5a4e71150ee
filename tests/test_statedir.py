"""``.wrenmem/`` ignores itself: whoever creates it writes a ``.gitignore`` of ``*``."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import PROCESS_TIMEOUT

from tests.conftest import write_pair
from wrenmem.fs import statedir
from wrenmem.fs.fsutil import write_marshal
from wrenmem.settings import load_settings
from wrenmem.storage.lock import index_lock


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True, timeout=PROCESS_TIMEOUT).stdout


def test_a_repository_that_never_ran_init_never_commits_the_state(project: Path, cli) -> None:
    git(project, "init", "-q", "-b", "main")
    write_pair(project, "a.md", "How many orders?", "SELECT COUNT(*) FROM orders")
    assert cli("list", root=project).exit_code == 0
    assert cli("recall", "-q", "orders", "--backend", "grep", root=project).exit_code == 0
    state = project / ".wrenmem"
    assert state.is_dir() and any(p.name != ".gitignore" for p in state.iterdir())
    assert (state / ".gitignore").read_text().splitlines()[-1] == "*"
    git(project, "add", "-A")
    staged = git(project, "diff", "--cached", "--name-only").split()
    assert staged == ["knowledge/sql/a.md"]


def test_every_way_of_creating_the_folder_writes_the_file(tmp_path: Path) -> None:
    settings = load_settings(tmp_path)
    write_marshal(settings.state_dir / "deep" / "x.bin", {"a": 1})
    assert (settings.state_dir / ".gitignore").is_file()
    assert not (settings.state_dir / "deep" / ".gitignore").exists()

    other = load_settings(tmp_path / "other")
    (tmp_path / "other").mkdir()
    with index_lock(other, timeout=1):
        pass
    assert (other.state_dir / ".gitignore").read_text().endswith("*\n")


def test_a_users_own_gitignore_is_kept(tmp_path: Path) -> None:
    folder = tmp_path / ".wrenmem"
    folder.mkdir()
    (folder / ".gitignore").write_text("index/\n")
    statedir.ensure_state_dir(folder)
    assert (folder / ".gitignore").read_text() == "index/\n"
