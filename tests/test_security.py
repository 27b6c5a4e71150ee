"""Issue 22, security: what a committed file can make wrenmem do outside the project.

A repository is untrusted input: its ``wrenmem.toml``, a ``.wrenmem`` it commits and hidden
files under the knowledge folder must never make a command read, write or delete anything
outside the project (or anything that is not a pair).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import run_wrenmem, write_pair
from wrenmem import Memory
from wrenmem.errors import WrenmemError
from wrenmem.settings import load_settings


def _victim(tmp_path: Path) -> Path:
    """A folder outside the project holding a file a hostile setting aims at."""
    victim = tmp_path / "victim"
    victim.mkdir()
    write_pair(victim, "precious.md", "Precious question?", "SELECT 1")
    (victim / "keep.txt").write_text("keep me\n")
    return victim


# --- a committed wrenmem.toml naming paths outside the project --------------------------------

@pytest.mark.parametrize(("name", "value"), [
    ("knowledge_dir", "/"),
    ("knowledge_dir", "../victim/knowledge/sql"),
    ("manifest", "../victim/keep.txt"),
    ("index_uri", "../victim/index"),
    ("index_uri", "file://{victim}/index"),
    ("knowledge_root", "../victim/knowledge"),
])
def test_a_committed_config_cannot_name_a_path_outside_the_project(
        project: Path, tmp_path: Path, name: str, value: str) -> None:
    victim = _victim(tmp_path)
    config = project / "wrenmem.toml"
    config.write_text(f'{name} = "{value.format(victim=victim)}"\n')
    with pytest.raises(WrenmemError) as refused:
        load_settings(project, environ={})
    message = str(refused.value)
    assert name in message and str(config) in message and "outside the project" in message
    assert "command line" in message  # how to mean it


def test_a_symlink_leading_out_is_outside_too(project: Path, tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    (project / "linked").symlink_to(victim / "knowledge" / "sql")
    (project / "wrenmem.toml").write_text('knowledge_dir = "linked"\n')
    with pytest.raises(WrenmemError, match="knowledge_dir.*outside the project"):
        load_settings(project, environ={})
    # The default location as a committed link leading out is refused the same way.
    (project / "wrenmem.toml").unlink()
    (project / "knowledge" / "sql").rmdir()
    (project / "knowledge" / "sql").symlink_to(victim / "knowledge" / "sql")
    with pytest.raises(WrenmemError, match="knowledge_dir.*outside the project"):
        load_settings(project, environ={})


def test_a_link_loop_is_an_error_not_a_traceback(project: Path) -> None:
    (project / "loop").symlink_to(project / "loop")
    (project / "wrenmem.toml").write_text('knowledge_dir = "loop/sql"\n')
    with pytest.raises(WrenmemError, match="knowledge_dir"):
        load_settings(project, environ={})


def test_the_command_line_and_the_environment_may_name_any_folder(
        project: Path, tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    (project / "wrenmem.toml").write_text('knowledge_dir = "/"\n')
    folder = str(victim / "knowledge" / "sql")
    by_flag = load_settings(project, {"knowledge_dir": folder}, environ={})
    assert by_flag.knowledge_path == Path(folder)
    by_env = load_settings(project, environ={"WRENMEM_KNOWLEDGE_DIR": folder,
                                             "WRENMEM_INDEX_URI": str(tmp_path / "idx")})
    assert by_env.knowledge_path == Path(folder)
    assert Memory(project, knowledge_dir=folder).settings.knowledge_path == Path(folder)
    # Inside the project, a committed setting is fine (through a link that stays inside too).
    (project / "pairs").mkdir()
    (project / "alias").symlink_to(project / "pairs")
    (project / "wrenmem.toml").write_text('knowledge_dir = "alias"\nmanifest = "a/../m.json"\n')
    assert load_settings(project, environ={}).knowledge_path == project / "pairs"


def test_forget_through_a_hostile_config_deletes_nothing(project: Path, tmp_path: Path,
                                                         cli) -> None:
    victim = _victim(tmp_path)
    (project / "wrenmem.toml").write_text('knowledge_dir = "../victim/knowledge/sql"\n')
    result = cli("forget", "-y", "Precious question?")
    assert result.exit_code == 1
    assert "knowledge_dir" in result.output and "outside the project" in result.output
    assert (victim / "knowledge" / "sql" / "precious.md").exists()
    (project / "wrenmem.toml").write_text('knowledge_dir = "/"\n')
    listed = cli("list")
    assert listed.exit_code == 1 and "outside the project" in listed.output


# --- a committed .wrenmem that is not a real folder ---------------------------------------------

def test_a_state_dir_symlink_is_refused_and_nothing_is_written_through_it(
        project: Path, tmp_path: Path, cli) -> None:
    victim = _victim(tmp_path)
    victim.chmod(0o755)
    before = sorted(p.name for p in victim.iterdir())
    (project / ".wrenmem").symlink_to(victim)
    write_pair(project, "a.md", "How many orders?", "SELECT COUNT(*) FROM orders")
    for args in (["list"], ["recall", "-q", "orders", "--backend", "grep"], ["status"],
                 ["reset"], ["sync"]):
        result = cli(*args)
        assert result.exit_code == 1, (args, result.output)
        assert ".wrenmem" in result.output and "symbolic link" in result.output, result.output
    assert sorted(p.name for p in victim.iterdir()) == before
    assert victim.stat().st_mode & 0o777 == 0o755
    assert (project / ".wrenmem").is_symlink()  # refused, not replaced: the user decides
    with pytest.raises(WrenmemError, match="symbolic link"):
        Memory(project)


def test_the_watcher_refuses_a_state_dir_symlink(project: Path, tmp_path: Path) -> None:
    """The watcher made its socket folder private: through a link, someone else's folder."""
    victim = _victim(tmp_path)
    victim.chmod(0o755)
    (project / ".wrenmem").symlink_to(victim)
    done = run_wrenmem(["--project", str(project), "watch"], project, timeout=120)
    assert done.returncode == 1 and "symbolic link" in done.stderr, done.stderr
    assert victim.stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt", "knowledge"]


def test_a_state_dir_that_is_a_file_is_refused(project: Path, cli) -> None:
    (project / ".wrenmem").write_text("not a folder\n")
    result = cli("list")
    assert result.exit_code == 1 and ".wrenmem" in result.output
    assert "not a folder" in result.output


# --- only pairs the catalog lists may be forgotten, through every door --------------------------

HIDDEN = ["knowledge/sql/.hidden.md", "knowledge/sql/.drafts/draft.md",
          "knowledge/sql/README.md"]


def _hidden_files(project: Path) -> list[Path]:
    write_pair(project, "real.md", "A real pair?", "SELECT 1")
    paths = []
    for rel in HIDDEN:
        path = project / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('---\nnl: "Hidden question?"\n---\n\n```sql\nSELECT 2\n```\n')
        paths.append(path)
    return paths


def test_forget_refuses_what_the_catalog_does_not_list(project: Path, cli) -> None:
    paths = _hidden_files(project)
    assert [p.path for p in Memory(project).list(seeds=False)] == ["knowledge/sql/real.md"]
    for rel in HIDDEN:
        result = cli("forget", "-y", rel)
        assert result.exit_code == 1, (rel, result.output)
        assert "not a pair" in result.output, result.output
        with pytest.raises(WrenmemError, match="not a pair"):
            Memory(project).forget([rel])
        with pytest.raises(WrenmemError, match="not a pair"):
            Memory(project).forget([str(project / rel)])
    # One refused target stops the whole call before anything is deleted.
    with pytest.raises(WrenmemError, match="not a pair"):
        Memory(project).forget(["knowledge/sql/real.md", HIDDEN[0]])
    assert all(p.exists() for p in paths) and (project / "knowledge/sql/real.md").exists()
    assert Memory(project).forget(["knowledge/sql/real.md"]) == ["knowledge/sql/real.md"]


def test_mcp_forget_refuses_a_hidden_file(project: Path) -> None:
    pytest.importorskip("mcp")
    from wrenmem.mcp.tools import Tools

    paths = _hidden_files(project)
    tools = Tools(Memory(project, backend="grep", mcp_forget=True))
    for rel in HIDDEN:
        with pytest.raises(WrenmemError, match="not a pair"):
            tools.forget_query(rel)
    assert all(p.exists() for p in paths)
    assert os.path.exists(project / "knowledge/sql/real.md")
