"""The first five minutes (issue 41 item 6): the README's tour run as written, step by step,
in an empty folder, with `wrenmem` on PATH as `. .venv/bin/activate` puts it there (real
processes, real git); each step that needs something says what; a mistyped command or
setting gets a "did you mean"."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROCESS_TIMEOUT, REPO, run_wrenmem

README = REPO / "README.md"


def tour_steps() -> list[str]:
    """The commands of the README's tour block: continuation lines joined, comments cut."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## A tour"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the README's tour has no bash block"
    steps: list[str] = []
    pending = ""
    for line in block.group(1).splitlines():
        line = pending + without_comment(line)
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
        if line.strip():
            steps.append(line.strip())
    return steps


def without_comment(line: str) -> str:
    """``line`` up to a shell comment: an unquoted ``#`` at a word's start."""
    quote = ""
    for n, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (n == 0 or line[n - 1].isspace()):
            return line[:n].rstrip()
    return line


@pytest.fixture
def shell_path(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH has `wrenmem` (this checkout's, as the venv's script)."""
    bin_dir = tmp_path / "venv-bin"
    bin_dir.mkdir()
    script = bin_dir / "wrenmem"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m wrenmem "$@"\n')
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": str(REPO)}


def test_the_readme_tour_runs_as_written_in_an_empty_folder(tmp_path: Path,
                                                            shell_path: dict[str, str]) -> None:
    folder = tmp_path / "shop"
    folder.mkdir()
    steps = tour_steps()
    assert steps[0].startswith("git init") and len(steps) > 10
    outputs: dict[str, str] = {}
    # one shell for the whole tour, as a reader types it (in one terminal);
    # each step's output to its own files, and the first failing step stops it, by number
    script = ["set -u"]
    for n, step in enumerate(steps):
        script.append(f"{{ {step} ; }} > out.{n} 2> err.{n} || {{ echo {n} > failed; exit 1; }}")
    try:
        done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=folder, env=shell_path,
                              capture_output=True, text=True, timeout=600)
        for n, step in enumerate(steps):
            if (folder / f"out.{n}").exists():
                outputs[step] = (folder / f"out.{n}").read_text(encoding="utf-8")
        if done.returncode != 0:
            failed = int((folder / "failed").read_text()) if (folder / "failed").exists() else 0
            err = (folder / f"err.{failed}").read_text(encoding="utf-8")
            pytest.fail(f"tour step {failed} failed: {steps[failed]}\n{err}{done.stderr}")
    finally:
        subprocess.run([sys.executable, "-m", "wrenmem", "watch", "--stop"], cwd=folder,
                       env=shell_path, capture_output=True, timeout=60)

    def output(prefix: str) -> str:
        [found] = [out for step, out in outputs.items() if step.startswith(prefix)]
        return found

    # the stored pair, beside the seed queries the schema gives
    assert "What is the total revenue?" in output('wrenmem recall -q "sum of all')
    assert json.loads(output('wrenmem recall -q "客户的订单数" --json'))
    assert "Model orders" in output("wrenmem describe")
    context = output("wrenmem fetch")
    assert "Revenue excludes cancelled orders" in context  # the rule the tour added
    assert "### AOV" in context and "average order value" in context  # and its term
    assert "in sync" in output("wrenmem check")
    assert "what-is-the-total-revenue.md" in output("wrenmem list --uses orders.amount")
    hooks = (folder / ".git" / "hooks" / "post-checkout").read_text()
    assert "wrenmem" in hooks
    assert "verified_by: Ann" in (folder / "knowledge" / "sql" /
                                  "what-is-the-total-revenue.md").read_text()


def test_each_step_says_what_it_needs(tmp_path: Path) -> None:
    folder = tmp_path / "new"
    folder.mkdir()
    assert run_wrenmem(["init"], folder).returncode == 0
    for args in (["describe"], ["fetch", "-q", "revenue"], ["list", "--uses", "orders"]):
        result = run_wrenmem(args, folder)
        assert result.returncode == 1, (args, result.stderr)
        assert "manifest not found" in result.stderr
        for source in ("Wren MDL", "dbt", "SQL DDL", "DuckDB", "--manifest"):
            assert source in result.stderr, (args, source, result.stderr)
    refused = run_wrenmem(["hooks", "install"], folder)
    assert refused.returncode == 1
    assert "not inside a git repository: run `git init` there first" in refused.stderr
    assert not (folder / ".git").exists()
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True, timeout=PROCESS_TIMEOUT)
    installed = run_wrenmem(["hooks", "install"], folder)
    assert installed.returncode == 0, installed.stderr
    assert "wrenmem" in (folder / ".git" / "hooks" / "post-merge").read_text()


@pytest.mark.parametrize(("typed", "meant"), [
    (["sotre", "--nl", "x", "--sql", "SELECT 1"], "Did you mean 'store'?"),
    (["hooks", "instal"], "Did you mean 'install' or 'uninstall'?"),
    (["memory", "recal", "-q", "x"], "Did you mean 'recall'?"),
])
def test_a_mistyped_command_says_what_was_meant(project: Path, typed: list[str],
                                                meant: str) -> None:
    result = run_wrenmem(typed, project)
    assert result.returncode == 2
    assert f"No such command '{typed[1] if typed[0] in ('hooks', 'memory') else typed[0]}'." \
        f" {meant}" in result.stderr, result.stderr
    assert not list((project / "knowledge" / "sql").iterdir())


def test_a_mistyped_setting_names_its_line_and_the_setting(project: Path) -> None:
    (project / "wrenmem.toml").write_text('# settings\nbackend = "grep"\nfetch_treshold = 10\n'
                                          'zzz = 1\n')
    result = run_wrenmem(["status"], project)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"error: {project / 'wrenmem.toml'}: line 3: unknown setting 'fetch_treshold' "
        "(did you mean 'fetch_threshold' or 'knowledge_threshold'?); line 4: unknown setting "
        "'zzz' "
        "(every setting: docs/settings.md)")


def test_shell_completion_is_what_the_docs_say(project: Path, shell_path: dict[str, str]
                                               ) -> None:
    """The line the README gives for bash, and what it completes."""
    source = subprocess.run(["wrenmem"], cwd=project, capture_output=True, text=True,
                            env={**shell_path, "_WRENMEM_COMPLETE": "bash_source"}, timeout=PROCESS_TIMEOUT)
    assert "_wrenmem_completion" in source.stdout and "complete " in source.stdout
    done = subprocess.run(["wrenmem"], cwd=project, capture_output=True, text=True,
                          env={**shell_path, "_WRENMEM_COMPLETE": "bash_complete",
                               "COMP_WORDS": "wrenmem sto", "COMP_CWORD": "1"}, timeout=PROCESS_TIMEOUT)
    assert done.stdout.split() == ["plain,store"]
    assert '"$(_WRENMEM_COMPLETE=bash_source wrenmem)"' in README.read_text(encoding="utf-8")


def test_the_demo_fetch_shows_the_examples_rule_caveat_and_term(example_project: Path) -> None:
    """`make demo`'s fetch, as the Makefile runs it, on the bundled example: its rule, its
    caveat and its glossary term come with the schema items."""
    recipe = (REPO / "Makefile").read_text(encoding="utf-8")
    [line] = [x.strip() for x in recipe.splitlines() if x.strip().startswith(
        "$(VENV)/bin/wrenmem fetch")]
    args = shlex.split(line)[1:]
    result = run_wrenmem(args, example_project)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "## Business rules and caveats" in text
    assert "Revenue excludes cancelled and returned orders" in text  # knowledge/rules/
    assert "Coupons before March 2024 are not recorded" in text      # knowledge/caveats/
    assert "## Glossary terms in this question\n\n### AOV" in text    # knowledge/glossary/
    assert "average_order_value" in text  # and the schema item it searched for


def test_a_mistyped_setting_variable_is_said_not_ignored_silently(project: Path) -> None:
    result = run_wrenmem(["status", "--json"], project,
                         env={"WRENMEM_BACKNED": "grep", "WRENMEM_PROGRESS": "0"})
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "wrenmem: WRENMEM_BACKNED is not a setting, so it is ignored: did you mean "
        "WRENMEM_BACKEND?"]
    assert json.loads(result.stdout)  # the command ran, its JSON on stdout; and
    # WRENMEM_PROGRESS, a variable that is no setting either, is far from every name: silent
