"""The README's Python API examples run, in a copy of the bundled example project."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from conftest import REPO

SECTION = re.compile(r"^## Python API\n(.*?)^## ", re.S | re.M)
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def python_examples() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = SECTION.search(readme)
    assert section, "README has no '## Python API' section"
    blocks = BLOCK.findall(section.group(1))
    assert len(blocks) >= 2, "the Python API section lost its examples"
    return blocks


@pytest.mark.parametrize("number", range(len(python_examples())))
def test_readme_python_example_runs(number: int, example_project: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(example_project)
    monkeypatch.setenv("WRENMEM_NO_DAEMON", "1")
    code = python_examples()[number]
    exec(compile(code, f"README.md:python-example-{number + 1}", "exec"), {"__name__": "doc"})
    assert os.getcwd() == str(example_project)
