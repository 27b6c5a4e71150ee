"""A client's ``recall`` or ``fetch`` command line, run by the warm daemon with the same
click command (the client's side: :mod:`wrenmem.watch.forward`).

The command runs as in the client: the client's project root and ``WRENMEM_*`` variables,
its own warnings-given-once (a fresh process's), its requests answered by the daemon as the
socket's are (``via``), its stdout and stderr captured. It is declined (None: the client
runs it itself) whenever the client's own run could print something else: help (it wraps
at the client's terminal), an option naming a path (relative to the client's folder), an
error (exit status other than 0 and click's 2 for a usage error), anything on stderr or a
library warning, a request the daemon refused, a command that asked the daemon nothing.
"""

from __future__ import annotations

import io
import logging
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from wrenmem import settings as settings_module
from wrenmem.cli import cli
from wrenmem.watch.forward import forwardable

log = logging.getLogger(__name__)
# sys.stdout and sys.stderr are the process's: one forwarded command at a time holds them
# (each takes milliseconds warm); one waiting longer than this is declined.
_RUNNING = threading.Lock()
RUNNING_WAIT = 5.0


def run_forwarded(argv: list[str], root: Path, environ: dict[str, str],
                  via: Callable[[dict[str, Any]], Any]) -> tuple[int, str, str] | None:
    """``wrenmem ARGV`` run here for the client in ``root``: (exit code, stdout, stderr),
    or None (declined)."""
    if not forwardable(argv):
        return None
    command = cli.get_command(click.Context(cli), argv[0])
    if command is None or _names_a_path(command, argv):
        return None
    if not _RUNNING.acquire(timeout=RUNNING_WAIT):
        return None
    try:
        return _run(argv, root, environ, via)
    finally:
        _RUNNING.release()


def _names_a_path(command: click.Command, argv: list[str]) -> bool:
    """Whether ``argv`` gives one of the command's path options (``--queries``, ``--manifest``),
    in any spelling, whether or not the path exists here (it is the client's folder's)."""
    try:
        ctx = command.make_context(argv[0], argv[1:], resilient_parsing=True)
    except click.ClickException:
        return False  # a usage error: the run says so, as the client's would
    given = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    return any(isinstance(p.type, click.Path) and ctx.get_parameter_source(p.name) in given
               for p in command.params if p.name)


def _run(argv: list[str], root: Path, environ: dict[str, str],
         via: Callable[[dict[str, Any]], Any]) -> tuple[int, str, str] | None:
    asked: list[object] = []

    def counted(message: dict[str, Any]) -> Any:
        asked.append(message.get("op"))
        return via(message)

    warnings = _ThreadWarnings()
    logger = logging.getLogger("wrenmem")
    logger.addHandler(warnings)
    fresh = settings_module.WARNED.set(set())
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        cli.main(args=["--project", str(root), *argv], prog_name="wrenmem",
                 obj={"environ": environ, "via": counted})
        code: int = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    except Exception as e:  # a refused request, anything: the client runs it
        log.debug("forwarded %s: declined: %s", argv[0], e)
        return None
    finally:
        sys.stdout, sys.stderr = saved
        settings_module.WARNED.reset(fresh)
        logger.removeHandler(warnings)
    if code not in (0, 2) or warnings.seen or (code == 0 and (err.getvalue() or not asked)):
        return None
    return code, out.getvalue(), err.getvalue()


class _ThreadWarnings(logging.Handler):
    """Whether this thread logged a warning (it went to the watcher's log, not to the
    client's stderr: the client's own run shows it)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.thread = threading.get_ident()
        self.seen = False

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.seen = True
