"""The ``wrenmem`` command line. The only package that imports click."""

from __future__ import annotations

import importlib
import sys

import click

from wrenmem import __version__
from wrenmem.cli.common import SuggestingGroup
from wrenmem.errors import WrenmemError, log_to_stderr

# Command name -> module of wrenmem.cli that defines it (in its COMMANDS list). Modules are
# imported only when one of their commands runs, so `recall` answered by the daemon does not
# pay for importing every other command's libraries. A test keeps this table exact.
COMMAND_MODULES: dict[str, str] = {
    **dict.fromkeys(["init", "store", "show", "list", "forget", "fmt", "verify"], "pair_cmds"),
    **dict.fromkeys(["import", "export", "load", "dump"], "exchange_cmds"),
    "recall": "recall_cmds",
    "eval": "eval_cmds",
    **dict.fromkeys(["describe", "fetch", "seed"], "schema_cmds"),
    **dict.fromkeys(["sync", "index", "status", "check", "reset"], "index_cmds"),
    "watch": "watch_cmds",
    "mcp": "mcp_cmds",
    **dict.fromkeys(["hooks", "validate", "duplicates", "diff"], "git_cmds"),
    **dict.fromkeys(["rules", "glossary"], "knowledge_cmds"),
    "memory": "wren_cmds",
}


class WrenmemGroup(SuggestingGroup):
    """Loads command modules on first use, and turns library errors into one
    ``error: ...`` line on stderr and exit status 1."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(COMMAND_MODULES))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            module = importlib.import_module(f"wrenmem.cli.{COMMAND_MODULES[cmd_name]}")
            for command in module.COMMANDS:
                self.add_command(command)
        return self.commands.get(cmd_name)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except WrenmemError as e:
            raise WrenmemClickError(str(e)) from e
        except BrokenPipeError:
            raise
        except (OSError, RuntimeError) as e:  # the environment: a message, never a traceback
            from pathlib import Path

            from wrenmem.fs.fsutil import disk_full_message, is_disk_full

            if is_disk_full(e):  # whatever was writing (the index's own writes say more)
                where = getattr(e, "filename", None) or Path.cwd()
                raise WrenmemClickError(disk_full_message(
                    f"{ctx.invoked_subcommand or 'the command'}", where)) from e
            if not isinstance(e, OSError):
                raise
            where = f": {e.filename}" if e.filename else ""
            raise WrenmemClickError(f"{e.strerror or e}{where}") from e


class WrenmemClickError(click.ClickException):
    def show(self, file: object = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


@click.group(cls=WrenmemGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="wrenmem")
@click.option("--project", "-P", type=click.Path(file_okay=False), envvar="WRENMEM_PROJECT",
              help="Project root (default: nearest folder up with wrenmem.toml, knowledge/ "
                   "or .git).")
@click.option("-v", "--verbose", count=True, help="More diagnostics on stderr.")
@click.pass_context
def cli(ctx: click.Context, project: str | None, verbose: int) -> None:
    """Memory for text-to-SQL agents: NL→SQL pairs as Markdown files in git, recalled on demand,
    with schema context from a Wren MDL manifest."""
    given = ctx.obj or {}  # the daemon running a client's command line gives its own
    if "via" not in given:  # (the daemon's logging is the watcher's)
        log_to_stderr(verbose)
    ctx.obj = {**given, "project": project, "verbose": verbose}


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    try:
        cli.main(args=argv, prog_name="wrenmem")
    except BrokenPipeError:
        sys.exit(0)
