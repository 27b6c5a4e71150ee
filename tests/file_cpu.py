"""``pytest --file-cpu``: the CPU (user + system) each test file took, in the test process
and in the processes it waited for (the CLI, git, hooks: ``RUSAGE_CHILDREN``), summed over
the xdist workers. On a loaded 2-core machine a file's seconds of wall time say more about
its neighbours than about it; its CPU does not (docs/testing.md)."""

from __future__ import annotations

import json
import resource
from collections.abc import Iterator

import pytest

# (user, system) of this process, (user, system) of its children that have ended
Times = tuple[float, float, float, float]


def _times() -> Times:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime, own.ru_stime, children.ru_utime, children.ru_stime


class FileCpu:
    """Per file: seconds of its tests' set-up, call and tear-down (a module fixture's
    set-up counts in its file's first test), in this process and its children."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.files: dict[str, list[float]] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        before = _times()
        yield
        spent = [b - a for a, b in zip(before, _times(), strict=True)]
        total = self.files.setdefault(item.path.relative_to(self.config.rootpath).as_posix(),
                                      [0.0] * 4)
        for i, seconds in enumerate(spent):
            total[i] += seconds

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        output = getattr(self.config, "workeroutput", None)
        if output is not None:  # an xdist worker: its figures go to the controller
            output["file_cpu"] = json.dumps(self.files)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: object, error: object) -> None:
        output = getattr(node, "workeroutput", {})
        for name, spent in json.loads(output.get("file_cpu", "{}")).items():
            total = self.files.setdefault(name, [0.0] * 4)
            for i, seconds in enumerate(spent):
                total[i] += seconds

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if getattr(self.config, "workeroutput", None) is not None:
            return
        rows = sorted(self.files.items(), key=lambda kv: -sum(kv[1]))
        everything = [sum(spent[i] for _, spent in rows) for i in range(4)]
        write = terminalreporter.write_line
        terminalreporter.section("CPU seconds per test file (user + system)")
        write(f"{'total':>8} {'tests':>8} {'children':>8}  file")
        for name, (user, system, child_user, child_system) in [*rows[:40],
                                                               ("(all files)", everything)]:
            own, children = user + system, child_user + child_system
            write(f"{own + children:8.1f} {own:8.1f} {children:8.1f}  {name}")
