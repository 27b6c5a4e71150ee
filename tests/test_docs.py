"""The documentation's examples run, in a copy of the bundled example project.

- The Python API examples (every ```python block of the "## Python API" section of the
  README and of docs/python-api.md) are executed as they are, each in a fresh copy.
- Runnable shell examples: a fenced ```console block (or ````console, when its output
  holds a fence) in README.md or docs/*.md whose previous non-blank line is
  ``<!-- runnable -->`` runs, one fresh copy of the example
  project per block. Each line starting with ``$ `` is a command, run by ``bash`` in the
  project folder with ``wrenmem`` on ``PATH`` (this checkout's, without the daemon and
  offline); the lines after it, up to the next ``$ `` line, are what it prints (stdout and
  stderr together, in order). A line ``...`` stands for any number of lines; a last line
  ``[exit N]`` says the command exits with N (otherwise it must exit 0). A command with no
  lines after it may print anything. Mark only examples that run offline in a few seconds.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLE_KNOWLEDGE, EXAMPLE_MANIFEST, REPO

SECTION = re.compile(r"^## Python API\n(.*?)^## ", re.S | re.M)
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
RUNNABLE = re.compile(r"^<!-- runnable -->\n(?:[ \t]*\n)*(`{3,})console\n(.*?)^\1$", re.S | re.M)
EXIT = re.compile(r"^\[exit (\d+)\]$")


API_PAGES = ("README.md", "docs/python-api.md")


def python_examples() -> list[tuple[str, str]]:
    """(``page:number``, code) of every Python API example."""
    found = []
    for page in API_PAGES:
        text = (REPO / page).read_text(encoding="utf-8")
        section = SECTION.search(text)
        assert section, f"{page} has no '## Python API' section"
        blocks = BLOCK.findall(section.group(1))
        assert len(blocks) >= 2, f"the Python API section of {page} lost its examples"
        found += [(f"{page}:python-example-{n}", code) for n, code in enumerate(blocks, 1)]
    return found


@pytest.mark.parametrize("where,code", python_examples(), ids=[w for w, _ in python_examples()])
def test_python_api_example_runs(where: str, code: str, example_project: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(example_project)
    monkeypatch.setenv("WRENMEM_NO_DAEMON", "1")
    exec(compile(code, where, "exec"), {"__name__": "doc"})
    assert os.getcwd() == str(example_project)


def shell_examples() -> list[tuple[str, str]]:
    """(``page:line``, block text) of every runnable console block."""
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for match in RUNNABLE.finditer(text):
            line = text.count("\n", 0, match.start(2)) + 1
            found.append((f"{page.relative_to(REPO).as_posix()}:{line}", match.group(2)))
    return found


def parse_console(block: str) -> list[tuple[str, list[str]]]:
    """The block's commands, each with the lines shown after it."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            assert steps, f"output before the first command: {line!r}"
            steps[-1][1].append(line)
    return steps


def output_matches(expected: list[str], actual: list[str]) -> bool:
    """``actual`` equals ``expected``, where a ``...`` line stands for any lines."""
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(output_matches(expected[1:], actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and actual[0] == expected[0] and output_matches(expected[1:], actual[1:])


def test_console_parsing_and_matching() -> None:
    steps = parse_console("$ wrenmem list\na\n...\nz\n[exit 1]\n$ true\n")
    assert steps == [("wrenmem list", ["a", "...", "z", "[exit 1]"]), ("true", [])]
    assert output_matches(["a", "...", "z"], ["a", "b", "c", "z"])
    assert output_matches(["a", "...", "z"], ["a", "z"])
    assert not output_matches(["a", "...", "z"], ["a", "b"])
    assert not output_matches(["a"], ["a", "b"])
    assert len(shell_examples()) >= 3, "the docs lost their runnable examples"


@pytest.fixture(scope="module")
def wrenmem_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a ``wrenmem`` that runs this checkout's package."""
    folder = tmp_path_factory.mktemp("bin")
    script = folder / "wrenmem"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m wrenmem "$@"\n')
    script.chmod(0o755)
    return folder


@pytest.mark.parametrize("where,block", shell_examples(), ids=[w for w, _ in shell_examples()])
def test_runnable_shell_example(where: str, block: str, tmp_path: Path,
                                wrenmem_bin: Path) -> None:
    root = tmp_path / "acme"
    shutil.copytree(EXAMPLE_KNOWLEDGE, root / "knowledge")
    (root / "target").mkdir()
    shutil.copy(EXAMPLE_MANIFEST, root / "target" / "mdl.json")
    env = {**os.environ, "PYTHONPATH": str(REPO), "WRENMEM_NO_DAEMON": "1",
           "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "COLUMNS": "100",
           "PATH": f"{wrenmem_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("WRENMEM_PROJECT", None)
    for command, shown in parse_console(block):
        code = 0
        if shown and EXIT.match(shown[-1]):
            code = int(EXIT.match(shown[-1]).group(1))  # type: ignore[union-attr]
            shown = shown[:-1]
        run = subprocess.run(["bash", "-c", command], cwd=root, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        printed = run.stdout.rstrip("\n").split("\n") if run.stdout.strip() else []
        assert run.returncode == code, f"{where}: `{command}` exited {run.returncode}:\n" \
                                       f"{run.stdout}"
        if shown:
            assert output_matches(shown, printed), (
                f"{where}: `{command}` printed:\n{run.stdout}\nthe page shows:\n"
                + "\n".join(shown))


def test_mcp_page_quotes_the_real_store_refusal(example_project: Path) -> None:
    """docs/mcp.md shows the refusal `store_query` gives for SQL with an unknown column."""
    from wrenmem.api import Memory
    from wrenmem.errors import WrenmemError
    from wrenmem.mcp.tools import Tools

    page = (REPO / "docs" / "mcp.md").read_text(encoding="utf-8")
    quoted = re.search(r"e\.g\. for `(SELECT[^`]*)`:\s+`(line \d+, column \d+: [^`]*)`",
                       page)
    assert quoted, "docs/mcp.md no longer shows a store_query refusal"
    tools = Tools(Memory(example_project, backend="grep"))
    with pytest.raises(WrenmemError) as refused:
        tools.store_query("Revenue per status", " ".join(quoted.group(1).split()))
    assert f"  {' '.join(quoted.group(2).split())}\n" in str(refused.value)


def table_rows(text: str) -> list[tuple[int, int, int]]:
    """(line, cells, header cells) for each row of each Markdown table in ``text``."""
    rows, header, fenced = [], 0, False
    for number, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("|"):
            header = 0
            continue
        cells = len(re.split(r"(?<!\\)\|", line.strip().strip("|")))
        if header == 0:
            header = cells
        elif not re.fullmatch(r"\|[\s:|-]+\|", line.strip()):
            rows.append((number, cells, header))
    return rows


@pytest.mark.parametrize("page", ["README.md", *sorted(
    p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))])
def test_every_table_row_has_its_header_cells(page: str) -> None:
    bad = [f"{page}:{line}: {cells} cells, the header has {header}"
           for line, cells, header in table_rows((REPO / page).read_text(encoding="utf-8"))
           if cells != header]
    assert not bad, "\n".join(bad)


MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|tmp|home|root|Users)/[^\s`)]*")


def test_no_page_names_a_machine_specific_path() -> None:
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for number, line in enumerate(page.read_text(encoding="utf-8").split("\n"), 1):
            found += [f"{page.relative_to(REPO)}:{number}: {m.group(0)}"
                      for m in MACHINE_PATH.finditer(line)]
    assert not found, "\n".join(found)
