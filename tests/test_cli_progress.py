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
    assert out.startswith("\rsync: [######..............] 3/10 texts embedded (30%), 0 s")
    assert "\rsync: [####################] 10/10 texts embedded (100%), 0 s" in out
    assert out.endswith("\n") and out.count("\n") == 1


def test_each_counting_step_has_its_unit_and_its_own_pace(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A step in other units (files checked, questions asked) says so, and the time left is
    guessed from that step's pace, not from the seconds of the steps before it."""
    clock = [100.0]
    monkeypatch.setattr("wrenmem.cli.progress.time.monotonic", lambda: clock[0])
    log = io.StringIO()
    progress = Progress("eval", stream=log, after=0, enabled=True)
    clock[0] += 30  # 30 s of loading and embedding first
    progress(8, 8)
    asked = progress.counter("questions asked")
    asked(0, 400)
    clock[0] += 10
    asked(100, 400)  # 10 s for 100: 30 s left
    clock[0] += 1
    asked(400, 400)
    progress.close()
    assert log.getvalue().splitlines() == [
        "eval: 8/8 texts embedded (100%), 30 s",  # (0/400 at once: not a line of its own)
        "eval: 100/400 questions asked (25%), 40 s, about 30 s left",
        "eval: 400/400 questions asked (100%), 41 s"]


def test_a_finished_step_shows_its_count_while_the_rest_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    monkeypatch.setattr("wrenmem.cli.progress.time.monotonic", lambda: clock[0])
    screen = Terminal()
    progress = Progress("import", stream=screen, after=0)
    progress.counter("pairs checked")(5000, 5000)
    clock[0] += 6
    progress._draw()  # what the ticker draws while the files are written
    progress.close()
    assert screen.getvalue().endswith("\rimport: 5000 pairs checked, 6 s"
                                      + " " * 35 + "\n")


def test_a_ci_log_gets_plain_lines_unless_told_not_to(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert wanted(io.StringIO())
    monkeypatch.setenv(PROGRESS_ENV, "0")
    assert not wanted(io.StringIO())
    monkeypatch.delenv(PROGRESS_ENV)
    monkeypatch.setenv("CI", "false")
    assert not wanted(io.StringIO())


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
